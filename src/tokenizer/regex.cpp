#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace ft {
namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

// Per-thread match data and JIT stack (32 KiB growing to 4 MiB), shared by all patterns.
struct ThreadMatchState {
  pcre2_match_data* md = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* ctx = nullptr;
  ThreadMatchState() {
    md = pcre2_match_data_create(16, nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    ctx = pcre2_match_context_create(nullptr);
    if (ctx && stack) pcre2_jit_stack_assign(ctx, nullptr, stack);
  }
  ~ThreadMatchState() {
    pcre2_match_context_free(ctx);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(md);
  }
};

ThreadMatchState& thread_state() {
  thread_local ThreadMatchState state;
  return state;
}

}  // namespace

Regex::Regex(std::string_view pattern, bool literal) : pattern_(pattern) {
  int err = 0;
  PCRE2_SIZE err_off = 0;
  const uint32_t opts = literal ? (PCRE2_UTF | PCRE2_LITERAL) : (PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(), opts, &err,
                                   &err_off, nullptr);
  if (!code) {
    fail(ErrorCode::kInvalidArgument, "pre-tokenizer regex /{}/: {} at pattern offset {}", pattern_,
         pcre2_message(err), static_cast<size_t>(err_off));
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& out) const {
  auto* code = static_cast<pcre2_code*>(code_);
  ThreadMatchState& st = thread_state();
  if (!st.md) fail(ErrorCode::kOutOfMemory, "pre-tokenizer regex: cannot allocate match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  uint32_t opts = 0;  // the first call checks UTF-8 validity; later calls start on character boundaries
  while (start <= text.size()) {
    int rc = jit_ ? pcre2_jit_match(code, subject, text.size(), start, opts, st.md, st.ctx)
                  : pcre2_match(code, subject, text.size(), start, opts, st.md, st.ctx);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      fail(ErrorCode::kInvalidArgument, "pre-tokenizer regex /{}/ failed at byte {} of a {}-byte piece: {}", pattern_,
           start, text.size(), pcre2_message(rc));
    }
    opts = PCRE2_NO_UTF_CHECK;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.md);
    const size_t b = ov[0], e = ov[1];
    out.emplace_back(b, e);
    if (e > b) {
      start = e;
    } else {
      if (e >= text.size()) break;
      start = e + utf8_seq_len(static_cast<uint8_t>(text[e]));
    }
  }
}

}  // namespace ft
