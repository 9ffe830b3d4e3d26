// CUDA vs CPU indexer_topk where the last pick falls among exactly tied scores: the CPU keeps
// torch.topk's CPU choice (libstdc++'s nth_element / partial_sort over the candidates in index
// order), which the CUDA kernel must repeat (backend/torch_topk_order.h) instead of taking the lower
// entry. Planted ties: zero key rows score exactly 0 for every query (the ReLU's zeros in a real
// model) and pairs of identical key rows score bit-equal values (so top_k 1 and 3 pick within pairs); queries of one sequence at
// several positions (V4: the sequence's entries compete, the unseen ones at -inf) and per_query
// (only the visible ones), with top_k 8 (nth_element) and top_k 1 over >= 64 entries (partial_sort).
#include <algorithm>
#include <set>

#include "backend/op_harness.h"

namespace ft::testing {
namespace {

class CudaIndexerTies : public GpuTest {};

TEST_F(CudaIndexerTies, ExactTiesPickTheCpuSet) {
  const int ih = 2, hd = 16;
  const std::vector<float> inv = {1.0f, 0.3f, 0.05f, 0.01f};
  struct Case {
    int rate, K, S_len0, S_len1;
    bool per_query;
  };
  int witnesses = 0;  // rows whose CPU set is not the lower-entry choice among the tied zeros
  for (const Case& cs : {Case{4, 8, 80, 1, false}, Case{4, 8, 80, 1, true}, Case{1, 1, 100, 1, false},
                         Case{1, 1, 100, 1, true}, Case{1, 3, 200, 1, false}}) {
    SCOPED_TRACE(::testing::Message() << "rate " << cs.rate << ", top_k " << cs.K << ", per_query " << cs.per_query);
    // Sequence 0: a prefill of S_len0 tokens; sequence 1: one decode token at position 70 (rate 4)
    // or S_len0 - 5, whose own 17 / 95 entries are all the candidates it has.
    std::vector<int32_t> pos, si;
    for (int p = 0; p < cs.S_len0; ++p) pos.push_back(p), si.push_back(0);
    const int p1 = cs.rate == 4 ? 70 : cs.S_len0 - 5;
    pos.push_back(p1), si.push_back(1);
    const int T = static_cast<int>(pos.size()), S = 2, M = cs.S_len0 / cs.rate;
    auto batch = [&](bool gpu_side) {
      auto i32 = [&](const std::vector<int32_t>& v, std::vector<int64_t> s) {
        return gpu_side ? arena().dev_i32(v, s) : arena().host_i32(v, s);
      };
      return BatchInfo{T, S, 1, cs.S_len0, i32(pos, {T}), i32(si, {T}), i32({0, cs.S_len0, T}, {3}),
                       i32(std::vector<int32_t>(S, 0), {S, 1}), Tensor()};
    };
    const BatchInfo hb = batch(false), db = batch(true);
    const auto q = rand_bf16(T * ih * hd, 31, 0.1f, 1.0f), w = rand_bf16(T * ih, 32, 0.1f, 1.0f);
    std::vector<float> keys = rand_bf16(S * M * hd, 33, 0.1f, 1.0f);
    std::vector<bool> zero_row(static_cast<size_t>(S * M));
    for (int r = 0; r < S * M; ++r) {  // entries 6j and 6j + 3 share a key (a tie above 0), the rest are 0
      float* k = keys.data() + static_cast<size_t>(r) * hd;
      if (r % 6 == 3) std::copy(k - 3 * hd, k - 2 * hd, k);
      if (r % 3 != 0) std::fill(k, k + hd, 0.0f), zero_row[static_cast<size_t>(r)] = true;
    }
    IndexerParams ip{ih, hd, cs.rate, cs.K, RopeParams{}};
    ip.per_query = cs.per_query;
    ip.rope.mode = RopeMode::kNormal, ip.rope.head_dim = hd, ip.rope.n_rot = 8, ip.rope.attn_factor = 1.25f;
    Tensor hids = arena().host_i32(std::vector<int32_t>(T * cs.K), {T, cs.K});
    ip.rope.inv_freq = arena().host_f32(inv, {4});
    cpu().indexer_topk(ip, hb, arena().host_f32(q, {T, ih * hd}), arena().host_f32(w, {T, ih}),
                       arena().host_f32(keys, {S, M, hd}), hids);
    Tensor dids = arena().dev_i32(std::vector<int32_t>(T * cs.K, -7), {T, cs.K});
    ip.rope.inv_freq = arena().dev_from(inv, DType::F32, {4});
    gpu().indexer_topk(ip, db, arena().dev_from(q, DType::F32, {T, ih * hd}), arena().dev_from(w, DType::F32, {T, ih}),
                       arena().dev_from(keys, DType::F32, {S, M, hd}), dids);
    const std::vector<int32_t> gi = arena().read_i32(dids);
    const std::vector<int32_t> ci(hids.ptr<int32_t>(), hids.ptr<int32_t>() + T * cs.K);
    for (int t = 0; t < T; ++t) {
      const std::set<int32_t> g(gi.begin() + t * cs.K, gi.begin() + (t + 1) * cs.K),
          c(ci.begin() + t * cs.K, ci.begin() + (t + 1) * cs.K);
      EXPECT_EQ(g, c) << "row " << t << " (position " << pos[t] << ")";
      // A witness: the CPU keeps a zero-key entry while leaving out a lower zero-key one it could see.
      const int base = si[t] * M, n_vis = std::min((pos[t] + 1) / cs.rate, M);
      int lowest_left = -1;
      for (int e = 0; e < n_vis; ++e)
        if (zero_row[static_cast<size_t>(base + e)] && !c.count(e)) { lowest_left = e; break; }
      for (int e : c)
        if (e > lowest_left && lowest_left >= 0 && zero_row[static_cast<size_t>(base + e)]) { ++witnesses; break; }
    }
  }
  EXPECT_GT(witnesses, 10);  // the ties decide something: the lower-entry rule would fail these rows
}

}  // namespace
}  // namespace ft::testing
