#include "cli/run_settings.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <thread>

#include "io/error.hpp"
#include "io/hf_config.hpp"
#include "io/measured_table.hpp"
#include "io/names.hpp"
#include "io/text_format.hpp"
#include "cli/args.hpp"

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
}

void add_parallel_flags(CLI::App* cmd, ParallelFlags& f) {
  cmd->add_option("--framework", f.framework,
                  "composer (llm-foundry FSDP, the default), megatron (tensor, pipeline and data parallel) or "
                  "torchtitan");
  cmd->add_option("--tp", f.tp, "tensor parallel degree (megatron; sweep and plan search it when not given)");
  cmd->add_option("--pp", f.pp, "pipeline parallel degree: stages of equal layers (megatron)");
  cmd->add_option("--vp", f.vp, "virtual stages per pipeline rank: interleaved 1F1B (megatron)");
  cmd->add_option("--cp", f.cp, "context parallel degree (megatron, torchtitan)");
  cmd->add_option("--ep", f.ep, "expert parallel degree (megatron, mixture-of-experts models)");
  cmd->add_option("--etp", f.etp,
                  "expert tensor parallel degree: the routed experts' own tensor parallelism (megatron's "
                  "--expert-tensor-parallel-size; default the --tp degree; sweep and plan also try 1)");
  auto* sp = cmd->add_flag_function(
      "--sp", [&f](int64_t) { f.sp = true; }, "sequence parallelism on (megatron; default: on wherever --tp > 1)");
  auto* no_sp = cmd->add_flag_function(
      "--no-sp", [&f](int64_t) { f.sp = false; }, "sequence parallelism off");
  sp->excludes(no_sp);
  auto* dist = cmd->add_flag_function(
      "--dist-opt", [&f](int64_t) { f.dist_opt = true; },
      "distributed optimizer: ZeRO-1 over data parallel (megatron; the default)");
  auto* no_dist = cmd->add_flag_function(
      "--no-dist-opt", [&f](int64_t) { f.dist_opt = false; }, "optimizer state replicated on every data-parallel rank");
  dist->excludes(no_dist);
  cmd->add_flag("--overlap-grad-reduce", f.overlap_grad_reduce,
                "gradient buckets reduced during the backward (megatron's --overlap-grad-reduce)");
  cmd->add_flag("--grad-reduce-in-bf16", f.grad_reduce_bf16,
                "main gradients kept and reduced in bf16, not fp32 (megatron's --grad-reduce-in-bf16; "
                "Megatron-Bridge's ddp.grad_reduce_in_fp32 False)");
  cmd->add_flag("--fp8-param-gather", f.fp8_param_gather,
                "megatron under fp8: the weights are fp8 parameters, not bf16 ones with TransformerEngine's fp8 "
                "copy beside them (megatron's --fp8-param-gather; Megatron-Bridge's fp8 recipes set it)");
  cmd->add_flag("--pipeline-scatter-gather", f.pipeline_scatter_gather,
                "megatron: each tensor-parallel rank sends 1/tp of the activations to the next pipeline stage, "
                "which all-gathers them (legacy Megatron-LM's and Megatron-DeepSpeed's default, "
                "--scatter-gather-tensors-in-pipeline; Megatron-Core ignores it); no effect under --sp");
  cmd->add_option("--shard-degree", f.shard_degree,
                  "composer HSDP: parameters sharded over N consecutive GPUs (fsdp_config's "
                  "data_parallel_shard_degree; -1: the GPUs the replicate degree leaves); torchtitan: its "
                  "data_parallel_shard_degree (FSDP2 shards over it x --cp; -1, the default: the rest)");
  cmd->add_option("--replicate-degree", f.replicate_degree,
                  "composer HSDP: gradients all-reduced over N replicas (fsdp_config's "
                  "data_parallel_replicate_degree; -1: the GPUs the shard degree leaves); torchtitan: its "
                  "data_parallel_replicate_degree (HSDP replicas, default 1)");
  cmd->add_flag("--async-tp", f.async_tp,
                "async tensor parallelism: the collectives beside the GEMMs (torchtitan's "
                "enable_async_tensor_parallel)");
  cmd->add_option("--selective-ac-option", f.selective_ac,
                  "torchtitan's selective checkpointing: op (per-op, the default) or N (every N-th block in full)")
      ->type_name("op|N");
  cmd->add_option("--first-stage-layers", f.first_stage_layers,
                  "megatron: layers of the first pipeline stage, the rest split evenly (Megatron-Core's "
                  "--decoder-first-pipeline-num-layers)");
  cmd->add_option("--last-stage-layers", f.last_stage_layers,
                  "megatron: layers of the last pipeline stage (--decoder-last-pipeline-num-layers)");
  cmd->add_flag("--account-for-embedding", f.account_for_embedding,
                "megatron: the embedding counts as a layer of the first stage in the pipeline split "
                "(--account-for-embedding-in-pipeline-split)");
  cmd->add_flag("--account-for-loss", f.account_for_loss,
                "megatron: the loss counts as a layer of the last stage (--account-for-loss-in-pipeline-split)");
  cmd->add_option("--attention", f.attention,
                  "flash (a fused kernel) or unfused (the scores materialised: llm-foundry's attn_impl torch under "
                  "composer, Megatron's core attention under megatron); default: the model's own");
  cmd->add_flag("--tp-comm-overlap", f.tp_comm_overlap,
                "megatron: TransformerEngine's tensor-parallel communication overlap (userbuffers; needs --sp and "
                "--tp > 1)");
  cmd->add_flag("--overlap-moe-expert-parallel-comm", f.moe_a2a_overlap,
                "megatron: Megatron-Core's combined 1F1B, each micro-batch's expert-parallel all-to-alls hidden behind "
                "another's compute (Megatron-Bridge's moe_a2a_overlap; needs --ep > 1, no full recompute, and --vp > 1 "
                "with --pp > 1)");
}

namespace {

// torchtitan's own flags, and megatron's that do not apply to it.
void check_torchtitan_flags(const ParallelFlags& f, ParallelSettings& s) {
  const FrameworkDef& def = framework_def(s.framework);
  if ((f.async_tp && !def.owns(FrameworkOption::kAsyncTensorParallel)) ||
      (!f.selective_ac.empty() && !def.owns(FrameworkOption::kSelectiveAcLayers)))
    throw Error(std::string(f.async_tp ? "--async-tp" : "--selective-ac-option") +
                ": torchtitan's option; use --framework " +
                std::string(option_owner(FrameworkOption::kAsyncTensorParallel).name));
  // A framework that shards the optimizer itself, with no flag for it (torchtitan's FSDP2).
  if (def.distributed_optimizer && !def.owns(FrameworkOption::kDistributedOptimizer) &&
      (f.dist_opt || f.overlap_grad_reduce))
    throw Error(std::string(f.dist_opt ? (*f.dist_opt ? "--dist-opt" : "--no-dist-opt") : "--overlap-grad-reduce") +
                ": megatron's option; torchtitan's FSDP2 shards the optimizer state and reduces gradients during the "
                "backward");
  s.axes.async_tensor_parallel = f.async_tp;
  if (!f.selective_ac.empty() && f.selective_ac != "op")
    s.axes.selective_ac_layers = parse_count("--selective-ac-option", f.selective_ac, 1 << 20);
}

// megatron's own flags: the uneven pipeline split and TransformerEngine's TP communication overlap.
void check_megatron_flags(const ParallelFlags& f, ParallelSettings& s) {
  struct Given {
    const char* flag;
    bool on;
    const char* owner;
    FrameworkOption option;
  };
  const char* const core = "Megatron-Core's";
  using O = FrameworkOption;
  const Given given[] = {
      {"--first-stage-layers", !f.first_stage_layers.empty(), core, O::kUnevenPipeline},
      {"--last-stage-layers", !f.last_stage_layers.empty(), core, O::kUnevenPipeline},
      {"--account-for-embedding", f.account_for_embedding, core, O::kUnevenPipeline},
      {"--account-for-loss", f.account_for_loss, core, O::kUnevenPipeline},
      {"--tp-comm-overlap", f.tp_comm_overlap, core, O::kTpCommOverlap},
      {"--overlap-moe-expert-parallel-comm", f.moe_a2a_overlap, core, O::kMoeA2aOverlap},
      {"--grad-reduce-in-bf16", f.grad_reduce_bf16, core, O::kGradReduceBf16},
      {"--fp8-param-gather", f.fp8_param_gather, core, O::kFp8ParamGather},
      {"--pipeline-scatter-gather", f.pipeline_scatter_gather, "Megatron-LM's", O::kPipelineScatterGather}};
  for (const Given& g : given)
    if (g.on && !framework_def(s.framework).owns(g.option))
      throw Error(std::string(g.flag) + ": " + g.owner + " option; use --framework " +
                  std::string(option_owner(g.option).name));
  if (f.tp_comm_overlap && f.sp == false)
    throw Error(
        "--tp-comm-overlap: TransformerEngine's TP communication overlap needs sequence parallelism (--no-sp given)");
  if (f.tp_comm_overlap && s.axes.tensor == 1)
    throw Error("--tp-comm-overlap: TransformerEngine's TP communication overlap needs --tp > 1");
  ParallelAxes& a = s.axes;
  if (!f.first_stage_layers.empty())
    a.first_stage_layers = parse_count("--first-stage-layers", f.first_stage_layers, 1 << 20);
  if (!f.last_stage_layers.empty())
    a.last_stage_layers = parse_count("--last-stage-layers", f.last_stage_layers, 1 << 20);
  a.account_for_embedding = f.account_for_embedding;
  a.account_for_loss = f.account_for_loss;
  a.tp_comm_overlap = f.tp_comm_overlap;
  a.moe_a2a_overlap = f.moe_a2a_overlap;
}

std::optional<int64_t> degree_flag(const std::string& flag, const std::string& text) {
  if (text.empty()) return std::nullopt;
  return parse_count(flag, text, kMaxGpus);
}

// An HSDP mesh degree: -1 (the rest of the GPUs) or a GPU count.
std::optional<int64_t> mesh_degree_flag(const std::string& flag, const std::string& text) {
  if (text == "-1") return -1;
  if (text.empty()) return std::nullopt;
  try {
    return parse_count(flag, text, kMaxGpus);
  } catch (const Error&) {
    throw Error(flag + " '" + text + "': expected -1 (the rest of the GPUs) or a whole number between 1 and " +
                std::to_string(kMaxGpus));
  }
}

// A positive, finite number (a network's bandwidth).
double positive_number(const std::string& flag, const std::string& text) {
  const std::optional<double> v = parse_number(text);
  if (!v || !std::isfinite(*v) || !(*v > 0)) throw Error(flag + " '" + text + "': expected a positive number");
  return *v;
}

}  // namespace

ParallelSettings resolve_parallel(const ParallelFlags& f) {
  ParallelSettings s;
  s.framework_given = !f.framework.empty();
  if (s.framework_given) {
    s.framework = framework_flag(f.framework);
  }
  ParallelAxes& a = s.axes;
  a.tensor = degree_flag("--tp", f.tp);
  a.pipeline = degree_flag("--pp", f.pp);
  a.virtual_stages = degree_flag("--vp", f.vp);
  a.context = degree_flag("--cp", f.cp);
  a.expert = degree_flag("--ep", f.ep);
  a.expert_tensor = degree_flag("--etp", f.etp);
  a.sequence_parallel = f.sp;
  a.distributed_optimizer = f.dist_opt;
  a.overlap_grad_reduce = f.overlap_grad_reduce;
  a.grad_reduce_bf16 = f.grad_reduce_bf16;
  a.fp8_param_gather = f.fp8_param_gather;
  a.pipeline_scatter_gather = f.pipeline_scatter_gather;
  a.shard_degree = mesh_degree_flag("--shard-degree", f.shard_degree);
  a.replicate_degree = mesh_degree_flag("--replicate-degree", f.replicate_degree);
  check_torchtitan_flags(f, s);
  check_megatron_flags(f, s);
  if (!f.attention.empty()) {
    if (f.attention != "flash" && f.attention != "unfused")
      throw Error("--attention '" + f.attention + "': expected flash or unfused");
    s.unfused_attention = f.attention == "unfused";
    if (*s.unfused_attention && !framework_def(s.framework).unfused_attention)
      throw Error(
          "--attention unfused: torchtitan runs PyTorch's scaled_dot_product_attention, costed as flash "
          "attention; its unfused math fallback is not modelled");
  }
  const FrameworkDef& def = framework_def(s.framework);
  if (def.data_parallel_degrees) return s;  // torchtitan's data_parallel_*_degree, as given
  if (!def.sharding_strategies) {
    for (const auto& [flag, given] : {std::pair{"--shard-degree", a.shard_degree.has_value()},
                                      std::pair{"--replicate-degree", a.replicate_degree.has_value()}})
      if (given)
        throw Error(std::string(flag) + ": HSDP's shard and replicate degrees are composer's (FSDP) and " +
                    "torchtitan's (FSDP2); --framework " + std::string(to_string(s.framework)) +
                    " has its own data parallelism");
    return s;
  }
  const std::pair<const char*, std::optional<int64_t>> degrees[] = {
      {"--tp", a.tensor}, {"--pp", a.pipeline}, {"--vp", a.virtual_stages}, {"--cp", a.context}, {"--ep", a.expert}};
  if (a.expert_tensor)
    throw Error("--etp " + std::to_string(*a.expert_tensor) +
                ": composer runs FSDP without model parallelism; use --framework megatron");
  for (const auto& [flag, value] : degrees)
    if (value.value_or(1) > 1)
      throw Error(std::string(flag) + " " + std::to_string(*value) +
                  ": composer runs FSDP without model parallelism; use --framework megatron");
  for (const auto& [flag, on] :
       {std::pair{"--sp", f.sp.value_or(false)}, std::pair{"--dist-opt", f.dist_opt.value_or(false)},
        std::pair{"--overlap-grad-reduce", f.overlap_grad_reduce}})
    if (on) throw Error(std::string(flag) + ": composer runs FSDP without model parallelism; use --framework megatron");
  return s;
}

ParallelSettings resolve_parallel(const ParallelFlags& f, const RunSettings& run) {
  ParallelSettings s = resolve_parallel(f);
  if (!run.shard_degree && !run.replicate_degree) return s;
  if (!framework_def(s.framework).sharding_strategies)
    throw Error(run.config_origin + ": fsdp_config's data_parallel_shard_degree and data_parallel_replicate_degree " +
                "are Composer's HSDP; --framework " + std::string(to_string(s.framework)) +
                " has its own data parallelism");
  // A degree given by flag wins over the YAML's, as every flag does.
  if (!s.axes.shard_degree) s.axes.shard_degree = run.shard_degree;
  if (!s.axes.replicate_degree) s.axes.replicate_degree = run.replicate_degree;
  return s;
}

Parallelism fixed_parallelism(const ParallelSettings& s) {
  const ParallelAxes& a = s.axes;
  Parallelism p;
  p.framework = s.framework;
  p.tensor = a.tensor.value_or(1);
  p.pipeline = a.pipeline.value_or(1);
  p.virtual_stages = a.virtual_stages.value_or(1);
  p.context = a.context.value_or(1);
  p.expert = a.expert.value_or(1);
  if (a.expert_tensor) p.set_expert_tensor(*a.expert_tensor);
  p.sequence_parallel = a.sequence_parallel.value_or(p.tensor > 1);
  p.distributed_optimizer = a.distributed_optimizer.value_or(framework_def(s.framework).distributed_optimizer);
  p.overlap_grad_reduce = a.overlap_grad_reduce;
  p.grad_reduce_bf16 = a.grad_reduce_bf16;
  p.fp8_param_gather = a.fp8_param_gather;
  p.pipeline_scatter_gather = a.pipeline_scatter_gather;
  p.shard_degree = a.shard_degree.value_or(0);
  p.replicate_degree = a.replicate_degree.value_or(0);
  p.async_tensor_parallel = a.async_tensor_parallel;
  p.selective_ac_layers = a.selective_ac_layers;
  p.first_stage_layers = a.first_stage_layers, p.last_stage_layers = a.last_stage_layers;
  p.account_for_embedding = a.account_for_embedding, p.account_for_loss = a.account_for_loss;
  p.tp_comm_overlap = a.tp_comm_overlap;
  p.moe_a2a_overlap = a.moe_a2a_overlap;
  return p;
}

void check_no_sharding_flag(const ParallelSettings& s, const std::string& flag, bool given) {
  const FrameworkDef& def = framework_def(s.framework);
  if (given && !def.sharding_strategies)
    throw Error(flag + ": --framework " + std::string(def.name) + " " + std::string(def.no_sharding_strategies));
}

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
  if (!s.model) throw Error("--model: no model given (name one, or give --config with a model: block)");
  if (!s.seq_len) throw Error("--seq: no sequence length given (or max_seq_len in --config)");
  return s;
}

ModelConfig attention_as_asked(const ModelConfig& model, const ParallelSettings& s, std::string* note) {
  if (!s.unfused_attention || *s.unfused_attention == model.unfused_attention) return model;
  ModelConfig m = model;
  if (!*s.unfused_attention) {
    m.unfused_attention = m.torch_attention = false;
    m.attention_dropout = 0;  // fused into the kernel
    if (note)
      *note = "--attention flash: " + model.name + "'s attention is costed as the profile's causal flash attention";
    return m;
  }
  if (framework_def(s.framework).core_attention) {
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
