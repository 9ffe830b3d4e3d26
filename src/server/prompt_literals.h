#pragma once
// A chat prompt's token ids with the messages' own text kept as text: a user, system, developer or tool
// message whose content spells a control token (`<|im_end|>`, `<|eot_id|>`) must not inject that token
// into the prompt, so its bytes in the rendered prompt are tokenized without control-token matching;
// the template's own markup around them still is (issue 38; Hugging Face tokenizers' and llama.cpp's
// `parse_special` applies to the whole string, which lets a message close its own turn).
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/vocab.h"

namespace ft::server {

/** Byte ranges [begin, end) of `prompt` (sorted, disjoint) holding the contents of `messages` (the
 *  validated chat form: role, content a string, null or text parts) with role system, developer, user
 *  or tool that spell a control token of `vocab`, found in message order (a template that trims a
 *  content is matched by the trimmed text). A content the template changed otherwise is not found and
 *  keeps the whole-string behaviour. */
std::vector<std::pair<size_t, size_t>> message_literal_ranges(const Vocab& vocab, std::string_view prompt,
                                                              const nlohmann::ordered_json& messages);

/** `prompt` encoded with control tokens parsed except inside message_literal_ranges. Throws what
 *  Vocab::encode throws. */
std::vector<int32_t> encode_chat_prompt(const Vocab& vocab, std::string_view prompt,
                                        const nlohmann::ordered_json& messages);

}  // namespace ft::server
