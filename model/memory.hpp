// Peak memory of one GPU during an FSDP training step.
//
// Activations kept for backward are the ops' saved_bytes (ops.hpp). For an MPT block this sums
// to 32 * t * d bytes in bf16 (t tokens, d = d_model, d_ffn = 4d) plus the attention statistics:
// Korthikanti et al., "Reducing Activation Recomputation in Large Transformer Models" (2022),
// Eq. 2, give s*b*h*(34 + 5*a*s/h); FlashAttention removes the 5*a*s/h score term and MPT's zero
// dropout removes the two dropout masks (1 byte per element each). With activation checkpointing
// only each block's input (2*t*d bytes) is kept, and one block's activations are rebuilt at a time.
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

struct MemoryInputs {
  double block_params = 0;      // parameters of one block
  double root_params = 0;       // parameters outside the blocks (embeddings, final norm)
  int64_t n_layers = 0;
  double block_saved_bytes = 0;  // one block's forward saved_bytes
  double block_input_bytes = 0;  // one block's input (what checkpointing keeps)
  double embed_saved_bytes = 0;
  double head_saved_bytes = 0;   // final norm, logits input, logits/gradient buffer
  double backward_buffer_bytes = 0;  // gradient buffers of one block's backward
};

MemoryBreakdown estimate_memory(const MemoryInputs& in, const FsdpLayout& layout, const TrainConfig& cfg,
                                const CostParams& params);

}  // namespace tpsim
