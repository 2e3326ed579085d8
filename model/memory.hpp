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

// What one micro-batch's forward keeps for the backward: the sums of its ops' saved_bytes.
struct SavedActivations {
  double block = 0;  // one block's forward
  double embed = 0;  // the embeddings
  double head = 0;   // final norm, logits input, logits/gradient buffer
  double block_attention_only = 0;  // of `block`, what only the attention kernel keeps (selective drops it)
};

// Peak memory of one GPU for `cfg`: the parameters, gradients and optimizer state of `model` under
// `layout`, the activations `saved` per micro-batch, and the buffers of a block's backward.
MemoryBreakdown estimate_memory(const ModelConfig& model, const TrainConfig& cfg, const SavedActivations& saved,
                                const FsdpLayout& layout, const CostParams& params);

}  // namespace tpsim
