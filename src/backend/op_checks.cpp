#include "backend/op_checks.h"

#include <vector>

#include "util/error.h"

namespace ft::op_checks {
namespace {

void want_i32(const char* op, const char* arg, const Tensor& t) {
  if (t.dtype != DType::I32)
    fail(ErrorCode::kInvalidArgument, "{}: {} {} must be I32", op, arg, t.str());
}

}  // namespace

void rope(const RopeParams& p, const Tensor& x, const Tensor& positions) {
  const int64_t T = x.rows(), W = x.cols(), hd = p.head_dim, n_rot = p.n_rot;
  if (hd <= 0 || W % hd != 0)
    fail(ErrorCode::kInvalidArgument, "rope: row length {} of x {} is not a multiple of head_dim {}", W, x.str(), hd);
  if (n_rot <= 0 || n_rot % 2 != 0 || n_rot > hd)
    fail(ErrorCode::kInvalidArgument, "rope: n_rot {} must be even and in (0, head_dim {}]", n_rot, hd);
  if (p.inv_freq.numel() != n_rot / 2)
    fail(ErrorCode::kInvalidArgument, "rope: inv_freq {} must have n_rot/2 = {} entries", p.inv_freq.str(), n_rot / 2);
  if (positions.numel() != T)
    fail(ErrorCode::kInvalidArgument, "rope: positions {} must have one entry per row of x {}", positions.str(),
         x.str());
}


void matmul(const Tensor& x, const Tensor& w, const Tensor& y) {
  if (w.ndim != 2) fail(ErrorCode::kInvalidArgument, "matmul: w {} must be 2-D [N, K]", w.str());
  const int64_t N = w.dim(0), K = w.dim(1), T = x.rows();
  if (x.cols() != K)
    fail(ErrorCode::kInvalidArgument, "matmul: w {} does not match x {} (K = {} vs {})", w.str(), x.str(), K, x.cols());
  if (y.rows() != T || y.cols() != N)
    fail(ErrorCode::kInvalidArgument, "matmul: y {} must be [{}, {}] for x {} and w {}", y.str(), T, N, x.str(),
         w.str());
  if (K % dtype_info(w.dtype).block_size != 0)
    fail(ErrorCode::kInvalidArgument, "matmul: w {} row length is not a whole number of {} blocks", w.str(),
         dtype_name(w.dtype));
}

void batch(const char* op, const BatchInfo& b) {
  want_i32(op, "batch.positions", b.positions);
  want_i32(op, "batch.seq_index", b.seq_index);
  want_i32(op, "batch.seq_start", b.seq_start);
  want_i32(op, "batch.block_tables", b.block_tables);
  const int64_t T = b.n_tokens, S = b.n_seqs;
  if (T < 0 || S < 0 || b.max_blocks < 0 || b.max_kv_len < 0)
    fail(ErrorCode::kInvalidArgument, "{}: batch has negative sizes (T={}, S={}, max_blocks={}, max_kv_len={})", op, T,
         S, b.max_blocks, b.max_kv_len);
  if (b.positions.numel() != T || b.seq_index.numel() != T || b.seq_start.numel() != S + 1 ||
      b.block_tables.numel() != S * static_cast<int64_t>(b.max_blocks))
    fail(ErrorCode::kInvalidArgument,
         "{}: batch index shapes positions {}, seq_index {}, seq_start {}, block_tables {} do not fit T={}, S={}, "
         "max_blocks={}",
         op, b.positions.shape_str(), b.seq_index.shape_str(), b.seq_start.shape_str(), b.block_tables.shape_str(), T,
         S, b.max_blocks);
}

int64_t sample(const Tensor& logits, const Tensor& rows, const Tensor& edits, const Tensor& out) {
  const int64_t R = logits.rows();
  if (rows.bytes() != R * static_cast<int64_t>(sizeof(SampleRow)))
    fail(ErrorCode::kInvalidArgument, "sample: rows holds {} bytes, expected {} rows of {}", rows.bytes(), R,
         sizeof(SampleRow));
  if (out.bytes() != R * static_cast<int64_t>(sizeof(SampleResult)))
    fail(ErrorCode::kInvalidArgument, "sample: out holds {} bytes, expected {} rows of {}", out.bytes(), R,
         sizeof(SampleResult));
  if (edits.empty()) return 0;
  if (edits.bytes() % static_cast<int64_t>(sizeof(LogitEdit)) != 0)
    fail(ErrorCode::kInvalidArgument, "sample: edits holds {} bytes, not a whole number of edits", edits.bytes());
  return edits.bytes() / static_cast<int64_t>(sizeof(LogitEdit));
}

void sample_edits(const char* op, const SampleRow* rows, int64_t R, const LogitEdit* edits, int64_t n, int64_t V) {
  thread_local std::vector<int32_t> owner;   // [n] the row holding each edit
  thread_local std::vector<int64_t> stamp;   // [V] the last row (stamp) that edited each id
  thread_local int64_t stamps = 0;
  owner.assign(static_cast<size_t>(n), -1);
  if (static_cast<int64_t>(stamp.size()) < V) stamp.assign(static_cast<size_t>(V), -1);
  for (int64_t r = 0; r < R; ++r) {
    const SampleRow& row = rows[r];
    if (row.skip) continue;
    if (row.edit_begin < 0 || row.edit_end < row.edit_begin || row.edit_end > n)
      fail(ErrorCode::kInvalidArgument, "{}: sampling row {} names edits [{}, {}) of {}", op, r, row.edit_begin,
           row.edit_end, n);
    const int64_t mark = ++stamps;
    for (int32_t j = row.edit_begin; j < row.edit_end; ++j) {
      int32_t& o = owner[static_cast<size_t>(j)];
      if (o >= 0) fail(ErrorCode::kInvalidArgument, "{}: sampling rows {} and {} share edit {}", op, o, r, j);
      o = static_cast<int32_t>(r);
      const int32_t id = edits[j].id;
      if (id < 0 || id >= V)
        fail(ErrorCode::kInvalidArgument, "{}: sampling row {} edits token {}, outside the vocabulary [0, {})", op, r,
             id, V);
      if (stamp[static_cast<size_t>(id)] == mark)
        fail(ErrorCode::kInvalidArgument, "{}: sampling row {} edits token {} twice", op, r, id);
      stamp[static_cast<size_t>(id)] = mark;
    }
  }
}

}  // namespace ft::op_checks
