#include "model/lora.hpp"

#include <array>

namespace tpsim {
namespace {

struct TargetName {
  std::string_view name;
  uint8_t bits;
  bool fused_qkv, fused_fc1;
};

// Module names as each framework calls a block's linears (model/lora.hpp). Names are matched
// exactly, as PEFT matches target_modules against module names.
constexpr std::array<TargetName, 21> kTargetNames = {{
    // Megatron-Core (megatron/core/transformer: SelfAttention.linear_qkv, MLP.linear_fc1, ...)
    {"linear_qkv", kLoraQkv, true, false},
    {"linear_proj", lora_bit(LoraTarget::kO), false, false},
    {"linear_fc1", kLoraGateUp, false, true},
    {"linear_fc2", lora_bit(LoraTarget::kDown), false, false},
    // Hugging Face (Llama, Mistral, Qwen, Gemma, OLMo, ...)
    {"q_proj", lora_bit(LoraTarget::kQ), false, false},
    {"k_proj", lora_bit(LoraTarget::kK), false, false},
    {"v_proj", lora_bit(LoraTarget::kV), false, false},
    {"o_proj", lora_bit(LoraTarget::kO), false, false},
    {"gate_proj", lora_bit(LoraTarget::kGate), false, false},
    {"up_proj", lora_bit(LoraTarget::kUp), false, false},
    {"down_proj", lora_bit(LoraTarget::kDown), false, false},
    // MPT and DBRX (Wqkv, out_proj; MPT's MLP up_proj and down_proj above), GPT-NeoX's fused QKV
    {"Wqkv", kLoraQkv, true, false},
    {"out_proj", lora_bit(LoraTarget::kO), false, false},
    {"query_key_value", kLoraQkv, true, false},
    // torchtitan (torchtitan/models/llama3: Attention.wq ..., FeedForward.w1 (gate), w3 (up), w2 (down))
    {"wq", lora_bit(LoraTarget::kQ), false, false},
    {"wk", lora_bit(LoraTarget::kK), false, false},
    {"wv", lora_bit(LoraTarget::kV), false, false},
    {"wo", lora_bit(LoraTarget::kO), false, false},
    {"w1", lora_bit(LoraTarget::kGate), false, false},
    {"w3", lora_bit(LoraTarget::kUp), false, false},
    {"w2", lora_bit(LoraTarget::kDown), false, false},
}};

std::string known_names() {
  std::string s = "all-linear";
  for (const TargetName& t : kTargetNames) s += ", " + std::string(t.name);
  return s;
}

}  // namespace

std::string parse_lora_targets(std::string_view names, Lora& out) {
  uint8_t bits = 0;
  bool fused_qkv = false, fused_fc1 = false;
  uint8_t split_qkv = 0, split_fc1 = 0;  // projections named one by one
  size_t start = 0;
  bool any = false;
  while (start <= names.size()) {
    size_t end = names.find(',', start);
    if (end == std::string_view::npos) end = names.size();
    std::string_view name = names.substr(start, end - start);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    start = end + 1;
    if (name.empty()) {
      if (end == names.size() && any) break;
      return "an empty module name (give a list such as linear_qkv or q_proj,v_proj)";
    }
    any = true;
    if (name == "all-linear") {  // PEFT: every linear of the blocks, one adapter each
      bits |= kLoraAll;
      split_qkv |= kLoraQkv;
      split_fc1 |= kLoraGateUp;
      continue;
    }
    const TargetName* found = nullptr;
    for (const TargetName& t : kTargetNames)
      if (t.name == name) found = &t;
    if (!found) return "'" + std::string(name) + "' is not a linear tpsim knows (" + known_names() + ")";
    bits |= found->bits;
    fused_qkv |= found->fused_qkv;
    fused_fc1 |= found->fused_fc1;
    if (!found->fused_qkv) split_qkv |= found->bits & kLoraQkv;
    if (!found->fused_fc1) split_fc1 |= found->bits & kLoraGateUp;
  }
  if (fused_qkv && split_qkv)
    return "Q, K and V are named both as one fused linear and one by one: give one adapter per linear, not both";
  if (fused_fc1 && split_fc1)
    return "gate and up are named both as the fused linear_fc1 and one by one: give one adapter per linear, not both";
  out.target_bits = bits;
  out.fused_qkv = fused_qkv;
  out.fused_fc1 = fused_fc1;
  return {};
}

std::string lora_targets_name(const Lora& l) {
  std::string s;
  const auto add = [&s](std::string_view n) {
    if (!s.empty()) s += ',';
    s += n;
  };
  const bool megatron = l.fused_qkv || l.fused_fc1;
  if (l.fused_qkv) add("linear_qkv");
  else {
    if (l.adapts(LoraTarget::kQ)) add("q_proj");
    if (l.adapts(LoraTarget::kK)) add("k_proj");
    if (l.adapts(LoraTarget::kV)) add("v_proj");
  }
  if (l.adapts(LoraTarget::kO)) add(megatron ? "linear_proj" : "o_proj");
  if (l.fused_fc1) add("linear_fc1");
  else {
    if (l.adapts(LoraTarget::kGate)) add("gate_proj");
    if (l.adapts(LoraTarget::kUp)) add("up_proj");
  }
  if (l.adapts(LoraTarget::kDown)) add(megatron ? "linear_fc2" : "down_proj");
  return s;
}

}  // namespace tpsim
