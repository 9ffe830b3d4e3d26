// GGUF NVFP4 with its per-tensor scale tensors (issue 36), as llama.cpp's convert_hf_to_gguf.py writes a
// ModelOpt NVFP4 checkpoint: `<module>.weight` NVFP4 (36-byte blocks of 64: 4 UE4M3 scales, then codes
// whose sub-block byte j holds value j low and value j + 8 high), `<module>.scale` F32 [1] (the
// checkpoint's weight_scale_2; [n_expert] for stacked experts, one per expert) and `<module>.input_scale`
// F32 (ignored here). The weights load as NVFP4_G64 blocks carrying that scale, decode to e2m1 * scale *
// global, and the model's logits equal, bit for bit, those of the same model stored as those F32 values,
// through the resident experts (fused) and the CPU expert executor (cpu). A malformed scale tensor is
// refused naming it.
#include <cmath>
#include <filesystem>

#include "fixture_util.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cuda_factory.h"
#include "backend/op_harness.h"
#include "formats/gguf_reader.h"
#include "formats/gguf_writer.h"
#include "model/weights.h"
#include "quant/fp8.h"
#include "quant/mxfp4.h"
#include "quant/nvfp4.h"
#include "util/progress.h"

namespace ft::testing {
namespace {

namespace fs = std::filesystem;

/** GGUF NVFP4 bytes [N, K] (K a multiple of 64) of ModelOpt rows: packed [N, K/2] (value 2j low, 2j+1
 *  high), E4M3 scales [N, K/16], as llama.cpp's converter repacks them (scale bits kept, sign cleared). */
std::vector<uint8_t> gguf_blocks(const uint8_t* packed, const uint8_t* scales, int64_t N, int64_t K) {
  std::vector<uint8_t> out;
  for (int64_t r = 0; r < N; ++r)
    for (int64_t b = 0; b < K / 64; ++b) {
      for (int k = 0; k < 4; ++k) out.push_back(scales[r * (K / 16) + b * 4 + k] & 0x7f);
      for (int k = 0; k < 4; ++k) {
        const int64_t v0 = r * K + b * 64 + k * 16;  // the sub-block's first value
        auto code = [&](int64_t v) { return (packed[v / 2] >> (v % 2 == 0 ? 0 : 4)) & 0x0f; };
        for (int j = 0; j < 8; ++j) out.push_back(static_cast<uint8_t>(code(v0 + j) | code(v0 + j + 8) << 4));
      }
    }
  return out;
}

/** Value i of GGUF NVFP4 bytes times g, from the raw bytes, in double: E2M1 code value (sign bit 3)
 *  times the UE4M3 scale (bias 7, subnormal at exponent 0, 0x7f decoding as 0) times g. */
double gguf_value(const uint8_t* blocks, int64_t i, double g) {
  static constexpr double kE2m1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};
  const uint8_t* b = blocks + (i / 64) * 36;
  const int k = static_cast<int>(i % 64) / 16, j = static_cast<int>(i % 16);
  const uint8_t byte = b[4 + 8 * k + j % 8], s = b[k];
  const int e = (s >> 3) & 0x0f, m = s & 7;
  const double scale = s == 0x7f ? 0 : e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
  return kE2m1[j < 8 ? byte & 0x0f : byte >> 4] * scale * g;
}

/** Random GGUF NVFP4 bytes for [rows, K]: every code, scale bytes 0x20..0x5f (0.0156 .. 30). */
std::vector<uint8_t> random_blocks(int64_t rows, int64_t K, uint32_t seed) {
  std::vector<uint8_t> b(static_cast<size_t>(dtype_bytes(DType::NVFP4, rows * K)));
  uint32_t x = seed;
  for (size_t i = 0; i < b.size(); ++i) {
    x = x * 1664525u + 1013904223u;
    b[i] = static_cast<uint8_t>(x >> 24);
    if (i % 36 < 4) b[i] = static_cast<uint8_t>(0x20 + b[i] % 0x40);
  }
  return b;
}

/** Expects `t` to decode to gguf_value(blocks, i, g of i's expert) within float32 rounding. */
void expect_scaled(const Tensor& t, const std::vector<uint8_t>& blocks, const std::vector<float>& g) {
  ASSERT_EQ(t.dtype, DType::NVFP4_G64);
  const int64_t n = t.numel(), per = n / static_cast<int64_t>(g.size());
  std::vector<float> got(static_cast<size_t>(n));
  dequantize_row(t.dtype, t.data, got.data(), n);
  int nonzero = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double want = gguf_value(blocks.data(), i, g[static_cast<size_t>(i / per)]);
    nonzero += want != 0;
    ASSERT_LE(std::fabs(got[i] - want), std::fabs(want) * 0x1p-23) << i;
  }
  EXPECT_GT(nonzero, n / 2);
}

struct SumSink : ProgressSink {
  void begin(const std::string&, int64_t) override {}
  void add(int64_t b) override { total += b; }
  void finish(bool) override {}
  int64_t total = 0;
};

constexpr int64_t kE = 3, kN = 4, kK = 128;

/** A GGUF with a dense NVFP4 weight and its scale + input scale, one without a scale, stacked NVFP4
 *  experts with one scale per expert and an F32 router. `edit` may change the scale tensors. */
struct TinyFile {
  std::vector<uint8_t> q = random_blocks(kN, kK, 1), k = random_blocks(kN, kK, 2), exps = random_blocks(kE * kN, kK, 3);
  std::vector<float> q_scale = {0.0371f}, exps_scale = {0.5f, 0.01f, 7.25f}, input_scale = {2.5f};

  std::string write(const std::string& name, DType scale_type = DType::F32,
                    std::vector<int64_t> q_scale_shape = {1}, std::vector<int64_t> exps_scale_shape = {kE}) const {
    GgufWriter w;
    w.add_tensor("blk.0.attn_q.weight", DType::NVFP4, {kN, kK}, q.data(), static_cast<int64_t>(q.size()));
    std::vector<uint8_t> qs(q_scale.size() * 4);
    std::memcpy(qs.data(), q_scale.data(), qs.size());
    if (scale_type == DType::F16) qs.resize(qs.size() / 2);
    w.add_tensor("blk.0.attn_q.scale", scale_type, q_scale_shape, qs.data(), static_cast<int64_t>(qs.size()));
    w.add_tensor("blk.0.attn_q.input_scale", DType::F32, {1}, input_scale.data(), 4);
    w.add_tensor("blk.0.attn_k.weight", DType::NVFP4, {kN, kK}, k.data(), static_cast<int64_t>(k.size()));
    w.add_tensor("blk.0.ffn_gate_exps.weight", DType::NVFP4, {kE, kN, kK}, exps.data(),
                 static_cast<int64_t>(exps.size()));
    w.add_tensor("blk.0.ffn_gate_exps.scale", DType::F32, exps_scale_shape, exps_scale.data(),
                 static_cast<int64_t>(exps_scale.size() * 4));
    const std::string path = scratch_path(name + ".gguf");
    w.write(path);
    return path;
  }
};

TEST(GgufNvfp4Scale, DenseAndExpertWeightsCarryTheirScale) {
  const TinyFile f;
  const std::string path = f.write("nvfp4_scale");
  auto ckpt = open_checkpoint(path);
  CpuOps ops(1);
  SumSink sink;
  WeightLoader ld(*ckpt, ops, &sink);
  // Every tensor is read while loading (the scaled experts are repacked, not left as views).
  int64_t all = 0;
  for (const TensorInfo& t : ckpt->tensors()) all += t.bytes;
  EXPECT_EQ(ld.load_bytes_estimate(), all);
  const Tensor q = ld.get(layer_weight(0, "attn_q", ""), {kN, kK});
  EXPECT_EQ(q.bytes(), kN * kK / 64 * 40);
  expect_scaled(q, f.q, f.q_scale);
  // Without a .scale (llama.cpp leaves out a scale of 1) the weight is the file's NVFP4 as stored.
  const Tensor k = ld.get(layer_weight(0, "attn_k", ""), {kN, kK});
  EXPECT_EQ(k.dtype, DType::NVFP4);
  EXPECT_EQ(k.data, ckpt->get("blk.0.attn_k.weight").data);
  // Stacked experts: expert e's rows carry scale e.
  const std::vector<Tensor> gate = ld.host_experts(0, "ffn_gate_exps", "", kE, kN, kK);
  ASSERT_EQ(gate.size(), static_cast<size_t>(kE));
  for (int64_t e = 0; e < kE; ++e) {
    SCOPED_TRACE(e);
    const std::vector<uint8_t> rows(f.exps.begin() + e * kN * (kK / 64) * 36, f.exps.begin() + (e + 1) * kN * (kK / 64) * 36);
    expect_scaled(gate[e], rows, {f.exps_scale[e]});
  }
  // Weight, scale and input scale all counted as loaded: nothing in the file is left unread.
  EXPECT_EQ(sink.total, all);
  // The same tensor twice is repacked once.
  EXPECT_EQ(ld.host(layer_weight(0, "attn_q", ""), {kN, kK}).data, q.data);
  fs::remove(path);
}

/** The ft::Error the loader throws reading attn_q and the experts of `path`; "" if both load. */
std::string read_error(const std::string& path, ErrorCode* code) {
  auto ckpt = open_checkpoint(path);
  CpuOps ops(1);
  WeightLoader ld(*ckpt, ops);
  try {
    ld.get(layer_weight(0, "attn_q", ""), {kN, kK});
    ld.host_experts(0, "ffn_gate_exps", "", kE, kN, kK);
  } catch (const Error& e) {
    *code = e.code();
    return e.what();
  }
  return "";
}

TEST(GgufNvfp4Scale, MalformedScalesAreRefusedNamingTheTensor) {
  TinyFile f;
  ErrorCode code{};
  // Wrong shape: two values for a dense weight.
  f.q_scale = {1.0f, 2.0f};
  std::string m = read_error(f.write("nvfp4_scale_shape", DType::F32, {2}), &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  EXPECT_NE(m.find("tensor blk.0.attn_q.scale: expected F32 [1]"), std::string::npos) << m;
  EXPECT_NE(m.find("found F32 [2]"), std::string::npos) << m;
  // Wrong type: F16.
  f.q_scale = {1.0f};
  m = read_error(f.write("nvfp4_scale_type", DType::F16), &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  EXPECT_NE(m.find("tensor blk.0.attn_q.scale: expected F32 [1]"), std::string::npos) << m;
  EXPECT_NE(m.find("found F16 [1]"), std::string::npos) << m;
  // One scale for a stack of 3 experts (llama.cpp writes one per expert).
  f.exps_scale = {0.5f};
  m = read_error(f.write("nvfp4_scale_experts", DType::F32, {1}, {1}), &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  EXPECT_NE(m.find("tensor blk.0.ffn_gate_exps.scale: expected F32 [3] (one scale per expert"), std::string::npos) << m;
  // A negative or non-finite scale, named with its expert.
  f.exps_scale = {0.5f, -2.0f, 1.0f};
  m = read_error(f.write("nvfp4_scale_negative"), &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  EXPECT_NE(m.find("tensor blk.0.ffn_gate_exps.scale (expert 1 of NVFP4 weight blk.0.ffn_gate_exps.weight)"),
            std::string::npos) << m;
  f.exps_scale = {0.5f, 1.0f, 1.0f};
  f.q_scale = {NAN};
  m = read_error(f.write("nvfp4_scale_nan"), &code);
  EXPECT_EQ(code, ErrorCode::kInvalidFile);
  EXPECT_NE(m.find("tensor blk.0.attn_q.scale (the scale of NVFP4 weight blk.0.attn_q.weight)"), std::string::npos)
      << m;
  f.q_scale = {1.0f};
  EXPECT_EQ(read_error(f.write("nvfp4_scale_ok"), &code), "");
  for (const char* n : {"shape", "type", "experts", "negative", "nan", "ok"})
    fs::remove(scratch_path(std::string("nvfp4_scale_") + n + ".gguf"));
}

TEST(GgufNvfp4Scale, ScaleBesideAnotherTypeIsRefused) {
  // llama.cpp multiplies any weight's .scale into its output; FreeToken reads it for NVFP4 only, so a
  // Q8_0 weight with one is refused rather than run unscaled.
  const std::vector<uint8_t> w(static_cast<size_t>(dtype_bytes(DType::Q8_0, kN * kK)), 0);
  const float s = 0.25f;
  GgufWriter gw;
  gw.add_tensor("blk.0.attn_q.weight", DType::Q8_0, {kN, kK}, w.data(), static_cast<int64_t>(w.size()));
  gw.add_tensor("blk.0.attn_q.scale", DType::F32, {1}, &s, 4);
  const std::string path = scratch_path("q8_0_scale.gguf");
  gw.write(path);
  ErrorCode code{};
  const std::string m = read_error(path, &code);
  EXPECT_EQ(code, ErrorCode::kUnsupported);
  EXPECT_NE(m.find("tensor blk.0.attn_q.scale beside Q8_0 weight blk.0.attn_q.weight"), std::string::npos) << m;
  fs::remove(path);
}

/** Writes `dir`/nvfp4.gguf (the qwen3_moe F32 fixture with every block matrix whose rows are a multiple
 *  of 64 values in GGUF NVFP4, quantized as ModelOpt does, with its .scale and .input_scale; experts
 *  quantized one by one, so their .scale holds one value per expert) and `dir`/f32.gguf (the same model
 *  with those matrices as the F32 values ModelOpt's dequantization gives: e2m1(q) * (e4m3(s) * g)). */
void write_pair(const std::string& dir) {
  const GgufReader r(shared_dir() + "/fixtures/gguf/qwen3_moe/qwen3_moe-f32.gguf");
  GgufWriter q4, f32;
  for (const GgufKV& kv : r.kvs()) q4.add(kv.key, kv.value), f32.add(kv.key, kv.value);
  int quantized = 0;
  for (const GgufTensor& gt : r.tensors()) {
    const TensorInfo& t = gt.info;
    const int64_t K = t.shape.back();
    const bool matrix = t.name.starts_with("blk.") && t.name.ends_with(".weight") && t.shape.size() >= 2 &&
                        t.name.find("ffn_gate_inp") == std::string::npos && K % 64 == 0;
    if (!matrix) {
      q4.add_tensor(t.name, t.dtype, t.shape, t.data, t.bytes);
      f32.add_tensor(t.name, t.dtype, t.shape, t.data, t.bytes);
      continue;
    }
    ASSERT_EQ(t.dtype, DType::F32) << t.name;
    const int64_t E = t.shape.size() == 3 ? t.shape[0] : 1, N = t.shape[t.shape.size() - 2];
    std::vector<uint8_t> blocks;
    std::vector<float> g(static_cast<size_t>(E)), y(static_cast<size_t>(E * N * K));
    for (int64_t e = 0; e < E; ++e) {
      const float* x = reinterpret_cast<const float*>(t.data) + e * N * K;
      std::vector<uint8_t> packed(N * K / 2), scales(N * K / 16);
      nvfp4_quantize_modelopt(x, N, K, packed.data(), scales.data(), &g[e]);
      const std::vector<uint8_t> b = gguf_blocks(packed.data(), scales.data(), N, K);
      blocks.insert(blocks.end(), b.begin(), b.end());
      for (int64_t i = 0; i < N * K; ++i) {
        const uint8_t byte = packed[i / 2];
        y[e * N * K + i] = e2m1_to_f32(i % 2 == 0 ? byte & 0x0f : byte >> 4) * (e4m3_to_f32(scales[i / 16]) * g[e]);
      }
    }
    const std::string module = t.name.substr(0, t.name.size() - 7);
    const std::vector<int64_t> sshape = {E == 1 && t.shape.size() == 2 ? 1 : E};
    const std::vector<float> input_scale(g.size(), 1.0f / 2688.0f);
    q4.add_tensor(t.name, DType::NVFP4, t.shape, blocks.data(), static_cast<int64_t>(blocks.size()));
    q4.add_tensor(module + ".scale", DType::F32, sshape, g.data(), E * 4);
    q4.add_tensor(module + ".input_scale", DType::F32, sshape, input_scale.data(), E * 4);
    f32.add_tensor(t.name, DType::F32, t.shape, y.data(), static_cast<int64_t>(y.size() * 4));
    ++quantized;
  }
  EXPECT_GE(quantized, 8);  // attention q/k/v/o and the gate/up experts of both layers
  fs::create_directories(dir);
  q4.write(dir + "/nvfp4.gguf");
  f32.write(dir + "/f32.gguf");
}

TEST(GgufNvfp4Scale, LogitsEqualTheDequantizedModel) {
  const std::string dir = scratch_path("gguf_nvfp4_scale_model");
  write_pair(dir);
  // Bit for bit: NVFP4_G64 rows decode to the very floats the F32 file holds.
  expect_same_as_dequantized(dir + "/nvfp4.gguf", dir + "/f32.gguf", "qwen3_moe", "gguf nvfp4 qwen3_moe", 0.0,
                             {MoeStrategy::kFused, MoeStrategy::kCpu});
  fs::remove_all(dir);
}

TEST(CudaGgufNvfp4Scale, MatchesTheCpu) {
  // The same scaled GGUF on CUDA (its NVFP4_G64 blocks decoded in registers by the GEMV, grouped expert
  // GEMM and prefill kernels) against the CPU: prompt logits within the CUDA fixtures' 2e-2, fused and
  // offload (slot copies of the converted experts).
  FT_SKIP_WITHOUT_GPU();
  const std::string dir = scratch_path("cuda_gguf_nvfp4_scale");
  write_pair(dir);
  const std::vector<RefCase> cases = read_reference(shared_dir() + "/fixtures/hf/qwen3_moe");
  ASSERT_EQ(cases.size(), 2u);
  auto cpu = Engine::load(dir + "/nvfp4.gguf", small_engine_options());
  for (MoeStrategy strategy : {MoeStrategy::kFused, MoeStrategy::kOffload}) {
    EngineOptions o = small_engine_options();
    o.moe.strategy = strategy;
    if (strategy == MoeStrategy::kOffload) o.moe.cache = {CacheSizeMode::kSlots, 16, 0.0};
    Engine gpu(open_checkpoint(dir + "/nvfp4.gguf"), make_cuda_ops(0, DType::F32), o);
    const int64_t V = gpu.config().n_vocab;
    for (const RefCase& c : cases) {
      SCOPED_TRACE(c.name + (strategy == MoeStrategy::kFused ? " fused" : " offload"));
      const auto g = generate(gpu, {greedy_request(c.input_ids, 1)})[0];
      const auto r = generate(*cpu, {greedy_request(c.input_ids, 1)})[0];
      EXPECT_LE(max_row_rel_l2(g.prompt_logits, r.prompt_logits, V), 2e-2);
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ft::testing
