// Peak memory of one GPU during an FSDP training step.
//
// Activations kept for backward are the ops' saved_bytes (ops.hpp). For an MPT block this sums
// to 32 * t * d bytes in bf16 (t tokens, d = d_model, d_ffn = 4d) plus the attention statistics:
// Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (2022),
// Eq. 2, give s*b*h*(34 + 5*a*s/h); FlashAttention removes the 5*a*s/h score term and MPT's zero
// dropout removes the two dropout masks (1 byte per element each). With activation checkpointing
// only each block's input (2*t*d bytes) is kept, and one block's activations are rebuilt at a time.
// Selective checkpointing (Megatron-LM's recompute of core attention) stops keeping what only the
// attention kernel needs: with flash attention only its log-sum-exp, since q, k and v are the
// recomputed region's inputs and o the out projection's input (Korthikanti et al.'s saving is the
// 5*a*s/h score term, which flash attention never stores).
// Other architectures: the same sums of saved_bytes over their ops (grouped-query attention's
// narrower K and V, GLU's gate, activation, up and product, RMSNorm's one statistic, the experts'
// permuted inputs, intermediates and outputs); the parameters, gradients and optimizer state are
// those of every block with all its experts (layer_parameter_count), and FSDP gathers a block with
// its experts.
#pragma once

#include "model/architecture.hpp"
#include "model/ops.hpp"
#include "model/parallelism.hpp"
#include "model/profile.hpp"
#include "model/training.hpp"

namespace tpsim {

struct MemoryBreakdown {
  double sharded_state_bytes = 0;    // fp32 parameters, gradients and Adam moments on this GPU
  double gathered_params_bytes = 0;  // unsharded parameters in flight (peak phase)
  double activation_bytes = 0;       // activations alive at the peak
  double transient_bytes = 0;        // unsharded gradients and gradient buffers at the peak
  double live_bytes = 0;             // sum of the above at the peak
  double reserve_bytes = 0;          // not available to tensors
  double peak_bytes = 0;             // live * fragmentation + reserve
};

// `m` with its live bytes (the sum of its four parts), the profile's reserve, and its peak: what
// every framework's memory estimate ends with.
inline MemoryBreakdown with_peak(MemoryBreakdown m, const CostParams& params) {
  m.live_bytes = m.sharded_state_bytes + m.gathered_params_bytes + m.activation_bytes + m.transient_bytes;
  m.reserve_bytes = params.memory_reserve_bytes;
  m.peak_bytes = m.live_bytes * params.memory_fragmentation + m.reserve_bytes;
  return m;
}

// What one micro-batch's forward keeps for the backward (the sums of its ops' saved_bytes), and
// the gradient buffers of one block's backward: what depends on the micro-batch, not the layout.
// Of a model whose layers differ (layer_pattern), `block` and the other one-block values are its
// largest block's (what one block rebuilds or buffers at a time) and `blocks` the sums over all.
struct SavedActivations {
  double block = 0;                   // one block's forward
  double embed = 0;                   // the embeddings
  double head = 0;                    // final norm, logits input, logits/gradient buffer
  double block_attention_only = 0;    // of `block`, what only the attention kernel keeps (selective drops it)
  double block_backward_buffers = 0;  // block_backward_buffer_bytes
  double blocks = 0;                  // every block's forward
  double blocks_attention_only = 0;   // of `blocks`, what only the attention kernels keep
};

// Bytes of the gradient buffers of one block's backward over `tokens` tokens: the incoming
// gradient, dQ, dK and dV, and the feed-forward's (MLP: 2 t x d_ffn; GLU: 3; mixture of experts:
// the experts' over their routed rows, the permuted input's and outputs' gradients, the router's
// logits gradient and the shared experts'). MPT: (4*t*d + 2*t*d_ffn) * activation bytes.
double block_backward_buffer_bytes(const ModelConfig& model, int64_t tokens, Precision p);

// The parameter counts memory needs, computed once per model and sequence length.
// Of a model whose layers differ, the block values are its largest block's and the blocks values the
// sums over its layers.
struct ModelMemoryCounts {
  double block_params = 0;  // layer_parameter_count: one block with all its experts (and its LoRA adapters)
  double root_params = 0;   // embedding_parameter_count: outside the blocks
  // Of them, those trained, with gradients and optimizer state: all of them, or under LoRA the
  // block's adapters and nothing of the root.
  double block_trained = 0;
  double root_trained = 0;
  double blocks_params = 0, blocks_trained = 0;  // every block's
  int64_t n_layers = 0;
  int64_t d_model = 0;
};
ModelMemoryCounts model_memory_counts(const ModelConfig& model, int64_t seq_len, const Lora& lora = {});

// Peak memory of one GPU for `cfg`: the parameters, gradients and optimizer state of `model` under
// `layout`, the activations `saved` per micro-batch, and the buffers of a block's backward.
MemoryBreakdown estimate_memory(const ModelMemoryCounts& model, const TrainConfig& cfg, const SavedActivations& saved,
                                const FsdpLayout& layout, const CostParams& params);

// The share of a step's time that the caching allocator's retries add to a run with full
// activation checkpointing and `free_bytes` free at its predicted peak (CostParams'
// allocator_headroom_bytes and allocator_retry_slowdown); 0 with the headroom free, or none at all.
double allocator_retry_fraction(double free_bytes, const CostParams& params);
// The least free memory at the predicted peak among the measured runs that term was fitted to (30b
// at 8,192 tokens on A100 80GB and H100, 1.29 GiB under the headroom): closer to full it extrapolates.
inline constexpr double kAllocatorEvidenceLeastFreeBytes = 2.7 * kGiB;

}  // namespace tpsim
