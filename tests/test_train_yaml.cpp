// llm-foundry training YAMLs: the examples, ${...} references, and bad input.
#define BOOST_TEST_MODULE train_yaml
#include <boost/test/unit_test.hpp>
#include <cstdlib>

#include "common.hpp"
#include "io/error.hpp"
#include "io/train_yaml.hpp"

using namespace tpsim;

namespace {
using tpsim::test::contains;
using tpsim::test::error_of;
std::string example(const char* name) { return std::string(TPSIM_DATA) + "/examples/" + name; }
}  // namespace

BOOST_AUTO_TEST_CASE(the_shipped_examples_read) {
  const TrainYaml a = read_train_yaml(example("mpt-7b-pretrain.yaml"));
  BOOST_TEST(a.model.d_model == 4096);
  BOOST_TEST(*a.seq_len == 2048);
  BOOST_TEST(*a.global_batch == 1024);
  BOOST_TEST(a.micro_batch_auto);
  BOOST_TEST((*a.precision == Precision::kAmpBf16));
  BOOST_TEST(*a.activation_checkpointing);
  BOOST_TEST(contains(a.ignored.front(), "variables"));
  const TrainYaml b = read_train_yaml(example("mpt-1b-long-context.yaml"));
  BOOST_TEST(*b.seq_len == 8192);  // through ${variables.context}
  BOOST_TEST(b.model.expansion_ratio == 4.0);  // ffn_config.expansion_ratio
  BOOST_TEST(*b.micro_batch == 2);
  const TrainYaml c = read_train_yaml(example("mpt-30b-fp8.yaml"));
  BOOST_TEST((*c.precision == Precision::kAmpFp8));
  BOOST_TEST((*c.sharding == Sharding::kHybridShard));
}

BOOST_AUTO_TEST_CASE(references_resolve_with_their_types) {
  ::setenv("TPSIM_TEST_SEQ", "4096", 1);
  const TrainYaml t = parse_train_yaml(
      "a: {b: 1024}\n"
      "seq: ${oc.env:TPSIM_TEST_SEQ}\n"
      "max_seq_len: ${seq}\n"
      "run_name: run-${a.b}-${seq}\n"
      "model:\n  d_model: ${a.b}\n  n_heads: 8\n  n_layers: 2\n  max_seq_len: ${max_seq_len}\n"
      "device_train_microbatch_size: ${oc.env:TPSIM_TEST_UNSET,3}\n",
      "t.yaml");
  BOOST_TEST(t.model.d_model == 1024);
  BOOST_TEST(*t.seq_len == 4096);
  BOOST_TEST(*t.micro_batch == 3);
}

BOOST_AUTO_TEST_CASE(bad_training_yamls_name_the_line) {
  BOOST_TEST(contains(error_of([] { parse_train_yaml("model:\n  d_model: ${nope}\n  n_heads: 8\n  n_layers: 2\n", "t.yaml"); }),
                      "t.yaml:2: ${nope}: no key 'nope'"));
  BOOST_TEST(contains(error_of([] { parse_train_yaml("a: ${b}\nb: ${a}\nmodel: {d_model: 8, n_heads: 1, n_layers: 1}\n", "t.yaml"); }),
                      "circular reference"));
  BOOST_TEST(contains(error_of([] { parse_train_yaml("max_seq_len: 2048\n", "t.yaml"); }), "missing the model: block"));
  BOOST_TEST(contains(error_of([] { parse_train_yaml("model: {d_model: 512, n_layers: 2}\n", "t.yaml"); }),
                      "missing the required key n_heads"));
  BOOST_TEST(contains(error_of([] { parse_train_yaml("model: {d_model: 512, n_heads: 8, n_layers: 2}\nprecision: fp4\n", "t.yaml"); }),
                      "t.yaml:2: precision 'fp4'"));
  BOOST_TEST(contains(error_of([] {
                        parse_train_yaml("model: {d_model: 512, n_heads: 8, n_layers: 2}\nfsdp_config: {sharding_strategy: HALF}\n", "t.yaml");
                      }),
                      "fsdp_config.sharding_strategy 'HALF'"));
  BOOST_TEST(contains(error_of([] { parse_train_yaml("model: [1, 2\n", "t.yaml"); }), "not valid YAML"));
  BOOST_TEST(contains(error_of([] {
                        parse_train_yaml("model: {d_model: 512, n_heads: 8, n_layers: 2}\ndevice_train_microbatch_size: lots\n", "t.yaml");
                      }),
                      "must be an integer"));
}
