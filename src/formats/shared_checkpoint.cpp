#include "formats/shared_checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <utility>

#include "util/error.h"

namespace ft {
namespace {

/** The shared checkpoint and, when it releases memory, which views released each page of its tensors. */
class SharedPages {
 public:
  SharedPages(std::unique_ptr<Checkpoint> ckpt, int n) : ckpt_(std::move(ckpt)), full_(static_cast<uint8_t>((1u << n) - 1)) {
    if (!ckpt_->releases_memory()) return;  // release() gives nothing back: no bookkeeping
    page_ = static_cast<uintptr_t>(std::max<long>(sysconf(_SC_PAGESIZE), 1));
    // The tensors' memory as segments of whole pages: neighbours closer than 1 MiB share one.
    std::vector<std::pair<uintptr_t, uintptr_t>> spans;
    for (const TensorInfo& t : ckpt_->tensors())
      if (t.data && t.bytes > 0) {
        const auto b = reinterpret_cast<uintptr_t>(t.data);
        spans.emplace_back(b / page_ * page_, (b + static_cast<uintptr_t>(t.bytes) + page_ - 1) / page_ * page_);
      }
    std::sort(spans.begin(), spans.end());
    constexpr uintptr_t kGap = uintptr_t{1} << 20;
    for (const auto& [b, e] : spans) {
      if (!segments_.empty() && b <= segments_.back().end + kGap) {
        segments_.back().end = std::max(segments_.back().end, e);
      } else {
        segments_.push_back({b, e, {}});
      }
    }
    for (Segment& s : segments_) s.masks.assign((s.end - s.begin) / page_, 0);
  }

  const Checkpoint& checkpoint() const { return *ckpt_; }

  /** View `view` reads nothing in [data, data + bytes) any more: the whole pages inside it that every
   *  view has now released go back to the OS. */
  void release(int view, const void* data, int64_t bytes) {
    if (segments_.empty() || bytes <= 0) return;
    const auto p = reinterpret_cast<uintptr_t>(data);
    const uintptr_t first = (p + page_ - 1) / page_ * page_, last = (p + static_cast<uintptr_t>(bytes)) / page_ * page_;
    if (last <= first) return;
    const auto bit = static_cast<uint8_t>(1u << view);
    std::vector<std::pair<uintptr_t, uintptr_t>> runs;  // pages every view released, now free to go
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Segment& s : segments_) {
        const uintptr_t b = std::max(first, s.begin), e = std::min(last, s.end);
        for (uintptr_t a = b; a < e; a += page_) {
          uint8_t& m = s.masks[(a - s.begin) / page_];
          if (m & bit) continue;  // this view released the page before
          m = static_cast<uint8_t>(m | bit);
          if (m != full_) continue;
          if (!runs.empty() && runs.back().second == a) {
            runs.back().second = a + page_;
          } else {
            runs.emplace_back(a, a + page_);
          }
        }
      }
    }
    for (const auto& [b, e] : runs) ckpt_->release(reinterpret_cast<const void*>(b), static_cast<int64_t>(e - b));
  }

 private:
  struct Segment {
    uintptr_t begin = 0, end = 0;  // page-aligned
    std::vector<uint8_t> masks;    // per page: bit v set once view v released it
  };
  std::unique_ptr<Checkpoint> ckpt_;
  uint8_t full_;  // every view's bit
  uintptr_t page_ = 4096;
  std::vector<Segment> segments_;  // by address
  std::mutex mu_;
};

class SharedCheckpointView final : public Checkpoint {
 public:
  SharedCheckpointView(std::shared_ptr<SharedPages> shared, int view) : shared_(std::move(shared)), view_(view) {
    index_tensors();
  }
  std::string format() const override { return shared_->checkpoint().format(); }
  const std::string& path() const override { return shared_->checkpoint().path(); }
  const std::vector<TensorInfo>& tensors() const override { return shared_->checkpoint().tensors(); }
  const nlohmann::json& metadata() const override { return shared_->checkpoint().metadata(); }
  void release(const void* data, int64_t bytes) override { shared_->release(view_, data, bytes); }
  bool releases_memory() const override { return shared_->checkpoint().releases_memory(); }

 private:
  std::shared_ptr<SharedPages> shared_;
  int view_;
};

}  // namespace

std::vector<std::unique_ptr<Checkpoint>> share_checkpoint(std::unique_ptr<Checkpoint> ckpt, int n) {
  if (!ckpt) fail(ErrorCode::kInvalidArgument, "share_checkpoint: no checkpoint");
  if (n < 1 || n > 8) fail(ErrorCode::kInvalidArgument, "share_checkpoint: {} views (1 to 8)", n);
  auto shared = std::make_shared<SharedPages>(std::move(ckpt), n);
  std::vector<std::unique_ptr<Checkpoint>> views;
  for (int v = 0; v < n; ++v) views.push_back(std::make_unique<SharedCheckpointView>(shared, v));
  return views;
}

}  // namespace ft
