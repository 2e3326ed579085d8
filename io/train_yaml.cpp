#include "io/train_yaml.hpp"

#include <cstdlib>
#include <set>

#include "io/error.hpp"
#include "io/files.hpp"
#include "io/yaml_util.hpp"

namespace tpsim {
namespace {

// Resolves ${...} references in place, depth-first, with cycle detection.
class Interpolator {
 public:
  Interpolator(YAML::Node root, std::string origin) : root_(std::move(root)), origin_(std::move(origin)) {}

  void resolve_all() { resolve(root_, ""); }

 private:
  void resolve(YAML::Node node, const std::string& path) {
    if (node.IsMap()) {
      for (auto kv : node) resolve(kv.second, join(path, yaml::key(kv.first, origin_)));
    } else if (node.IsSequence()) {
      for (size_t i = 0; i < node.size(); ++i) resolve(node[i], path + "[" + std::to_string(i) + "]");
    } else if (node.IsScalar()) {
      const std::string v = node.Scalar();
      if (v.find("${") == std::string::npos) return;
      if (!active_.insert(path).second)
        throw Error(yaml::where(origin_, node) + ": circular reference through '" + path + "'");
      node = substitute(node, v);
      active_.erase(path);
    }
  }

  static std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "." + b; }

  // The value of one reference: a dotted key path from the root, or an environment variable.
  YAML::Node lookup(const YAML::Node& at, const std::string& ref) {
    if (ref.rfind("oc.env:", 0) == 0) {
      const std::string spec = ref.substr(7);
      const size_t comma = spec.find(',');
      const std::string var = spec.substr(0, comma);
      if (const char* env = std::getenv(var.c_str())) return YAML::Node(std::string(env));
      if (comma != std::string::npos) return YAML::Node(spec.substr(comma + 1));
      throw Error(yaml::where(origin_, at) + ": ${" + ref + "}: environment variable " + var + " is not set");
    }
    if (ref.find(':') != std::string::npos)
      throw Error(yaml::where(origin_, at) + ": ${" + ref + "}: resolver not supported (only key paths and oc.env)");
    YAML::Node cur = root_;
    std::string walked;
    size_t start = 0;
    while (true) {
      const size_t dot = ref.find('.', start);
      const std::string key = ref.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      walked = join(walked, key);
      if (!cur.IsMap() || !cur[key]) throw Error(yaml::where(origin_, at) + ": ${" + ref + "}: no key '" + walked + "'");
      cur.reset(cur[key]);  // rebind the handle; `cur = ...` would overwrite the node it points to
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    resolve(cur, ref);  // a reference to a reference
    return cur;
  }

  YAML::Node substitute(YAML::Node node, const std::string& v) {
    // A value that is exactly one reference takes the referenced node (and its type).
    if (v.rfind("${", 0) == 0 && v.find('}') == v.size() - 1 && v.find("${", 2) == std::string::npos) {
      const YAML::Node target = lookup(node, v.substr(2, v.size() - 3));
      if (!target.IsScalar()) return YAML::Clone(target);
      return YAML::Node(target.Scalar());
    }
    std::string out;
    size_t i = 0;
    while (i < v.size()) {
      const size_t open = v.find("${", i);
      if (open == std::string::npos) {
        out += v.substr(i);
        break;
      }
      const size_t close = v.find('}', open);
      if (close == std::string::npos) throw Error(yaml::where(origin_, node) + ": unterminated ${ in '" + v + "'");
      out += v.substr(i, open - i);
      const YAML::Node target = lookup(node, v.substr(open + 2, close - open - 2));
      if (!target.IsScalar()) throw Error(yaml::where(origin_, node) + ": '" + v + "' embeds a non-scalar value");
      out += target.Scalar();
      i = close + 1;
    }
    return YAML::Node(out);
  }

  YAML::Node root_;
  std::string origin_;
  std::set<std::string> active_;
};

// A sequence length or batch size: a whole number from 1 to what the simulator models.
int64_t as_count(const YAML::Node& node, const std::string& origin, const std::string& key, int64_t max) {
  const int64_t v = yaml::as_int(node, origin, key);
  if (v < 1 || v > max)
    throw Error(yaml::where(origin, node) + ": " + key + " must be between 1 and " + std::to_string(max) + ", got " +
                std::to_string(v));
  return v;
}

const std::set<std::string> kModelKeys = {"d_model", "n_heads", "n_layers", "expansion_ratio", "vocab_size",
                                          "learned_pos_emb", "no_bias", "max_seq_len", "name", "ffn_config",
                                          "attn_config", "init_device"};

}  // namespace

namespace {
TrainYaml parse_train_yaml_unguarded(const std::string& text, const std::string& origin);
}

TrainYaml parse_train_yaml(const std::string& text, const std::string& origin) {
  return yaml::guard(origin, [&] { return parse_train_yaml_unguarded(text, origin); });
}

namespace {

void need_map(const YAML::Node& n, const std::string& origin, const std::string& key) {
  if (!n.IsMap()) throw Error(yaml::where(origin, n) + ": " + key + " must be a map");
}

// model.ffn_config: only the expansion ratio is modelled.
void read_ffn_config(const YAML::Node& v, const std::string& origin, const std::string& label, TrainYaml& t) {
  need_map(v, origin, label);
  for (const auto& f : v) {
    const std::string fk = yaml::key(f.first, origin);
    if (fk == "expansion_ratio") t.model.expansion_ratio = yaml::as_double(f.second, origin, label + ".expansion_ratio");
    else t.ignored.push_back(label + "." + fk);
  }
}

// model.attn_config: any attn_impl is costed as causal flash attention, and says so.
void read_attn_config(const YAML::Node& v, const std::string& origin, const std::string& label, TrainYaml& t) {
  need_map(v, origin, label);
  for (const auto& a : v) {
    const std::string ak = yaml::key(a.first, origin);
    if (ak == "attn_impl") {
      const std::string impl = yaml::as_string(a.second, origin, label + ".attn_impl");
      t.notes.push_back("model.attn_config.attn_impl: " + impl +
                        " -- attention is costed as the profile's causal flash attention");
    } else {
      t.ignored.push_back(label + "." + ak);
    }
  }
}

// The model block: the same keys as a --models file; d_model, n_heads and n_layers required.
void read_model_block(const YAML::Node& model, const std::string& origin, TrainYaml& t) {
  need_map(model, origin, "model");
  t.model.name = std::filesystem::path(origin).stem().string();
  t.model.vocab_size = 50368;
  std::set<std::string> seen;
  for (const auto& kv : model) {
    const std::string key = yaml::key(kv.first, origin);
    const YAML::Node& v = kv.second;
    const std::string label = "model." + key;
    seen.insert(key);
    if (key == "d_model") t.model.d_model = yaml::as_int(v, origin, label);
    else if (key == "n_heads") t.model.n_heads = yaml::as_int(v, origin, label);
    else if (key == "n_layers") t.model.n_layers = yaml::as_int(v, origin, label);
    else if (key == "expansion_ratio") t.model.expansion_ratio = yaml::as_double(v, origin, label);
    else if (key == "vocab_size") t.model.vocab_size = yaml::as_int(v, origin, label);
    else if (key == "learned_pos_emb") t.model.learned_pos_emb = yaml::as_bool(v, origin, label);
    else if (key == "no_bias") t.model.no_bias = yaml::as_bool(v, origin, label);
    else if (key == "max_seq_len") t.seq_len = as_count(v, origin, label, kMaxSeqLen);
    else if (key == "ffn_config") read_ffn_config(v, origin, label, t);
    else if (key == "attn_config") read_attn_config(v, origin, label, t);
    else if (key != "name" && key != "init_device") t.ignored.push_back(label);
  }
  for (const char* required : {"d_model", "n_heads", "n_layers"})
    if (!seen.count(required)) throw Error(yaml::where(origin, model) + ": model is missing the required key " + required);
  if (std::string why = check_architecture(t.model); !why.empty()) throw Error(yaml::where(origin, model) + ": model: " + why);
}

// fsdp_config: sharding strategy, mixed precision and activation checkpointing; the settings the
// costs assume (limit_all_gathers on, no activation offload) noted or refused when written otherwise.
void read_fsdp_config(const YAML::Node& v, const std::string& origin, TrainYaml& t) {
  need_map(v, origin, "fsdp_config");
  for (const auto& f : v) {
    const std::string fk = yaml::key(f.first, origin);
    const YAML::Node& fv = f.second;
    const std::string label = "fsdp_config." + fk;
    if (fk == "sharding_strategy") {
      const std::string s = yaml::as_string(fv, origin, label);
      const auto parsed = parse_sharding(s);
      if (!parsed) throw Error(yaml::where(origin, fv) + ": " + label + " '" + s + "' is not one of FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD");
      t.sharding = *parsed;
    } else if (fk == "mixed_precision") {
      const std::string s = yaml::as_string(fv, origin, label);
      const auto parsed = parse_mp_mode(s);
      if (!parsed) throw Error(yaml::where(origin, fv) + ": " + label + " '" + s + "' is not one of DEFAULT, PURE, FULL");
      t.mp_mode = *parsed;
    } else if (fk == "activation_checkpointing") {
      t.activation_checkpointing = yaml::as_bool(fv, origin, label);
    } else if (fk == "limit_all_gathers") {
      if (!yaml::as_bool(fv, origin, label)) t.notes.push_back(label + ": false -- costed with limit_all_gathers on");
    } else if (fk == "activation_cpu_offload") {
      if (yaml::as_bool(fv, origin, label)) throw Error(yaml::where(origin, fv) + ": " + label + ": true is not modelled");
    } else {
      t.ignored.push_back(label);
    }
  }
}

// The top-level keys after the model block (a top-level max_seq_len overrides model.max_seq_len).
void read_run_keys(const YAML::Node& root, const std::string& origin, TrainYaml& t) {
  const std::set<std::string> used = {"model", "max_seq_len", "global_train_batch_size", "device_train_microbatch_size",
                                      "precision", "fsdp_config"};
  for (const auto& kv : root) {
    const std::string key = yaml::key(kv.first, origin);
    const YAML::Node& v = kv.second;
    if (key == "max_seq_len") t.seq_len = as_count(v, origin, key, kMaxSeqLen);
    else if (key == "global_train_batch_size") t.global_batch = as_count(v, origin, key, kMaxBatch);
    else if (key == "device_train_microbatch_size") {
      if (v.IsScalar() && v.Scalar() == "auto") t.micro_batch_auto = true;
      else t.micro_batch = as_count(v, origin, key, kMaxBatch);
    } else if (key == "precision") {
      const std::string p = yaml::as_string(v, origin, key);
      const auto parsed = parse_precision(p);
      if (!parsed) throw Error(yaml::where(origin, v) + ": precision '" + p + "' is not one of amp_bf16, amp_fp16, amp_fp8, bf16, fp32");
      t.precision = *parsed;
    } else if (key == "fsdp_config") {
      read_fsdp_config(v, origin, t);
    } else if (!used.count(key)) {
      t.ignored.push_back(key);
    }
  }
}

TrainYaml parse_train_yaml_unguarded(const std::string& text, const std::string& origin) {
  YAML::Node root = yaml::parse(text, origin);
  if (!root.IsMap()) throw Error(origin + ": a training YAML must be a map (llm-foundry's train.yaml)");
  Interpolator(root, origin).resolve_all();
  TrainYaml t;
  t.origin = origin;
  const YAML::Node model = root["model"];
  if (!model) throw Error(origin + ": missing the model: block");
  read_model_block(model, origin, t);
  read_run_keys(root, origin, t);
  for (auto& k : t.ignored) k = one_line(k);
  return t;
}

}  // namespace

TrainYaml read_train_yaml(const std::filesystem::path& path) {
  return parse_train_yaml(read_text_file(path, "training YAML"), path.string());
}

}  // namespace tpsim
