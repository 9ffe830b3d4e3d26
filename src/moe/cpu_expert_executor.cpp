#include "moe/cpu_expert_executor.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/expert_ffn.h"
#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/q8_rows.h"
#include "backend/cpu/simd.h"
#include "backend/op_checks.h"
#include "moe/ec12.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft {
namespace {

constexpr int64_t kRowTile = 16;  // weight rows per task (as the CPU backend's matmul)
constexpr int64_t kAmxMinInputs = 4;  // an expert's inputs from which its BF16 blocks run on AMX tiles

void check_host(const char* arg, const Tensor& t) {
  if (t.device != Device::kCpu || t.empty())
    fail(ErrorCode::kInvalidArgument, "cpu experts: {} {} must be a host tensor", arg, t.str());
}

/** Rows [r0, r0 + nr) of an EC12 matrix w (moe/ec12.h) as BF16, decoded into bf (nr * K). */
const uint16_t* ec12_rows(const Tensor& w, int64_t r0, int64_t nr, std::vector<uint16_t>& bf) {
  ec12::decode_rows(w.bytes_ptr(), w.dim(0), w.dim(1), r0, nr, bf.data());
  return bf.data();
}

/** Rows [r0, r0 + nr) of w [N, K] as fp32: in place for F32, else decoded into buf (EC12 through
 *  BF16 rows in bf). */
const float* rows_f32(const Tensor& w, int64_t r0, int64_t nr, std::vector<float>& buf, int64_t buf_off,
                      std::vector<uint16_t>& bf) {
  const int64_t K = w.dim(1), rb = w.row_bytes();
  if (w.dtype == DType::F32) return reinterpret_cast<const float*>(w.bytes_ptr() + r0 * rb);
  float* dst = buf.data() + buf_off;
  if (w.dtype == DType::EC12) {
    cpu::to_f32(DType::BF16, ec12_rows(w, r0, nr, bf), dst, nr * K);
    return dst;
  }
  for (int64_t r = 0; r < nr; ++r) cpu::to_f32(w.dtype, w.bytes_ptr() + (r0 + r) * rb, dst + r * K, K);
  return dst;
}

/** y[r] = dot(x, w[r, :]) for r < nr, in groups of 4 rows (a row's result does not depend on the group). */
void dot_tile(const float* x, const float* w, int64_t K, int64_t nr, float* y) {
  for (int64_t r = 0; r < nr; r += 4)
    cpu::dot_rows(x, w + r * K, K, static_cast<int>(std::min<int64_t>(4, nr - r)), K, y + r);
}

/** Rows [r0, r0 + nr) of w [N, K] (BF16 or EC12) as BF16: in place for BF16, EC12 decoded into
 *  bf at element `off`. */
const uint16_t* rows_bf16(const Tensor& w, int64_t r0, int64_t nr, std::vector<uint16_t>& bf, int64_t off) {
  if (w.dtype == DType::BF16) return reinterpret_cast<const uint16_t*>(w.bytes_ptr() + r0 * w.row_bytes());
  ec12::decode_rows(w.bytes_ptr(), w.dim(0), w.dim(1), r0, nr, bf.data() + off);
  return bf.data() + off;
}

/** y [n, ldy] = x16 [n, K] (BF16, row stride ldx) times rows [r0, r0 + nr) of w [N, K] (BF16 or
 *  EC12)^T via cpu::gemm_nt_bf16: stored BF16 rows read in place, EC12 rows decoded into bf at `off`,
 *  except a single EC12 input, which meets the rows decoded in registers (ec12::dot_rows_bf16: the
 *  same bits, no tile written and read back). */
void bf16_block(const uint16_t* x16, int64_t ldx, int64_t n, const Tensor& w, int64_t r0, int64_t nr,
                std::vector<uint16_t>& bf, int64_t off, float* y, int64_t ldy) {
  const int64_t K = w.dim(1);
  if (n == 1 && w.dtype == DType::EC12) {
    for (int64_t r = 0; r < nr; r += 4)
      ec12::dot_rows_bf16(x16, w.bytes_ptr(), w.dim(0), K, r0 + r, static_cast<int>(std::min<int64_t>(4, nr - r)), y + r);
    return;
  }
  cpu::gemm_nt_bf16(x16, ldx, n, rows_bf16(w, r0, nr, bf, off), K, nr, K, y, ldy);
}

/** Whether rows of `w` are dotted straight from storage (decoded in registers) when an expert has
 *  `n_inputs` inputs: with one input a decoded tile would be read once, so decoding it into memory
 *  only costs; with more, decoding once and reusing the tile is cheaper. Same bits either way. */
bool fused(const Tensor& w, int64_t n_inputs) {
  return n_inputs == 1 && cpu::has_fused_dot(w.dtype == DType::EC12 ? DType::BF16 : w.dtype);
}

/** The first 64-byte aligned address at or after p. */
uint8_t* align64(uint8_t* p) { return p + ((64 - reinterpret_cast<uintptr_t>(p) % 64) % 64); }

/** dot_tile over rows [r0, r0 + nr) of x's int8 form and w [N, K] as stored (cpu::dot_rows_q8). */
void q8_dot_tile(const cpu::Q8Row& x, const Tensor& w, int64_t r0, int64_t nr, float* y) {
  const int64_t rb = w.row_bytes();
  for (int64_t r = 0; r < nr; r += 4)
    cpu::dot_rows_q8(w.dtype, x, w.bytes_ptr() + (r0 + r) * rb, rb, static_cast<int>(std::min<int64_t>(4, nr - r)), y + r);
}

/** dot_tile over rows [r0, r0 + nr) of w [N, K] as stored (cpu::dot_rows_stored; EC12 rows through
 *  ec12::dot_rows: the same bits as the BF16 matrix they code). */
void stored_dot_tile(const float* x, const Tensor& w, int64_t r0, int64_t nr, float* y) {
  const int64_t K = w.dim(1), rb = w.row_bytes();
  for (int64_t r = 0; r < nr; r += 4) {
    const int rows = static_cast<int>(std::min<int64_t>(4, nr - r));
    if (w.dtype == DType::EC12)
      ec12::dot_rows(x, w.bytes_ptr(), w.dim(0), K, r0 + r, rows, y + r);
    else
      cpu::dot_rows_stored(w.dtype, x, w.bytes_ptr() + (r0 + r) * rb, rb, rows, K, y + r);
  }
}

}  // namespace

bool CpuExpertExecutor::int8_weight(const Tensor& w) { return cpu::has_q8_dot(w.dtype, w.dim(1)); }

bool CpuExpertExecutor::bf16_weight(const Tensor& w) {
  return (w.dtype == DType::BF16 || w.dtype == DType::EC12) && cpu::has_bf16_dot();
}

CpuExpertExecutor::WeightForms CpuExpertExecutor::weight_forms(const std::vector<ExpertBank>& banks) {
  WeightForms f;
  for (const ExpertBank& b : banks)
    for (const std::vector<Tensor>* v : {&b.gate, &b.up, &b.down})
      if (!v->empty()) {
        f.int8 = f.int8 || int8_weight(v->front());
        f.bf16 = f.bf16 || bf16_weight(v->front());
      }
  return f;
}

CpuExpertExecutor::CpuExpertExecutor(int n_threads, int spin_us, bool int8_activations, bool bf16_activations)
    : pool_(n_threads > 0 ? n_threads : physical_core_count(), spin_us),
      int8_(int8_activations),
      bf16_(bf16_activations),
      amx_(bf16_activations && cpu::has_amx_bf16()) {
  wbuf_.resize(static_cast<size_t>(pool_.size()));
  wbuf16_.resize(static_cast<size_t>(pool_.size()));
  gu_.resize(static_cast<size_t>(pool_.size()));
}

void CpuExpertExecutor::run(const MoeExpertsParams& p, const Tensor& x, const Tensor& ids, const Tensor& weights,
                            const ExpertBank& bank, Tensor out) {
  check_host("x", x);
  check_host("ids", ids);
  check_host("weights", weights);
  check_host("out", out);
  if (x.dtype != DType::F32 && x.dtype != DType::BF16)
    fail(ErrorCode::kInvalidArgument, "cpu experts: x {} must be F32 or BF16", x.str());
  if (out.dtype != DType::F32) fail(ErrorCode::kInvalidArgument, "cpu experts: out {} must be F32", out.str());
  if (ids.dtype != DType::I32) fail(ErrorCode::kInvalidArgument, "cpu experts: ids {} must be I32", ids.str());
  if (weights.dtype != DType::F32)
    fail(ErrorCode::kInvalidArgument, "cpu experts: weights {} must be F32", weights.str());
  const int64_t T = x.rows(), H = x.cols(), k = ids.cols();
  if (x.ndim != 2 || !out.has_shape({T, H}))
    fail(ErrorCode::kInvalidArgument, "cpu experts: out {} must have x's shape {}", out.str(), x.shape_str());
  if (ids.ndim != 2 || ids.rows() != T || !weights.has_shape({T, k}))
    fail(ErrorCode::kInvalidArgument, "cpu experts: ids {} and weights {} must both be [{}, k]", ids.str(),
         weights.str(), T);
  if (x.data == out.data) fail(ErrorCode::kInvalidArgument, "cpu experts: out must not alias x");
  if (bank.up.size() != bank.gate.size() || bank.down.size() != bank.gate.size())
    fail(ErrorCode::kInvalidArgument, "cpu experts: bank has {} gate, {} up, {} down experts", bank.gate.size(),
         bank.up.size(), bank.down.size());
  op_checks::expert_bank_extras("cpu experts", bank, H);
  for (const Tensor* b : {&bank.gate_bias, &bank.up_bias, &bank.down_bias})
    if (!b->empty()) check_host("bank bias", *b);
  const int32_t* id = ids.ptr<int32_t>();
  const float* wt = weights.ptr<float>();

  // Group (token, slot) pairs by expert, token order within an expert.
  pairs_.build("cpu experts", ids, bank, H);
  const std::vector<Group>& groups = pairs_.groups();
  for (const Group& g : groups)
    for (const Tensor* w : {&bank.gate[static_cast<size_t>(g.expert)], &bank.up[static_cast<size_t>(g.expert)],
                            &bank.down[static_cast<size_t>(g.expert)]})
      check_host("expert weight", *w);
  const int64_t n_pairs = pairs_.n_pairs(), max_ff = pairs_.max_ff();
  experts_computed_ += static_cast<int64_t>(groups.size());
  pairs_computed_ += n_pairs;

  // Activations in fp32.
  const float* xf = x.ptr<float>();
  if (x.dtype == DType::BF16) {
    x_f32_.resize(static_cast<size_t>(T * H));
    cpu::to_f32(DType::BF16, x.data, x_f32_.data(), T * H);
    xf = x_f32_.data();
  }
  // int8 activations (int8_): weights of a type cpu::dot_rows_q8 takes are dotted with x's (and h's)
  // int8 form, every input of the expert alike, so a pair's result does not depend on the other
  // tokens of the step (the engine's batch invariance); other weights as above.
  auto int8 = [&](const Tensor& w) { return int8_ && int8_weight(w); };
  // bf16 activations (bf16_): BF16 and EC12 weights meet BF16 forms of x and h (cpu::gemm_nt_bf16),
  // every input alike, as a GEMM block per tile; gate and up only where both are such weights.
  auto bf16 = [&](const Tensor& w) { return bf16_ && bf16_weight(w); };
  auto gu16 = [&](const Group& g) {
    return bf16(bank.gate[static_cast<size_t>(g.expert)]) && bf16(bank.up[static_cast<size_t>(g.expert)]);
  };
  auto d16 = [&](const Group& g) { return bf16(bank.down[static_cast<size_t>(g.expert)]); };
  // On AMX (amx_) the BF16 blocks of an expert with kAmxMinInputs inputs or more, weights with whole
  // 32-value chunks a row, run as AMX tiles over the group's x and h rows packed in B-tile order
  // (xp16_, hp16_). Fewer inputs stay on AVX-512 BF16: a tile of 16 weight rows read for one token
  // streams 16 rows at once from memory and wastes 15 of the tile's 16 columns (measured on the H100
  // host: a decode layer 13% slower, EC12 60%).
  auto amx_w = [&](const Tensor& w) { return amx_ && bf16(w) && w.dim(1) % 32 == 0; };
  auto gu_amx = [&](const Group& g) {
    return g.n >= kAmxMinInputs && gu16(g) && amx_w(bank.gate[static_cast<size_t>(g.expert)]) &&
           amx_w(bank.up[static_cast<size_t>(g.expert)]);
  };
  auto d_amx = [&](const Group& g) {
    return g.n >= kAmxMinInputs && d16(g) && amx_w(bank.down[static_cast<size_t>(g.expert)]);
  };
  auto blocked_gate_up = [&](const Group& g) {
    const auto e = static_cast<size_t>(g.expert);
    return g.n > 1 && !gu16(g) && (!int8(bank.gate[e]) || !int8(bank.up[e]));
  };
  bool any_x8 = false;
  for (const Group& g : groups)
    any_x8 = any_x8 || int8(bank.gate[static_cast<size_t>(g.expert)]) || int8(bank.up[static_cast<size_t>(g.expert)]);
  // Rows of the int8 forms start 64-byte aligned (their scales are floats).
  const int64_t x8_bytes = (cpu::q8_row_bytes(H) + 63) & ~int64_t{63}, h8_bytes = (cpu::q8_row_bytes(max_ff) + 63) & ~int64_t{63};
  x8_rows_.assign(any_x8 ? static_cast<size_t>(T) : 0, cpu::Q8Row{});
  if (any_x8) {  // H is whole 256-blocks: the Q4_K rows are
    if (static_cast<int64_t>(x8_.size()) < T * x8_bytes + 64) x8_.resize(static_cast<size_t>(T * x8_bytes + 64));
    uint8_t* x8 = align64(x8_.data());
    // ~1 us a row: a few rows (decode) on the calling thread, where waking the pool would cost more;
    // a prefill's rows on the pool.
    auto quantize = [&](int64_t t) {
      x8_rows_[static_cast<size_t>(t)] = cpu::quantize_q8_row(xf + t * H, H, x8 + t * x8_bytes);
    };
    constexpr int64_t kPoolRows = 64;
    if (T < kPoolRows) {
      for (int64_t t = 0; t < T; ++t) quantize(t);
    } else {
      pool_.run((T + kPoolRows - 1) / kPoolRows, [&](int64_t ti, int) {
        for (int64_t t = ti * kPoolRows; t < std::min(T, (ti + 1) * kPoolRows); ++t) quantize(t);
      });
    }
  }
  // x's int8 rows by group position (the int8 GEMM blocks of experts with several inputs).
  xg8_rows_.resize(any_x8 ? static_cast<size_t>(n_pairs) : 0);
  if (any_x8)
    for (int64_t i = 0; i < n_pairs; ++i) xg8_rows_[static_cast<size_t>(i)] = x8_rows_[static_cast<size_t>(pairs_.pair(i) / k)];
  bool any_h8 = false;  // some down GEMV takes h's int8 form: only then is room for it made
  for (const Group& g : groups) any_h8 = any_h8 || int8(bank.down[static_cast<size_t>(g.expert)]);
  if (any_h8 && static_cast<int64_t>(h8_.size()) < n_pairs * h8_bytes + 64)
    h8_.resize(static_cast<size_t>(n_pairs * h8_bytes + 64));
  uint8_t* h8 = any_h8 ? align64(h8_.data()) : nullptr;
  h8_rows_.assign(any_h8 ? static_cast<size_t>(n_pairs) : 0, cpu::Q8Row{});
  if (static_cast<int64_t>(h_.size()) < n_pairs * max_ff) h_.resize(static_cast<size_t>(n_pairs * max_ff));
  if (static_cast<int64_t>(y_.size()) < n_pairs * H) y_.resize(static_cast<size_t>(n_pairs * H));
  // y_ holds a pair's result at its group position (pairs_.positions(); the blocked kernels write a
  // group's tokens as one [n, H] block).
  const int64_t wbuf_need = 2 * kRowTile * std::max(H, max_ff);
  for (auto& b : wbuf_)
    if (static_cast<int64_t>(b.size()) < wbuf_need) b.resize(static_cast<size_t>(wbuf_need));
  // An expert with several inputs and fp32 gate or up rows runs them as GEMM blocks (cpu::gemm_nt)
  // over its inputs' rows of x gathered by group position into xg_ [pairs, H]; each worker keeps
  // the [n, 16] gate and up results of its tile in gu_.
  int64_t max_n = 0, gather_rows = 0;
  for (const Group& g : groups) {
    max_n = std::max(max_n, g.n);
    if (blocked_gate_up(g)) gather_rows += g.n;
  }
  for (auto& b : gu_)
    if (static_cast<int64_t>(b.size()) < 2 * max_n * kRowTile) b.resize(static_cast<size_t>(2 * max_n * kRowTile));
  if (gather_rows > 0) {
    if (static_cast<int64_t>(xg_.size()) < n_pairs * H) xg_.resize(static_cast<size_t>(n_pairs * H));
    auto gather = [&](const Group& g) {
      if (!blocked_gate_up(g)) return;
      for (int64_t r = 0; r < g.n; ++r)
        std::memcpy(xg_.data() + (g.begin + r) * H, xf + (pairs_.pair(g.begin + r) / k) * H,
                    static_cast<size_t>(H) * 4);
    };
    constexpr int64_t kPoolRows = 64;  // as the quantization above: a few rows on the calling thread
    if (gather_rows < kPoolRows) {
      for (const Group& g : groups) gather(g);
    } else {
      pool_.run(static_cast<int64_t>(groups.size()), [&](int64_t gi, int) { gather(groups[static_cast<size_t>(gi)]); });
    }
  }
  // BF16 forms: x's rows gathered by group position into xg16_ [pairs, H] for the gu16 groups
  // (x itself where it is BF16, else rounded once into x16_ [T, H]); h16_ [pairs, F] for the d16 groups,
  // written by the gate/up tasks beside h.
  int64_t rows16 = 0;
  bool any_h16 = false;
  for (const Group& g : groups) {
    if (gu16(g)) rows16 += g.n;
    any_h16 = any_h16 || d16(g);
  }
  if (rows16 > 0) {
    const uint16_t* x16 = static_cast<const uint16_t*>(x.data);
    if (x.dtype != DType::BF16) {
      if (static_cast<int64_t>(x16_.size()) < T * H) x16_.resize(static_cast<size_t>(T * H));
      constexpr int64_t kPoolRows = 64;
      if (T < kPoolRows) {
        cpu::to_bf16(xf, x16_.data(), T * H);
      } else {
        pool_.run((T + kPoolRows - 1) / kPoolRows, [&](int64_t ti, int) {
          const int64_t t0 = ti * kPoolRows, t1 = std::min(T, t0 + kPoolRows);
          cpu::to_bf16(xf + t0 * H, x16_.data() + t0 * H, (t1 - t0) * H);
        });
      }
      x16 = x16_.data();
    }
    if (static_cast<int64_t>(xg16_.size()) < n_pairs * H) xg16_.resize(static_cast<size_t>(n_pairs * H));
    for (const Group& g : groups)
      if (gu16(g) && !gu_amx(g))  // AMX groups pack their rows straight from x16 below
        for (int64_t r = 0; r < g.n; ++r)
          std::memcpy(xg16_.data() + (g.begin + r) * H, x16 + (pairs_.pair(g.begin + r) / k) * H,
                      static_cast<size_t>(H) * 2);
  }
  if (any_h16 && static_cast<int64_t>(h16_.size()) < n_pairs * max_ff) h16_.resize(static_cast<size_t>(n_pairs * max_ff));
  // AMX: each such group's x rows packed once, gathered from x16 by token (xp_row_ by group position),
  // its h rows written packed by its gate/up tasks.
  xp_at_.assign(groups.size(), -1);
  hp_at_.assign(groups.size(), -1);
  int64_t xp_elems = 0, hp_elems = 0;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (gu_amx(groups[g])) xp_at_[g] = xp_elems, xp_elems += cpu::amx_packed_elems(groups[g].n, H);
    if (d_amx(groups[g])) hp_at_[g] = hp_elems, hp_elems += cpu::amx_packed_elems(groups[g].n, groups[g].F);
  }
  if (static_cast<int64_t>(xp16_.size()) < xp_elems) xp16_.resize(static_cast<size_t>(xp_elems));
  if (static_cast<int64_t>(hp16_.size()) < hp_elems) hp16_.resize(static_cast<size_t>(hp_elems));
  if (xp_elems > 0) {
    const uint16_t* x16 = x.dtype == DType::BF16 ? static_cast<const uint16_t*>(x.data) : x16_.data();
    xp_row_.resize(static_cast<size_t>(n_pairs));
    for (int64_t i = 0; i < n_pairs; ++i) xp_row_[static_cast<size_t>(i)] = static_cast<int32_t>(pairs_.pair(i) / k);
    auto pack = [&](size_t g) {
      if (xp_at_[g] >= 0)
        cpu::amx_pack_bf16(x16, H, groups[g].n, H, xp16_.data() + xp_at_[g], xp_row_.data() + groups[g].begin);
    };
    if (rows16 < 64) {  // as the gathers above: a few rows on the calling thread
      for (size_t g = 0; g < groups.size(); ++g) pack(g);
    } else {
      pool_.run(static_cast<int64_t>(groups.size()), [&](int64_t gi, int) { pack(static_cast<size_t>(gi)); });
    }
  }
  const int64_t wbuf16_need = 2 * kRowTile * std::max(H, max_ff);  // EC12 rows decoded to BF16 (gate and up)
  for (auto& b : wbuf16_)
    if (static_cast<int64_t>(b.size()) < wbuf16_need) b.resize(static_cast<size_t>(wbuf16_need));

  // Phases 1 and 2 as one job: tasks (expert, 16 rows of F) computing h = silu(x Wg^T) * (x Wu^T)
  // per pair, then tasks (expert, 16 rows of H) computing y = h Wd^T. Tasks are handed out in
  // order, so a down task starts once every gate/up task has been taken, and it waits only for its
  // own expert's gate/up tasks still running: no barrier between the phases, and the workers that
  // finish gate/up early start on the first experts' down rows.
  tasks_.clear();
  for (size_t g = 0; g < groups.size(); ++g)
    for (int64_t r = 0; r < groups[g].F; r += kRowTile) tasks_.push_back(Task{static_cast<int32_t>(g), r});
  const auto n_gate_up = static_cast<int64_t>(tasks_.size());
  pending_.assign(groups.size(), 0);
  for (const Task& t : tasks_) ++pending_[static_cast<size_t>(t.group)];
  // A group whose down GEMV takes h's int8 form counts one more step: its last gate/up task
  // quantizes h, and only then do the group's down tasks start.
  h8_stage_.assign(groups.size(), 0);
  for (size_t g = 0; g < groups.size(); ++g)
    if (int8(bank.down[static_cast<size_t>(groups[g].expert)])) h8_stage_[g] = 1, ++pending_[g];
  for (size_t g = 0; g < groups.size(); ++g)
    for (int64_t r = 0; r < H; r += kRowTile) tasks_.push_back(Task{static_cast<int32_t>(g), r});
  auto gate_up = [&](const Task& task, int worker) {
    const Group& G = groups[static_cast<size_t>(task.group)];
    const int64_t F = G.F, nr = std::min(kRowTile, F - task.row0);
    std::vector<float>& buf = wbuf_[static_cast<size_t>(worker)];
    std::vector<uint16_t>& bf = wbuf16_[static_cast<size_t>(worker)];
    const Tensor& gate = bank.gate[static_cast<size_t>(G.expert)];
    const Tensor& up = bank.up[static_cast<size_t>(G.expert)];
    const bool g8 = int8(gate), u8 = int8(up), b16 = gu16(G);
    const float* wg = b16 || g8 || fused(gate, G.n) ? nullptr : rows_f32(gate, task.row0, nr, buf, 0, bf);
    const float* wu = b16 || u8 || fused(up, G.n) ? nullptr : rows_f32(up, task.row0, nr, buf, kRowTile * H, bf);
    // [n, 16] results of the tile: an fp32 tile meets all the inputs at once as a GEMM block over the
    // gathered x (several inputs), else each input alone; the same bits per element either way.
    std::vector<float>& gu = gu_[static_cast<size_t>(worker)];
    float* gall = gu.data();
    float* uall = gu.data() + G.n * kRowTile;
    const bool gathered = blocked_gate_up(G);
    const float* xg = gathered ? xg_.data() + G.begin * H : nullptr;
    if (wg && gathered) cpu::gemm_nt(xg, H, G.n, wg, H, nr, H, gall, kRowTile);
    if (wu && gathered) cpu::gemm_nt(xg, H, G.n, wu, H, nr, H, uall, kRowTile);
    if (b16 && xp_at_[static_cast<size_t>(task.group)] >= 0) {
      const uint16_t* xp = xp16_.data() + xp_at_[static_cast<size_t>(task.group)];
      cpu::gemm_nt_amx_bf16(xp, G.n, rows_bf16(gate, task.row0, nr, bf, 0), H, nr, H, gall, kRowTile);
      cpu::gemm_nt_amx_bf16(xp, G.n, rows_bf16(up, task.row0, nr, bf, kRowTile * H), H, nr, H, uall, kRowTile);
    } else if (b16) {
      const uint16_t* x16 = xg16_.data() + G.begin * H;
      bf16_block(x16, H, G.n, gate, task.row0, nr, bf, 0, gall, kRowTile);
      bf16_block(x16, H, G.n, up, task.row0, nr, bf, kRowTile * H, uall, kRowTile);
    }
    // int8 activations with several inputs: one int8 GEMM block (cpu::gemm_q8, the same bits as
    // dot_rows_q8 per input) over the inputs' int8 rows by group position.
    if (g8 && G.n > 1)
      cpu::gemm_q8(gate.dtype, xg8_rows_.data() + G.begin, G.n, gate.bytes_ptr() + task.row0 * gate.row_bytes(),
                   gate.row_bytes(), nr, gall, kRowTile);
    if (u8 && G.n > 1)
      cpu::gemm_q8(up.dtype, xg8_rows_.data() + G.begin, G.n, up.bytes_ptr() + task.row0 * up.row_bytes(), up.row_bytes(),
                   nr, uall, kRowTile);
    for (int64_t r = 0; !b16 && r < G.n; ++r) {  // b16: computed above
      const int64_t t = pairs_.pair(G.begin + r) / k;
      const float* xt = xf + t * H;
      float* gv = gall + r * kRowTile;
      float* uv = uall + r * kRowTile;
      if (g8) {
        if (G.n == 1) q8_dot_tile(x8_rows_[static_cast<size_t>(t)], gate, task.row0, nr, gv);
      } else if (wg && !gathered) dot_tile(xt, wg, H, nr, gv);
      else if (!wg) stored_dot_tile(xt, gate, task.row0, nr, gv);
      if (u8) {
        if (G.n == 1) q8_dot_tile(x8_rows_[static_cast<size_t>(t)], up, task.row0, nr, uv);
      } else if (wu && !gathered) dot_tile(xt, wu, H, nr, uv);
      else if (!wu) stored_dot_tile(xt, up, task.row0, nr, uv);
    }
    // The biases and the GLU as CpuOps::moe_experts (cpu::expert_glu), into h by group position.
    float* h = h_.data() + G.begin * max_ff + task.row0;
    cpu::expert_glu(bank, G.expert, F, task.row0, nr, G.n, gall, kRowTile, uall, kRowTile, h, max_ff);
    if (const int64_t hp = hp_at_[static_cast<size_t>(task.group)]; hp >= 0) {
      for (int64_t r = 0; r < G.n; ++r)
        for (int64_t j = 0; j < nr; ++j)
          hp16_[static_cast<size_t>(hp + cpu::amx_packed_index(r, task.row0 + j, F))] = f32_to_bf16(h[r * max_ff + j]);
    } else if (d16(G)) {
      for (int64_t r = 0; r < G.n; ++r) cpu::to_bf16(h + r * max_ff, h16_.data() + (G.begin + r) * max_ff + task.row0, nr);
    }
  };
  auto down = [&](const Task& task, int worker) {
    const Group& G = groups[static_cast<size_t>(task.group)];
    const int64_t nr = std::min(kRowTile, H - task.row0);
    const Tensor& dw = bank.down[static_cast<size_t>(G.expert)];
    const bool d8 = h8_stage_[static_cast<size_t>(task.group)] != 0;
    std::vector<uint16_t>& bf = wbuf16_[static_cast<size_t>(worker)];
    const bool b16 = d16(G);
    const float* wd = b16 || d8 || fused(dw, G.n) ? nullptr : rows_f32(dw, task.row0, nr, wbuf_[static_cast<size_t>(worker)], 0, bf);
    // An fp32 (or BF16) tile meets the expert's h rows (contiguous by group position) as one GEMM block.
    if (wd) cpu::gemm_nt(h_.data() + G.begin * max_ff, max_ff, G.n, wd, G.F, nr, G.F, y_.data() + G.begin * H + task.row0, H);
    if (const int64_t hp = hp_at_[static_cast<size_t>(task.group)]; hp >= 0)
      cpu::gemm_nt_amx_bf16(hp16_.data() + hp, G.n, rows_bf16(dw, task.row0, nr, bf, 0), G.F, nr, G.F,
                            y_.data() + G.begin * H + task.row0, H);
    else if (b16)
      bf16_block(h16_.data() + G.begin * max_ff, max_ff, G.n, dw, task.row0, nr, bf, 0, y_.data() + G.begin * H + task.row0, H);
    if (d8 && G.n > 1)
      cpu::gemm_q8(dw.dtype, h8_rows_.data() + G.begin, G.n, dw.bytes_ptr() + task.row0 * dw.row_bytes(), dw.row_bytes(),
                   nr, y_.data() + G.begin * H + task.row0, H);
    for (int64_t r = 0; r < G.n; ++r) {
      const float* hp = h_.data() + (G.begin + r) * max_ff;
      float* yp = y_.data() + (G.begin + r) * H + task.row0;
      if (d8) {
        if (G.n == 1) q8_dot_tile(h8_rows_[static_cast<size_t>(G.begin + r)], dw, task.row0, nr, yp);
      } else if (!wd && !b16) stored_dot_tile(hp, dw, task.row0, nr, yp);
    }
    cpu::expert_down_bias(bank, G.expert, H, task.row0, nr, G.n, y_.data() + G.begin * H + task.row0, H);
  };
  pool_.run(static_cast<int64_t>(tasks_.size()), [&](int64_t ti, int worker) {
    const Task& task = tasks_[static_cast<size_t>(ti)];
    std::atomic_ref<int32_t> pending(pending_[static_cast<size_t>(task.group)]);
    if (ti >= n_gate_up) {
      while (pending.load(std::memory_order_acquire) > 0) cpu_relax();
      return down(task, worker);
    }
    // Counted down even when the task throws: a down task of this expert may already be waiting. The
    // group's last gate/up task first quantizes its h where the down GEMV takes the int8 form (the
    // acquire sees every task's h; the release hands the int8 rows to the down tasks).
    const int32_t stage = h8_stage_[static_cast<size_t>(task.group)];
    auto finish = [&] {
      if (pending.fetch_sub(1, std::memory_order_acq_rel) != 1 + stage || stage == 0) return;
      struct Release {  // the last count goes even if quantizing throws: waiting down tasks never hang
        std::atomic_ref<int32_t>& p;
        ~Release() { p.fetch_sub(1, std::memory_order_release); }
      } release{pending};
      const Group& G = groups[static_cast<size_t>(task.group)];
      for (int64_t r = 0; r < G.n; ++r)  // G.F is whole 256-blocks (int8 above)
        h8_rows_[static_cast<size_t>(G.begin + r)] =
            cpu::quantize_q8_row(h_.data() + (G.begin + r) * max_ff, G.F, h8 + (G.begin + r) * h8_bytes);
    };
    try {
      gate_up(task, worker);
    } catch (...) {
      finish();
      throw;
    }
    finish();
  });
  // Phase 3: out[t] (=|+=) sum_j w[t, j] * y[t, j], j in order.
  float* o = out.ptr<float>();
  const int64_t rows_per_task = std::max<int64_t>(1, 16384 / std::max<int64_t>(H, 1));
  pool_.run((T + rows_per_task - 1) / rows_per_task, [&](int64_t ti, int) {
    cpu::weighted_slot_sum(id, wt, k, H, y_.data(), pairs_.positions(), p.accumulate, ti * rows_per_task,
                           std::min(T, (ti + 1) * rows_per_task), o);
  });
}

}  // namespace ft
