// Low-rank adaptation (LoRA; Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models"):
// what a fine-tuning run trains. Every base weight is frozen (no weight gradient, no optimizer
// state, no gradient reduction); each adapted linear y = x W^T gains y += (alpha / r) * (x A^T) B^T
// with A of r x k and B of n x r trained. Activation gradients still flow through every frozen
// layer (the data-gradient GEMMs stay). Rank 0 is pre-training or full fine-tuning: every weight
// trained, as before this struct existed.
//
// Which linears are adapted, by the names the frameworks give them (model/lora.cpp lists them):
//   Hugging Face PEFT (llm-foundry's peft_config, NeMo AutoModel): q_proj, k_proj, v_proj, o_proj,
//     gate_proj, up_proj, down_proj, one adapter each; MPT's and DBRX's fused Wqkv and out_proj;
//     "all-linear" (PEFT: every linear of the blocks, not the output head);
//   Megatron-Core (Megatron-Bridge's LoRA, NeMo 2): linear_qkv, linear_proj, linear_fc1 (gate and up
//     as one linear), linear_fc2, one adapter on each fused linear (Megatron-Bridge's default LoRA;
//     its CanonicalLoRA's separate q, k, v adapters are the PEFT names);
//   torchtitan (torchtitan/components/lora.py): wq, wk, wv, wo, w1 (gate), w3 (up), w2 (down).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tpsim {

// The projections of a block an adapter can sit on (bits of Lora::targets).
enum class LoraTarget : uint8_t { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumLoraTargets = 7;
inline constexpr uint8_t lora_bit(LoraTarget t) { return static_cast<uint8_t>(1u << static_cast<unsigned>(t)); }
inline constexpr uint8_t kLoraQkv = lora_bit(LoraTarget::kQ) | lora_bit(LoraTarget::kK) | lora_bit(LoraTarget::kV);
inline constexpr uint8_t kLoraGateUp = lora_bit(LoraTarget::kGate) | lora_bit(LoraTarget::kUp);
inline constexpr uint8_t kLoraAll = 0x7f;

inline constexpr int64_t kMaxLoraRank = 1 << 16;

struct Lora {
  int64_t rank = 0;         // r; 0: no adapters, every weight trained
  double alpha = 0;         // the adapters' scale is alpha / r: no cost, kept to print and check
  uint8_t target_bits = 0;  // bits of LoraTarget
  // One adapter over the fused linear, not one per projection: Q, K and V (Megatron-Core's
  // linear_qkv, MPT's Wqkv, GPT-NeoX's query_key_value); gate and up (Megatron-Core's linear_fc1).
  bool fused_qkv = false;
  bool fused_fc1 = false;
  // Hugging Face PEFT's lora_dropout: a dropout of each adapter's input (its mask and the dropped copy
  // kept for the backward); Megatron-Bridge's default 0.
  int64_t dropout_per_mille = 0;

  bool active() const { return rank > 0; }
  bool adapts(LoraTarget t) const { return (target_bits & lora_bit(t)) != 0; }
  bool operator==(const Lora&) const = default;
};

// The targets a list of module names asks for ("linear_qkv", "q_proj,v_proj", "all-linear", or a
// list of names as PEFT's target_modules gives them), into `out` (rank, alpha and dropout left as
// they are). An empty string on success, else what is wrong, naming the name.
std::string parse_lora_targets(std::string_view names, Lora& out);
// The targets as the one list of names parse_lora_targets reads back (Megatron-Core's names when
// fused, PEFT's otherwise): "linear_qkv", "q_proj,v_proj", ...
std::string lora_targets_name(const Lora& l);

}  // namespace tpsim
