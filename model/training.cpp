#include "model/training.hpp"

#include <algorithm>

#include "model/enum_names.hpp"

namespace tpsim {
namespace {

constexpr std::array<std::string_view, 7> kPrecisionNames = {"amp_bf16", "amp_fp16", "amp_fp8", "bf16",
                                                             "fp32",     "mxfp8",    "nvfp4"};
constexpr std::array<std::string_view, 3> kMpModeNames = {"DEFAULT", "PURE", "FULL"};
constexpr std::array<std::string_view, 4> kShardingNames = {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD"};
constexpr std::array<std::string_view, 3> kCheckpointingNames = {"none", "selective", "full"};
constexpr std::array<std::string_view, kRecomputeModuleCount> kRecomputeModuleNames = {
    "core_attn", "layernorm", "moe_act", "mla_up_proj", "mlp", "moe", "shared_experts"};
constexpr std::array<std::string_view, 3> kFrameworkNames = {"composer", "megatron", "torchtitan"};
constexpr std::array<std::string_view, 5> kMegatronFsdpNames = {"off", "no_shard", "optim", "optim_grads",
                                                                "optim_grads_params"};
constexpr std::array<std::string_view, kGraphModuleCount> kGraphModuleNames = {
    "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba", "full_iteration"};
constexpr std::array<std::string_view, 3> kMoeDispatcherNames = {"alltoall", "flex:deepep", "flex:hybridep"};

// A set of names (bit i: names[i]) as its names in order, joined by `sep` ("" for none).
template <size_t N>
std::string name_set_text(unsigned bits, const std::array<std::string_view, N>& names, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < N; ++i)
    if ((bits & (1u << i)) != 0) {
      if (!out.empty()) out += sep;
      out += names[i];
    }
  return out;
}

// The set `text` names, separated by commas, semicolons or spaces, each at most once; nullopt with
// `error` set (`unknown(name)` for a name not in `names`) otherwise, or for an empty list.
template <size_t N, typename Unknown>
std::optional<uint8_t> parse_name_set(std::string_view text, const std::array<std::string_view, N>& names,
                                      std::string& error, Unknown&& unknown) {
  static_assert(N <= 8, "a set of names is a byte of bits");
  uint8_t bits = 0;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find_first_of(",; ", at), text.size());
    const std::string_view name = text.substr(at, end - at);
    at = end + 1;
    if (name.empty()) continue;
    const auto i = std::find(names.begin(), names.end(), name);
    if (i == names.end()) {
      error = unknown(name);
      return std::nullopt;
    }
    const auto bit = static_cast<uint8_t>(1u << static_cast<unsigned>(i - names.begin()));
    if ((bits & bit) != 0) {
      error = "'" + std::string(name) + "' given twice";
      return std::nullopt;
    }
    bits |= bit;
  }
  if (bits == 0) {
    error = "no module given";
    return std::nullopt;
  }
  return bits;
}

}  // namespace

std::string_view to_string(Framework f) { return name_of(f, kFrameworkNames); }
std::optional<Framework> parse_framework(std::string_view s) { return value_named<Framework>(s, kFrameworkNames); }
std::string_view to_string(MegatronFsdp m) { return name_of(m, kMegatronFsdpNames); }
std::optional<MegatronFsdp> parse_megatron_fsdp(std::string_view s) {
  return value_named<MegatronFsdp>(s, kMegatronFsdpNames);
}
std::string_view to_string(GraphModule m) { return name_of(m, kGraphModuleNames); }

std::string cuda_graphs_text(uint8_t modules, std::string_view sep) {
  return name_set_text(modules, kGraphModuleNames, sep);
}

std::optional<uint8_t> parse_cuda_graphs(std::string_view text, std::string& error) {
  for (std::string_view impl : {"transformer_engine:", "local:"})
    if (text.substr(0, impl.size()) == impl) text.remove_prefix(impl.size());
  if (text == "none" || text == "false") return uint8_t{0};
  if (text == "layer") return kWholeLayerGraphs;
  const std::optional<uint8_t> modules = parse_name_set(text, kGraphModuleNames, error, [](std::string_view name) {
    return "unknown CUDA graph module '" + std::string(name) + "' (" +
           name_set_text((1u << kGraphModuleCount) - 1, kGraphModuleNames, ", ") + ", or layer, none)";
  });
  if (modules && (*modules & graph_bit(GraphModule::kFullIteration)) != 0 &&
      *modules != graph_bit(GraphModule::kFullIteration)) {
    error = "full_iteration captures the whole step; it takes no modules";
    return std::nullopt;
  }
  return modules;
}

std::string_view to_string(MoeDispatcher m) { return name_of(m, kMoeDispatcherNames); }
std::optional<MoeDispatcher> parse_moe_dispatcher(std::string_view s) {
  if (s == "deepep") return MoeDispatcher::kDeepEp;
  if (s == "hybridep") return MoeDispatcher::kHybridEp;
  return value_named<MoeDispatcher>(s, kMoeDispatcherNames);
}
std::string_view to_string(Precision p) { return name_of(p, kPrecisionNames); }
std::string_view to_string(MpMode m) { return name_of(m, kMpModeNames); }
std::string_view to_string(Sharding s) { return s == Sharding::kDdp ? "DDP" : name_of(s, kShardingNames); }
std::string_view to_string(DType t) { return name_of(t, kDTypeNames); }
std::optional<Precision> parse_precision(std::string_view s) { return value_named<Precision>(s, kPrecisionNames); }
std::optional<MpMode> parse_mp_mode(std::string_view s) { return value_named<MpMode>(s, kMpModeNames); }
std::optional<Sharding> parse_sharding(std::string_view s) { return value_named<Sharding>(s, kShardingNames); }
std::string_view to_string(Checkpointing c) { return name_of(c, kCheckpointingNames); }
std::optional<Checkpointing> parse_checkpointing(std::string_view s) {
  return value_named<Checkpointing>(s, kCheckpointingNames);
}
std::string_view to_string(RecomputeModule m) { return name_of(m, kRecomputeModuleNames); }
std::string recompute_modules_text(uint8_t modules, std::string_view sep) {
  return name_set_text(modules, kRecomputeModuleNames, sep);
}
std::optional<uint8_t> parse_recompute_modules(std::string_view text, std::string& error) {
  return parse_name_set(text, kRecomputeModuleNames, error, [](std::string_view name) {
    return "'" + std::string(name) + "' is not one of Megatron-Core's recompute modules tpsim models (" +
           name_set_text(kAllRecomputeModules, kRecomputeModuleNames, ", ") + ")";
  });
}
std::optional<DType> parse_dtype(std::string_view s) { return value_named<DType>(s, kDTypeNames); }
std::optional<ScaledFormat> parse_scaled_format(std::string_view s) {
  return value_named<ScaledFormat>(s, kScaledFormatNames);
}

std::optional<ScaledFormat> scaled_format(Precision p) {
  if (p == Precision::kMxfp8) return ScaledFormat::kMxfp8;
  if (p == Precision::kNvfp4) return ScaledFormat::kNvfp4;
  return std::nullopt;
}

int scale_block_elements(Precision p) {
  if (p == Precision::kMxfp8) return 32;  // OCP MX v1.0: one e8m0 scale per 32 elements
  if (p == Precision::kNvfp4) return 16;  // NVFP4: one e4m3 scale per 16 elements
  return 0;
}

DType block_gemm_dtype(Precision p) {
  switch (p) {
    case Precision::kMxfp8:
    case Precision::kAmpFp8: return DType::kFp8;
    case Precision::kNvfp4: return DType::kFp4;
    case Precision::kAmpFp16: return DType::kFp16;
    case Precision::kFp32: return DType::kFp32;
    case Precision::kAmpBf16:
    case Precision::kBf16: return DType::kBf16;
  }
  return DType::kBf16;
}

DType other_gemm_dtype(Precision p) {
  // TransformerEngine replaces the block's linear layers only; attention and the tied logits
  // projection stay in bf16 under amp_fp8.
  // So do the block-scaled recipes (NVIDIA's NVFP4 recipe keeps attention, embeddings and the
  // output head in bf16: arXiv 2509.25149, section 4).
  const bool te = p == Precision::kAmpFp8 || p == Precision::kMxfp8 || p == Precision::kNvfp4;
  return te ? DType::kBf16 : block_gemm_dtype(p);
}

double activation_bytes(Precision p) { return p == Precision::kFp32 ? 4.0 : 2.0; }

DType activation_dtype(Precision p) {
  if (p == Precision::kFp32) return DType::kFp32;
  return p == Precision::kAmpFp16 ? DType::kFp16 : DType::kBf16;
}

double gathered_param_bytes(Precision p, MpMode m) {
  if (m == MpMode::kFull || p == Precision::kFp32) return 4.0;
  return 2.0;  // DEFAULT and PURE gather in the autocast dtype (bf16 or fp16; fp8 runs keep bf16 weights)
}

double reduced_grad_bytes(Precision p, MpMode m) {
  if (m == MpMode::kPure && p != Precision::kFp32) return 2.0;
  return 4.0;
}

DType mfu_dtype(Precision p) { return block_gemm_dtype(p); }

}  // namespace tpsim
