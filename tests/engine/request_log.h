#pragma once
// RequestLog: the requests a scheduler test submitted and what each generated, shared by the
// scheduler tests' drivers (scheduler_test.cpp, scheduler_swa_test.cpp).
#include <cstdint>
#include <map>
#include <vector>

#include "engine/scheduler.h"

namespace ft::testing {

struct RequestLog {
  /** Submits a request to `s` and remembers its prompt and budget for the solo reference. */
  void submit(Scheduler& s, uint64_t id, std::vector<int32_t> prompt, int32_t max_new, uint64_t after = 0) {
    prompts[id] = prompt;
    max_new_tokens[id] = max_new;
    s.submit(id, std::move(prompt), max_new, after);
  }

  /** Records a token sampled for `id`: at its budget the request finishes (its cached prompt tokens
   *  noted), otherwise the token is appended for the next step. */
  void take(Scheduler& s, uint64_t id, int32_t token) {
    auto& out = generated[id];
    out.push_back(token);
    if (static_cast<int32_t>(out.size()) >= max_new_tokens[id]) {
      cached[id] = s.find(id)->n_cached;
      s.finish(id);
      done.push_back(id);
    } else {
      s.append(id, token);
    }
  }

  std::map<uint64_t, std::vector<int32_t>> prompts, generated;
  std::map<uint64_t, int32_t> max_new_tokens, cached;
  std::vector<uint64_t> done;
};

}  // namespace ft::testing
