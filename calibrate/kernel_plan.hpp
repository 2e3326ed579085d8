// What `tpsim calibrate kernels` measures: the shapes the simulator will cost, and a grid around
// them.
//
// The sweep part builds, with the simulator's own builders (step_ops.hpp), every op of a training
// step for each model, sequence length and micro-batch of a sweep, and keeps one op per distinct
// shape (a GEMM's m, n, k, layout and format; attention's batch, heads, sequence and head size;
// a memory-bound kernel's kind, rows, columns and bytes). The grid part fills the space between:
// GEMMs over powers of two in m, n and k in every format measured, causal attention over sequence
// lengths and head sizes 64 and 128, and memory-bound kernels over sizes. A deterministic fifth of
// the GEMM, attention and memory-bound shapes is marked held out: the fit does not see them and
// the calibration reports its error on them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/architecture.hpp"
#include "model/ops.hpp"
#include "model/training.hpp"

namespace tpsim {

struct KernelPlanOptions {
  // The sweep whose shapes are measured: every model at every sequence length and micro-batch.
  std::vector<ModelConfig> models;
  std::vector<int64_t> seq_lens;
  std::vector<int64_t> micro_batches;
  std::vector<Precision> precisions = {Precision::kAmpBf16};
  // The optimizer and FSDP's casts run over a device's shard: parameters / shard_ranks (1: one
  // device holds the model; 8: the catalogue's usual node).
  int64_t shard_ranks = 1;

  // GEMM grid: m, n and k over the powers of two in [min, max], in each of these formats, at most
  // max_flops each (the biggest shapes cost the most time and say least about the shape terms).
  std::vector<DType> gemm_dtypes = {DType::kBf16};
  int64_t grid_gemm_min = 64;
  int64_t grid_gemm_max = 4096;
  double grid_gemm_max_flops = 2.0 * 4096.0 * 4096.0 * 4096.0;
  // And over the three-halves of those powers (48, 96, 192, ...) in m, n and k: sizes whose tiles
  // do not divide them, which a grid of powers of two never shows the fit (a model's d_model of
  // 384 or 448, a micro-batch of three sequences).
  bool grid_gemm_three_halves = false;
  // Attention grid: one sequence of `grid_attention_heads` heads over the powers of two in
  // [min, max] positions, head sizes 64 and 128, forward and backward, in the precisions' formats.
  int64_t grid_attention_heads = 16;
  int64_t grid_attention_seq_min = 256;
  int64_t grid_attention_seq_max = 16384;
  double grid_attention_max_flops = 1e12;
  // Memory-bound grid: residual add, GELU, layer norm, cross-entropy and AdamW over the powers of
  // four in [min, max] elements (rows of 1024 for the row-wise kernels).
  int64_t grid_membound_min_elements = int64_t{1} << 16;
  int64_t grid_membound_max_elements = int64_t{1} << 26;

  // Every fifth shape of each group (GEMM, attention, memory-bound), in the order of a hash of its
  // shape, is held out of the fit.
  int held_out_every = 5;
};

// The sweep and grid the calibration measures by default on a backend: on the CPU the `tiny` model
// at a few short sequences and small micro-batches, fp32, with a grid of shapes that each take at
// most some tens of milliseconds on one core; on a GPU the catalogue's models with a grid up to
// 8192 in every GEMM dimension. `models` is filled by the caller (it owns the catalogue).
KernelPlanOptions default_kernel_plan_options(bool gpu);

enum class PlanSource : uint8_t { kSweep, kGrid };
enum class ShapeGroup : uint8_t { kGemm, kAttention, kMemoryBound };
ShapeGroup group_of(const Op& op);
std::string_view to_string(ShapeGroup g);  // "gemm", "attention", "memory-bound"

struct PlannedOp {
  Op op;
  PlanSource source;
  bool held_out;
};

// The sweep's distinct shapes in the order the sweep meets them, then the grid's, in the order of
// their hashes (so that a budget that ends early leaves a spread of the grid, not its small end).
// A grid shape the sweep already has is not repeated.
std::vector<PlannedOp> make_kernel_plan(const KernelPlanOptions& options);

// What makes two ops the same measurement: kind, format, layout and every dimension (and for a
// memory-bound op its kernel and bytes). Readable: "gemm bf16 NT 2048x3072x1024".
std::string shape_key(const Op& op);
// A short description of the shape, for reports: "2048x3072x1024 NT", "b1 h16 s4096 d128".
std::string shape_text(const Op& op);

}  // namespace tpsim
