// Timing of the MLA ops on the device (only with FT_MLA_BENCH=1; skipped otherwise): attention_mla
// decode at DeepSeek-V2-Lite (16 heads) and DeepSeek-V3 (128 heads) shapes, R 512, P 64, 4096 keys,
// across the kernel's plan choices (and over fp8 / q8_0 pages: the CUDA-core kernel they take, and the
// tensor-core kernel asked for), one prefill chunk each, and head_matmul at V3's absorbed shapes.
// Each line: microseconds per call (20 calls recorded in one graph, replayed 20 times, after a warm-up)
// and the bytes the call must read (KV latent and RoPE rows; weights) over that time.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>

#include "backend/op_harness.h"
#include "quant/kv_quant.h"
#include "tensor/half.h"

#ifdef FT_HAVE_CUDA
#include "backend/cuda/attention_mla.h"
#endif

namespace ft::testing {
namespace {

class CudaMlaBench : public GpuTest {
 protected:
  void SetUp() override {
    const char* v = std::getenv("FT_MLA_BENCH");
    if (!v || std::string(v) != "1") GTEST_SKIP() << "timings only with FT_MLA_BENCH=1";
    GpuTest::SetUp();
  }
  /** Microseconds per call of `body` (which makes one call). */
  double time_us(const std::function<void()>& body) {
    constexpr int kCalls = 20, kReps = 20;
    body();  // one-time scratch
    gpu().synchronize();
    auto g = gpu().capture([&] {
      for (int i = 0; i < kCalls; ++i) body();
    });
    for (int i = 0; i < 3; ++i) g->launch();
    gpu().synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kReps; ++i) g->launch();
    gpu().synchronize();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return s * 1e6 / (kCalls * kReps);
  }
  void line(const std::string& what, double us, double bytes) {
    std::printf("[bench] %-58s %9.2f us %8.1f GB/s\n", what.c_str(), us, bytes / (us * 1e-6) / 1e9);
    std::fflush(stdout);
  }
};

TEST_F(CudaMlaBench, AttentionAndHeadMatmul) {
#ifdef FT_HAVE_CUDA
  const int64_t R = 512, P = 64, page = 64, kv_len = 4096;
  struct Variant {
    int64_t H, bs;
    DType kv;
    int tc, row_tiles, n_split;
  };
  const DType B = DType::BF16, F = DType::F32;
  const Variant variants[] = {
      {16, 1, B, -1, 0, 0},   {16, 1, B, -1, 0, 1},   {16, 1, B, -1, 0, 16},  {16, 1, B, -1, 0, 32},
      {16, 1, F, -1, 0, 0},   {16, 1, F, -1, 0, 1},   {16, 8, B, -1, 0, 0},   {16, 32, B, -1, 0, 0},
      {128, 1, B, -1, 0, 0},  {128, 1, B, -1, 1, 0},  {128, 1, B, -1, 1, 32}, {128, 1, B, -1, 2, 0},
      {128, 1, B, -1, 4, 32}, {128, 1, F, -1, 0, 0},  {128, 8, B, -1, 0, 0},  {128, 8, B, -1, 1, 0},
  };
  for (const Variant& v : variants) {
    const int64_t blocks = (kv_len + page - 1) / page, n_pages = v.bs * blocks;
    std::vector<int32_t> table(static_cast<size_t>(n_pages));
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>((i * 7919) % n_pages);
    std::vector<int32_t> pos(static_cast<size_t>(v.bs), static_cast<int32_t>(kv_len - 1)), seq(pos.size()), start;
    for (int64_t s = 0; s <= v.bs; ++s) start.push_back(static_cast<int32_t>(s));
    for (int64_t s = 0; s < v.bs; ++s) seq[static_cast<size_t>(s)] = static_cast<int32_t>(s);
    BatchInfo b;
    b.n_tokens = b.n_seqs = static_cast<int32_t>(v.bs), b.max_blocks = static_cast<int32_t>(blocks);
    b.max_kv_len = static_cast<int32_t>(kv_len);
    b.positions = arena().dev_i32(pos, {v.bs}), b.seq_index = arena().dev_i32(seq, {v.bs});
    b.seq_start = arena().dev_i32(start, {v.bs + 1}), b.block_tables = arena().dev_i32(table, {v.bs, blocks});
    KvLayer kv{arena().dev_from(rand_bf16(static_cast<size_t>(n_pages * page * R), 1), v.kv, {n_pages, page, 1, R}),
               arena().dev_from(rand_bf16(static_cast<size_t>(n_pages * page * P), 2), v.kv, {n_pages, page, 1, P})};
    const Tensor ql = arena().dev_from(rand_bf16(static_cast<size_t>(v.bs * v.H * R), 3), B, {v.bs, v.H * R});
    const Tensor qr = arena().dev_from(rand_bf16(static_cast<size_t>(v.bs * v.H * P), 4), B, {v.bs, v.H * P});
    Tensor out = arena().dev(B, {v.bs, v.H * R});
    const MlaAttentionParams p{static_cast<int32_t>(v.H), static_cast<int32_t>(R), static_cast<int32_t>(P), 0.072f};
    cuda::mla_tuning() = cuda::MlaTuning{v.tc, v.row_tiles, v.n_split};
    const double us = time_us([&] { gpu().attention_mla(p, b, ql, qr, kv, out); });
    cuda::mla_tuning() = cuda::MlaTuning{};
    const double bytes = static_cast<double>(v.bs * kv_len * (R + P) * (v.kv == F ? 4 : 2));
    line("mla decode H=" + std::to_string(v.H) + " bs=" + std::to_string(v.bs) + " kv=4096 " + dtype_name(v.kv) +
             (v.row_tiles ? " tiles=" + std::to_string(v.row_tiles) : "") +
             (v.n_split ? " split=" + std::to_string(v.n_split) : ""),
         us, bytes);
  }
  // Quantized pages (random codes, scales near 1 / 448 or 1 / 127): the default plan (CUDA-core
  // kernel) and the tensor-core kernel asked for (tc 1).
  for (const DType kd : {DType::F8_E4M3, DType::Q8_0}) {
    for (const Variant& v : {Variant{16, 1, kd, -1, 0, 0}, Variant{16, 1, kd, 1, 0, 0}, Variant{16, 8, kd, -1, 0, 0},
                             Variant{16, 8, kd, 1, 0, 0}, Variant{128, 1, kd, -1, 0, 0}, Variant{128, 1, kd, 1, 0, 0},
                             Variant{128, 8, kd, -1, 0, 0}, Variant{128, 8, kd, 1, 0, 0}}) {
      const int64_t blocks = (kv_len + page - 1) / page, n_pages = v.bs * blocks;
      std::vector<int32_t> table(static_cast<size_t>(n_pages));
      for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>((i * 7919) % n_pages);
      std::vector<int32_t> pos(static_cast<size_t>(v.bs), static_cast<int32_t>(kv_len - 1)), seq(pos.size()), start;
      for (int64_t s = 0; s <= v.bs; ++s) start.push_back(static_cast<int32_t>(s));
      for (int64_t s = 0; s < v.bs; ++s) seq[static_cast<size_t>(s)] = static_cast<int32_t>(s);
      BatchInfo b;
      b.n_tokens = b.n_seqs = static_cast<int32_t>(v.bs), b.max_blocks = static_cast<int32_t>(blocks);
      b.max_kv_len = static_cast<int32_t>(kv_len);
      b.positions = arena().dev_i32(pos, {v.bs}), b.seq_index = arena().dev_i32(seq, {v.bs});
      b.seq_start = arena().dev_i32(start, {v.bs + 1}), b.block_tables = arena().dev_i32(table, {v.bs, blocks});
      const DType code = kv_code_dtype(kd), scale = kv_scale_dtype(kd);
      auto codes = [&](int64_t D, uint32_t seed) {
        std::vector<uint8_t> c(static_cast<size_t>(n_pages * page * D));
        std::mt19937 rng(seed);
        for (uint8_t& x : c) x = static_cast<uint8_t>(rng() & 0x77u);  // no NaN codes
        return arena().dev_bytes(c, code, {n_pages, page, 1, D});
      };
      auto scales = [&](int64_t D) {
        const int64_t sph = kv_scales_per_head(kd, D), n = n_pages * page * sph;
        std::vector<uint8_t> s(static_cast<size_t>(n * (scale == DType::F32 ? 4 : 2)));
        for (int64_t i = 0; i < n; ++i) {
          if (scale == DType::F32) {
            const float f = 1.0f / 448.0f;
            std::memcpy(s.data() + i * 4, &f, 4);
          } else {
            const uint16_t h = f32_to_f16(1.0f / 127.0f);
            std::memcpy(s.data() + i * 2, &h, 2);
          }
        }
        return arena().dev_bytes(s, scale, {n_pages, page, 1, sph});
      };
      KvLayer kv{codes(R, 1), codes(P, 2), scales(R), scales(P)};
      const Tensor ql = arena().dev_from(rand_bf16(static_cast<size_t>(v.bs * v.H * R), 3), B, {v.bs, v.H * R});
      const Tensor qr = arena().dev_from(rand_bf16(static_cast<size_t>(v.bs * v.H * P), 4), B, {v.bs, v.H * P});
      Tensor out = arena().dev(B, {v.bs, v.H * R});
      const MlaAttentionParams p{static_cast<int32_t>(v.H), static_cast<int32_t>(R), static_cast<int32_t>(P), 0.072f};
      cuda::mla_tuning() = cuda::MlaTuning{v.tc, v.row_tiles, v.n_split};
      const double us = time_us([&] { gpu().attention_mla(p, b, ql, qr, kv, out); });
      cuda::mla_tuning() = cuda::MlaTuning{};
      const double row_bytes = static_cast<double>(R + P) + static_cast<double>(kv.k_scale.bytes() + kv.v_scale.bytes()) /
                                                               static_cast<double>(n_pages * page);
      line("mla decode H=" + std::to_string(v.H) + " bs=" + std::to_string(v.bs) + " kv=4096 " +
               (kd == DType::F8_E4M3 ? "fp8" : "q8_0") + (v.tc == 1 ? " tc" : " (core)"),
           us, static_cast<double>(v.bs * kv_len) * row_bytes);
    }
  }
  for (int64_t H : {16, 128}) {  // one prefill chunk of 512 tokens from position 0, bf16 pages
    const int64_t T = 512, blocks = T / page;
    std::vector<int32_t> table(static_cast<size_t>(blocks)), pos(static_cast<size_t>(T)), seq(pos.size(), 0);
    for (int64_t i = 0; i < blocks; ++i) table[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(t);
    BatchInfo b;
    b.n_tokens = static_cast<int32_t>(T), b.n_seqs = 1, b.max_blocks = static_cast<int32_t>(blocks);
    b.max_kv_len = static_cast<int32_t>(T);
    b.positions = arena().dev_i32(pos, {T}), b.seq_index = arena().dev_i32(seq, {T});
    b.seq_start = arena().dev_i32({0, static_cast<int32_t>(T)}, {2}), b.block_tables = arena().dev_i32(table, {1, blocks});
    KvLayer kv{arena().dev_from(rand_bf16(static_cast<size_t>(blocks * page * R), 1), B, {blocks, page, 1, R}),
               arena().dev_from(rand_bf16(static_cast<size_t>(blocks * page * P), 2), B, {blocks, page, 1, P})};
    const Tensor ql = arena().dev_from(rand_bf16(static_cast<size_t>(T * H * R), 3), B, {T, H * R});
    const Tensor qr = arena().dev_from(rand_bf16(static_cast<size_t>(T * H * P), 4), B, {T, H * P});
    Tensor out = arena().dev(B, {T, H * R});
    const MlaAttentionParams p{static_cast<int32_t>(H), static_cast<int32_t>(R), static_cast<int32_t>(P), 0.072f};
    const double us = time_us([&] { gpu().attention_mla(p, b, ql, qr, kv, out); });
    const double flops = 2.0 * H * (T * (T + 1) / 2.0) * (2 * R + P);
    std::printf("[bench] %-58s %9.2f us %8.1f TFLOP/s\n",
                ("mla prefill 512 tokens H=" + std::to_string(H) + " bf16").c_str(), us, flops / (us * 1e-6) / 1e12);
  }
  struct Hm {
    int64_t T, H, N, K;
  };
  for (const Hm& h : {Hm{1, 128, 512, 128}, Hm{1, 128, 128, 512}, Hm{8, 128, 512, 128}, Hm{512, 128, 512, 128}}) {
    const Tensor x = arena().dev_from(rand_bf16(static_cast<size_t>(h.T * h.H * h.K), 5), B, {h.T, h.H * h.K});
    const Tensor w = arena().dev_from(rand_bf16(static_cast<size_t>(h.H * h.N * h.K), 6), B, {h.H, h.N, h.K});
    Tensor y = arena().dev(B, {h.T, h.H * h.N});
    const double us = time_us([&] { gpu().head_matmul(x, w, y); });
    line("head_matmul T=" + std::to_string(h.T) + " H=128 N=" + std::to_string(h.N) + " K=" + std::to_string(h.K) +
             " bf16",
         us, static_cast<double>(h.H * h.N * h.K * 2));
  }
#endif
}

}  // namespace
}  // namespace ft::testing
