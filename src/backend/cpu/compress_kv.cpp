// compress_kv: DeepSeek-V4's KV compressor (CPU backend; semantics in ops.h, after transformers'
// DeepseekV4HCACompressor / DeepseekV4CSACompressor and the indexer's compressor). Stores the step's
// per-token projections in the value pages, then pools windows from the pages: every closed window
// of each sequence into a dense [S, M, hd] (Qwen4-Exp), or, into the KV pages' entry rows (paged:
// DeepSeek-V4), only the windows this step closes (earlier ones are already there). Either way an
// entry is a function of the pages alone, so a prefix-cache hit, a chunked prefill and a decode step
// all give the same entries as one cold prefill. The entry pages may be another pool's than kv.v's
// (CompressParams::entry_tables). F32 pages, or quantized
// ones (--kv-cache-dtype fp8 / q8_0): each head of the stored columns quantized as kv_write does,
// read back dequantized a head at a time (kv_rows.h).
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/entry_rows.h"
#include "backend/cpu/kv_rows.h"
#include "quant/kv_quant.h"
#include "util/error.h"

namespace ft {

void CpuOps::compress_kv(const CompressParams& p, const BatchInfo& batch, const Tensor& proj, KvLayer kv,
                         const Tensor& ape, const Tensor& norm_w, Tensor entries) {
  const char* op = "compress_kv";
  cpu::check_batch(op, batch);
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"proj", &proj}, {"ape", &ape},
                                {"norm_w", &norm_w}, {"inv_freq", &p.rope.inv_freq}})
    cpu::check_dtype(op, name, *t, DType::F32);
  cpu::check_kv_page_tensor(op, "kv.v", kv.v, kv.v_scale);  // F32, or quantized codes and scales
  const int64_t hd = p.head_dim, width = p.overlap ? 2 * hd : hd, T = batch.n_tokens, S = batch.n_seqs;
  const int64_t rate = p.rate;
  if (rate < 1 || hd < 1 || p.rope.n_rot % 2 != 0 || p.rope.n_rot > hd || p.rope.head_dim != hd)
    fail(ErrorCode::kInvalidArgument, "{}: rate {}, head_dim {}, rope head_dim {} n_rot {} are inconsistent", op, rate,
         hd, p.rope.head_dim, p.rope.n_rot);
  const int64_t n_pages = kv.v.dim(0), ps = kv.v.dim(1), heads = kv.v.dim(2), dim = kv.v.dim(3), Wv = heads * dim;
  const bool quant = !kv.v_scale.empty();  // (kv.k may be absent: this op reads and writes kv.v only)
  if (p.col < 0 || p.col + 2 * width > Wv || !proj.has_shape({T, 2 * width}) || !ape.has_shape({rate, width}) ||
      norm_w.numel() != hd)
    fail(ErrorCode::kInvalidArgument,
         "{}: proj {} (want [{}, {}]), columns {}.. of kv.v {}, ape {} (want [{}, {}]), norm_w {} do not fit", op,
         proj.str(), T, 2 * width, p.col, kv.v.str(), ape.str(), rate, width, norm_w.str());
  const BatchInfo eb = entry_batch(op, batch, p.entry_tables);  // the entry pages' tables (their own pool's)
  const cpu::EntryRows out(op, eb, entries, hd, entries.ndim == 4 ? p.entry_col : 0, ps, rate);
  // Quantized pages keep scales per head: this compressor's columns must be whole heads, so that
  // storing them re-scales nothing another op wrote (ModelConfig::kv_v_head_dim lays them out so).
  if (quant && (p.col % dim != 0 || (2 * width) % dim != 0))
    fail(ErrorCode::kInvalidArgument, "{}: columns [{}, {}) of quantized kv.v {} are not whole heads of {}", op, p.col,
         p.col + 2 * width, kv.v.str(), dim);
  const int32_t* pos = batch.positions.ptr<int32_t>();
  const int32_t* si = batch.seq_index.ptr<int32_t>();
  const int32_t* ss = batch.seq_start.ptr<int32_t>();
  auto slot_of = [&](int32_t s, int32_t position) {
    const cpu::PageSlot at = cpu::page_slot(op, batch, n_pages, ps, s, position);
    return at.page * ps + at.slot;
  };
  for (int64_t t = 0; t < T; ++t) {
    const int64_t slot = slot_of(si[t], pos[t]);
    const float* src = proj.ptr<float>() + t * 2 * width;
    if (!quant) {
      std::memcpy(kv.v.ptr<float>() + slot * Wv + p.col, src, static_cast<size_t>(2 * width) * 4);
      continue;
    }
    // Each head of the columns to its codes and scales, as kv_write quantizes a head row.
    const DType kd = kv_dtype_of_codes(kv.v.dtype);
    const int64_t scale_bytes = kv.v_scale.dim(3) * dtype_bytes(kv.v_scale.dtype, 1);
    for (int64_t h = p.col / dim; h < (p.col + 2 * width) / dim; ++h) {
      const int64_t row = slot * heads + h;
      kv_quantize_head(kd, src + h * dim - p.col, dim, static_cast<uint8_t*>(kv.v.data) + row * dim,
                       static_cast<uint8_t*>(kv.v_scale.data) + row * scale_bytes);
    }
  }

  const float* a = ape.ptr<float>();
  const float* nw = norm_w.ptr<float>();
  const cpu::KvRows rows(kv.v, kv.v_scale);
  const int64_t span = 2 * width + 2 * dim;  // a row's columns as KvRows::cols dequantizes them
  for (int32_t s = 0; s < S; ++s) {
    if (ss[s + 1] <= ss[s]) continue;
    // Windows to pool: all closed ones (dense), or those whose last position is in this step (paged).
    const int64_t w_end = (int64_t{pos[ss[s + 1] - 1]} + 1) / rate;
    const int64_t w_begin = out.paged() ? int64_t{pos[ss[s]]} / rate : 0;
    if (w_end > out.limit())
      fail(ErrorCode::kInvalidArgument, "{}: sequence {} has {} entries, entries {} holds {}", op, s, w_end,
           entries.str(), out.limit());
    if (w_end <= w_begin) continue;
    // Page slots of the positions those windows read, and the entries' rows (outside the parallel loop).
    const int64_t base = p.overlap && w_begin > 0 ? (w_begin - 1) * rate : w_begin * rate;
    std::vector<int64_t> slots(static_cast<size_t>(w_end * rate - base));
    for (int64_t j = base; j < w_end * rate; ++j) slots[static_cast<size_t>(j - base)] = slot_of(s, static_cast<int32_t>(j));
    std::vector<float*> dst(static_cast<size_t>(w_end - w_begin));
    for (int64_t w = w_begin; w < w_end; ++w) dst[static_cast<size_t>(w - w_begin)] = out.at(s, w);
#pragma omp parallel for num_threads(n_threads_) schedule(static) if ((w_end - w_begin) * rate * width > 65536)
    for (int64_t w = w_begin; w < w_end; ++w) {
      float* e = dst[static_cast<size_t>(w - w_begin)];
      std::vector<float> logit(static_cast<size_t>(2 * rate)), val(static_cast<size_t>(2 * rate));
      // The window's rows (kv then gate): window w-1's then w's when they overlap, else w's alone.
      const int64_t first = p.overlap && w > 0 ? (w - 1) * rate : w * rate, n_rows = (w + 1) * rate - first;
      std::vector<const float*> r(static_cast<size_t>(n_rows));
      std::vector<float> buf(quant ? static_cast<size_t>(n_rows * span) : 0);
      for (int64_t i = 0; i < n_rows; ++i)
        r[static_cast<size_t>(i)] = rows.cols(slots[static_cast<size_t>(first - base + i)], p.col, 2 * width,
                                             buf.data() + (quant ? i * span : 0));
      const float* const* cur = r.data() + (n_rows - rate);  // window w's rows
      for (int64_t d = 0; d < hd; ++d) {
        int64_t n = 0;
        if (p.overlap && w > 0)
          for (int64_t j = 0; j < rate; ++j, ++n) {  // Ca of window w-1
            const float* rr = r[static_cast<size_t>(j)];
            val[static_cast<size_t>(n)] = rr[d];
            logit[static_cast<size_t>(n)] = rr[width + d] + a[j * width + d];
          }
        const int64_t off = p.overlap ? hd : 0;  // Cb of window w (or the only series)
        for (int64_t j = 0; j < rate; ++j, ++n) {
          const float* rr = cur[j];
          val[static_cast<size_t>(n)] = rr[off + d];
          logit[static_cast<size_t>(n)] = rr[width + off + d] + a[j * width + off + d];
        }
        float mx = -INFINITY;
        for (int64_t i = 0; i < n; ++i) mx = std::fmax(mx, logit[static_cast<size_t>(i)]);
        float sum = 0.0f, acc = 0.0f;
        for (int64_t i = 0; i < n; ++i) sum += (logit[static_cast<size_t>(i)] = std::exp(logit[static_cast<size_t>(i)] - mx));
        for (int64_t i = 0; i < n; ++i) acc += logit[static_cast<size_t>(i)] / sum * val[static_cast<size_t>(i)];
        e[d] = acc;
      }
      float ms = 0.0f;
      for (int64_t d = 0; d < hd; ++d) ms += e[d] * e[d];
      const float inv = 1.0f / std::sqrt(ms / static_cast<float>(hd) + p.eps);
      for (int64_t d = 0; d < hd; ++d) e[d] = nw[d] * (e[d] * inv);
      cpu::rope_tail(p.rope, e, static_cast<double>(w * rate));
    }
  }
}

}  // namespace ft
