#include "calibrate/kernel_plan.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "calibrate/step_ops.hpp"
#include "io/error.hpp"
#include "model/enum_names.hpp"
#include "model/parallelism.hpp"

namespace tpsim {
namespace {

double d(int64_t x) { return static_cast<double>(x); }

// FNV-1a: a hash that is the same on every machine and every run (std::hash is not promised to be).
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string layout(const Op& op) { return std::string(op.trans_a ? "T" : "N") + (op.trans_b ? "T" : "N"); }

std::string mem_name(MemKind k) {
  switch (k) {
    case MemKind::kNone: return "none";
    case MemKind::kLayerNorm: return "layer_norm";
    case MemKind::kLayerNormBackward: return "layer_norm_bwd";
    case MemKind::kGelu: return "gelu";
    case MemKind::kGeluBackward: return "gelu_bwd";
    case MemKind::kAdd: return "add";
    case MemKind::kBiasGrad: return "bias_grad";
    case MemKind::kCrossEntropy: return "cross_entropy";
    case MemKind::kCrossEntropyBackward: return "cross_entropy_bwd";
    case MemKind::kEmbedding: return "embedding";
    case MemKind::kEmbeddingBackward: return "embedding_bwd";
    case MemKind::kCast: return "cast";
    case MemKind::kGradNorm: return "grad_norm";
    case MemKind::kScale: return "scale";
    case MemKind::kAdamW: return "adamw";
    case MemKind::kRmsNorm: return "rms_norm";
    case MemKind::kRmsNormBackward: return "rms_norm_bwd";
    case MemKind::kSilu: return "silu";
    case MemKind::kSiluBackward: return "silu_bwd";
    case MemKind::kRelu: return "relu";
    case MemKind::kReluBackward: return "relu_bwd";
    case MemKind::kMul: return "mul";
    case MemKind::kMulBackward: return "mul_bwd";
    case MemKind::kRope: return "rope";
    case MemKind::kRouter: return "router";
    case MemKind::kRouterBackward: return "router_bwd";
    case MemKind::kPermute: return "permute";
    case MemKind::kUnpermute: return "unpermute";
    case MemKind::kSoftmax: return "softmax";
    case MemKind::kSoftmaxBackward: return "softmax_bwd";
    case MemKind::kDropout: return "dropout";
    case MemKind::kDropoutBackward: return "dropout_bwd";
    case MemKind::kCausalConv1d: return "causal_conv1d";
    case MemKind::kCausalConv1dBackward: return "causal_conv1d_bwd";
    case MemKind::kSsdScan: return "ssd_scan";
    case MemKind::kSsdScanBackward: return "ssd_scan_bwd";
    case MemKind::kGatedRmsNorm: return "gated_rms_norm";
    case MemKind::kGatedRmsNormBackward: return "gated_rms_norm_bwd";
    case MemKind::kGatedDeltaRule: return "gated_delta_rule";
    case MemKind::kGatedDeltaRuleBackward: return "gated_delta_rule_bwd";
  }
  return "?";
}

std::string number(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

// Causal attention as ops.cpp builds it (model/ops.hpp attention_op), for one sequence of `heads`
// heads of size `dh`: forward, then backward.
void grid_attention(int64_t heads, int64_t seq, int64_t dh, Precision p, std::vector<Op>& out) {
  BlockShape s;
  s.batch = 1;
  s.seq = seq;
  s.d_model = heads * dh;
  s.n_heads = heads;
  s.precision = p;
  out.push_back(attention_op("grid.attention.fwd", OpKind::kAttentionFwd, s));
  out.push_back(attention_op("grid.attention.bwd", OpKind::kAttentionBwd, s));
}

std::vector<int64_t> powers(int64_t lo, int64_t hi, int64_t step) {
  std::vector<int64_t> v;
  for (int64_t x = lo; x <= hi; x *= step) v.push_back(x);
  return v;
}

}  // namespace

KernelPlanOptions default_kernel_plan_options(bool gpu) {
  KernelPlanOptions o;
  if (gpu) {
    o.seq_lens = {512, 2048, 8192};
    o.micro_batches = {1, 4};
    o.precisions = {Precision::kAmpBf16};
    o.shard_ranks = 8;
    o.gemm_dtypes = {DType::kBf16};
    o.grid_gemm_min = 64;
    o.grid_gemm_max = 8192;
    o.grid_gemm_max_flops = 2.0 * 8192.0 * 8192.0 * 8192.0;
    o.grid_attention_heads = 16;
    o.grid_attention_seq_min = 256;
    o.grid_attention_seq_max = 16384;
    o.grid_attention_max_flops = 1e13;
    o.grid_membound_min_elements = int64_t{1} << 16;
    o.grid_membound_max_elements = int64_t{1} << 28;
  } else {
    // One core reaches some 10^11 fp32 FLOP/s: 2^31 FLOPs is a few tens of milliseconds.
    o.seq_lens = {128, 256, 512};
    o.micro_batches = {1, 2, 4};
    o.precisions = {Precision::kFp32};
    o.shard_ranks = 1;
    o.gemm_dtypes = {DType::kFp32};
    o.grid_gemm_min = 32;
    o.grid_gemm_max = 2048;
    o.grid_gemm_max_flops = 2.0 * 1024.0 * 1024.0 * 1024.0;
    o.grid_gemm_three_halves = true;
    o.grid_attention_heads = 4;
    o.grid_attention_seq_min = 64;
    o.grid_attention_seq_max = 2048;
    o.grid_attention_max_flops = 2.0 * 1024.0 * 1024.0 * 1024.0;
    o.grid_membound_min_elements = int64_t{1} << 12;
    o.grid_membound_max_elements = int64_t{1} << 24;
  }
  return o;
}

ShapeGroup group_of(const Op& op) {
  switch (op.kind) {
    case OpKind::kGemm: return ShapeGroup::kGemm;
    case OpKind::kAttentionFwd:
    case OpKind::kAttentionBwd: return ShapeGroup::kAttention;
    case OpKind::kMemoryBound: return ShapeGroup::kMemoryBound;
  }
  return ShapeGroup::kMemoryBound;
}

std::string_view to_string(ShapeGroup g) {
  constexpr std::array<std::string_view, 3> kNames = {"gemm", "attention", "memory-bound"};
  return name_of(g, kNames);
}

std::string shape_text(const Op& op) {
  switch (op.kind) {
    case OpKind::kGemm:
      return std::to_string(op.m) + "x" + std::to_string(op.n) + "x" + std::to_string(op.k) + " " + layout(op);
    case OpKind::kAttentionFwd:
    case OpKind::kAttentionBwd:
      return "b" + std::to_string(op.batch) + " h" + std::to_string(op.heads) + " s" + std::to_string(op.seq) + " d" +
             std::to_string(op.head_dim);
    case OpKind::kMemoryBound: {
      std::string s = mem_name(op.mem) + " " + std::to_string(op.m) + "x" + std::to_string(op.n);
      if (op.mem == MemKind::kEmbedding || op.mem == MemKind::kEmbeddingBackward) s += " rows " + std::to_string(op.k);
      return s;
    }
  }
  return "?";
}

std::string shape_key(const Op& op) {
  const std::string dtype(to_string(op.dtype));
  switch (op.kind) {
    case OpKind::kGemm: return "gemm " + dtype + " " + shape_text(op);
    case OpKind::kAttentionFwd: return "attention_fwd " + dtype + " " + shape_text(op);
    case OpKind::kAttentionBwd: return "attention_bwd " + dtype + " " + shape_text(op);
    case OpKind::kMemoryBound:
      return "membound " + dtype + " " + shape_text(op) + " k" + std::to_string(op.k) + " kernels " +
             std::to_string(op.kernels) + " bytes " + number(op.bytes_read) + "+" + number(op.bytes_written);
  }
  return "?";
}

namespace {

// The sweep: a step's ops for every configuration (a uniform model's blocks are alike: one of each
// is enough; a model whose layers differ gives all of them), then the optimizer and FSDP's casts
// over a device's shard, per layer group; each passed to `add`.
template <typename Add>
void add_sweep_ops(const KernelPlanOptions& o, const Add& add) {
  for (const ModelConfig& m : o.models)
    for (Precision p : o.precisions)
      for (int64_t seq : o.seq_lens)
        for (int64_t mb : o.micro_batches) {
          StepOptions so;
          so.micro_batch = mb;
          so.seq_len = seq;
          so.layers = m.uniform() ? 1 : 0;
          so.precision = p;
          for (const StepOp& s : training_step_ops(m, so))
            if (s.part != StepPart::kOptimizer) add(s.op);
          const double shard = static_cast<double>(o.shard_ranks);
          OpVector v;
          optimizer_ops(static_cast<double>(parameter_count(m, seq)) / shard, v);
          if (o.shard_ranks > 1) {
            const double gb = gathered_param_bytes(p, MpMode::kDefault);
            for (const LayerGroup& g : layer_pattern(m).groups) {
              const double block_params = static_cast<double>(layer_parameter_count(g.model));
              fsdp_pre_gather_ops(block_params, shard, gb, v);
              fsdp_pre_reduce_ops(block_params, shard, std::min(gb, 4.0), reduced_grad_bytes(p, MpMode::kDefault), v);
            }
          }
          for (const Op& op : v.ops) add(op);
        }
}

// The grid of GEMMs, attentions and memory-bound ops beside the sweep's, ordered by the hash of
// their shapes.
std::vector<Op> grid_ops(const KernelPlanOptions& o) {
  std::vector<Op> grid;
  const std::vector<int64_t> dims = powers(o.grid_gemm_min, o.grid_gemm_max, 2);
  // The three layouts the step's GEMMs use (forward NT, data gradient NN, weight gradient TN),
  // taken in turn, so that every layout meets every size class.
  const bool layouts[3][2] = {{false, true}, {false, false}, {true, false}};
  int index = 0;
  std::vector<std::vector<int64_t>> grids = {dims};
  if (o.grid_gemm_three_halves) {
    std::vector<int64_t> halves;
    for (int64_t x : dims)
      if (x * 3 / 2 < o.grid_gemm_max) halves.push_back(x * 3 / 2);
    grids.push_back(halves);
  }
  for (const std::vector<int64_t>& g : grids)
    for (DType t : o.gemm_dtypes)
      for (int64_t m : g)
        for (int64_t n : g)
          for (int64_t k : g) {
            if (2.0 * d(m) * d(n) * d(k) > o.grid_gemm_max_flops) continue;
            const auto& l = layouts[index++ % 3];
            // fp8 only in the layout cuBLASLt takes for it (y = x W^T); operands in the GEMM's format.
            const bool ta = t == DType::kFp8 ? false : l[0], tb = t == DType::kFp8 ? true : l[1];
            grid.push_back(gemm_op("grid.gemm", m, n, k, t, gemm_operand_bytes(t), gemm_output_bytes(t), ta, tb));
          }
  for (Precision p : o.precisions)
    for (int64_t seq : powers(o.grid_attention_seq_min, o.grid_attention_seq_max, 2))
      for (int64_t dh : {int64_t{64}, int64_t{128}}) {
        std::vector<Op> att;
        grid_attention(o.grid_attention_heads, seq, dh, p, att);
        for (const Op& a : att)
          if (a.flops <= o.grid_attention_max_flops) grid.push_back(a);
      }
  for (Precision p : o.precisions) {
    const DType act = activation_dtype(p);
    const double a = activation_bytes(p);
    for (int64_t e : powers(o.grid_membound_min_elements, o.grid_membound_max_elements, 4)) {
      const int64_t n = std::min<int64_t>(e, 1024), m = e / n;
      const double x = d(e);
      // Bytes as ops.cpp counts them for the model's ops of these kinds.
      grid.push_back(membound_op("grid.add", MemKind::kAdd, m, n, act, 2.0 * x * a, x * a));
      grid.push_back(membound_op("grid.gelu", MemKind::kGelu, m, n, act, x * a, x * a));
      grid.push_back(
          membound_op("grid.layer_norm", MemKind::kLayerNorm, m, n, act, x * a + 2.0 * d(n) * a, x * a + d(m) * 8.0));
      // Cross-entropy rows as wide as a small vocabulary.
      const int64_t vn = std::min<int64_t>(e, 8192), vm = e / vn;
      grid.push_back(
          membound_op("grid.cross_entropy", MemKind::kCrossEntropy, vm, vn, act, x * a, x * a + d(vm) * 4.0));
      grid.push_back(membound_op("grid.adamw", MemKind::kAdamW, e, 1, DType::kFp32, 16.0 * x, 12.0 * x));
    }
  }
  std::stable_sort(grid.begin(), grid.end(),
                   [](const Op& x, const Op& y) { return fnv1a(shape_key(x)) < fnv1a(shape_key(y)); });
  return grid;
}

// Held out: within each group, every held_out_every-th shape in hash order.
void mark_held_out(std::vector<PlannedOp>& plan, int held_out_every) {
  for (ShapeGroup g : {ShapeGroup::kGemm, ShapeGroup::kAttention, ShapeGroup::kMemoryBound}) {
    std::vector<std::pair<uint64_t, size_t>> order;
    for (size_t i = 0; i < plan.size(); ++i)
      if (group_of(plan[i].op) == g) order.emplace_back(fnv1a(shape_key(plan[i].op)), i);
    std::sort(order.begin(), order.end());
    for (size_t j = 0; j < order.size(); ++j)
      plan[order[j].second].held_out = static_cast<int>(j % static_cast<size_t>(held_out_every)) == held_out_every - 1;
  }
}

}  // namespace

std::vector<PlannedOp> make_kernel_plan(const KernelPlanOptions& o) {
  if (o.held_out_every < 2)
    throw Error("kernel plan: held_out_every " + std::to_string(o.held_out_every) + " must be >= 2");
  std::vector<PlannedOp> plan;
  std::set<std::string> seen;
  const auto add = [&](const Op& op, PlanSource source) {
    if (seen.insert(shape_key(op)).second) plan.push_back({op, source, false});
  };
  add_sweep_ops(o, [&](const Op& op) { add(op, PlanSource::kSweep); });
  for (const Op& op : grid_ops(o)) add(op, PlanSource::kGrid);
  mark_held_out(plan, o.held_out_every);
  return plan;
}

}  // namespace tpsim
