#pragma once
// The chat template a checkpoint ships: GGUF `tokenizer.chat_template`, or a Hugging Face folder's
// chat_template.jinja / chat_template.json / tokenizer_config.json; ChatML when it has none.
#include <optional>
#include <string>

namespace ft {

class Checkpoint;
class Vocab;

struct ModelTemplate {
  std::string source;  // Jinja text
  std::string origin;  // where it came from, for start-up logs ("the GGUF metadata", a path, ...)
  std::optional<std::string> bos_token, eos_token;  // text of the vocabulary's BOS/EOS (nullopt: it has none)
};

/** Template of `checkpoint` with the BOS/EOS texts of `vocab`; `override_file` (e.g. --chat-template),
 *  when not empty, replaces the checkpoint's template. Throws ft::Error(kNotFound/kIo) naming an
 *  unreadable override file, kInvalidFile for a malformed template file of the folder. */
ModelTemplate model_chat_template(const Checkpoint& checkpoint, const Vocab& vocab,
                                  const std::string& override_file = "");

}  // namespace ft
