#include "tokenizer/vocab.h"

#include <cctype>
#include <unordered_map>

#include "tokenizer/byte_level.h"
#include "tokenizer/spm.h"
#include "tokenizer/utf8.h"
#include "util/error.h"
#include "util/log.h"

namespace ft {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's space

// Token texts that end a turn or a generation (llama.cpp llama_vocab::impl::load, EOT/EOG lists), in
// the order used to pick the EOT token.
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>",        "<|im_end|>", "<|end|>",    "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>",   "<EOT>",      "_<EOT>",     "<|eom_id|>",    "<|return|>",
    "<|call|>",          "<eos>",      "<turn|>",    "<end_of_utterance>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81" "of\xE2\x96\x81" "sentence\xEF\xBD\x9C>",  // DeepSeek
};

}  // namespace

// Per-call buffers: word cache, arena for transformed text, BPE scratch.
struct EncodeState {
  std::deque<std::string> arena;
  std::vector<std::string_view> words;
  std::unordered_map<std::string_view, std::pair<uint32_t, uint32_t>> cache;  // word -> [begin, end) in cache_ids
  std::vector<int32_t> cache_ids;
  std::vector<int32_t> ids;
  std::vector<uint32_t> lens;
  BpeScratch scratch;
};

Vocab::Vocab() = default;
Vocab::Vocab(Vocab&&) noexcept = default;
Vocab& Vocab::operator=(Vocab&&) noexcept = default;
Vocab::~Vocab() = default;

void Vocab::finalize() {
  const int32_t n = table_.size();
  if (n == 0) fail(ErrorCode::kInvalidFile, "tokenizer: the vocabulary has no tokens");
  for (int32_t* id : {&bos_, &eos_, &eot_, &unk_, &pad_, &sep_}) {
    if (*id >= n) {
      spdlog::warn("tokenizer: special token id {} is outside the vocabulary ({} tokens); ignoring it", *id, n);
      *id = -1;
    }
  }
  if (add_bos_ && bos_ < 0) add_bos_ = false;
  if (add_eos_ && eos_ < 0) add_eos_ = false;
  if (add_sep_ && sep_ < 0) add_sep_ = false;

  // End-of-generation tokens; EOT is the first of the list present.
  is_eog_.assign(n, 0);
  for (std::string_view text : kEogTexts) {
    const int32_t id = table_.find(text);
    if (id < 0) continue;
    if (eot_ < 0 && text != "<|return|>" && text != "<|call|>" && text != "<eos>") eot_ = id;
    is_eog_[id] = 1;
  }
  // gpt-oss (o200k_harmony): <|end|> closes a message, not the generation, when <|return|>/<|call|> exist.
  if (table_.find("<|return|>") >= 0 && table_.find("<|call|>") >= 0 && table_.find("<|end|>") >= 0) {
    is_eog_[table_.find("<|end|>")] = 0;
    if (eot_ == table_.find("<|end|>")) eot_ = -1;
  }
  if (eos_ >= 0) is_eog_[eos_] = 1;
  if (eot_ >= 0) is_eog_[eot_] = 1;
  eog_.clear();
  for (int32_t id = 0; id < n; ++id) {
    if (!is_eog_[id]) continue;
    eog_.push_back(id);
    // Like llama.cpp: an end-of-generation token is a control token even if the file says otherwise.
    if (!(table_.tokens[id].attr & (token_attr::kControl | token_attr::kUserDefined)))
      table_.tokens[id].attr |= token_attr::kControl;
  }

  // Decoded bytes of every token.
  pieces_.assign(n, {});
  size_t max_len = 0;
  for (int32_t id = 0; id < n; ++id) {
    const TokenData& t = table_.tokens[id];
    max_len = std::max(max_len, t.text.size());
    std::string& p = pieces_[id];
    if (t.attr & (token_attr::kControl | token_attr::kUnknown | token_attr::kUserDefined)) {
      p = t.text;
    } else if (t.attr & token_attr::kByte) {
      if (t.text.size() == 6 && t.text.compare(0, 3, "<0x") == 0 && t.text[5] == '>' &&
          std::isxdigit(static_cast<unsigned char>(t.text[3])) && std::isxdigit(static_cast<unsigned char>(t.text[4]))) {
        p.assign(1, static_cast<char>(std::stoi(t.text.substr(3, 2), nullptr, 16)));
      } else {
        p = t.text;
      }
    } else if (t.attr & token_attr::kUnused) {
      p.clear();
    } else if (piece_decode_ == PieceDecode::kByteLevel) {
      p = byte_level_decode(t.text);
    } else if (piece_decode_ == PieceDecode::kSpaceEscape) {
      p = t.text;
      replace_all(p, space_escape_, " ");
    } else {
      p = t.text;
    }
  }
  wordpiece_.max_token_len = max_len;

  if (byte_level_) {
    byte_tokens_.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
      std::string s;
      utf8_append(s, byte_to_unicode(static_cast<uint8_t>(b)));
      byte_tokens_[b] = table_.find(s);
    }
  }
  if (type_ == VocabType::kSpm) spm_split_words_ = spm_can_split_words(table_);
  specials_.build(table_);
}

const TokenData& Vocab::token(int32_t id) const {
  if (id < 0 || id >= table_.size())
    fail(ErrorCode::kInvalidArgument, "token id {} is out of range (vocabulary of {} tokens)", id, table_.size());
  return table_.tokens[id];
}

const std::string& Vocab::piece(int32_t id) const {
  token(id);  // range check
  return pieces_[id];
}

bool Vocab::is_special(int32_t id) const {
  return token(id).attr & (token_attr::kControl | token_attr::kUnknown | token_attr::kUnused);
}

bool Vocab::spells_control_token(std::string_view text) const {
  std::vector<Fragment> frags;
  specials_.partition(text, true, frags);
  for (const Fragment& f : frags)
    if (f.token >= 0 && !(token(f.token).attr & token_attr::kUserDefined)) return true;
  return false;
}

bool Vocab::is_eog(int32_t id) const { return id >= 0 && id < table_.size() && is_eog_[id]; }

std::vector<int32_t> Vocab::encode(std::string_view text, const EncodeOptions& opts) const {
  if (size_t bad = utf8_first_invalid(text); bad != std::string_view::npos)
    fail(ErrorCode::kInvalidArgument, "tokenizer input is not valid UTF-8 at byte {} of {}", bad, text.size());
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  if (opts.add_special && add_bos_) out.push_back(bos_);
  std::vector<Fragment> frags;
  specials_.partition(text, opts.parse_special, frags, opts.literal);
  EncodeState st;
  bool prev_special = true;  // SentencePiece: a space prefix before the first text and after specials
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    if (type_ == VocabType::kSpm) {
      std::string s;
      if (add_space_prefix_ && prev_special) s = " ";
      s.append(f.text);
      replace_all(s, " ", kSpaceMark);
      spm_encode(table_, s, unk_, spm_split_words_, out);
    } else if (type_ == VocabType::kWordPiece) {
      wordpiece_encode(table_, f.text, wordpiece_, unk_, out);
    } else {
      encode_text(f.text, f.offset == 0, out, st);
    }
    prev_special = false;
  }
  // The text began with the BOS token itself (parsed as special): kept, as llama.cpp keeps it, but said.
  // (Checked before EOS is added, which may be the same id.)
  if (opts.add_special && add_bos_ && out.size() >= 2 && out[1] == bos_)
    spdlog::warn("tokenizer: the text starts with the BOS token and the model adds one too, so the ids start with 2 BOS "
                 "tokens (drop the text's, or tokenize without special tokens added)");
  if (opts.add_special && add_eos_) out.push_back(eos_);
  if (opts.add_special && add_sep_) out.push_back(sep_);
  return out;
}

void Vocab::encode_text(std::string_view text, bool at_start, std::vector<int32_t>& out, EncodeState& st) const {
  if (!normalizer_.empty()) {
    st.arena.push_back(normalizer_.apply(text));
    text = st.arena.back();
  }
  st.words.clear();
  if (pre_tokenizer_.empty()) st.words.push_back(text);
  else pre_tokenizer_.run(text, at_start, st.words, st.arena);
  for (std::string_view w : st.words) {
    if (w.size() > 256) {  // long words are rare: do not cache
      encode_bpe_word(w, out, st);
      continue;
    }
    auto it = st.cache.find(w);
    if (it != st.cache.end()) {
      out.insert(out.end(), st.cache_ids.begin() + it->second.first, st.cache_ids.begin() + it->second.second);
      continue;
    }
    const size_t begin = out.size();
    encode_bpe_word(w, out, st);
    const auto cb = static_cast<uint32_t>(st.cache_ids.size());
    st.cache_ids.insert(st.cache_ids.end(), out.begin() + begin, out.end());
    st.cache.emplace(w, std::make_pair(cb, static_cast<uint32_t>(st.cache_ids.size())));
  }
}

void Vocab::encode_bpe_word(std::string_view word, std::vector<int32_t>& out, EncodeState& st) const {
  std::vector<int32_t>& ids = st.ids;
  std::vector<uint32_t>& lens = st.lens;
  ids.clear();
  lens.clear();
  if (byte_level_) {
    if (ignore_merges_) {
      const int32_t id = table_.find(byte_level_encode(word));
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    for (char c : word) {
      ids.push_back(byte_tokens_[static_cast<uint8_t>(c)]);
      lens.push_back(1);
    }
  } else {
    if (ignore_merges_ || (whole_newlines_ && word.find_first_not_of('\n') == std::string_view::npos)) {
      const int32_t id = table_.find(word);
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    for (size_t i = 0; i < word.size();) {
      const size_t n = std::min(utf8_seq_len(static_cast<uint8_t>(word[i])), word.size() - i);
      ids.push_back(table_.find(word.substr(i, n)));
      lens.push_back(static_cast<uint32_t>(n));
      i += n;
    }
  }
  merges_.merge(ids, lens, st.scratch);
  size_t pos = 0;
  bool last_unk = false;
  for (size_t k = 0; k < ids.size(); pos += lens[k], ++k) {
    if (ids[k] >= 0) {
      out.push_back(ids[k]);
      last_unk = false;
      continue;
    }
    if (byte_fallback_) {  // HF BPE byte_fallback: <0xXX> per byte, unk if one is missing
      std::vector<int32_t> bytes;
      for (size_t j = pos; j < pos + lens[k]; ++j) {
        const int32_t b = spm_byte_token(table_, static_cast<uint8_t>(word[j]));
        if (b < 0) {
          bytes.clear();
          break;
        }
        bytes.push_back(b);
      }
      if (!bytes.empty()) {
        out.insert(out.end(), bytes.begin(), bytes.end());
        last_unk = false;
        continue;
      }
    }
    if (unk_ >= 0 && !(fuse_unk_ && last_unk)) out.push_back(unk_);
    last_unk = true;
  }
}

std::string Vocab::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string bytes;
  bool first = true;
  const uint32_t special = token_attr::kControl | token_attr::kUnknown | token_attr::kUnused;
  for (int32_t id : ids) {
    if (skip_special && (token(id).attr & special)) continue;
    const std::string& p = piece(id);
    if (first && strip_leading_space_ && !p.empty() && p[0] == ' ') bytes.append(p, 1, std::string::npos);
    else bytes += p;
    if (!p.empty()) first = false;
  }
  return utf8_repaired(bytes);
}

}  // namespace ft
