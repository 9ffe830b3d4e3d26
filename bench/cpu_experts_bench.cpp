// CPU expert executor (moe/cpu_expert_executor.h) at a Qwen3-30B-A3B decode layer's shapes: one
// token, H 2048, experts of F 768 with bf16 or q4_k weights, k of them per call (8: the cpu
// strategy's layer; 3: hybrid's typical CPU share), threads 1, 2 and one per physical core. The
// bank holds 128 experts (1.2 GB in bf16), more than the last-level cache, and each call takes the
// next k experts, so weights come from memory as in a real step. Reports the expert weight bytes
// read per second: compare with the host's read bandwidth per thread count (bench/RESULTS.md).
// The *_prefill cases run a 512-token prefill layer (the `cpu` strategy's prompt): 512 tokens, top-8
// of the 128 experts drawn uniformly (~32 tokens an expert), and report tokens per second; bf16act:
// --moe-cpu-bf16 on; ec12: the bank coded as EC12 (the banks' default form for BF16 experts).
// fp8 / nvfp4: FP8 block-scaled (F8_E4M3_B32) and ModelOpt NVFP4 (NVFP4_G64) checkpoints' experts as
// stored, decoded in SIMD registers (block_rows.cpp); mxfp4: gpt-oss's MXFP4 experts (at these shapes), fp32
// and int8 activations (issue 34's CPU share).
#include <benchmark/benchmark.h>

#include <cstring>
#include <memory>
#include <vector>

#include "backend/cpu/q8_rows.h"
#include "backend/cpu/simd.h"
#include "backend/host_allocator.h"
#include "moe/cpu_expert_executor.h"
#include "moe/expert_bank.h"
#include "moe/thread_pool.h"
#include "quant/nvfp4.h"
#include "quant/quant.h"

namespace {

using namespace ft;

constexpr int64_t kH = 2048, kF = 768, kExperts = 128;

/** kExperts experts of `type`: one expert's gate, up and down quantized from a fixed pattern, copied
 *  to every expert (the executor's speed does not depend on the values). */
struct Bank {
  DType type;
  std::vector<uint8_t> storage;
  ExpertBank bank;

  explicit Bank(DType t) : type(t) {
    const int64_t mat = dtype_bytes(t, kF * kH);
    storage.resize(static_cast<size_t>(3 * mat * kExperts));
    std::vector<float> src(static_cast<size_t>(kF * kH));
    uint32_t s = 12345;
    for (float& v : src) v = (static_cast<float>((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f) / 45.0f;
    if (t == DType::NVFP4_G64) {  // as a ModelOpt checkpoint's rows are repacked at load
      std::vector<uint8_t> packed(static_cast<size_t>(kF * kH / 2)), scales(static_cast<size_t>(kF * kH / 16));
      float g = 0;
      nvfp4_quantize_modelopt(src.data(), kF, kH, packed.data(), scales.data(), &g);
      nvfp4_rows_from_modelopt(packed.data(), scales.data(), g, kF, kH, storage.data(), t);
    } else {
      quantize_row(t, src.data(), storage.data(), kF * kH);
    }
    for (int64_t m = 1; m < 3 * kExperts; ++m) std::memcpy(storage.data() + m * mat, storage.data(), static_cast<size_t>(mat));
    for (int64_t e = 0; e < kExperts; ++e) {
      uint8_t* base = storage.data() + 3 * mat * e;
      bank.gate.push_back(Tensor(base, t, {kF, kH}));
      bank.up.push_back(Tensor(base + mat, t, {kF, kH}));
      bank.down.push_back(Tensor(base + 2 * mat, t, {kH, kF}));
    }
  }
  int64_t expert_bytes() const { return 3 * dtype_bytes(type, kF * kH); }
};

Bank& bank(DType t) {
  if (t == DType::BF16) {
    static Bank b(DType::BF16);
    return b;
  }
  if (t == DType::F8_E4M3_B32) {
    static Bank b(DType::F8_E4M3_B32);
    return b;
  }
  if (t == DType::NVFP4_G64) {
    static Bank b(DType::NVFP4_G64);
    return b;
  }
  static Bank q4k(DType::Q4_K);
  return q4k;
}

/** The BF16 bank as EC12 (BankFormat::kEc12: the expert banks' default form for BF16 experts). */
const ExpertBank& ec12_bank() {
  static std::unique_ptr<HostAllocator> alloc = make_host_allocator();
  static ExpertBanks banks({bank(DType::BF16).bank}, *alloc, 0, {}, false, BankFormat::kEc12);
  return banks.bank(0);
}

void run_layer(benchmark::State& state, DType type, bool int8 = false, bool bf16 = false, bool ec12 = false) {
  const int k = static_cast<int>(state.range(0));
  const int threads = state.range(1) > 0 ? static_cast<int>(state.range(1)) : physical_core_count();
  Bank& b = bank(type);
  const ExpertBank& eb = ec12 ? ec12_bank() : b.bank;
  CpuExpertExecutor ex(threads, 2000, int8, bf16);
  std::vector<float> x(kH, 0.01f), out(kH), w(static_cast<size_t>(k), 1.0f / static_cast<float>(k));
  std::vector<int32_t> ids(static_cast<size_t>(k));
  int32_t next = 0;
  std::vector<float> xr(kH);  // activations of a plausible spread (the int8 path's scales see it)
  for (int64_t i = 0; i < kH; ++i) xr[static_cast<size_t>(i)] = 0.01f * static_cast<float>((i * 37) % 101 - 50) / 50.0f;
  x = xr;
  for (auto _ : state) {
    for (int32_t& id : ids) id = next++ % kExperts;
    ex.run({}, Tensor(x.data(), DType::F32, {1, kH}), Tensor(ids.data(), DType::I32, {1, k}),
           Tensor(w.data(), DType::F32, {1, k}), eb, Tensor(out.data(), DType::F32, {1, kH}));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * k * b.expert_bytes());
  state.counters["threads"] = threads;
}

void bf16_layer(benchmark::State& state) { run_layer(state, DType::BF16); }
void q4_k_layer(benchmark::State& state) { run_layer(state, DType::Q4_K); }
void fp8_layer(benchmark::State& state) { run_layer(state, DType::F8_E4M3_B32); }
void nvfp4_layer(benchmark::State& state) { run_layer(state, DType::NVFP4_G64); }
/** bf16 activations on: the BF16 rows meet BF16 x and h (cpu::gemm_nt_bf16; AVX-512 BF16 only). */
void bf16_bf16act_layer(benchmark::State& state) {
  if (!cpu::has_bf16_dot()) return state.SkipWithError("no AVX-512 BF16 on this machine");
  run_layer(state, DType::BF16, false, true);
}
/** The BF16 bank coded as EC12 (bytes per second counted as BF16's), fp32 and bf16 activations. */
void ec12_layer(benchmark::State& state) { run_layer(state, DType::BF16, false, false, true); }
void ec12_bf16act_layer(benchmark::State& state) {
  if (!cpu::has_bf16_dot()) return state.SkipWithError("no AVX-512 BF16 on this machine");
  run_layer(state, DType::BF16, false, true, true);
}
/** --moe-cpu-int8 on: the Q4_K rows meet int8 activations (cpu::dot_rows_q8; AVX-512 VNNI only). */
void q4_k_int8_layer(benchmark::State& state) {
  if (!cpu::has_q8_dot(DType::Q4_K)) return state.SkipWithError("no AVX-512 VNNI on this machine");
  run_layer(state, DType::Q4_K, true);
}
/** gpt-oss's MXFP4 experts (at this bench's shapes) with int8 activations (cpu::dot_rows_q8; AVX-512
 *  VNNI only) and fp32: the CPU's share of a hybrid gpt-oss decode step (issue 34). */
void mxfp4_int8_layer(benchmark::State& state) {
  if (!cpu::has_q8_dot(DType::MXFP4)) return state.SkipWithError("no AVX-512 VNNI on this machine");
  run_layer(state, DType::MXFP4, true);
}
void mxfp4_layer(benchmark::State& state) { run_layer(state, DType::MXFP4); }

/** One prefill layer: state.range(0) tokens, each routed to 8 distinct experts drawn uniformly
 *  (a fixed pseudo-random sequence), threads state.range(1) (0: one per physical core). Reports
 *  tokens per second (items). */
void run_prefill(benchmark::State& state, DType type, bool int8 = false, bool bf16 = false, bool ec12 = false) {
  const int64_t T = state.range(0), k = 8;
  const int threads = state.range(1) > 0 ? static_cast<int>(state.range(1)) : physical_core_count();
  Bank& b = bank(type);
  const ExpertBank& eb = ec12 ? ec12_bank() : b.bank;
  CpuExpertExecutor ex(threads, 2000, int8, bf16);
  std::vector<float> x(static_cast<size_t>(T * kH)), out(static_cast<size_t>(T * kH));
  std::vector<float> w(static_cast<size_t>(T * k), 1.0f / static_cast<float>(k));
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  uint32_t s = 777;
  auto next = [&] { return (s = s * 1664525u + 1013904223u) >> 8; };
  for (float& v : x) v = 0.02f * (static_cast<float>(next()) / 16777216.0f - 0.5f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) {
      int32_t e;
      bool dup;
      do {
        e = static_cast<int32_t>(next() % kExperts);
        dup = false;
        for (int64_t i = 0; i < j; ++i) dup = dup || ids[static_cast<size_t>(t * k + i)] == e;
      } while (dup);
      ids[static_cast<size_t>(t * k + j)] = e;
    }
  for (auto _ : state) {
    ex.run({}, Tensor(x.data(), DType::F32, {T, kH}), Tensor(ids.data(), DType::I32, {T, k}),
           Tensor(w.data(), DType::F32, {T, k}), eb, Tensor(out.data(), DType::F32, {T, kH}));
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * T);
  state.counters["threads"] = threads;
}

void bf16_prefill(benchmark::State& state) { run_prefill(state, DType::BF16); }
void q4_k_prefill(benchmark::State& state) { run_prefill(state, DType::Q4_K); }
void fp8_prefill(benchmark::State& state) { run_prefill(state, DType::F8_E4M3_B32); }
void nvfp4_prefill(benchmark::State& state) { run_prefill(state, DType::NVFP4_G64); }
void mxfp4_int8_prefill(benchmark::State& state) {
  if (!cpu::has_q8_dot(DType::MXFP4)) return state.SkipWithError("no AVX-512 VNNI on this machine");
  run_prefill(state, DType::MXFP4, true);
}
void bf16_bf16act_prefill(benchmark::State& state) {
  if (!cpu::has_bf16_dot()) return state.SkipWithError("no AVX-512 BF16 on this machine");
  run_prefill(state, DType::BF16, false, true);
}
void ec12_prefill(benchmark::State& state) { run_prefill(state, DType::BF16, false, false, true); }
void ec12_bf16act_prefill(benchmark::State& state) {
  if (!cpu::has_bf16_dot()) return state.SkipWithError("no AVX-512 BF16 on this machine");
  run_prefill(state, DType::BF16, false, true, true);
}
void q4_k_int8_prefill(benchmark::State& state) {
  if (!cpu::has_q8_dot(DType::Q4_K)) return state.SkipWithError("no AVX-512 VNNI on this machine");
  run_prefill(state, DType::Q4_K, true);
}

// Args: {k experts per call, threads (0: one per physical core)}.
BENCHMARK(bf16_layer)->ArgsProduct({{3, 8}, {1, 2, 0}})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(bf16_bf16act_layer)->ArgsProduct({{8}, {1, 0}})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(ec12_layer)->ArgsProduct({{8}, {1, 0}})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(ec12_bf16act_layer)->ArgsProduct({{8}, {1, 0}})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(q4_k_layer)->ArgsProduct({{8}, {1, 0}})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(q4_k_int8_layer)->ArgsProduct({{8}, {1, 0}})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(fp8_layer)->ArgsProduct({{8}, {1, 0}})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(nvfp4_layer)->ArgsProduct({{8}, {1, 0}})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(mxfp4_layer)->ArgsProduct({{4, 8}, {1, 0}})->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(mxfp4_int8_layer)->ArgsProduct({{4, 8}, {1, 0}})->Unit(benchmark::kMicrosecond)->UseRealTime();
// Args: {tokens, threads (0: one per physical core)}.
BENCHMARK(bf16_prefill)->ArgsProduct({{512}, {0}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(bf16_bf16act_prefill)->ArgsProduct({{512}, {0}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(ec12_prefill)->ArgsProduct({{512}, {0}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(ec12_bf16act_prefill)->ArgsProduct({{512}, {0}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(q4_k_prefill)->ArgsProduct({{512}, {0}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(q4_k_int8_prefill)->ArgsProduct({{512}, {0}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(fp8_prefill)->ArgsProduct({{512}, {0}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(nvfp4_prefill)->ArgsProduct({{512}, {0}})->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(mxfp4_int8_prefill)->ArgsProduct({{512}, {0}})->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
