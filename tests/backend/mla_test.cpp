// Multi-head latent attention's ops: kv_write into latent and RoPE-key pages of different widths,
// attention_mla over them (a prefill chunk, a cached sequence's continuation and a decode token in
// one batch, randomly assigned pages) against naive latent attention in double precision, and
// head_matmul (per-head x W^T) for F32 / F16 / BF16 weights.
#include <algorithm>
#include <numeric>

#include "op_harness.h"

namespace ft::testing {
namespace {

class MlaTest : public OpTest {};

TEST_P(MlaTest, LatentAttentionOverPagesMatchesNaive) {
  const int32_t H = 4, R = 32, P = 8, page = 16, n_pages = 16, max_blocks = 4;
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{0, 9}, {20, 3}, {50, 1}};  // cached, new
  const int32_t S = static_cast<int32_t>(seqs.size());
  std::vector<int32_t> perm(n_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  std::vector<int32_t> table(perm.begin(), perm.begin() + S * max_blocks);
  std::vector<std::vector<float>> C(S), Rk(S), QL(S), QR(S);
  for (int32_t s = 0; s < S; ++s) {
    const int32_t L = seqs[s].first + seqs[s].second;
    C[s] = random_vec(L * R, 10 + s);
    Rk[s] = random_vec(L * P, 20 + s);
    QL[s] = random_vec(L * H * R, 30 + s, -0.5f, 0.5f);
    QR[s] = random_vec(L * H * P, 40 + s, -2, 2);
  }
  const DType kvt = ops().activation_dtype();
  KvLayer kv{arena().alloc(kvt, {n_pages, page, 1, R}), arena().alloc(kvt, {n_pages, page, 1, P})};
  Tensor bt = arena().i32(table, {S, max_blocks});
  const float scale = 0.21f;
  auto run = [&](bool cached_part) {
    std::vector<int32_t> pos, si, st{0};
    std::vector<float> c, r, ql, qr;
    for (int32_t s = 0; s < S; ++s) {
      const int32_t lo = cached_part ? 0 : seqs[s].first, hi = cached_part ? seqs[s].first : seqs[s].first + seqs[s].second;
      for (int32_t p = lo; p < hi; ++p) {
        pos.push_back(p), si.push_back(s);
        c.insert(c.end(), C[s].begin() + p * R, C[s].begin() + (p + 1) * R);
        r.insert(r.end(), Rk[s].begin() + p * P, Rk[s].begin() + (p + 1) * P);
        ql.insert(ql.end(), QL[s].begin() + p * H * R, QL[s].begin() + (p + 1) * H * R);
        qr.insert(qr.end(), QR[s].begin() + p * H * P, QR[s].begin() + (p + 1) * H * P);
      }
      st.push_back(static_cast<int32_t>(pos.size()));
    }
    const int32_t T = static_cast<int32_t>(pos.size());
    BatchInfo b{T, S, max_blocks, 0, arena().i32(pos, {T}), arena().i32(si, {T}), arena().i32(st, {S + 1}), bt, Tensor()};
    for (int32_t p : pos) b.max_kv_len = std::max(b.max_kv_len, p + 1);
    ops().kv_write(b, arena().act(c, {T, R}), arena().act(r, {T, P}), kv);
    if (cached_part) return;
    Tensor out = arena().alloc(ops().activation_dtype(), {T, H * R});
    ops().attention_mla({H, R, P, scale}, b, arena().act(ql, {T, H * R}), arena().act(qr, {T, H * P}), kv, out);
    std::vector<double> want;
    for (int32_t t = 0; t < T; ++t) {
      const int32_t s = si[t], p = pos[t];
      for (int32_t h = 0; h < H; ++h) {
        std::vector<double> sc;
        double mx = -1e30;
        for (int32_t j = 0; j <= p; ++j) {
          double d = 0;
          for (int32_t i = 0; i < R; ++i) d += static_cast<double>(QL[s][(p * H + h) * R + i]) * C[s][j * R + i];
          for (int32_t i = 0; i < P; ++i) d += static_cast<double>(QR[s][(p * H + h) * P + i]) * Rk[s][j * P + i];
          sc.push_back(d * scale);
          mx = std::max(mx, sc.back());
        }
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - mx));
        for (int32_t i = 0; i < R; ++i) {
          double o = 0;
          for (int32_t j = 0; j <= p; ++j) o += sc[j] * C[s][j * R + i];
          want.push_back(o / sum);
        }
      }
    }
    EXPECT_LT(rel_l2(arena().read(out), want), tol());
  };
  run(true);
  run(false);
}

TEST_P(MlaTest, WrongWidthsAreRejected) {
  const int32_t H = 2, R = 16, P = 4;
  KvLayer kv{arena().alloc(ops().activation_dtype(), {2, 4, 1, R}), arena().alloc(ops().activation_dtype(), {2, 4, 1, P})};
  BatchInfo b{1, 1, 1, 1, arena().i32({0}, {1}), arena().i32({0}, {1}), arena().i32({0, 1}, {2}),
              arena().i32({0}, {1, 1}), Tensor()};
  std::vector<float> z(H * R, 0.0f);
  Tensor out = arena().alloc(ops().activation_dtype(), {1, H * R});
  EXPECT_THROW(ops().attention_mla({H, R, P, 1.0f}, b, arena().act(z, {1, H * R}), arena().act(z, {1, H * R}), kv, out),
               Error);  // q_rope must be [T, H * P]
  EXPECT_THROW(ops().kv_write(b, arena().act(z, {1, R}), arena().act(z, {1, R}), kv), Error);  // v is P wide
}

TEST_P(MlaTest, HeadMatmulPerHead) {
  const int64_t T = 5, H = 3, N = 12, K = 16;
  const std::vector<float> x = random_vec(T * H * K, 3);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const HostWeight w = make_weight(dt, {H, N, K}, 11);
    Tensor y = arena().alloc(ops().activation_dtype(), {T, H * N});
    ops().head_matmul(arena().act(x, {T, H * K}), arena().weight(w), y);
    std::vector<double> want;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t n = 0; n < N; ++n) {
          double d = 0;
          for (int64_t k = 0; k < K; ++k)
            d += static_cast<double>(x[(t * H + h) * K + k]) * w.values[(h * N + n) * K + k];
          want.push_back(d);
        }
    EXPECT_LT(rel_l2(arena().read(y), want), tol()) << dtype_name(dt);
  }
}

FT_INSTANTIATE_OP_TEST(MlaTest);

}  // namespace
}  // namespace ft::testing
