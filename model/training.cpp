#include "model/training.hpp"

namespace tpsim {
namespace {

template <typename E, size_t N>
std::optional<E> lookup(std::string_view s, const std::array<std::pair<std::string_view, E>, N>& table) {
  for (const auto& [name, value] : table)
    if (name == s) return value;
  return std::nullopt;
}

template <typename E, size_t N>
std::string_view name_of(E e, const std::array<std::pair<std::string_view, E>, N>& table) {
  for (const auto& [name, value] : table)
    if (value == e) return name;
  return "?";
}

constexpr std::array<std::pair<std::string_view, Precision>, 7> kPrecisions = {{
    {"amp_bf16", Precision::kAmpBf16},
    {"amp_fp16", Precision::kAmpFp16},
    {"amp_fp8", Precision::kAmpFp8},
    {"bf16", Precision::kBf16},
    {"fp32", Precision::kFp32},
    {"mxfp8", Precision::kMxfp8},
    {"nvfp4", Precision::kNvfp4},
}};
constexpr std::array<std::pair<std::string_view, MpMode>, 3> kMpModes = {{
    {"DEFAULT", MpMode::kDefault},
    {"PURE", MpMode::kPure},
    {"FULL", MpMode::kFull},
}};
constexpr std::array<std::pair<std::string_view, Sharding>, 4> kShardings = {{
    {"FULL_SHARD", Sharding::kFullShard},
    {"SHARD_GRAD_OP", Sharding::kShardGradOp},
    {"NO_SHARD", Sharding::kNoShard},
    {"HYBRID_SHARD", Sharding::kHybridShard},
}};
constexpr std::array<std::pair<std::string_view, Checkpointing>, 3> kCheckpointings = {{
    {"none", Checkpointing::kNone},
    {"selective", Checkpointing::kSelective},
    {"full", Checkpointing::kFull},
}};

constexpr std::array<std::pair<std::string_view, Framework>, 3> kFrameworks = {{
    {"composer", Framework::kComposer},
    {"megatron", Framework::kMegatron},
    {"torchtitan", Framework::kTorchtitan},
}};

}  // namespace

std::string_view to_string(Framework f) { return name_of(f, kFrameworks); }
std::optional<Framework> parse_framework(std::string_view s) { return lookup(s, kFrameworks); }
std::string_view to_string(Precision p) { return name_of(p, kPrecisions); }
std::string_view to_string(MpMode m) { return name_of(m, kMpModes); }
std::string_view to_string(Sharding s) { return s == Sharding::kDdp ? "DDP" : name_of(s, kShardings); }
std::string_view to_string(DType t) { return kDTypeNames[static_cast<int>(t)]; }
std::optional<Precision> parse_precision(std::string_view s) { return lookup(s, kPrecisions); }
std::optional<MpMode> parse_mp_mode(std::string_view s) { return lookup(s, kMpModes); }
std::optional<Sharding> parse_sharding(std::string_view s) { return lookup(s, kShardings); }
std::string_view to_string(Checkpointing c) { return name_of(c, kCheckpointings); }
std::optional<Checkpointing> parse_checkpointing(std::string_view s) { return lookup(s, kCheckpointings); }
std::optional<DType> parse_dtype(std::string_view s) {
  for (int i = 0; i < kNumDTypes; ++i)
    if (kDTypeNames[i] == s) return static_cast<DType>(i);
  return std::nullopt;
}

std::optional<ScaledFormat> parse_scaled_format(std::string_view s) {
  for (int i = 0; i < kNumScaledFormats; ++i)
    if (kScaledFormatNames[i] == s) return static_cast<ScaledFormat>(i);
  return std::nullopt;
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

DType mfu_dtype(Precision p) {
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

}  // namespace tpsim
