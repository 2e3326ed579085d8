// Throughput metrics exactly as llm-foundry's scripts/train/benchmarking/collect_results.py
// computes them (seed 001, "MFU and HFU"; Korthikanti et al. 2022 for the definitions):
//   flops_per_seq      = 2 * n_params * seq_len
//   attn_flops_per_seq = n_layers * 2 * 2 * d_model * seq_len^2   (counted as if not causal)
//   MFU = (3 * flops_per_seq + 3 * attn_flops_per_seq) * seq_per_s / (gpus * peak)
//   HFU = (4 * flops_per_seq + 4 * attn_flops_per_seq) * seq_per_s / (gpus * peak) with activation
//         checkpointing, else HFU = MFU
//   Model TFLOP: (3 * flops_per_seq + 3 * attn_flops_per_seq) * seq_per_s / gpus, the model FLOP/s
//         each GPU achieves. collect_results.py writes it in FLOP/s as "%.6E"; the seed tables show
//         its mantissa (4.212583 for 4.212583E+14). tpsim prints it in TFLOP/s (421.2583).
// The peak is Composer's GPU_AVAILABLE_FLOPS for the run's precision: the dense datasheet peak
// (312e12 A100 bf16, 989.5e12 H100 bf16, 1979e12 H100 fp8).
// Norms, activations and residuals are not counted.
//
// Every architecture: llm-foundry's ComposerMPTCausalLM.flops_per_batch
// (llmfoundry/models/mpt/modeling_mpt.py) is the same formula with n_params = n_active_params,
// mpt_get_active_params (llm-foundry's llmfoundry/models/utils/mpt_param_count.py): the
// routed experts' weights counted top_k / experts, and the token embedding left out when untied (a
// lookup table, not a matmul). tpsim passes active_parameter_count() (model/architecture.hpp),
// which equals parameter_count() for a dense model with tied embeddings, so MPT rows do not move.
// Where this convention differs from the FLOPs the ops execute (model/ops.hpp):
//   grouped-query attention: the same (K and V projections are in the parameters; the attention
//     products are per query head either way);
//   causal attention: counted as if not causal (2x what the causal kernel executes), with d_model
//     even where n_heads * head_dim differs from it;
//   sliding window and chunked attention: counted as full attention, whatever the window or chunk;
//   hybrid models (Mamba-2 layers): the attention term over the attention layers alone, and the
//     Mamba-2 scan's FLOPs not counted (its parameters' are, in the parameter term);
//   mixture of experts: top_k experts per token, without the capacity factor's padding, the
//     router's softmax and top-k, or the permutations;
//   untied embeddings: the lookup is not counted, the output projection is.
// HFU with selective checkpointing (Korthikanti et al. 2022, Sec. 5): the attention term is run
// 4 times (its forward again in the backward) and the parameter term 3 times:
//   HFU = (3 * flops_per_seq + 4 * attn_flops_per_seq) * seq_per_s / (gpus * peak).
// LoRA (model/lora.hpp), with `lora_params` adapter parameters over the whole model: the forward and
// the data gradient over the base and adapter parameters, the weight gradient over the adapters
// only, as Megatron-Bridge's flop_utils (the frozen model's FLOPs times 2/3) and NeMo AutoModel's
// benchmark ((2 + lora/frozen) / 3) count them: the parameter term 3 * flops_per_seq becomes
//   2 * flops_per_seq(n_params + lora_params) + flops_per_seq(lora_params),
// and full checkpointing adds the forward again, flops_per_seq(n_params + lora_params).
#pragma once

#include <cstdint>
#include <string>

#include "model/training.hpp"

namespace tpsim {

struct FoundryMetrics {
  double mfu = 0;  // fraction, not percent
  double hfu = 0;
  double model_flops_per_s_per_gpu = 0;  // FLOP/s
};

double foundry_flops_per_seq(int64_t n_params, int64_t seq_len);
double foundry_attn_flops_per_seq(int64_t n_layers, int64_t d_model, int64_t seq_len);

// `n_params`: the parameters flops_per_batch multiplies (active_parameter_count()).
FoundryMetrics foundry_metrics(int64_t n_params, int64_t n_layers, int64_t d_model, int64_t seq_len, double seq_per_s,
                               int64_t n_gpus, double peak_flops_per_s, Checkpointing checkpointing,
                               int64_t lora_params = 0);
// The same with full checkpointing when `activation_checkpointing`, else none (the seed tables').
FoundryMetrics foundry_metrics(int64_t n_params, int64_t n_layers, int64_t d_model, int64_t seq_len, double seq_per_s,
                               int64_t n_gpus, double peak_flops_per_s, bool activation_checkpointing);

struct ModelConfig;
struct DeviceSpec;

// The FLOPs of one training step's sequence as Megatron-LM counts them for its "model TFLOP/s"
// (num_floating_point_operations, megatron/training/training.py; Megatron-Bridge's performance
// summary divides the same count by the step time), over a vocabulary padded to `padded_vocab`:
//   transformers (transformer_flops): 3 x 2 x per token [h (ffn x (3 with SwiGLU, else 2)) per dense
//     layer; h (moe_ffn x top_k x the same, or at the latent width plus the two latent projections,
//     2 h latent) and the shared experts' per expert layer; the attention's projections (q, k, v and
//     out; latent attention's down and up projections, norms and RoPE key as its formula counts
//     them); h x vocabulary for the logits] plus, per layer, the causal core 2 x 2 x q_width x s^2 / 2
//     (latent attention: heads x (score head + value head) / 2);
//   hybrids (hybrid_flops: any Mamba-2 layer or layer of one sublayer): per layer of each symbol,
//     attention 4 T h p (h + h g / n) + 2 s^2 h p (p = head_dim n / h, g the key/value heads), MLP and
//     experts 4 T h width (x 3/2 with SwiGLU), Mamba-2 2 T h (2 d + 2 G N + H) + 7 T d N + 2 T d h
//     with d = 2 h whatever the mixer's heads x head_dim (Megatron's own approximation), and the
//     logits 2 T h vocabulary; all x 3.
// Where it differs from the FLOPs tpsim's ops execute: sliding windows and chunks counted in full;
// the causal core at exactly half the square; norms, activations, routers' top-k and the Mamba-2
// scan's other passes not counted; the hybrids' Mamba-2 width taken as 2 h.
// With multi-token prediction (`mtp_layers` depths; Megatron-LM counts each depth's layer, its norms
// and projection and its logits, whether or not the depths share one layer's weights; on a hybrid
// model each depth's layers of the MTP pattern and its logits, not its projection).
double megatron_flops_per_sequence(const ModelConfig& m, int64_t seq_len, int64_t padded_vocab, int64_t mtp_layers = 0);

// Why a measured throughput of `cfg` is one no run reaches, or "": the model FLOPs it needs at the
// least (the matmuls over the active parameters, forward and backward: 3 x foundry_flops_per_seq
// per sequence; attention, norms and recompute not counted) per GPU, more than the device's peak
// for the run's precision (the peak MFU divides by).
std::string check_measured_throughput(const ModelConfig& model, const DeviceSpec& device, const TrainConfig& cfg,
                                      double tokens_per_s);

}  // namespace tpsim
