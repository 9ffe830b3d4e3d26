#pragma once
// RequestStream: one request's TokenSink and the queue between the engine thread and the HTTP thread
// that serves it. On the engine thread it turns tokens into text (incremental detokenizer), holds back
// text that may become a stop string (StopMatcher) and asks the engine to stop when one matched; the
// HTTP thread waits for what accumulated (text, log-probabilities, the finish) and sends it.
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "engine/service.h"
#include "engine/token_constraint.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/stop_matcher.h"
#include "tokenizer/vocab.h"

namespace ft::server {

/** One sampled token's log-probability and its top alternatives (ids; text via the vocabulary). */
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;
};

/** What accumulated since the last take(). */
struct StreamUpdate {
  std::string text;                   // new output text (stop strings never included)
  std::vector<TokenLogprob> logprobs; // tokens since the last update (only when asked for)
  bool finished = false;
  FinishInfo finish;                  // valid when finished
  int stop_index = -1;                // valid when finished: the stop string that ended the output, or -1
};

/** What the engine thread reported to a stream so far (for the request's log line). */
struct StreamProgress {
  int32_t tokens = 0;  // sampled tokens (an end-of-generation one included, as FinishInfo counts them)
  std::optional<std::chrono::steady_clock::time_point> first_token, last_token;
  std::optional<int32_t> cached_tokens;  // prompt tokens from the prefix cache, once the engine admitted it
  std::optional<FinishInfo> finish;      // once the request finished
};

/** Wakes the one thread that serves several streams (the choices of a request, OpenAI's `n`) when any of
 *  them has news. */
class StreamWaker {
 public:
  /** Counts one piece of news and wakes the waiter. */
  void notify();
  /** News counted so far. */
  uint64_t count();
  /** Waits up to `timeout` for the count to move past `seen`; returns whether it did. */
  bool wait(uint64_t seen, std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t n_ = 0;
};

class RequestStream : public TokenSink {
 public:
  /** `vocab` must outlive the stream. `want_logprobs`: keep each token's log-probability.
   *  `starts_text`: the prompt has no text (prompt_has_text), so the first piece's leading space goes.
   *  `keep_special`: control tokens stay in the text (GenerationParams::keep_special_tokens).
   *  `stop_ids`: end-of-generation ids (vLLM's stop_token_ids) whose log-probability is reported.
   *  `include_stop`: vLLM's include_stop_str_in_output: a stop string that ends the output is kept at its
   *  end, and so is a stop id's text (control tokens still follow `keep_special`).
   *  `min_tokens`: the text of the first min_tokens tokens is not searched for stop strings (as vLLM's
   *  detokenizer; the engine masks the end-of-generation ids as long). */
  RequestStream(const Vocab& vocab, std::vector<std::string> stops, bool want_logprobs, bool starts_text,
                bool keep_special = false, const std::vector<int32_t>& stop_ids = {}, bool include_stop = false,
                int32_t min_tokens = 0);

  /** Text the server writes into the reply itself (a forced tool call's opening and closing,
   *  tool_call_grammar.h): `prefix` starts the reply's text (the first take() returns it; it is not
   *  searched for stop strings), `suffix` ends it when `constraint` is complete as the request finishes
   *  by its end or its length limit (not by a stop string, an error or a cancel). Call before the
   *  request is submitted. */
  void frame(std::string prefix, std::string suffix, std::shared_ptr<const TokenConstraint> constraint);

  /** Also wakes `waker` on news. Call before the request is submitted. */
  void set_waker(std::shared_ptr<StreamWaker> waker) { waker_ = std::move(waker); }

  void on_admitted(int32_t cached_tokens) override;
  bool on_token(const SampledToken& token, bool eog) override;
  void on_finish(const FinishInfo& info) override;

  /** Waits up to `timeout` for news, then moves everything accumulated into `out` (replacing it).
   *  Returns true when there was news (text, log-probabilities or the finish). */
  bool take(StreamUpdate& out, std::chrono::milliseconds timeout);

  /** The tokens, token times and finish seen so far (thread-safe). */
  StreamProgress progress();

 private:
  Detokenizer detok_;
  StopMatcher stops_;
  std::unordered_set<int32_t> stop_ids_;
  bool include_stop_;
  bool want_logprobs_;
  int32_t min_tokens_;
  std::string suffix_;
  std::shared_ptr<const TokenConstraint> constraint_;
  std::shared_ptr<StreamWaker> waker_;
  int32_t n_tokens_ = 0;  // engine thread only
  int stop_index_ = -1;  // engine thread only
  std::mutex mu_;
  std::condition_variable cv_;
  StreamUpdate pending_;
  bool news_ = false;
  StreamProgress progress_;
};

}  // namespace ft::server
