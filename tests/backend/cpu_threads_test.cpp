// The CPU backend's multi-threaded paths: every op on shapes above its parallel threshold gives
// bit-identical results with 1 and 3 threads (each output element is computed by one fixed
// sequence of operations, whichever thread runs it).
#include "op_harness.h"

namespace ft::testing {
namespace {

struct Pair {
  CpuOps one{1}, many{3};
  Arena a1{one}, a2{many};
};

/** Runs `op(ops, arena)` on both backends; returns both outputs. */
template <typename F>
void expect_same(const char* what, F op) {
  Pair p;
  const std::vector<float> x = op(p.one, p.a1), y = op(p.many, p.a2);
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] != y[i] && !(std::isnan(x[i]) && std::isnan(y[i]))) {
      ADD_FAILURE() << what << ": element " << i << " differs: " << x[i] << " vs " << y[i];
      return;
    }
}

TEST(CpuThreads, EveryOpIsThreadCountInvariant) {
  const int64_t T = 300, H = 256, F = 384, V = 500, E = 8, k = 2;
  const auto x = random_vec(T * H, 1), g = random_vec(T * F, 2), u = random_vec(T * F, 3);
  const HostWeight w = make_weight(DType::BF16, {F, H}, 4), tab = make_weight(DType::Q8_0, {V, H}, 5);
  const HostWeight nw = make_weight(DType::F32, {H}, 6);
  std::vector<int32_t> ids(T), pos(T), seq(T, 0);
  for (int64_t t = 0; t < T; ++t) ids[t] = static_cast<int32_t>((t * 7) % V), pos[t] = static_cast<int32_t>(t);
  expect_same("matmul", [&](Ops& o, Arena& a) {
    Tensor y = a.alloc(DType::F32, {T, F});
    o.matmul(a.f32(x, {T, H}), a.weight(w), y, a.f32(random_vec(F, 7), {F}));
    return a.read(y);
  });
  expect_same("swiglu+add+scaled", [&](Ops& o, Arena& a) {
    Tensor gt = a.f32(g, {T, F}), ut = a.f32(u, {T, F});
    o.swiglu(gt, ut, gt);
    o.add(gt, ut, ut);
    o.add_scaled_rows(gt, a.f32(random_vec(T, 8), {T}), 0.5f, ut);
    return a.read(ut);
  });
  expect_same("embedding+rms_norm+rope", [&](Ops& o, Arena& a) {
    Tensor e = a.alloc(DType::F32, {T, H});
    o.embedding(a.weight(tab), a.i32(ids, {T}), e);
    o.rms_norm({1e-6f, 0.0f}, e, a.weight(nw), e);
    std::vector<float> inv(32);
    for (int i = 0; i < 32; ++i) inv[i] = std::pow(10000.0f, -i / 32.0f);
    o.rope({RopeMode::kNeox, 64, 64, a.f32(inv, {32}), 1.0f}, e, a.i32(pos, {T}));
    return a.read(e);
  });
  expect_same("softmax+topk+route", [&](Ops& o, Arena& a) {
    Tensor s = a.f32(random_vec(T * E, 9, -4, 4), {T, E});
    Tensor ti = a.alloc(DType::I32, {T, k}), tv = a.alloc(DType::F32, {T, k});
    o.moe_route({static_cast<int32_t>(k), RouterScoring::kSoftmax, true, 1.0f}, s, ti, tv);
    o.softmax(s, s);
    std::vector<float> out = a.read(s), v = a.read(tv), i = a.read(ti);
    out.insert(out.end(), v.begin(), v.end());
    out.insert(out.end(), i.begin(), i.end());
    return out;
  });
  expect_same("kv_write+attention", [&](Ops& o, Arena& a) {
    const int64_t pages = 5, page = 64, G = 2, D = 32, Hq = 8;
    KvLayer kv{a.alloc(DType::F32, {pages, page, G, D}), a.alloc(DType::F32, {pages, page, G, D})};
    BatchInfo b{static_cast<int32_t>(T), 1, static_cast<int32_t>(pages), static_cast<int32_t>(T), a.i32(pos, {T}),
                a.i32(seq, {T}), a.i32({0, static_cast<int32_t>(T)}, {2}), a.i32({4, 2, 0, 1, 3}, {1, pages}), Tensor()};
    o.kv_write(b, a.f32(random_vec(T * G * D, 10), {T, G * D}), a.f32(random_vec(T * G * D, 11), {T, G * D}), kv);
    Tensor out = a.alloc(DType::F32, {T, Hq * D});
    o.attention({static_cast<int32_t>(Hq), static_cast<int32_t>(G), static_cast<int32_t>(D), 0.17f, 0}, b,
                a.f32(random_vec(T * Hq * D, 12), {T, Hq * D}), kv, out);
    return a.read(out);
  });
  expect_same("moe_experts", [&](Ops& o, Arena& a) {
    ExpertBank bank;
    std::vector<HostWeight> keep;
    for (int64_t e = 0; e < E; ++e) {
      keep.push_back(make_weight(DType::BF16, {F, H}, 20 + e));
      bank.gate.push_back(a.weight(keep.back()));
      keep.push_back(make_weight(DType::BF16, {F, H}, 40 + e));
      bank.up.push_back(a.weight(keep.back()));
      keep.push_back(make_weight(DType::Q4_0, {H, F}, 60 + e));
      bank.down.push_back(a.weight(keep.back()));
    }
    std::vector<int32_t> route(T * k);
    for (int64_t i = 0; i < T * k; ++i) route[i] = static_cast<int32_t>((i * 5 + i / k) % E);
    Tensor out = a.alloc(DType::F32, {T, H});
    o.moe_experts({}, a.f32(x, {T, H}), a.i32(route, {T, k}), a.f32(random_vec(T * k, 13, 0, 1), {T, k}), bank, out);
    return a.read(out);
  });
}

}  // namespace
}  // namespace ft::testing
