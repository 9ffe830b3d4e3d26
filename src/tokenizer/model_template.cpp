#include "tokenizer/model_template.h"

#include <filesystem>

#include "formats/checkpoint.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/vocab.h"
#include "util/error.h"
#include "util/read_file.h"

namespace ft {
namespace {

std::optional<std::string> token_text(const Vocab& v, int32_t id) {
  if (id < 0 || id >= v.n_tokens()) return std::nullopt;
  return v.token(id).text;
}

}  // namespace

ModelTemplate model_chat_template(const Checkpoint& checkpoint, const Vocab& vocab, const std::string& override_file) {
  ModelTemplate t;
  t.bos_token = token_text(vocab, vocab.bos());
  t.eos_token = token_text(vocab, vocab.eos());
  if (!override_file.empty()) {
    if (!std::filesystem::exists(override_file))
      fail(ErrorCode::kNotFound,
           "--chat-template {}: no such file (the flag takes a Jinja template file; llama.cpp's built-in template "
           "names such as chatml are not known here: without the flag the model's own template is used)",
           override_file);
    t.source = read_text_file(override_file);
    t.origin = override_file;
    return t;
  }
  if (checkpoint.format() == "gguf") {
    auto it = checkpoint.metadata().find("tokenizer.chat_template");
    if (it != checkpoint.metadata().end() && it->is_string()) {
      t.source = it->get<std::string>();
      t.origin = "the GGUF metadata";
      return t;
    }
  } else if (auto found = find_chat_template(checkpoint.path())) {
    t.source = *found;
    t.origin = "the model folder";
    return t;
  }
  t.source = kChatMLTemplate;
  t.origin = "built-in ChatML (the model has none)";
  return t;
}

}  // namespace ft
