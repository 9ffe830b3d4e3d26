#include "engine/step_codec.h"

#include <cstring>

#include "util/error.h"

namespace ft {
namespace {

constexpr int64_t kVersion = 1;

class Writer {
 public:
  void i64(int64_t v) { put(&v, 8); }
  void i32s(const int32_t* p, int64_t n) {
    i64(n);
    if (n > 0) put(p, static_cast<size_t>(n) * 4);
  }
  std::vector<uint8_t> take() { return std::move(out_); }

 private:
  void put(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  std::vector<uint8_t> out_;
};

class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& in) : in_(in) {}
  int64_t i64(const char* field) {
    int64_t v;
    get(&v, 8, field);
    return v;
  }
  /** A length-prefixed int32 list; a length of -1 is "none" when `optional` (returns false). */
  bool i32s(std::vector<int32_t>& v, const char* field, bool optional = false) {
    const size_t at = pos_;
    const int64_t n = i64(field);
    if (optional && n == -1) return false;
    if (n < 0 || static_cast<uint64_t>(n) > (in_.size() - pos_) / 4)
      fail(ErrorCode::kInvalidArgument, "step message: {} has length {} at byte {} ({} bytes left)", field, n, at,
           in_.size() - pos_);
    v.resize(static_cast<size_t>(n));
    if (n > 0) get(v.data(), static_cast<size_t>(n) * 4, field);
    return true;
  }
  void end() const {
    if (pos_ != in_.size())
      fail(ErrorCode::kInvalidArgument, "step message: {} trailing bytes at byte {}", in_.size() - pos_, pos_);
  }

 private:
  void get(void* p, size_t n, const char* field) {
    if (in_.size() - pos_ < n)
      fail(ErrorCode::kInvalidArgument, "step message truncated: {} needs {} bytes at byte {}, {} left", field, n, pos_,
           in_.size() - pos_);
    std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }
  const std::vector<uint8_t>& in_;
  size_t pos_ = 0;
};

void write_copies(Writer& w, const std::vector<StateCopy>& copies) {
  w.i64(static_cast<int64_t>(copies.size()));
  for (const StateCopy& c : copies) w.i64(c.from), w.i64(c.to);
}

void read_copies(Reader& r, std::vector<StateCopy>& copies, const char* field) {
  const int64_t n = r.i64(field);
  if (n < 0 || n > (int64_t{1} << 24)) fail(ErrorCode::kInvalidArgument, "step message: {} count {}", field, n);
  copies.resize(static_cast<size_t>(n));
  for (StateCopy& c : copies) {
    c.from = static_cast<int32_t>(r.i64(field));
    c.to = static_cast<int32_t>(r.i64(field));
  }
}

}  // namespace

std::vector<uint8_t> encode_step(const StepBatch& batch) {
  Writer w;
  w.i64(kVersion);
  w.i64(static_cast<int64_t>(batch.items.size()));
  for (const StepItem& it : batch.items) {
    w.i64(it.start), w.i64(it.n_logits), w.i64(it.state_slot);
    w.i32s(it.tokens, it.n);
    w.i32s(it.pages ? it.pages->data() : nullptr, it.pages ? static_cast<int64_t>(it.pages->size()) : 0);
    if (it.swa_pages)
      w.i32s(it.swa_pages->data(), static_cast<int64_t>(it.swa_pages->size()));
    else
      w.i64(-1);
  }
  write_copies(w, batch.copies_before);
  write_copies(w, batch.copies_after);
  return w.take();
}

void decode_step(const std::vector<uint8_t>& bytes, DecodedStep& out) {
  Reader r(bytes);
  if (const int64_t v = r.i64("version"); v != kVersion)
    fail(ErrorCode::kInvalidArgument, "step message: version {}, this build reads {}", v, kVersion);
  const int64_t n = r.i64("item count");
  if (n < 0 || static_cast<uint64_t>(n) > bytes.size() / 8)
    fail(ErrorCode::kInvalidArgument, "step message: item count {} at byte 8", n);
  out.batch.clear();
  out.tokens.assign(static_cast<size_t>(n), {});
  out.pages.assign(static_cast<size_t>(n), {});
  out.swa_pages.assign(static_cast<size_t>(n), {});
  for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
    StepItem it;
    it.start = r.i64("start");
    it.n_logits = r.i64("n_logits");
    it.state_slot = static_cast<int32_t>(r.i64("state_slot"));
    r.i32s(out.tokens[i], "tokens");
    it.tokens = out.tokens[i].data();
    it.n = static_cast<int64_t>(out.tokens[i].size());
    r.i32s(out.pages[i], "pages");
    it.pages = &out.pages[i];
    if (r.i32s(out.swa_pages[i], "swa_pages", /*optional=*/true)) it.swa_pages = &out.swa_pages[i];
    out.batch.items.push_back(it);
  }
  read_copies(r, out.batch.copies_before, "copies_before");
  read_copies(r, out.batch.copies_after, "copies_after");
  r.end();
}

}  // namespace ft
