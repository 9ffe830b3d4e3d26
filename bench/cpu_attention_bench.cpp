// CPU decode attention (backend/cpu/attention.cpp) over F32, fp8 and q8_0 KV pages (--kv-cache-dtype)
// at a Qwen3-30B-A3B layer's attention shapes: 32 query heads over 4 KV heads of 128, 8 sequences of
// one decode token each, 4096 cached positions a sequence, pages of 16; threads 1 and 2. Reports
// tokens (query rows) per second: the quantized pages' cost over F32 is the dequantization (a page
// row once for the group's query heads).
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "quant/kv_quant.h"

namespace {

using namespace ft;

constexpr int64_t kH = 32, kG = 4, kD = 128, kSeqs = 8, kCtx = 4096, kPage = 16;
constexpr int64_t kBlocks = kCtx / kPage, kPages = kSeqs * kBlocks;

void BM_DecodeAttention(benchmark::State& state) {
  const DType kv = state.range(0) == 0 ? DType::F32 : state.range(0) == 1 ? DType::F8_E4M3 : DType::Q8_0;
  CpuOps ops(static_cast<int>(state.range(1)));
  const int64_t rows = kPages * kPage * kG;
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<float> kf, vf;
  std::vector<uint8_t> kc, vc, ks, vs;
  KvLayer layer;
  if (kv == DType::F32) {
    kf.resize(static_cast<size_t>(rows * kD), 0.01f), vf = kf;
    layer = {Tensor(kf.data(), DType::F32, {kPages, kPage, kG, kD}), Tensor(vf.data(), DType::F32, {kPages, kPage, kG, kD})};
  } else {
    const int64_t sph = kv_scales_per_head(kv, kD), sb = kv_scale_dtype(kv) == DType::F32 ? 4 : 2;
    kc.resize(static_cast<size_t>(rows * kD));
    for (uint8_t& c : kc) c = static_cast<uint8_t>(byte(rng) & 0x77);  // finite codes in either form
    vc = kc;
    ks.assign(static_cast<size_t>(rows * sph * sb), 0x3c), vs = ks;  // small positive scales
    layer = {Tensor(kc.data(), kv_code_dtype(kv), {kPages, kPage, kG, kD}),
             Tensor(vc.data(), kv_code_dtype(kv), {kPages, kPage, kG, kD}),
             Tensor(ks.data(), kv_scale_dtype(kv), {kPages, kPage, kG, sph}),
             Tensor(vs.data(), kv_scale_dtype(kv), {kPages, kPage, kG, sph})};
  }
  std::vector<int32_t> pos(kSeqs, static_cast<int32_t>(kCtx - 1)), seq(kSeqs), start(kSeqs + 1), table(kSeqs * kBlocks);
  for (int32_t s = 0; s < kSeqs; ++s) seq[static_cast<size_t>(s)] = s, start[static_cast<size_t>(s) + 1] = s + 1;
  for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>(i);
  BatchInfo b;
  b.n_tokens = kSeqs, b.n_seqs = kSeqs, b.max_blocks = kBlocks, b.max_kv_len = kCtx;
  b.positions = Tensor(pos.data(), DType::I32, {kSeqs});
  b.seq_index = Tensor(seq.data(), DType::I32, {kSeqs});
  b.seq_start = Tensor(start.data(), DType::I32, {kSeqs + 1});
  b.block_tables = Tensor(table.data(), DType::I32, {kSeqs, kBlocks});
  std::vector<float> q(static_cast<size_t>(kSeqs * kH * kD), 0.1f), out(q.size());
  AttentionParams ap{static_cast<int32_t>(kH), static_cast<int32_t>(kG), static_cast<int32_t>(kD), 0.088f, 0};
  for (auto _ : state) {
    ops.attention(ap, b, Tensor(q.data(), DType::F32, {kSeqs, kH * kD}), layer, Tensor(out.data(), DType::F32, {kSeqs, kH * kD}));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * kSeqs);
  state.SetLabel(kv == DType::F32 ? "f32" : kv == DType::F8_E4M3 ? "fp8" : "q8_0");
}
BENCHMARK(BM_DecodeAttention)->ArgsProduct({{0, 1, 2}, {1, 2}})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
