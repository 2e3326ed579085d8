// The CUDA and HIP backends (kernels/cuda, kernels/hip).
//
// Suite `host` runs everywhere: the row-major -> cuBLASLt column-major mapping through a host
// column-major GEMM, the device code's number-format rounding, and the factory's errors on a
// machine without the GPU. Suites `cuda` and `hip` need a device: without one every case reports
// "SKIPPED: no CUDA device (...)" (Boost.Test precondition; ctest's test_kernels_gpu_cuda and
// test_kernels_gpu_hip entries show as Skipped), with one every op the simulator builds is checked
// against the reference kernels with the tolerances below and timed once.
#define BOOST_TEST_MODULE kernels_gpu
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "io/error.hpp"
#include "kernels/backend.hpp"
#include "kernels/cuda/formats.hpp"
#include "kernels/cuda/gemm_layout.hpp"
#include "kernels/cuda/gpu_backend.hpp"
#include "kernels/cuda/nccl_comm.hpp"
#include "kernels/reference.hpp"
#include "model/ops.hpp"

namespace tt = boost::test_tools;
namespace utf = boost::unit_test;
using namespace tpsim;

namespace {

// ---- host: cuBLASLt's view of our GEMMs ----

// D = op(A) op(B) in column-major storage, exactly as cuBLASLt reads the descriptors.
std::vector<float> column_major_gemm(const gpu::LtProblem& p, const std::vector<float>& a,
                                     const std::vector<float>& b) {
  auto at = [](const gpu::LtOperand& o, const std::vector<float>& x, int64_t i, int64_t j) {
    // Element (i, j) of op(X): X stored column-major rows x cols with leading dimension ld.
    return o.transposed ? x[static_cast<size_t>(j + i * o.ld)] : x[static_cast<size_t>(i + j * o.ld)];
  };
  std::vector<float> d(static_cast<size_t>(p.c.ld * p.c.cols), 0.0f);
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t j = 0; j < p.n; ++j) {
      double s = 0;
      for (int64_t l = 0; l < p.k; ++l) s += double(at(p.a, a, i, l)) * at(p.b, b, l, j);
      d[static_cast<size_t>(i + j * p.c.ld)] = static_cast<float>(s);
    }
  return d;
}

std::vector<float> random_values(size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(gen);
  return v;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---- device: which backends exist here ----

struct DeviceState {
  std::unique_ptr<Backend> backend;
  std::string why_not;
};

DeviceState& device(BackendKind kind) {
  static DeviceState states[3];
  static bool tried[3] = {};
  const int i = static_cast<int>(kind);
  if (!tried[i]) {
    tried[i] = true;
    try {
      states[i].backend = make_backend(kind, 0);
    } catch (const Error& e) {
      states[i].why_not = e.what();
    }
  }
  return states[i];
}

// Boost.Test precondition: the case runs only with a device, and says plainly when it does not.
struct HasDevice {
  BackendKind kind;
  tt::assertion_result operator()(utf::test_unit_id) const {
    const DeviceState& d = device(kind);
    tt::assertion_result r(d.backend != nullptr);
    if (!d.backend) {
      // why_not starts "no CUDA device: ..." (the factory's message), which ctest's
      // SKIP_REGULAR_EXPRESSION "SKIPPED: no CUDA device" matches.
      r.message() << "SKIPPED: " << d.why_not;
      BOOST_TEST_MESSAGE("SKIPPED: " << d.why_not);
    }
    return r;
  }
};

// Largest error relative to the output's scale (reference.hpp's max_relative_error) each format
// may show. Outputs are stored in the format, so its rounding (bf16: 2^-9 relative, fp16: 2^-12)
// bounds what any kernel can reach; the rest is accumulation order (fp32 in every kernel here).
double tolerance(const Op& op) {
  if (op.kind == OpKind::kMemoryBound) {
    if (op.mem == MemKind::kCast) return 0.0;  // conversions are exact to the bit
    if (op.mem == MemKind::kGradNorm || op.mem == MemKind::kScale || op.mem == MemKind::kAdamW) return 1e-5;
  }
  switch (op.dtype) {
    case DType::kFp32: return op.kind == OpKind::kMemoryBound ? 1e-5 : 1e-4;
    case DType::kTf32: return 1e-2;  // 10-bit mantissas in the products
    case DType::kFp16: return 4e-3;
    case DType::kBf16: return 1.6e-2;
    case DType::kFp8: return 1.6e-2;  // exact e4m3 inputs, bf16 output
    case DType::kFp4: return 0.0;     // no backend runs fp4 GEMMs
  }
  return 0.0;
}

// Every op the simulator builds for one small model, under each precision: ragged sizes (not
// multiples of the kernels' tiles) so that edges are exercised, k multiple of 16 for fp8.
std::vector<Op> ops_to_check(Precision p) {
  BlockShape s;
  s.batch = 2;
  s.seq = 80;
  s.d_model = 96;
  s.n_heads = 3;  // head_dim 32
  s.d_ffn = 384;
  s.vocab = 517;
  s.bias = true;
  s.precision = p;
  OpList fwd, bwd, head, emb, opt, fsdp;
  block_forward_ops(s, fwd);
  block_backward_ops(s, bwd);
  head_forward_ops(s, head);
  head_backward_ops(s, head);
  embedding_forward_ops(s, emb);
  embedding_backward_ops(s, emb);
  optimizer_ops(10007, opt);
  fsdp_pre_gather_ops(20000, 4, gathered_param_bytes(p, MpMode::kDefault), fsdp);
  fsdp_pre_reduce_ops(20000, 4, activation_bytes(p), reduced_grad_bytes(p, MpMode::kDefault), fsdp);
  std::vector<Op> all;
  for (const OpList* l : {&fwd, &bwd, &head, &emb, &opt, &fsdp}) all.insert(all.end(), l->begin(), l->end());
  return all;
}

// A GEMM of each format and layout not already in the model's ops.
std::vector<Op> gemm_variants() {
  std::vector<Op> v;
  for (DType d : {DType::kFp32, DType::kTf32, DType::kBf16, DType::kFp16, DType::kFp8})
    for (int layout = 0; layout < 4; ++layout) {
      // Ragged for the tiles; fp8 needs 16-byte leading dimensions, so multiples of 16 there.
      const bool fp8 = d == DType::kFp8;
      v.push_back(gemm_op("gemm.variant", fp8 ? 144 : 131, fp8 ? 80 : 77, fp8 ? 144 : 203, d, gemm_operand_bytes(d),
                          gemm_output_bytes(d), (layout & 1) != 0, (layout & 2) != 0));
    }
  return v;
}

// Attention of each padded head size the tensor-core kernels have (32, 64, 128), one not a multiple
// of 8 (element-wise tile loads), and sequences that end inside a 64-row tile; bf16 and fp16.
std::vector<Op> attention_variants() {
  std::vector<Op> v;
  for (Precision p : {Precision::kAmpBf16, Precision::kAmpFp16})
    for (const auto& [heads, head_dim, seq] :
         {std::tuple{2, 16, 70}, std::tuple{2, 64, 131}, std::tuple{1, 100, 150}, std::tuple{1, 128, 200}}) {
      BlockShape s;
      s.batch = 2;
      s.seq = seq;
      s.n_heads = heads;
      s.d_model = heads * head_dim;
      s.precision = p;
      v.push_back(attention_op("attention.variant.fwd", OpKind::kAttentionFwd, s));
      v.push_back(attention_op("attention.variant.bwd", OpKind::kAttentionBwd, s));
    }
  return v;
}

std::string describe(const Op& op) {
  return std::string(op.name) + " [" + std::string(to_string(op.dtype)) + " m=" + std::to_string(op.m) +
         " n=" + std::to_string(op.n) + " k=" + std::to_string(op.k) + "]";
}

[[maybe_unused]] void check_every_op(BackendKind kind) {
  Backend& b = *device(kind).backend;
  int checked = 0, unsupported = 0;
  std::vector<Op> ops = gemm_variants();
  const auto attention = attention_variants();
  ops.insert(ops.end(), attention.begin(), attention.end());
  for (Precision p : {Precision::kAmpBf16, Precision::kAmpFp16, Precision::kAmpFp8, Precision::kFp32}) {
    const auto more = ops_to_check(p);
    ops.insert(ops.end(), more.begin(), more.end());
  }
  for (const Op& op : ops) {
    const std::string why = b.unsupported(op);
    if (!why.empty()) {
      BOOST_TEST_MESSAGE("not supported: " << describe(op) << ": " << why);
      // Only formats a device or a library lacks may be missing: fp8 and tf32 GEMMs.
      BOOST_TEST((op.kind == OpKind::kGemm && (op.dtype == DType::kFp8 || op.dtype == DType::kTf32)), describe(op));
      ++unsupported;
      continue;
    }
    CheckResult r;
    try {
      r = b.check_op(op);
    } catch (const std::exception& e) {
      BOOST_TEST(false, describe(op) << ": " << e.what());  // go on: one run names every op that fails
      continue;
    }
    if (!r.supported) {
      // cuBLASLt can refuse a shape only at run time (LtMatmul::choose): the same formats only.
      BOOST_TEST_MESSAGE("not supported when run: " << describe(op) << ": " << r.reason);
      BOOST_TEST((op.kind == OpKind::kGemm && (op.dtype == DType::kFp8 || op.dtype == DType::kTf32)),
                 describe(op) << ": " << r.reason);
      ++unsupported;
      continue;
    }
    BOOST_TEST_CONTEXT(describe(op)) { BOOST_TEST(r.max_rel_error <= tolerance(op)); }
    ++checked;
  }
  BOOST_TEST_MESSAGE(checked << " ops checked, " << unsupported << " not supported");
  BOOST_TEST(checked > 0);
}

[[maybe_unused]] void time_ops_and_sequences(BackendKind kind) {
  Backend& b = *device(kind).backend;
  const TimingOptions o{.warmup = 1, .min_repetitions = 3, .max_repetitions = 5, .min_seconds = 0, .max_seconds = 1};
  OpList fwd;
  const BlockShape s{.batch = 2, .seq = 512, .d_model = 256, .n_heads = 4, .d_ffn = 1024, .vocab = 1000};
  block_forward_ops(s, fwd);
  for (const Op& op : fwd) {
    const Timing t = b.time_op(op, o);
    BOOST_TEST_CONTEXT(op.name) {
      BOOST_TEST(t.supported, t.reason);
      BOOST_TEST(t.repetitions >= o.min_repetitions);
      BOOST_TEST(t.median_s > 0.0);
      BOOST_TEST(t.p10_s <= t.median_s);
      BOOST_TEST(t.median_s <= t.p90_s);
    }
  }
  const SequenceTiming seq = b.time_sequence(std::span<const Op>(fwd.begin(), fwd.end()), o);
  BOOST_TEST(seq.supported, seq.reason);
  BOOST_TEST(seq.per_op.size() == static_cast<size_t>(fwd.size()));
  BOOST_TEST(seq.total_median_s > 0.0);

  auto* probe = dynamic_cast<GpuCopyProbe*>(&b);
  BOOST_TEST_REQUIRE(probe != nullptr);
  const Timing copy = probe->time_copy(64.0 * (1 << 20), o);
  BOOST_TEST(copy.supported, copy.reason);
  BOOST_TEST_MESSAGE("copy of 64 MiB: " << 2.0 * 64.0 * (1 << 20) / copy.median_s / 1e9 << " GB/s");
  BOOST_TEST(copy.median_s > 0.0);
}

[[maybe_unused]] void info_and_bad_index(BackendKind kind) {
  const BackendInfo i = device(kind).backend->info();
  BOOST_TEST_MESSAGE(i.backend << ": " << i.device_name << "; " << i.driver_version << "; " << i.library_versions);
  BOOST_TEST(i.backend == std::string(to_string(kind)));
  BOOST_TEST(!i.device_name.empty());
  BOOST_TEST(i.compute_units > 0);
  BOOST_TEST(i.memory_bytes > 0.0);
  BOOST_CHECK_EXCEPTION(make_backend(kind, 1 << 20), Error, [](const Error& e) {
    return std::string(e.what()).find("--device-index 1048576") != std::string::npos;
  });
}

}  // namespace

BOOST_AUTO_TEST_SUITE(host)

BOOST_AUTO_TEST_CASE(cublaslt_column_major_mapping_computes_the_row_major_product) {
  for (int layout = 0; layout < 4; ++layout) {
    const bool ta = layout & 1, tb = layout & 2;
    const int64_t m = 7, n = 5, k = 3;
    const auto a = random_values(static_cast<size_t>(m * k), 1 + layout);
    const auto b = random_values(static_cast<size_t>(k * n), 11 + layout);
    std::vector<float> want(static_cast<size_t>(m * n));
    gemm_reference(m, n, k, ta, tb, a, b, want);

    const gpu::LtProblem p = gpu::column_major_problem(m, n, k, ta, tb);
    BOOST_TEST_CONTEXT("trans_a=" << ta << " trans_b=" << tb) {
      // cuBLASLt's problem is C^T: its m is our n, its n our m; each operand's stored shape holds
      // exactly the operand's elements and the product's dimensions agree.
      BOOST_TEST(p.m == n);
      BOOST_TEST(p.n == m);
      BOOST_TEST(p.k == k);
      BOOST_TEST(p.a.rows * p.a.cols == k * n);  // our B
      BOOST_TEST(p.b.rows * p.b.cols == m * k);  // our A
      BOOST_TEST((p.a.transposed ? p.a.cols : p.a.rows) == p.m);
      BOOST_TEST((p.b.transposed ? p.b.rows : p.b.cols) == p.n);
      BOOST_TEST(p.a.ld == p.a.rows);
      BOOST_TEST(p.b.ld == p.b.rows);
      BOOST_TEST(p.c.rows == n);
      BOOST_TEST(p.c.ld == n);
      BOOST_TEST(p.a.transposed == tb);
      BOOST_TEST(p.b.transposed == ta);
      // The column-major product over the same bytes (cuBLASLt's A = our B) is our row-major C.
      const std::vector<float> got = column_major_gemm(p, b, a);
      BOOST_TEST(max_relative_error(got, want) <= 1e-6);
    }
  }
}

BOOST_AUTO_TEST_CASE(fp8_forward_layout_is_the_tn_layout_cublaslt_requires) {
  // y = x W^T (trans_b): cuBLASLt's A (our W) read transposed, its B (our x) as stored.
  const gpu::LtProblem p = gpu::column_major_problem(64, 48, 32, false, true);
  BOOST_TEST(p.a.transposed);
  BOOST_TEST(!p.b.transposed);
}

BOOST_AUTO_TEST_CASE(bf16_rounding_of_the_device_code_matches_the_reference) {
  std::vector<float> x = random_values(4096, 5);
  for (float s : {1e-3f, 3.0f, 1e30f}) x.push_back(s * 1.00390625f);  // ties and near-ties
  x.push_back(from_bits(0x3f808000u));                                // exactly halfway, even below: rounds down
  x.push_back(from_bits(0x3f818000u));                                // exactly halfway, odd below: rounds up
  x.push_back(std::numeric_limits<float>::infinity());
  x.push_back(-0.0f);
  std::vector<uint16_t> want(x.size());
  cast_fp32_to_bf16_reference(x, want);
  for (size_t i = 0; i < x.size(); ++i) BOOST_TEST(gpu::float_to_bf16(x[i]) == want[i], "x = " << x[i]);
  BOOST_TEST(std::isnan(gpu::bf16_to_float(gpu::float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

BOOST_AUTO_TEST_CASE(e4m3_encoding_rounds_to_nearest_even_and_saturates) {
  // Every finite code decodes to a value that encodes back to it.
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    if (c == 0x80) continue;           // -0 encodes as -0 (0x80): checked below
    BOOST_TEST(gpu::float_to_e4m3(gpu::e4m3_to_float(static_cast<uint8_t>(c))) == c, "code " << c);
  }
  BOOST_TEST(gpu::float_to_e4m3(-0.0f) == 0x80);
  BOOST_TEST(gpu::e4m3_to_float(0x7e) == 448.0f);        // largest finite
  BOOST_TEST(gpu::e4m3_to_float(0x01) == 0.001953125f);  // smallest subnormal, 2^-9
  BOOST_TEST(gpu::e4m3_to_float(0x08) == 0.015625f);     // smallest normal, 2^-6
  // Between neighbours: below the midpoint down, above it up, at it to the even code.
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = gpu::e4m3_to_float(static_cast<uint8_t>(c)), hi = gpu::e4m3_to_float(static_cast<uint8_t>(c + 1));
    const float mid = 0.5f * (lo + hi);
    BOOST_TEST(gpu::float_to_e4m3(std::nextafter(mid, lo)) == c);
    BOOST_TEST(gpu::float_to_e4m3(std::nextafter(mid, hi)) == c + 1);
    BOOST_TEST(gpu::float_to_e4m3(mid) == (c % 2 == 0 ? c : c + 1), "midpoint of codes " << c << ", " << c + 1);
  }
  // Saturation (SATFINITE) instead of NaN past 448, and for infinities.
  BOOST_TEST(gpu::float_to_e4m3(460.0f) == 0x7e);
  BOOST_TEST(gpu::float_to_e4m3(1e6f) == 0x7e);
  BOOST_TEST(gpu::float_to_e4m3(-std::numeric_limits<float>::infinity()) == 0xfe);
  BOOST_TEST(gpu::float_to_e4m3(1e-10f) == 0);
  BOOST_TEST((gpu::float_to_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f) == 0x7f);
}

BOOST_AUTO_TEST_CASE(fp16_readback_is_exact) {
  BOOST_TEST(gpu::half_bits_to_float(0x3c00) == 1.0f);
  BOOST_TEST(gpu::half_bits_to_float(0xc000) == -2.0f);
  BOOST_TEST(gpu::half_bits_to_float(0x7bff) == 65504.0f);
  BOOST_TEST(gpu::half_bits_to_float(0x0001) == std::ldexp(1.0f, -24));
  BOOST_TEST(std::isinf(gpu::half_bits_to_float(0x7c00)));
  BOOST_TEST(std::isnan(gpu::half_bits_to_float(0x7e00)));
}

// Without the device (or without the backend in this build), asking for it is one clear Error.
BOOST_AUTO_TEST_CASE(a_missing_gpu_backend_or_device_is_a_clear_error) {
  for (BackendKind kind : {BackendKind::kCuda, BackendKind::kHip}) {
    const std::string name = kind == BackendKind::kCuda ? "CUDA" : "HIP";
    const DeviceState& d = device(kind);
    if (d.backend) {
      BOOST_TEST_MESSAGE(name << " device present: the no-device error is not reachable here");
      continue;
    }
    BOOST_TEST_MESSAGE(name << ": " << d.why_not);
    BOOST_TEST(d.why_not.find('\n') == std::string::npos);
    if (backend_built(kind)) BOOST_TEST(d.why_not.rfind("no " + name + " device", 0) == 0u, d.why_not);
    else BOOST_TEST(d.why_not.find("this build has no " + name + " backend") != std::string::npos, d.why_not);
  }
}

#ifdef TPSIM_HAVE_NCCL_COMM
BOOST_AUTO_TEST_CASE(the_nccl_communicator_without_a_device_is_a_clear_error) {
  if (device(BackendKind::kCuda).backend) {
    BOOST_TEST_MESSAGE("CUDA device present: the NCCL communicator is not checked here (it needs mpirun)");
    return;
  }
  BOOST_CHECK_EXCEPTION(make_nccl_communicator(), Error, [](const Error& e) {
    BOOST_TEST_MESSAGE(e.what());
    return std::string(e.what()).rfind("NCCL communicator: no CUDA device", 0) == 0;
  });
}
#endif

BOOST_AUTO_TEST_SUITE_END()

#ifdef TPSIM_HAVE_CUDA
BOOST_AUTO_TEST_SUITE(cuda)

BOOST_AUTO_TEST_CASE(every_op_matches_the_reference, *utf::precondition(HasDevice{BackendKind::kCuda})) {
  check_every_op(BackendKind::kCuda);
}
BOOST_AUTO_TEST_CASE(ops_sequences_and_copies_are_timed, *utf::precondition(HasDevice{BackendKind::kCuda})) {
  time_ops_and_sequences(BackendKind::kCuda);
}
BOOST_AUTO_TEST_CASE(info_names_the_device_and_a_bad_index_is_an_error,
                     *utf::precondition(HasDevice{BackendKind::kCuda})) {
  info_and_bad_index(BackendKind::kCuda);
}

BOOST_AUTO_TEST_SUITE_END()
#endif

#ifdef TPSIM_HAVE_HIP
BOOST_AUTO_TEST_SUITE(hip)

BOOST_AUTO_TEST_CASE(every_op_matches_the_reference, *utf::precondition(HasDevice{BackendKind::kHip})) {
  check_every_op(BackendKind::kHip);
}
BOOST_AUTO_TEST_CASE(ops_sequences_and_copies_are_timed, *utf::precondition(HasDevice{BackendKind::kHip})) {
  time_ops_and_sequences(BackendKind::kHip);
}
BOOST_AUTO_TEST_CASE(info_names_the_device_and_a_bad_index_is_an_error,
                     *utf::precondition(HasDevice{BackendKind::kHip})) {
  info_and_bad_index(BackendKind::kHip);
}

BOOST_AUTO_TEST_SUITE_END()
#endif
