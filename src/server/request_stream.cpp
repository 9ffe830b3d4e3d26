#include "server/request_stream.h"

namespace ft::server {

RequestStream::RequestStream(const Vocab& vocab, std::vector<std::string> stops, bool want_logprobs, bool starts_text,
                             bool keep_special, const std::vector<int32_t>& stop_ids, bool include_stop,
                             int32_t min_tokens)
    : detok_(vocab, /*skip_special=*/!keep_special, starts_text),
      stops_(std::move(stops)),
      stop_ids_(stop_ids.begin(), stop_ids.end()),
      include_stop_(include_stop),
      want_logprobs_(want_logprobs),
      min_tokens_(min_tokens) {}

void RequestStream::frame(std::string prefix, std::string suffix, std::shared_ptr<const TokenConstraint> constraint) {
  suffix_ = std::move(suffix);
  constraint_ = std::move(constraint);
  if (prefix.empty()) return;
  std::lock_guard<std::mutex> lk(mu_);
  pending_.text.insert(0, prefix);
  news_ = true;
}

void RequestStream::on_admitted(int32_t cached_tokens) {
  std::lock_guard<std::mutex> lk(mu_);
  progress_.cached_tokens = cached_tokens;
}

bool RequestStream::on_token(const SampledToken& token, bool eog) {
  std::string text;
  bool stopped = false;
  // A stop token id's text stays only with include_stop_str_in_output, as in vLLM's detokenizer; its
  // log-probability is reported either way.
  const bool stop_id = eog && stop_ids_.count(token.id) > 0, as_text = !eog || (stop_id && include_stop_);
  if (as_text && ++n_tokens_ <= min_tokens_) {
    text = stops_.pass(detok_.feed(token.id));
  } else if (as_text) {
    StopMatcher::Result r = stops_.feed(detok_.feed(token.id));
    text = std::move(r.text);
    stopped = r.stopped;
    if (stopped) {
      stop_index_ = r.stop_index;
      if (include_stop_) text += r.stop;
    }
  }
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++progress_.tokens;
    if (!progress_.first_token) progress_.first_token = now;
    progress_.last_token = now;
    pending_.text += text;
    if (want_logprobs_ && (!eog || stop_id)) pending_.logprobs.push_back({token.id, token.logprob, token.top});
    news_ = true;
  }
  cv_.notify_all();
  if (waker_) waker_->notify();
  return !stopped;
}

void RequestStream::on_finish(const FinishInfo& info) {
  std::string tail;
  if (!stops_.stopped()) {
    StopMatcher::Result r = stops_.feed(detok_.flush());
    if (r.stopped) stop_index_ = r.stop_index;
    tail = r.stopped ? std::move(r.text) : r.text + stops_.flush();
    if (r.stopped && include_stop_) tail += r.stop;
  }
  const bool ended = info.reason == FinishReason::kStop || info.reason == FinishReason::kLength;
  if (!suffix_.empty() && ended && stop_index_ < 0 && constraint_ && constraint_->complete()) tail += suffix_;
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.text += tail;
    pending_.finished = true;
    pending_.finish = info;
    pending_.stop_index = stop_index_;
    news_ = true;
    progress_.finish = info;
  }
  cv_.notify_all();
  if (waker_) waker_->notify();
}

void StreamWaker::notify() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++n_;
  }
  cv_.notify_all();
}

uint64_t StreamWaker::count() {
  std::lock_guard<std::mutex> lk(mu_);
  return n_;
}

bool StreamWaker::wait(uint64_t seen, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return n_ != seen; });
}

StreamProgress RequestStream::progress() {
  std::lock_guard<std::mutex> lk(mu_);
  return progress_;
}

bool RequestStream::take(StreamUpdate& out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return news_; });
  const bool had = news_;
  out = std::move(pending_);
  pending_ = StreamUpdate{};
  news_ = false;
  return had;
}

}  // namespace ft::server
