#include "cli/run_settings.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <thread>
#include <tuple>

#include "io/error.hpp"
#include "io/hf_config.hpp"
#include "io/measured_table.hpp"
#include "io/names.hpp"
#include "io/text_format.hpp"
#include "cli/args.hpp"
#include "model/model_parallel.hpp"
#include "model/rules.hpp"

namespace tpsim {

namespace {
// --ckpt and --no-ckpt set one value; a second that differs (--ckpt --no-ckpt, --ckpt full --ckpt
// none) contradicts the first and is an error, not a silent "last one wins".
void set_ckpt(std::optional<std::string>& value, const std::string& v, const char* flag) {
  if (value && to_lower(*value) != to_lower(v))
    throw Error(std::string(flag) + ": contradicts the --ckpt " + *value + " given before it");
  value = v;
}
}  // namespace

void add_ckpt_flags(CLI::App* cmd, std::optional<std::string>& value, bool any) {
  // An option with an optional value: CLI11 hands a bare --ckpt over as "" (full). Each occurrence
  // calls back as it is parsed (trigger_on_parse), so set_ckpt sees every one.
  cmd->add_option_function<std::string>(
         "--ckpt", [&value](const std::string& v) { set_ckpt(value, v.empty() ? "full" : v, "--ckpt"); },
         any ? "activation checkpointing: none, selective (the attention core is recomputed), full (each block's "
               "forward is; a bare --ckpt), or any (search all three)"
             : "activation checkpointing: none, selective (the attention core is recomputed) or full (each block's "
               "forward is; a bare --ckpt)")
      ->expected(0, 1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->trigger_on_parse()
      ->type_name(any ? "[none|selective|full|any]" : "[none|selective|full]");
  cmd->add_flag_function(
      "--no-ckpt", [&value](int64_t) { set_ckpt(value, "none", "--no-ckpt"); },
      "activation checkpointing off (--ckpt none)");
}

std::vector<Checkpointing> parse_ckpt_flag(const std::string& text, bool any_allowed) {
  if (const auto c = parse_checkpointing(to_lower(text))) return {*c};
  if (any_allowed && to_lower(text) == "any") return {kAllCheckpointings.begin(), kAllCheckpointings.end()};
  throw Error("--ckpt '" + text + "': expected none, selective or full" + (any_allowed ? " (or any)" : ""));
}

std::string checkpointing_phrase(const Layout& l) {
  if (l.checkpointing != Checkpointing::kSelective || l.recompute_modules == kDefaultRecomputeModules)
    return checkpointing_phrase(l.checkpointing);
  return "selective recompute of " + recompute_modules_text(l.recompute_modules, ", ");
}

std::string checkpointing_phrase(Checkpointing c) {
  switch (c) {
    case Checkpointing::kNone: return "no checkpointing";
    case Checkpointing::kSelective: return "selective checkpointing";
    case Checkpointing::kFull: return "checkpointing";
  }
  return {};
}

void add_run_flags(CLI::App* cmd, RunFlags& f, bool with_sharding_and_ckpt, bool ckpt_any) {
  cmd->add_option("--config", f.config, "llm-foundry training YAML (flags override it)");
  cmd->add_option(
      "--model", f.model,
      "model: a catalogue or --models name, or a Hugging Face config.json (or its folder); default: the --config's model");
  cmd->add_option("--seq", f.seq, "sequence length; default: the --config's max_seq_len");
  cmd->add_option("--precision", f.precision,
                  "amp_bf16, amp_fp16, amp_fp8, bf16, fp32, mxfp8 or nvfp4 (default amp_bf16)");
  cmd->add_option("--mp-mode", f.mp_mode, "FSDP mixed precision: DEFAULT, PURE or FULL (default DEFAULT)");
  if (with_sharding_and_ckpt) {
    cmd->add_option(
        "--micro-batch", f.micro_batch,
        "sequences per micro-batch per GPU, or auto: under composer what Composer's auto-microbatching "
        "runs (the per-device batch, halved on each out-of-memory), under megatron and torchtitan the largest "
        "that fits");
    cmd->add_option("--sharding", f.sharding,
                    "FULL_SHARD, SHARD_GRAD_OP, NO_SHARD or HYBRID_SHARD (default FULL_SHARD)");
    f.ckpt_any = ckpt_any;
    add_ckpt_flags(cmd, f.ckpt, ckpt_any);
  }
  add_lora_flags(cmd, f.lora);
}

void add_lora_flags(CLI::App* cmd, LoraFlags& f) {
  cmd->add_option("--lora-rank", f.rank,
                  "fine-tune with LoRA adapters of this rank, every base weight frozen (0: train every weight; "
                  "default: the --config's peft_config, else 0)");
  cmd->add_option("--lora-targets", f.targets,
                  "the linears LoRA adapts: Megatron-Core's linear_qkv,linear_proj,linear_fc1,linear_fc2 (one "
                  "adapter per fused linear), Hugging Face's q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj "
                  "(and Wqkv, out_proj), torchtitan's wq,wk,wv,wo,w1,w3,w2, or all-linear");
  cmd->add_option("--lora-alpha", f.alpha, "LoRA's alpha (scale alpha/rank; no cost, printed)");
  cmd->add_option("--lora-dropout", f.dropout,
                  "dropout probability of each adapter's input (Hugging Face PEFT's lora_dropout; default 0)");
}

Lora resolve_lora(const LoraFlags& f, Lora l) {
  if (f.rank) {
    l.rank = *f.rank == "0" ? 0 : parse_count("--lora-rank", *f.rank, kMaxLoraRank);
    if (l.rank == 0) return {};
  }
  if (f.targets) {
    if (const std::string why = parse_lora_targets(*f.targets, l); !why.empty())
      throw Error("--lora-targets '" + *f.targets + "': " + why);
  }
  const auto fraction = [](const std::string& flag, const std::string& text, double lo, double hi) {
    char* end = nullptr;
    const double v = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v < lo || v >= hi)
      throw Error(flag + " '" + text + "': expected a number in [" + general(lo) + ", " + general(hi) + ")");
    return v;
  };
  if (f.alpha) l.alpha = fraction("--lora-alpha", *f.alpha, 0.0, 1e9);
  if (f.dropout) l.dropout_per_mille = std::llround(1000.0 * fraction("--lora-dropout", *f.dropout, 0.0, 1.0));
  if (!l.active() && (f.targets || f.alpha || f.dropout))
    throw Error(std::string(f.targets ? "--lora-targets"
                            : f.alpha ? "--lora-alpha"
                                      : "--lora-dropout") +
                ": no LoRA rank (give --lora-rank, or a --config with a peft_config)");
  if (l.active() && l.target_bits == 0)
    throw Error("--lora-rank " + std::to_string(l.rank) +
                ": no targets (give --lora-targets: linear_qkv,... under Megatron-Core's names, q_proj,v_proj,... "
                "under Hugging Face's, or all-linear)");
  return l;
}

std::string lora_phrase(const Lora& l) {
  std::string s = "LoRA rank " + std::to_string(l.rank) + " on " + lora_targets_name(l);
  if (l.alpha > 0) s += " (alpha " + general(l.alpha) + ")";
  return s;
}

namespace {

// An option whose text is parsed as it is read (each error one line naming the flag) into `target`.
template <class T, class Parse>
CLI::Option* add_parsed(CLI::App* cmd, const char* flag, T& target, Parse parse, const std::string& help) {
  return cmd->add_option_function<std::string>(
      flag, [&target, parse, flag](const std::string& text) { target = parse(flag, text); }, help);
}

std::optional<int64_t> degree_flag(const std::string& flag, const std::string& text) {
  return parse_count(flag, text, kMaxGpus);
}

std::optional<int64_t> layers_flag(const std::string& flag, const std::string& text) {
  return parse_count(flag, text, 1 << 20);
}

// An HSDP mesh degree: -1 (the rest of the GPUs) or a GPU count.
std::optional<int64_t> mesh_degree_flag(const std::string& flag, const std::string& text) {
  if (text == "-1") return -1;
  try {
    return parse_count(flag, text, kMaxGpus);
  } catch (const Error&) {
    throw Error(flag + " '" + text + "': expected -1 (the rest of the GPUs) or a whole number between 1 and " +
                std::to_string(kMaxGpus));
  }
}

// On/off flags: --X and --no-X, the one given last contradicting the other being an error.
void add_on_off(CLI::App* cmd, const std::string& on, const std::string& off, std::optional<bool>& target,
                const std::string& on_help, const std::string& off_help) {
  auto* yes = cmd->add_flag_function(
      on, [&target](int64_t) { target = true; }, on_help);
  auto* no = cmd->add_flag_function(
      off, [&target](int64_t) { target = false; }, off_help);
  yes->excludes(no);
}

}  // namespace

namespace {

// Megatron-Core's options that change the model run, not its layout's degrees: the pipeline layout,
// multi-token prediction, the MoE dispatcher and token dropping, CUDA graphs and the recompute modules.
void add_megatron_model_flags(CLI::App* cmd, LayoutRequest& r) {
  cmd->add_option_function<std::string>(
         "--pipeline-layout",
         [&r](const std::string& text) {
           std::string error;
           const std::optional<uint16_t> id = parse_pipeline_layout(text, error);
           if (!id) throw Error("--pipeline-layout '" + text + "': " + error);
           r.pipeline_layout = *id;
         },
         "megatron: Megatron-Core's pipeline_model_parallel_layout, model chunks separated by '|' of E "
         "(embedding), t (layer), m (MTP depth), L (loss), with x*N and (...)*N repeats: Et*4|(t*4|)*14tmL")
      ->type_name("LAYOUT");
  add_parsed(
      cmd, "--mtp-layers", r.mtp_layers,
      [](const std::string& flag, const std::string& text) -> int64_t { return parse_count(flag, text, 64); },
      "megatron: multi-token prediction's depths (Megatron-Core's --mtp-num-layers; DeepSeek-V3's "
      "num_nextn_predict_layers), each one more layer and its logits on the last pipeline stage")
      ->type_name("N");
  add_parsed(
      cmd, "--moe-dispatcher", r.moe_dispatcher,
      [](const std::string& flag, const std::string& text) -> MoeDispatcher {
        const std::optional<MoeDispatcher> m = parse_moe_dispatcher(text);
        if (!m) throw Error(flag + " '" + text + "': expected alltoall, deepep or hybridep");
        return *m;
      },
      "megatron: the MoE token dispatcher: alltoall (the default), deepep or hybridep (Megatron-Core's "
      "--moe-token-dispatcher-type flex with --moe-flex-dispatcher-backend)")
      ->type_name("NAME");
  add_parsed(
      cmd, "--cuda-graphs", r.cuda_graphs,
      [](const std::string& flag, const std::string& text) -> uint8_t {
        std::string error;
        const std::optional<uint8_t> m = parse_cuda_graphs(text, error);
        if (!m) throw Error(flag + " '" + text + "': " + error);
        return *m;
      },
      "megatron: the modules Megatron-Core captures in CUDA graphs, comma-separated (attn, mlp, moe, moe_router, "
      "moe_preprocess, mamba; layer: the whole layer), or full_iteration (the whole step); docs/frameworks.md")
      ->type_name("MODULES");
  cmd->add_option("--moe-capacity-factor", r.moe_capacity_factor,
                  "megatron: token dropping, each expert taking this many times its even share of the routed rows "
                  "and padded to it (Megatron-Core's --moe-expert-capacity-factor with "
                  "--moe-pad-expert-input-to-capacity; Megatron-Bridge's token-drop runs: 1.0); default: the model's")
      ->check(finite_range(0.01, 64.0))
      ->type_name("X");
  for (auto [flag, count, where] : {std::tuple{"--bf16-layers-at-start", &r.bf16_layers_start, "first"},
                                    std::tuple{"--bf16-layers-at-end", &r.bf16_layers_end, "last"}})
    add_parsed(
        cmd, flag, *count,
        [](const std::string& f, const std::string& text) -> int64_t {
          return text == "0" ? 0 : parse_count(f, text, 1 << 16);
        },
        std::string("megatron: the ") + where +
            " N decoder layers run in bf16 under an fp8 or fp4 precision (Megatron-Core's --first-last-layers-bf16 "
            "with --num-layers-at-" +
            (where[0] == 'f' ? "start" : "end") + "-in-bf16; Nemotron 3 Super's NVFP4 recipes: the last 14)")
        ->type_name("N");
  cmd->add_option("--moe-paged-stash", r.moe_paged_stash,
                  "megatron: the routed experts' kept activations in Megatron-Core's paged stash, a buffer of this "
                  "many times their expected size (moe_paged_stash with moe_paged_stash_buffer_size_factor_cuda; "
                  "Megatron-Bridge's full-iteration recipes: 1.2); needs --fused-grouped-mlp")
      ->check(finite_range(1.0, 4.0))
      ->type_name("X");
  cmd->add_flag("--mtp-repeated-layer", r.mtp_repeated_layer,
                "megatron: the multi-token prediction depths share one layer's weights (--mtp-use-repeated-layer)");
  add_parsed(
      cmd, "--recompute-modules", r.recompute_modules,
      [](const std::string& flag, const std::string& text) -> uint8_t {
        std::string error;
        const std::optional<uint8_t> m = parse_recompute_modules(text, error);
        if (!m) throw Error(flag + " '" + text + "': " + error);
        return *m;
      },
      "megatron, with --ckpt selective: Megatron-Core's recompute modules, comma-separated (core_attn, the "
      "default; layernorm, moe_act, mla_up_proj, mlp, moe, shared_experts; docs/frameworks.md)")
      ->type_name("LIST");
}

}  // namespace

void add_layout_flags(CLI::App* cmd, LayoutRequest& r) {
  cmd->add_option_function<std::string>(
      "--framework",
      [&r](const std::string& text) {
        r.framework = framework_flag(text);
        r.framework_given = true;
      },
      "composer (llm-foundry FSDP, the default), megatron (tensor, pipeline and data parallel) or torchtitan");
  constexpr auto degree_help =
      std::to_array<const char*>({"tensor parallel degree (megatron; sweep and plan search it when not given)",
                                  "pipeline parallel degree: stages of equal layers (megatron)",
                                  "virtual stages per pipeline rank: interleaved 1F1B (megatron)",
                                  "context parallel degree (megatron, torchtitan)",
                                  "expert parallel degree (megatron, mixture-of-experts models)"});
  static_assert(degree_help.size() == kDegreeAxes.size(), "one help text per axis of the registry");
  for (size_t i = 0; i < kDegreeAxes.size(); ++i)
    add_parsed(cmd, kDegreeAxes[i].names.flag.data(), r.*kDegreeAxes[i].asked, degree_flag, degree_help[i]);
  add_parsed(cmd, "--etp", r.expert_tensor, degree_flag,
             "expert tensor parallel degree: the routed experts' own tensor parallelism (megatron's "
             "--expert-tensor-parallel-size; default the --tp degree; sweep and plan also try 1)");
  add_on_off(cmd, "--sp", "--no-sp", r.sequence_parallel,
             "sequence parallelism on (megatron; default: on wherever --tp > 1)", "sequence parallelism off");
  add_on_off(cmd, "--dist-opt", "--no-dist-opt", r.distributed_optimizer,
             "distributed optimizer: ZeRO-1 over data parallel (megatron; the default)",
             "optimizer state replicated on every data-parallel rank");
  constexpr auto switch_help = std::to_array<const char*>(
      {"gradient buckets reduced during the backward (megatron's --overlap-grad-reduce)",
       "main gradients kept and reduced in bf16, not fp32 (megatron's --grad-reduce-in-bf16; Megatron-Bridge's "
       "ddp.grad_reduce_in_fp32 False)",
       "megatron under fp8: the weights are fp8 parameters, not bf16 ones with TransformerEngine's fp8 copy beside "
       "them (megatron's --fp8-param-gather; Megatron-Bridge's fp8 recipes set it)",
       "megatron under mxfp8: the output layer's GEMMs in MXFP8 with their casts, not bf16 (Megatron-Core's "
       "--fp8-output-proj)",
       "megatron on Blackwell under mxfp8 or nvfp4: the routed experts' MLP as TransformerEngine's fused grouped "
       "MLP, the activation and casts in the GEMMs' epilogues (Megatron-Core's --use-transformer-engine-op-fuser)",
       "megatron: each tensor-parallel rank sends 1/tp of the activations to the next pipeline stage, which "
       "all-gathers them (legacy Megatron-LM's and Megatron-DeepSpeed's default, "
       "--scatter-gather-tensors-in-pipeline; Megatron-Core ignores it); no effect under --sp",
       "megatron: TransformerEngine's tensor-parallel communication overlap (userbuffers; needs --sp and --tp > 1)",
       "megatron: Megatron-Core's combined 1F1B, each micro-batch's expert-parallel all-to-alls hidden behind "
       "another's compute (Megatron-Bridge's moe_a2a_overlap; needs --ep > 1, no full recompute, and --vp > 1 with "
       "--pp > 1)",
       "megatron: under --overlap-moe-expert-parallel-comm, the weight gradients computed apart from the data "
       "gradients, so that the all-to-alls start earlier (Megatron-Core's --delay-wgrad-compute)",
       "megatron: the embedding counts as a layer of the first stage in the pipeline split "
       "(--account-for-embedding-in-pipeline-split)",
       "megatron: the loss counts as a layer of the last stage (--account-for-loss-in-pipeline-split)",
       "async tensor parallelism: the collectives beside the GEMMs (torchtitan's enable_async_tensor_parallel)",
       "composer, torchtitan: torch.compile of each transformer block, which fuses its norm and elementwise kernels "
       "(Composer's compile_config, torchtitan's compile)",
       "torchtitan: model.norm_type fused_rmsnorm, its Triton RMSNorm kernel (default: rmsnorm, PyTorch ops)",
       "megatron: the precision-aware optimizer with both Adam moments in bf16 (--use-precision-aware-optimizer "
       "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16; Megatron-Bridge's DeepSeek-V3 recipes)"});
  static_assert(switch_help.size() == kSwitchAxes.size(), "one help text per axis of the registry");
  for (size_t i = 0; i < kSwitchAxes.size(); ++i)
    cmd->add_flag(std::string(kSwitchAxes[i].names.flag), r.*kSwitchAxes[i].asked, switch_help[i]);
  add_parsed(cmd, "--shard-degree", r.shard_degree, mesh_degree_flag,
             "composer HSDP: parameters sharded over N consecutive GPUs (fsdp_config's data_parallel_shard_degree; "
             "-1: the GPUs the replicate degree leaves); torchtitan: its data_parallel_shard_degree (FSDP2 shards "
             "over it x --cp; -1, the default: the rest)");
  add_parsed(cmd, "--replicate-degree", r.replicate_degree, mesh_degree_flag,
             "composer HSDP: gradients all-reduced over N replicas (fsdp_config's data_parallel_replicate_degree; "
             "-1: the GPUs the shard degree leaves); torchtitan: its data_parallel_replicate_degree (HSDP "
             "replicas, default 1)");
  add_parsed(
      cmd, "--selective-ac-option", r.selective_ac_layers,
      [](const std::string& flag, const std::string& text) -> int64_t {
        return text == "op" ? 0 : parse_count(flag, text, 1 << 20);
      },
      "torchtitan's selective checkpointing: op (per-op, the default) or N (every N-th block in full)")
      ->type_name("op|N");
  add_megatron_model_flags(cmd, r);
  add_parsed(
      cmd, kMegatronFsdpAxis.flag.data(), r.megatron_fsdp,  // a literal: null-terminated
      [](const std::string& flag, const std::string& text) -> MegatronFsdp {
        const auto m = parse_megatron_fsdp(text);
        if (!m || *m == MegatronFsdp::kOff)
          throw Error(flag + " '" + text + "': expected no_shard, optim, optim_grads or optim_grads_params");
        return *m;
      },
      "megatron: Megatron-FSDP with this --data-parallel-sharding-strategy: no_shard, optim (optimizer state), "
      "optim_grads (and gradients), optim_grads_params (and parameters: ZeRO-3)")
      ->type_name("STRATEGY");
  add_parsed(cmd, "--first-stage-layers", r.first_stage_layers, layers_flag,
             "megatron: layers of the first pipeline stage, the rest split evenly (Megatron-Core's "
             "--decoder-first-pipeline-num-layers)");
  add_parsed(cmd, "--last-stage-layers", r.last_stage_layers, layers_flag,
             "megatron: layers of the last pipeline stage (--decoder-last-pipeline-num-layers)");
  add_parsed(
      cmd, "--attention", r.unfused_attention,
      [](const std::string& flag, const std::string& text) {
        if (text != "flash" && text != "unfused") throw Error(flag + " '" + text + "': expected flash or unfused");
        return text == "unfused";
      },
      "flash (a fused kernel) or unfused (the scores materialised: llm-foundry's attn_impl torch under composer, "
      "Megatron's core attention under megatron); default: the model's own");
}

void check_layout_request(const LayoutRequest& r) {
  if (const BrokenRule b = first_broken_request_rule(r)) throw Error(b.why);
}

void check_layout_request(LayoutRequest& r, const RunSettings& run) {
  r.torch_compile = r.torch_compile || run.torch_compile;  // the YAML's compile_config, or --compile
  check_layout_request(r);
  if (r.recompute_modules &&
      std::find(run.ckpt_asked.begin(), run.ckpt_asked.end(), Checkpointing::kSelective) == run.ckpt_asked.end())
    throw Error(
        "--recompute-modules: Megatron-Core's recompute modules are those of selective recompute; give "
        "--ckpt selective (or any, under sweep and plan)");
  if (!run.shard_degree && !run.replicate_degree) return;
  if (!framework_def(r.framework).sharding_strategies)
    throw Error(run.config_origin + ": fsdp_config's data_parallel_shard_degree and data_parallel_replicate_degree " +
                "are Composer's HSDP; --framework " + std::string(to_string(r.framework)) +
                " has its own data parallelism");
  // A degree given by flag wins over the YAML's, as every flag does.
  if (!r.shard_degree) r.shard_degree = run.shard_degree;
  if (!r.replicate_degree) r.replicate_degree = run.replicate_degree;
}

void check_no_sharding_flag(const LayoutRequest& r, const std::string& flag, bool given) {
  const FrameworkDef& def = framework_def(r.framework);
  if (given && !def.sharding_strategies)
    throw Error(flag + ": --framework " + std::string(def.name) + " " + std::string(def.no_sharding_strategies));
}

namespace {

// A positive, finite number (a network's bandwidth).
double positive_number(const std::string& flag, const std::string& text) {
  const std::optional<double> v = parse_number(text);
  if (!v || !std::isfinite(*v) || !(*v > 0)) throw Error(flag + " '" + text + "': expected a positive number");
  return *v;
}

}  // namespace

namespace {

// --model: a catalogue name (shipped or from --models), else a Hugging Face config.json or the
// folder holding one, named after it; its ignored keys and notes join the run's notes.
ModelConfig resolve_model(const Context& ctx, const std::string& spec, std::vector<std::string>& notes) {
  if (const ModelConfig* m = ctx.catalog().find(spec)) return *m;
  if (!is_hf_config_path(spec)) return ctx.catalog().get(spec);  // an Error naming the known models
  const HfConfig h = read_hf_config_file(spec);
  const std::string file = hf_config_file(spec).string();
  if (!h.ignored.empty()) {
    std::string list;
    for (const auto& k : h.ignored) list += (list.empty() ? "" : ", ") + k;
    notes.push_back(file + ": not modelled, ignored: " + list);
  }
  for (const auto& n : h.notes) notes.push_back(file + ": " + n);
  ModelConfig m = h.model;
  m.name = hf_model_name(spec);
  return m;
}

}  // namespace

RunSettings resolve_run(const Context& ctx, const RunFlags& f) {
  RunSettings s;
  if (!f.config.empty()) {
    TrainYaml y = read_train_yaml(f.config);
    s.config_origin = y.origin;
    s.model = y.model;
    s.seq_len = y.seq_len;
    s.micro_batch = y.micro_batch;
    s.micro_batch_auto = y.micro_batch_auto;
    s.global_batch = y.global_batch;
    if (y.precision) s.precision = *y.precision;
    if (y.mp_mode) s.mp_mode = *y.mp_mode;
    s.sharding = y.has_fsdp_config ? y.sharding : Sharding::kDdp;
    if (!y.has_fsdp_config)
      s.notes.push_back(
          y.origin +
          ": no fsdp_config -- predicted as plain PyTorch DDP, as Composer runs it: every "
          "GPU holds all parameters, gradients and optimizer state; the gradients are all-reduced in 25 MiB "
          "buckets on the last micro-batch");
    s.checkpointing = y.checkpointing;
    s.lora = y.lora;
    s.torch_compile = y.torch_compile;
    s.shard_degree = y.shard_degree;
    s.replicate_degree = y.replicate_degree;
    if (!y.ignored.empty()) {
      std::string list;
      for (const auto& k : y.ignored) list += (list.empty() ? "" : ", ") + k;
      s.notes.push_back(y.origin + ": not modelled, ignored: " + list);
    }
    for (const auto& n : y.notes) s.notes.push_back(y.origin + ": " + n);
  }
  if (!f.model.empty()) s.model = resolve_model(ctx, f.model, s.notes);
  if (!f.seq.empty()) s.seq_len = parse_count("--seq", f.seq, kMaxSeqLen);
  if (!f.micro_batch.empty()) {
    if (f.micro_batch == "auto") {
      s.micro_batch_auto = true;
      s.micro_batch.reset();
    } else {
      s.micro_batch = parse_count("--micro-batch", f.micro_batch, kMaxBatch);
      s.micro_batch_auto = false;
    }
  }
  if (!f.precision.empty()) s.precision = parse_precision_flag("--precision", f.precision);
  if (!f.mp_mode.empty()) s.mp_mode = parse_mp_mode_flag("--mp-mode", f.mp_mode);
  if (!f.sharding.empty()) s.sharding = parse_sharding_flag("--sharding", f.sharding);
  if (f.ckpt) {
    s.ckpt_asked = parse_ckpt_flag(*f.ckpt, f.ckpt_any);
    if (s.ckpt_asked.size() == 1) s.checkpointing = s.ckpt_asked.front();
  }
  s.lora = resolve_lora(f.lora, s.lora);
  if (!s.model) throw Error("--model: no model given (name one, or give --config with a model: block)");
  if (!s.seq_len) throw Error("--seq: no sequence length given (or max_seq_len in --config)");
  return s;
}

ModelConfig attention_as_asked(const ModelConfig& model, const LayoutRequest& s, std::string* note) {
  if (!s.unfused_attention || *s.unfused_attention == model.unfused_attention) return model;
  ModelConfig m = model;
  if (!*s.unfused_attention) {
    m.unfused_attention = m.torch_attention = false;
    m.attention_dropout = 0;  // fused into the kernel
    if (note)
      *note = "--attention flash: " + model.name + "'s attention is costed as the profile's causal flash attention";
    return m;
  }
  if (framework_def(s.framework).conventions.core_attention) {
    use_megatron_core_attention(m);
    if (note)
      *note = "--attention unfused: " + model.name +
              "'s attention is costed as Megatron's core attention: the scores "
              "materialised, its fused causal softmax, attention dropout 0.1";
    return m;
  }
  m.unfused_attention = m.torch_attention = true;
  if (note)
    *note = "--attention unfused: " + model.name +
            "'s attention is costed as llm-foundry's PyTorch attention "
            "(attn_impl: torch): the scores materialised, scaled, masked, softmaxed in fp32 and cast back";
  return m;
}

void print_notes(const RunSettings& s) {
  for (const auto& n : s.notes) std::cerr << "tpsim: note: " << n << "\n";
}

void add_fold_threads_flag(CLI::App* cmd, std::string& threads) {
  cmd->add_option("--threads", threads, "held-out folds fitted at once (default: one per core)");
}

int fold_threads(const std::string& flag) {
  if (!flag.empty()) return static_cast<int>(parse_count("--threads", flag, 4096));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

void add_network_flags(CLI::App* cmd, NetworkFlags& f) {
  cmd->add_option(
      "--inter-node-gbps", f.inter_node_gbps,
      "the cluster's network: Gbit/s per node and direction, all NICs together (default: the device file's)");
  cmd->add_option("--gpus-per-node", f.gpus_per_node, "GPUs per node of the cluster (default: the device file's)");
}

ClusterNetwork resolve_network(const NetworkFlags& f) {
  ClusterNetwork n;
  if (!f.gpus_per_node.empty()) n.gpus_per_node = parse_count("--gpus-per-node", f.gpus_per_node, 10000);
  if (!f.inter_node_gbps.empty()) n.inter_node_gbps = positive_number("--inter-node-gbps", f.inter_node_gbps);
  return n;
}

void apply_network_flags(Context& ctx, const NetworkFlags& f) {
  const ClusterNetwork n = resolve_network(f);
  if (!n.empty()) ctx.set_network(n);
}

}  // namespace tpsim
