#include "model/memory.hpp"

#include <algorithm>

#include "model/architecture.hpp"

namespace tpsim {

namespace {

struct MemoryInputs {
  double block_params = 0;                       // parameters of one block (the largest)
  double blocks_params = 0, blocks_trained = 0;  // of all blocks
  double root_params = 0;                        // parameters outside the blocks (embeddings, final norm)
  double block_trained = 0, root_trained = 0;    // of them, those trained (ModelMemoryCounts)
  int64_t n_layers = 0;
  double block_saved_bytes = 0;  // one block's forward saved_bytes
  double block_input_bytes = 0;  // one block's input (what checkpointing keeps)
  double embed_saved_bytes = 0;
  double head_saved_bytes = 0;
  double backward_buffer_bytes = 0;       // gradient buffers of one block's backward
  double block_attention_only_bytes = 0;  // what selective checkpointing stops keeping per block
  double blocks_saved_bytes = 0, blocks_attention_only_bytes = 0;  // every block's
};

MemoryInputs memory_inputs(const ModelMemoryCounts& model, const TrainConfig& cfg, const SavedActivations& saved) {
  const double a = activation_bytes(cfg.precision);
  const double tokens = static_cast<double>(cfg.micro_batch) * static_cast<double>(cfg.seq_len);
  const double td = tokens * static_cast<double>(model.d_model);
  MemoryInputs in;
  in.block_params = model.block_params;
  in.root_params = model.root_params;
  in.block_trained = model.block_trained;
  in.blocks_params = model.blocks_params;
  in.blocks_trained = model.blocks_trained;
  in.blocks_saved_bytes = saved.blocks;
  in.blocks_attention_only_bytes = saved.blocks_attention_only;
  in.root_trained = model.root_trained;
  in.n_layers = model.n_layers;
  in.block_saved_bytes = saved.block;
  in.block_input_bytes = td * a;
  in.embed_saved_bytes = saved.embed;
  in.head_saved_bytes = saved.head;
  in.block_attention_only_bytes = saved.block_attention_only;
  in.backward_buffer_bytes = saved.block_backward_buffers;
  return in;
}

// The activations kept through the forward under `cfg`'s checkpointing (every block's, or its input
// only, and the embeddings'), and what the block in backward rebuilds.
struct KeptActivations {
  double kept = 0, rebuilt = 0;
};
KeptActivations kept_activations(const MemoryInputs& in, const TrainConfig& cfg) {
  double blocks = in.blocks_saved_bytes, rebuilt = 0.0;
  if (cfg.layout.checkpointing == Checkpointing::kFull) {
    blocks = static_cast<double>(in.n_layers) * in.block_input_bytes;
    rebuilt = in.block_saved_bytes;
  } else if (cfg.layout.checkpointing == Checkpointing::kSelective) {
    blocks = in.blocks_saved_bytes - in.blocks_attention_only_bytes;
    rebuilt = in.block_attention_only_bytes;
  }
  return {blocks + in.embed_saved_bytes, rebuilt};
}

// Plain PyTorch DDP under Composer's amp: every GPU holds the fp32 parameters, their fp32 gradients
// and Adam's two moments (16 bytes per parameter; 4 for a frozen one, which has neither), and DDP's
// gradient buckets, a second fp32 copy of every gradient (gradient_as_bucket_view is False in Composer's
// prepare_ddp_module; PyTorch's DistributedDataParallel documents the saving as "the total gradients size" when it is
// True). Autocast's copies of the weights in the compute dtype are kept for the backward of the matmuls that used them:
// all of them at the loss, or, under full checkpointing, those of the block being recomputed and the next (as FSDP's
// two gathered blocks). fp32 runs compute with the weights themselves. The backward adds one block's gradients in the
// compute dtype before they are accumulated into the fp32 ones. One GPU runs no DDP (Composer wraps only when
// distributed).
MemoryBreakdown ddp_memory(const MemoryInputs& in, const TrainConfig& cfg, const CostParams& params) {
  const double L = static_cast<double>(in.n_layers);
  const double total_params = in.blocks_params + in.root_params;
  const double total_trained = in.blocks_trained + in.root_trained;
  const double compute_bytes = gathered_param_bytes(cfg.precision, MpMode::kDefault);
  MemoryBreakdown m;
  m.sharded_state_bytes = 4.0 * total_params + 12.0 * total_trained;
  if (compute_bytes < 4.0) {
    const double blocks =
        cfg.layout.checkpointing == Checkpointing::kFull ? std::min(2.0, L) * in.block_params : in.blocks_params;
    m.gathered_params_bytes = (in.root_params + blocks) * compute_bytes;
  }
  const double buckets = cfg.n_gpus > 1 ? 4.0 * total_trained : 0.0;
  const KeptActivations a = kept_activations(in, cfg);
  const double at_loss = a.kept + in.head_saved_bytes;
  const double backward = in.backward_buffer_bytes + in.block_trained * compute_bytes;
  const double at_backward = a.kept + a.rebuilt + backward;
  m.activation_bytes = at_loss >= at_backward ? at_loss : a.kept + a.rebuilt;
  m.transient_bytes = buckets + (at_loss >= at_backward ? 0.0 : backward);
  return with_peak(m, params);
}

}  // namespace

double block_backward_buffer_bytes(const ModelConfig& model, int64_t tokens, Precision p) {
  require_uniform(model, "block_backward_buffer_bytes");
  const double t = static_cast<double>(tokens);
  const double td = t * static_cast<double>(model.d_model);
  const double tq = t * static_cast<double>(model.q_dim());
  const double tkv = t * static_cast<double>(model.kv_dim());
  const double tv = t * static_cast<double>(model.kv_heads() * model.v_head());
  // Latent attention: the compressed query's and key/value's gradients too.
  const double latent =
      model.mla.active()
          ? t * static_cast<double>(model.mla.q_lora_rank + model.mla.kv_lora_rank + model.mla.qk_rope_head_dim)
          : 0.0;
  // The mixer's: attention's (above) or the Mamba-2 mixer's in projection, convolution and inner width.
  double mixer = tq + tkv + tv + latent;
  if (model.mixer == Mixer::kMamba2)
    mixer = t * static_cast<double>(model.mamba.in_width() + model.mamba.conv_channels() + model.mamba.d_inner());
  if (model.mixer == Mixer::kGatedDeltaNet)
    mixer = t * static_cast<double>(model.gdn.in_width() + model.gdn.conv_channels() + model.gdn.value_dim());
  if (model.mixer == Mixer::kNone) mixer = 0;
  const double per_width = model.ffn == FfnKind::kGlu ? 3.0 : 2.0;
  double ffn = per_width * t * static_cast<double>(model.d_ffn());
  if (model.moe.active()) {
    const MoeConfig& e = model.moe;
    const double rows = static_cast<double>(moe_routed_rows(e, tokens));
    ffn = per_width * rows * static_cast<double>(e.d_expert) +
          2.0 * rows * static_cast<double>(e.routed_width(model.d_model)) + 2.0 * t * static_cast<double>(e.latent) +
          t * static_cast<double>(e.experts) + per_width * t * static_cast<double>(e.shared_experts * e.d_shared);
  }
  if (model.no_ffn) ffn = 0;
  return (td + mixer + ffn) * activation_bytes(p);
}

ModelMemoryCounts model_memory_counts(const ModelConfig& model, int64_t seq_len, const Lora& lora) {
  ModelMemoryCounts c;
  c.root_params = static_cast<double>(embedding_parameter_count(model, seq_len));
  c.n_layers = model.n_layers;
  c.d_model = model.d_model;
  if (!lora.active()) c.root_trained = c.root_params;
  if (model.uniform() && !lora.active()) {  // the common case, without a pattern to build
    c.block_params = c.block_trained = static_cast<double>(layer_parameter_count(model));
    c.blocks_params = c.blocks_trained = static_cast<double>(model.n_layers) * c.block_params;
    return c;
  }
  for (const LayerGroup& g : layer_pattern(model).groups) {
    const double trained =
        lora.active() ? lora_model_block_params(g.model, lora) : static_cast<double>(layer_parameter_count(g.model));
    const double params = (lora.active() ? static_cast<double>(layer_parameter_count(g.model)) : 0.0) + trained;
    c.block_params = std::max(c.block_params, params);
    c.block_trained = std::max(c.block_trained, trained);
    c.blocks_params += static_cast<double>(g.layers) * params;
    c.blocks_trained += static_cast<double>(g.layers) * trained;
  }
  return c;
}

MemoryBreakdown estimate_memory(const ModelMemoryCounts& model, const TrainConfig& cfg, const SavedActivations& saved,
                                const FsdpLayout& layout, const CostParams& params) {
  const MemoryInputs in = memory_inputs(model, cfg, saved);
  if (layout.ddp) return ddp_memory(in, cfg, params);
  const double total_params = in.blocks_params + in.root_params;
  const double total_trained = in.blocks_trained + in.root_trained;
  const double gb = gathered_param_bytes(cfg.precision, cfg.mp_mode);
  const double rb = reduced_grad_bytes(cfg.precision, cfg.mp_mode);
  const double L = static_cast<double>(in.n_layers);

  MemoryBreakdown m;
  // fp32 master parameters (4), gradients (4) and Adam's two moments (8), sharded; a frozen
  // parameter (LoRA) only its 4: llm-foundry wraps the adapters in FSDP units of their own
  // (prepare_hf_causal_lm_model_for_fsdp), so the blocks' flat parameters, all frozen, have no
  // gradient.
  m.sharded_state_bytes = (4.0 * total_params + 12.0 * total_trained) / static_cast<double>(layout.shard_ranks);

  // Gathered parameters: the root unit stays gathered through the step; blocks are gathered two at
  // a time (limit_all_gathers), or all of them between forward and backward under SHARD_GRAD_OP.
  // Under NO_SHARD the low-precision copies are made per block in the same way.
  const bool all_blocks = layout.gather_in_forward && !layout.gather_in_backward;
  const double blocks_gathered = all_blocks ? in.blocks_params : std::min(2.0, L) * in.block_params;
  const double gathered = (in.root_params + blocks_gathered) * gb;

  // Under selective checkpointing each block drops what only the attention kernel keeps, and the
  // block in backward rebuilds it.
  const auto [kept, rebuilt] = kept_activations(in, cfg);

  // Peak A: the loss, with every block's activations and the logits alive.
  const double at_loss = kept + in.head_saved_bytes;
  // Peak B: the first block backward; the logits are gone, one block's activations are rebuilt
  // under checkpointing, and unsharded gradients sit beside the gradient buffers: the block being
  // computed (compute dtype) and the one waiting for its reduce-scatter (reduce dtype).
  const double grads = in.block_trained * (gb + rb);
  const double at_backward = kept + rebuilt + in.backward_buffer_bytes + grads;

  m.gathered_params_bytes = gathered;
  if (at_loss >= at_backward) {
    m.activation_bytes = at_loss;
  } else {
    m.activation_bytes = kept + rebuilt;
    m.transient_bytes = in.backward_buffer_bytes + grads;
  }
  return with_peak(m, params);
}

double allocator_retry_fraction(double free_bytes, const CostParams& params) {
  if (!(free_bytes >= 0) || free_bytes >= params.allocator_headroom_bytes) return 0.0;
  const double short_gib = (params.allocator_headroom_bytes - free_bytes) / kGiB;
  return params.allocator_retry_slowdown * short_gib * short_gib;
}

}  // namespace tpsim
