// CUDA op timings at Qwen3-30B-A3B shapes (H 2048, 32/4 heads of 128, 128 experts of 768, top-8,
// vocab 151936): decode GEMVs (bf16, q4_k, q8_0), the MoE decode layer, split-K attention, the LM
// head, and prefill GEMM / MoE at 512 tokens. Prints time per call and the bytes of weights (or KV)
// read per second, to compare with the device copy bandwidth (H200: ~4.25 TB/s read+write).
// Usage: bench_cuda_ops_bench [iterations]. Needs a CUDA device; prints a note and exits 0 without.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda_factory.h"
#include "backend/sampling.h"
#include "backend/device.h"
#include "quant/quant.h"
#include "tensor/half.h"

namespace {

using namespace ft;

struct Bench {
  Ops& ops;
  std::vector<Buffer> bufs;

  Tensor dev(DType dt, std::initializer_list<int64_t> shape) {
    Tensor t(nullptr, dt, shape, Device::kCuda);
    bufs.push_back(ops.alloc(t.bytes()));
    t.data = bufs.back().data();
    return t;
  }
  /** Device tensor of `dt` with valid random contents (a row block quantized once, then repeated). */
  Tensor weights(DType dt, std::initializer_list<int64_t> shape) {
    Tensor t = dev(dt, shape);
    const int64_t cols = t.cols(), block_rows = 16;
    std::vector<float> src(static_cast<size_t>(block_rows * cols));
    uint32_t s = 12345;
    for (float& v : src) v = static_cast<float>((s = s * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    std::vector<uint8_t> blk(static_cast<size_t>(dtype_bytes(dt, block_rows * cols)));
    quantize_row(dt, src.data(), blk.data(), block_rows * cols);
    const int64_t rows = t.rows();
    std::vector<uint8_t> all(static_cast<size_t>(t.bytes()));
    for (int64_t r = 0; r < rows; r += block_rows) {
      const int64_t n = std::min(block_rows, rows - r) * t.row_bytes();
      std::memcpy(all.data() + r * t.row_bytes(), blk.data(), static_cast<size_t>(n));
    }
    Tensor host = t;
    host.data = all.data(), host.device = Device::kCpu;
    ops.copy(host, t);
    return t;
  }
  Tensor act(std::initializer_list<int64_t> shape, float v = 0.01f) {
    Tensor t = dev(DType::F32, shape);
    std::vector<float> h(static_cast<size_t>(t.numel()));
    for (size_t i = 0; i < h.size(); ++i) h[i] = v * static_cast<float>((i * 7919) % 13) - 6 * v;
    Tensor host = t;
    host.data = h.data(), host.device = Device::kCpu;
    Tensor b = dev(DType::BF16, shape);
    ops.copy(host, b);
    return b;
  }
  Tensor ids(const std::vector<int32_t>& v, std::initializer_list<int64_t> shape) {
    Tensor t = dev(DType::I32, shape);
    Tensor host = t;
    host.data = const_cast<int32_t*>(v.data()), host.device = Device::kCpu;
    ops.copy(host, t);
    return t;
  }
  /** Median-free simple timing: warm up 3 calls, then `iters` calls between two synchronizes. */
  double time_us(const std::function<void()>& f, int iters) {
    for (int i = 0; i < 3; ++i) f();
    ops.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) f();
    ops.synchronize();
    const auto t1 = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::micro>(t1 - t0).count() / iters;
  }
};

void row(const char* name, double us, double bytes) {
  std::printf("| %-44s | %10.1f | %8.0f |\n", name, us, bytes / (us * 1e-6) / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  if (ft::cuda_device_count() == 0) {
    std::printf("no CUDA device: nothing to time\n");
    return 0;
  }
  const int iters = argc > 1 ? std::atoi(argv[1]) : 50;
  auto ops = ft::make_cuda_ops(0);
  Bench b{*ops, {}};
  const int64_t H = 2048, QD = 4096, E = 128, F = 768, k = 8, V = 151936;
  std::printf("| %-44s | %10s | %8s |\n|---|---|---|\n", "op (qwen3-30b-a3b shapes)", "us/call", "GB/s");
  for (DType dt : {DType::BF16, DType::Q8_0, DType::Q4_K}) {  // past L2 (50 MB): bandwidth
    Tensor w = b.weights(dt, {32768, 4096});
    Tensor x = b.act({1, 4096}), y = b.dev(DType::BF16, {1, 32768});
    const double us = b.time_us([&] { ops->matmul(x, w, y, Tensor()); }, iters);
    row((std::string("matmul ") + dtype_name(dt) + " [32768x4096] T=1").c_str(), us, static_cast<double>(w.bytes()));
  }
  for (DType dt : {DType::BF16, DType::Q8_0, DType::Q4_K}) {
    Tensor w = b.weights(dt, {QD, H});
    for (int64_t T : {1, 8}) {
      Tensor x = b.act({T, H}), y = b.dev(DType::BF16, {T, QD});
      const double us = b.time_us([&] { ops->matmul(x, w, y, Tensor()); }, iters);
      const std::string name = std::string("matmul ") + dtype_name(dt) + " [4096x2048] T=" + std::to_string(T);
      row(name.c_str(), us, static_cast<double>(w.bytes()));
    }
  }
  for (DType dt : {DType::BF16, DType::Q4_K}) {
    Tensor gate = b.weights(dt, {E, F, H}), up = b.weights(dt, {E, F, H}), down = b.weights(dt, {E, H, F});
    ExpertBank bank;
    for (int64_t e = 0; e < E; ++e)
      bank.gate.push_back(gate.index(e)), bank.up.push_back(up.index(e)), bank.down.push_back(down.index(e));
    const double expert_bytes = static_cast<double>(gate.bytes() + up.bytes() + down.bytes()) / E;
    for (int64_t T : {1, 8, 32, 512}) {
      std::vector<int32_t> idv(static_cast<size_t>(T * k));
      for (size_t i = 0; i < idv.size(); ++i) idv[i] = static_cast<int32_t>((i * 37 + i / k * 11) % E);
      std::vector<float> wv(idv.size(), 0.125f);
      Tensor x = b.act({T, H}), out = b.dev(DType::BF16, {T, H}), ids = b.ids(idv, {T, k});
      Tensor wts = b.dev(DType::F32, {T, k});
      Tensor hw = wts;
      hw.data = wv.data(), hw.device = Device::kCpu;
      ops->copy(hw, wts);
      const double us = b.time_us([&] { ops->moe_experts({}, x, ids, wts, bank, out); }, T >= 512 ? 5 : iters);
      const double used = std::min<double>(static_cast<double>(E), static_cast<double>(T * k));
      const std::string name = std::string("moe_experts ") + dtype_name(dt) + " T=" + std::to_string(T);
      row(name.c_str(), us, used * expert_bytes);
    }
  }
  {  // attention decode, one sequence of 4096 and a batch of 8
    const int64_t page = 64, n_pages = 1024, G = 4, D = 128, NH = 32;
    Tensor kc = b.act({n_pages, page, G, D}), vc = b.act({n_pages, page, G, D});
    for (int64_t S : {1, 8}) {
      const int64_t len = 4096, mb = len / page;
      std::vector<int32_t> pos(static_cast<size_t>(S), static_cast<int32_t>(len - 1)), seq(static_cast<size_t>(S)),
          start(static_cast<size_t>(S + 1)), table(static_cast<size_t>(S * mb));
      for (int64_t s = 0; s < S; ++s) seq[static_cast<size_t>(s)] = static_cast<int32_t>(s);
      for (int64_t s = 0; s <= S; ++s) start[static_cast<size_t>(s)] = static_cast<int32_t>(s);
      for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>((i * 7) % n_pages);
      BatchInfo bi;
      bi.n_tokens = static_cast<int32_t>(S), bi.n_seqs = static_cast<int32_t>(S);
      bi.max_blocks = static_cast<int32_t>(mb), bi.max_kv_len = static_cast<int32_t>(len);
      bi.positions = b.ids(pos, {S}), bi.seq_index = b.ids(seq, {S}), bi.seq_start = b.ids(start, {S + 1});
      bi.block_tables = b.ids(table, {S, mb});
      AttentionParams p{static_cast<int32_t>(NH), static_cast<int32_t>(G), static_cast<int32_t>(D), 0.088f, 0};
      Tensor q = b.act({S, NH * D}), o = b.dev(DType::BF16, {S, NH * D});
      const double us = b.time_us([&] { ops->attention(p, bi, q, KvLayer{kc, vc}, o); }, iters);
      const std::string name = "attention decode ctx 4096 S=" + std::to_string(S);
      row(name.c_str(), us, static_cast<double>(S * len * G * D * 2 * 2));
    }
    // prefill attention: 512 new tokens of one sequence
    const int64_t T = 512, mb = T / page;
    std::vector<int32_t> pos(T), seq(T, 0), start = {0, static_cast<int32_t>(T)}, table(static_cast<size_t>(mb));
    for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(t);
    for (int64_t j = 0; j < mb; ++j) table[static_cast<size_t>(j)] = static_cast<int32_t>(j);
    BatchInfo bi;
    bi.n_tokens = static_cast<int32_t>(T), bi.n_seqs = 1, bi.max_blocks = static_cast<int32_t>(mb);
    bi.max_kv_len = static_cast<int32_t>(T);
    bi.positions = b.ids(pos, {T}), bi.seq_index = b.ids(seq, {T}), bi.seq_start = b.ids(start, {2});
    bi.block_tables = b.ids(table, {1, mb});
    AttentionParams p{static_cast<int32_t>(NH), static_cast<int32_t>(G), static_cast<int32_t>(D), 0.088f, 0};
    Tensor q = b.act({T, NH * D}), o = b.dev(DType::BF16, {T, NH * D});
    const double us = b.time_us([&] { ops->attention(p, bi, q, KvLayer{kc, vc}, o); }, 10);
    row("attention prefill T=512 (GB/s of q+out)", us, static_cast<double>(T * NH * D * 2 * 2));
  }
  {
    Tensor w = b.weights(DType::BF16, {V, H});
    Tensor x = b.act({1, H}), y = b.dev(DType::BF16, {1, V});
    row("lm head bf16 [151936x2048] T=1", b.time_us([&] { ops->matmul(x, w, y, Tensor()); }, iters),
        static_cast<double>(w.bytes()));
    Tensor x2 = b.act({512, H}), y2 = b.dev(DType::BF16, {512, QD});
    Tensor w2 = b.weights(DType::BF16, {QD, H}), w3 = b.weights(DType::Q4_K, {QD, H});
    row("matmul bf16 [4096x2048] T=512 (cuBLAS)", b.time_us([&] { ops->matmul(x2, w2, y2, Tensor()); }, 10),
        static_cast<double>(w2.bytes()));
    row("matmul q4_k [4096x2048] T=512 (decode+cuBLAS)", b.time_us([&] { ops->matmul(x2, w3, y2, Tensor()); }, 10),
        static_cast<double>(w3.bytes()));
  }
  {  // The sampler (Ops::sample) on F32 logits rows of the vocabulary, against what it replaces: the
     // rows copied to pinned host memory, then the host sampler (cpu::sample_rows) on one core.
    std::vector<float> host(static_cast<size_t>(8 * V));
    uint32_t s = 7;
    for (float& v : host) v = static_cast<float>((s = s * 1664525u + 1013904223u) >> 8) / 1048576.0f - 8.0f;
    Tensor logits = b.dev(DType::F32, {8, V});
    ops->copy(Tensor(host.data(), DType::F32, {8, V}), logits);
    auto rows_of = [](float t, int32_t top_k, float top_p, int32_t top_logprobs) {
      SampleRow r;
      r.temperature = t;
      r.top_k = top_k;
      r.top_p = top_p;
      r.top_logprobs = top_logprobs;
      return std::vector<SampleRow>(8, r);
    };
    struct Kind {
      const char* name;
      std::vector<SampleRow> rows;
    };
    const Kind kinds[] = {{"greedy", rows_of(0.0f, 0, 1.0f, 0)},
                          {"greedy + 5 logprobs", rows_of(0.0f, 0, 1.0f, 5)},
                          {"t 0.7 top-p 0.9", rows_of(0.7f, 0, 0.9f, 0)},
                          {"t 0.7 top-k 40 top-p 0.9 + 5 logprobs", rows_of(0.7f, 40, 0.9f, 5)}};
    Buffer pinned = ops->alloc_host(8 * V * 4);
    std::vector<SampleResult> res(8);
    for (const Kind& k : kinds) {
      for (int64_t R : {1, 8}) {
        Tensor rows = b.dev(DType::U8, {R * static_cast<int64_t>(sizeof(SampleRow))});
        ops->copy(Tensor(const_cast<SampleRow*>(k.rows.data()), DType::U8, {rows.bytes()}), rows);
        Tensor out = b.dev(DType::U8, {R * static_cast<int64_t>(sizeof(SampleResult))});
        Tensor x = logits.slice(0, R);
        const std::string what = std::string("sample ") + k.name + " R=" + std::to_string(R);
        row((what + " (GPU)").c_str(), b.time_us([&] { ops->sample(x, rows, Tensor(), out, k.rows.data()); }, iters),
            static_cast<double>(x.bytes()));
        const double host_us = b.time_us(
            [&] {
              ops->copy(x, Tensor(pinned.data(), DType::F32, {R, V}));
              cpu::sample_rows(static_cast<const float*>(pinned.data()), V, k.rows.data(), R, nullptr, res.data());
            },
            3);
        row((what + " (copy + host)").c_str(), host_us, static_cast<double>(x.bytes()));
      }
    }
  }
  return 0;
}
