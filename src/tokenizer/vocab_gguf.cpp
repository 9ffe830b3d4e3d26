// Vocab from GGUF metadata (`tokenizer.ggml.*` keys, llama.cpp's gguf-py constants and its
// llama_vocab::impl::load defaults per tokenizer model).
#include <algorithm>
#include <cctype>

#include "tokenizer/vocab.h"
#include "util/error.h"

namespace ft {

struct GgufVocabLoader {
  const nlohmann::json& md;

  const nlohmann::json* get(const char* key) const {
    auto it = md.find(key);
    return it == md.end() || it->is_null() ? nullptr : &*it;
  }

  const nlohmann::json& array(const char* key, bool required) const {
    static const nlohmann::json kEmpty = nlohmann::json::array();
    const nlohmann::json* v = get(key);
    if (!v) {
      if (required) fail(ErrorCode::kInvalidFile, "GGUF metadata: missing {}", key);
      return kEmpty;
    }
    if (!v->is_array()) fail(ErrorCode::kInvalidFile, "GGUF metadata: {} is not an array", key);
    return *v;
  }

  std::string str(const char* key, const std::string& def) const {
    const nlohmann::json* v = get(key);
    if (!v) return def;
    if (!v->is_string()) fail(ErrorCode::kInvalidFile, "GGUF metadata: {} is not a string", key);
    return v->get<std::string>();
  }

  void flag(const char* key, bool& out) const {
    const nlohmann::json* v = get(key);
    if (!v) return;
    if (!v->is_boolean()) fail(ErrorCode::kInvalidFile, "GGUF metadata: {} is not a bool", key);
    out = v->get<bool>();
  }

  void id(const char* key, int32_t& out) const {
    const nlohmann::json* v = get(key);
    if (!v) return;
    if (!v->is_number_integer()) fail(ErrorCode::kInvalidFile, "GGUF metadata: {} is not an integer", key);
    out = static_cast<int32_t>(v->get<int64_t>());
  }

  Vocab load() const {
    Vocab v;
    v.model_ = str("tokenizer.ggml.model", "");
    if (v.model_.empty()) fail(ErrorCode::kInvalidFile, "GGUF metadata: missing tokenizer.ggml.model");
    v.pre_ = str("tokenizer.ggml.pre", "");
    read_tokens(v);

    if (v.model_ == "llama") {
      v.type_ = VocabType::kSpm;
      v.bos_ = 1, v.eos_ = 2, v.unk_ = 0;
      v.add_space_prefix_ = true;
      v.add_bos_ = true;
      v.piece_decode_ = Vocab::PieceDecode::kSpaceEscape;
    } else if (v.model_ == "gpt2" || v.model_ == "gemma4") {
      v.type_ = VocabType::kBpe;
      if (v.model_ == "gemma4") {  // SentencePiece-style BPE on raw UTF-8 (llama.cpp LLAMA_VOCAB_PRE_TYPE_GEMMA4)
        v.pre_ = "gemma4";
        v.whole_newlines_ = true;
        v.byte_fallback_ = true;
        v.add_bos_ = true;
        v.piece_decode_ = Vocab::PieceDecode::kSpaceEscape;
        v.normalizer_.add(Normalizer::Kind::kReplace, " ", "\xE2\x96\x81");
      } else {
        v.byte_level_ = true;
        v.piece_decode_ = Vocab::PieceDecode::kByteLevel;
      }
      v.pre_tokenizer_ = gguf_pre_tokenizer(v.pre_);
      static const char* kLlama3[] = {"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"};
      if (std::find(std::begin(kLlama3), std::end(kLlama3), v.pre_) != std::end(kLlama3)) {
        v.ignore_merges_ = true;
        v.add_bos_ = true;
      }
      read_merges(v);
    } else if (v.model_ == "bert") {
      v.type_ = VocabType::kWordPiece;
      v.bos_ = 101, v.unk_ = 100, v.sep_ = 102, v.pad_ = 0;
      v.add_bos_ = true;
      v.add_sep_ = true;
      v.strip_leading_space_ = true;
      v.piece_decode_ = Vocab::PieceDecode::kSpaceEscape;
      flag("tokenizer.ggml.normalizer.lowercase", v.wordpiece_.lowercase);
      v.wordpiece_.strip_accents = v.wordpiece_.lowercase;
      flag("tokenizer.ggml.normalizer.strip_accents", v.wordpiece_.strip_accents);
    } else {
      fail(ErrorCode::kUnsupported, "GGUF metadata: tokenizer.ggml.model '{}' is not supported (llama, gpt2, bert, gemma4)",
           v.model_);
    }

    flag("tokenizer.ggml.add_space_prefix", v.add_space_prefix_);
    if (v.type_ == VocabType::kSpm) v.strip_leading_space_ = v.add_space_prefix_;
    id("tokenizer.ggml.cls_token_id", v.bos_);
    id("tokenizer.ggml.bos_token_id", v.bos_);
    id("tokenizer.ggml.eos_token_id", v.eos_);
    id("tokenizer.ggml.eot_token_id", v.eot_);
    id("tokenizer.ggml.unknown_token_id", v.unk_);
    id("tokenizer.ggml.seperator_token_id", v.sep_);  // sic: the GGUF key is spelled this way
    id("tokenizer.ggml.padding_token_id", v.pad_);
    flag("tokenizer.ggml.add_bos_token", v.add_bos_);
    flag("tokenizer.ggml.add_eos_token", v.add_eos_);
    flag("tokenizer.ggml.add_sep_token", v.add_sep_);

    apply_phi3_rstrip(v);
    v.finalize();
    return v;
  }

  void read_tokens(Vocab& v) const {
    const nlohmann::json& tokens = array("tokenizer.ggml.tokens", true);
    const nlohmann::json& scores = array("tokenizer.ggml.scores", false);
    const nlohmann::json& types = array("tokenizer.ggml.token_type", false);
    const size_t n = tokens.size();
    if (!scores.empty() && scores.size() < n)
      fail(ErrorCode::kInvalidFile, "GGUF metadata: tokenizer.ggml.scores has {} entries for {} tokens", scores.size(), n);
    if (!types.empty() && types.size() < n)
      fail(ErrorCode::kInvalidFile, "GGUF metadata: tokenizer.ggml.token_type has {} entries for {} tokens",
           types.size(), n);
    v.table_.tokens.resize(n);
    v.table_.index.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      TokenData& t = v.table_.tokens[i];
      if (!tokens[i].is_string()) fail(ErrorCode::kInvalidFile, "GGUF metadata: tokenizer.ggml.tokens[{}] is not a string", i);
      t.text = tokens[i].get<std::string>();
      if (t.text.empty()) t.text = "[EMPTY_" + std::to_string(i) + "]";  // as llama.cpp
      if (!scores.empty()) {
        if (!scores[i].is_number())
          fail(ErrorCode::kInvalidFile, "GGUF metadata: tokenizer.ggml.scores[{}] is not a number", i);
        t.score = scores[i].get<float>();
      }
      if (!types.empty()) {
        if (!types[i].is_number_integer())
          fail(ErrorCode::kInvalidFile, "GGUF metadata: tokenizer.ggml.token_type[{}] is not an integer", i);
        switch (types[i].get<int64_t>()) {
          case 1: t.attr = token_attr::kNormal; break;
          case 2: t.attr = token_attr::kUnknown; break;
          case 3: t.attr = token_attr::kControl; break;
          case 4: t.attr = token_attr::kUserDefined; break;
          case 5: t.attr = token_attr::kUnused; break;
          case 6: t.attr = token_attr::kByte; break;
          default: t.attr = token_attr::kUnused; break;  // undefined
        }
      }
      if (!v.table_.index.emplace(t.text, static_cast<int32_t>(i)).second)
        fail(ErrorCode::kInvalidFile, "GGUF metadata: tokenizer.ggml.tokens[{}] duplicates token {} ('{}')", i,
             v.table_.index.at(t.text), t.text);
    }
  }

  void read_merges(Vocab& v) const {
    const nlohmann::json& merges = array("tokenizer.ggml.merges", true);
    for (size_t i = 0; i < merges.size(); ++i) {
      if (!merges[i].is_string()) fail(ErrorCode::kInvalidFile, "GGUF metadata: tokenizer.ggml.merges[{}] is not a string", i);
      const std::string& m = merges[i].get_ref<const std::string&>();
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos)
        fail(ErrorCode::kInvalidFile, "GGUF metadata: tokenizer.ggml.merges[{}] '{}' has no space", i, m);
      const int32_t l = v.table_.find(std::string_view(m).substr(0, sp));
      const int32_t r = v.table_.find(std::string_view(m).substr(sp + 1));
      const int32_t merged = v.table_.find(m.substr(0, sp) + m.substr(sp + 1));
      if (l >= 0 && r >= 0 && merged >= 0) v.merges_.add(l, r, merged, static_cast<int32_t>(i));
    }
  }

  // llama.cpp sets rstrip on the special tokens of Phi-3 models (by general.name), since the GGUF
  // has no per-token strip flags.
  void apply_phi3_rstrip(Vocab& v) const {
    std::string name = str("general.name", "");
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    if (name.find("phi-3") == std::string::npos && name.find("phi3") == std::string::npos) return;
    for (TokenData& t : v.table_.tokens) {
      if (t.attr & (token_attr::kControl | token_attr::kUserDefined | token_attr::kUnknown)) t.attr |= token_attr::kRstrip;
    }
    auto set = [&](const char* text, bool on) {
      const int32_t id = v.table_.find(text);
      if (id < 0) return;
      if (on) v.table_.tokens[id].attr |= token_attr::kRstrip;
      else v.table_.tokens[id].attr &= ~token_attr::kRstrip;
    };
    set("</s>", true);
    for (const char* t : {"<unk>", "<s>", "<|endoftext|>"}) set(t, false);
  }
};

Vocab Vocab::from_gguf_metadata(const nlohmann::json& md) {
  if (!md.is_object()) fail(ErrorCode::kInvalidArgument, "GGUF metadata must be a JSON object");
  return GgufVocabLoader{md}.load();
}

}  // namespace ft
