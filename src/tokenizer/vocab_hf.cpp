// Vocab from a Hugging Face tokenizer.json (format of the `tokenizers` library: model, normalizer,
// pre_tokenizer, post_processor, decoder, added_tokens) and tokenizer_config.json (transformers).
#include <filesystem>

#include "formats/checkpoint.h"
#include "formats/hf_config.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace ft {

namespace {

const nlohmann::json* field(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

bool flag_or(const nlohmann::json& j, const char* key, bool def) {
  const nlohmann::json* v = field(j, key);
  return v && v->is_boolean() ? v->get<bool>() : def;
}

std::string str_or(const nlohmann::json& j, const char* key, const std::string& def) {
  const nlohmann::json* v = field(j, key);
  return v && v->is_string() ? v->get<std::string>() : def;
}

// tokenizers' Split/Replace pattern: {"String": "..."} or {"Regex": "..."}.
std::pair<std::string, bool> pattern_of(const nlohmann::json& j, const char* what) {
  const nlohmann::json* p = field(j, "pattern");
  if (p && p->is_object()) {
    if (auto s = field(*p, "String"); s && s->is_string()) return {s->get<std::string>(), false};
    if (auto r = field(*p, "Regex"); r && r->is_string()) return {r->get<std::string>(), true};
  }
  fail(ErrorCode::kInvalidFile, "tokenizer.json: {} has no pattern String or Regex", what);
}

SplitBehavior behavior_of(const std::string& b) {
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  fail(ErrorCode::kUnsupported, "tokenizer.json: Split behavior '{}' is not supported", b);
}

// The id of a tokenizer_config token entry: "text" or {"content": "text", ...}.
int32_t config_token(const TokenTable& table, const nlohmann::json& cfg, const char* key) {
  const nlohmann::json* v = field(cfg, key);
  if (!v) return -2;  // absent
  std::string text;
  if (v->is_string()) text = v->get<std::string>();
  else if (v->is_object()) text = str_or(*v, "content", "");
  return text.empty() ? -1 : table.find(text);
}

}  // namespace

struct HfVocabLoader {
  const nlohmann::json& tok;
  const nlohmann::json& cfg;

  Vocab load() const {
    Vocab v;
    v.type_ = VocabType::kBpe;
    v.model_ = "hf";
    const nlohmann::json* model = field(tok, "model");
    if (!model) fail(ErrorCode::kInvalidFile, "tokenizer.json: missing model");
    const std::string type = str_or(*model, "type", "BPE");
    if (type != "BPE") fail(ErrorCode::kUnsupported, "tokenizer.json: model type '{}' is not supported (BPE only)", type);
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
      if (!str_or(*model, k, "").empty()) fail(ErrorCode::kUnsupported, "tokenizer.json: BPE {} is not supported", k);
    }
    read_vocab(v, *model);
    if (auto n = field(tok, "normalizer")) add_normalizer(v, *n);
    if (auto p = field(tok, "pre_tokenizer")) add_pre_tokenizer(v, *p);
    read_merges(v, *model);
    v.byte_fallback_ = flag_or(*model, "byte_fallback", false);
    v.ignore_merges_ = flag_or(*model, "ignore_merges", false);
    v.fuse_unk_ = flag_or(*model, "fuse_unk", false);
    if (auto u = field(*model, "unk_token"); u && u->is_string()) v.unk_ = v.table_.find(u->get<std::string>());
    if (v.byte_fallback_) {
      for (TokenData& t : v.table_.tokens) {
        if (t.attr == token_attr::kNormal && t.text.size() == 6 && t.text.compare(0, 3, "<0x") == 0 && t.text[5] == '>')
          t.attr = token_attr::kByte;
      }
    }
    if (auto d = field(tok, "decoder")) read_decoder(v, *d);
    else if (v.byte_level_) v.piece_decode_ = Vocab::PieceDecode::kByteLevel;
    if (auto p = field(tok, "post_processor")) read_post_processor(v, *p);
    read_config(v);
    v.finalize();
    return v;
  }

  void read_vocab(Vocab& v, const nlohmann::json& model) const {
    const nlohmann::json* vocab = field(model, "vocab");
    if (!vocab || !vocab->is_object()) fail(ErrorCode::kInvalidFile, "tokenizer.json: model.vocab is not an object");
    int64_t max_id = -1;
    for (auto& [text, id] : vocab->items()) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0)
        fail(ErrorCode::kInvalidFile, "tokenizer.json: model.vocab['{}'] is not a non-negative integer", text);
      max_id = std::max(max_id, id.get<int64_t>());
    }
    const nlohmann::json* added = field(tok, "added_tokens");
    if (added && !added->is_array()) fail(ErrorCode::kInvalidFile, "tokenizer.json: added_tokens is not an array");
    if (added) {
      for (const auto& a : *added) {
        auto id = field(a, "id");
        if (!id || !id->is_number_integer() || id->get<int64_t>() < 0)
          fail(ErrorCode::kInvalidFile, "tokenizer.json: added token without a valid id");
        max_id = std::max(max_id, id->get<int64_t>());
      }
    }
    if (max_id >= (1 << 24)) fail(ErrorCode::kInvalidFile, "tokenizer.json: token id {} is implausibly large", max_id);
    v.table_.tokens.assign(static_cast<size_t>(max_id + 1), TokenData{"", 0.0f, token_attr::kUnused});
    for (auto& [text, id] : vocab->items()) {
      TokenData& t = v.table_.tokens[static_cast<size_t>(id.get<int64_t>())];
      t.text = text;
      t.attr = token_attr::kNormal;
    }
    if (added) {
      for (const auto& a : *added) {
        TokenData& t = v.table_.tokens[static_cast<size_t>(a["id"].get<int64_t>())];
        t.text = str_or(a, "content", "");
        t.attr = flag_or(a, "special", false) ? token_attr::kControl : token_attr::kUserDefined;
        if (flag_or(a, "lstrip", false)) t.attr |= token_attr::kLstrip;
        if (flag_or(a, "rstrip", false)) t.attr |= token_attr::kRstrip;
        if (flag_or(a, "single_word", false)) t.attr |= token_attr::kSingleWord;
      }
    }
    for (size_t i = 0; i < v.table_.tokens.size(); ++i) {
      const TokenData& t = v.table_.tokens[i];
      if (!t.text.empty()) v.table_.index.emplace(t.text, static_cast<int32_t>(i));  // first id wins
    }
  }

  void read_merges(Vocab& v, const nlohmann::json& model) const {
    const nlohmann::json* merges = field(model, "merges");
    if (!merges) return;
    if (!merges->is_array()) fail(ErrorCode::kInvalidFile, "tokenizer.json: model.merges is not an array");
    int32_t rank = 0;
    for (const auto& m : *merges) {
      std::string a, b;
      if (m.is_string()) {
        const std::string& s = m.get_ref<const std::string&>();
        const size_t sp = s.find(' ', 1);
        if (sp == std::string::npos) fail(ErrorCode::kInvalidFile, "tokenizer.json: merge {} '{}' has no space", rank, s);
        a = s.substr(0, sp), b = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get<std::string>(), b = m[1].get<std::string>();
      } else {
        fail(ErrorCode::kInvalidFile, "tokenizer.json: merge {} is neither \"a b\" nor [a, b]", rank);
      }
      const int32_t l = v.table_.find(a), r = v.table_.find(b), merged = v.table_.find(a + b);
      if (l >= 0 && r >= 0 && merged >= 0) v.merges_.add(l, r, merged, rank);
      ++rank;
    }
  }

  void add_normalizer(Vocab& v, const nlohmann::json& n) const {
    const std::string type = str_or(n, "type", "");
    using K = Normalizer::Kind;
    if (type == "Sequence") {
      const nlohmann::json* list = field(n, "normalizers");
      if (!list || !list->is_array()) fail(ErrorCode::kInvalidFile, "tokenizer.json: Sequence normalizer without a list");
      for (const auto& x : *list) add_normalizer(v, x);
    } else if (type == "NFC") {
      v.normalizer_.add(K::kNFC);
    } else if (type == "NFD") {
      v.normalizer_.add(K::kNFD);
    } else if (type == "NFKC") {
      v.normalizer_.add(K::kNFKC);
    } else if (type == "NFKD") {
      v.normalizer_.add(K::kNFKD);
    } else if (type == "Lowercase") {
      v.normalizer_.add(K::kLowercase);
    } else if (type == "StripAccents") {
      v.normalizer_.add(K::kStripAccents);
    } else if (type == "Prepend") {
      v.normalizer_.add(K::kPrepend, str_or(n, "prepend", ""));
    } else if (type == "Replace") {
      auto [pat, is_regex] = pattern_of(n, "Replace normalizer");
      v.normalizer_.add(K::kReplace, pat, str_or(n, "content", ""), is_regex);
    } else {
      fail(ErrorCode::kUnsupported, "tokenizer.json: normalizer '{}' is not supported", type);
    }
  }

  void add_pre_tokenizer(Vocab& v, const nlohmann::json& p) const {
    const std::string type = str_or(p, "type", "");
    PreTokenizer& pt = v.pre_tokenizer_;
    if (type == "Sequence") {
      const nlohmann::json* list = field(p, "pretokenizers");
      if (!list || !list->is_array()) fail(ErrorCode::kInvalidFile, "tokenizer.json: Sequence pre-tokenizer without a list");
      for (const auto& x : *list) add_pre_tokenizer(v, x);
    } else if (type == "Split") {
      auto [pat, is_regex] = pattern_of(p, "Split pre-tokenizer");
      pt.add_split(pat, behavior_of(str_or(p, "behavior", "Isolated")), flag_or(p, "invert", false), !is_regex);
    } else if (type == "ByteLevel") {
      pt.add_byte_level(flag_or(p, "add_prefix_space", false), flag_or(p, "use_regex", true));
      v.byte_level_ = true;
    } else if (type == "Metaspace") {
      std::string scheme = str_or(p, "prepend_scheme", "");
      if (scheme.empty()) scheme = flag_or(p, "add_prefix_space", true) ? "always" : "never";  // older files
      pt.add_metaspace(str_or(p, "replacement", "\xE2\x96\x81"), scheme, flag_or(p, "split", true));
    } else if (type == "Digits") {
      pt.add_split(flag_or(p, "individual_digits", false) ? "\\p{N}" : "\\p{N}+", SplitBehavior::kIsolated);
    } else if (type == "WhitespaceSplit") {
      pt.add_split("\\s+", SplitBehavior::kRemoved);
    } else if (type == "Whitespace") {
      pt.add_split("\\w+|[^\\w\\s]+", SplitBehavior::kRemoved, /*invert=*/true);
    } else {
      fail(ErrorCode::kUnsupported, "tokenizer.json: pre-tokenizer '{}' is not supported", type);
    }
  }

  void read_decoder(Vocab& v, const nlohmann::json& d) const {
    const std::string type = str_or(d, "type", "");
    if (type == "Sequence") {
      const nlohmann::json* list = field(d, "decoders");
      if (list && list->is_array())
        for (const auto& x : *list) read_decoder(v, x);
    } else if (type == "ByteLevel") {
      v.piece_decode_ = Vocab::PieceDecode::kByteLevel;
    } else if (type == "Metaspace") {
      v.piece_decode_ = Vocab::PieceDecode::kSpaceEscape;
      v.space_escape_ = str_or(d, "replacement", "\xE2\x96\x81");
      std::string scheme = str_or(d, "prepend_scheme", "");
      if (scheme.empty()) scheme = flag_or(d, "add_prefix_space", true) ? "always" : "never";
      if (scheme != "never") v.strip_leading_space_ = true;
    } else if (type == "Replace") {
      auto [pat, is_regex] = pattern_of(d, "Replace decoder");
      if (is_regex || str_or(d, "content", "") != " ")
        fail(ErrorCode::kUnsupported, "tokenizer.json: Replace decoder other than '<string>' -> ' '");
      v.piece_decode_ = Vocab::PieceDecode::kSpaceEscape;
      v.space_escape_ = pat;
    } else if (type == "Strip") {
      const nlohmann::json* start = field(d, "start");
      if (str_or(d, "content", " ") == " " && start && start->is_number_integer() && start->get<int64_t>() > 0)
        v.strip_leading_space_ = true;
    } else if (type == "ByteFallback" || type == "Fuse") {
      // byte tokens decode to their byte (kByte attribute); pieces are always fused
    } else {
      fail(ErrorCode::kUnsupported, "tokenizer.json: decoder '{}' is not supported", type);
    }
  }

  // TemplateProcessing "single": a leading/trailing SpecialToken means BOS/EOS are added.
  void read_post_processor(Vocab& v, const nlohmann::json& p) const {
    const std::string type = str_or(p, "type", "");
    if (type == "Sequence") {
      if (auto list = field(p, "processors"); list && list->is_array())
        for (const auto& x : *list) read_post_processor(v, x);
      return;
    }
    if (type != "TemplateProcessing") return;
    const nlohmann::json* single = field(p, "single");
    if (!single || !single->is_array() || single->empty()) return;
    auto special_id = [&](const nlohmann::json& item) -> int32_t {
      const nlohmann::json* st = field(item, "SpecialToken");
      return st ? v.table_.find(str_or(*st, "id", "")) : -1;
    };
    if (int32_t id = special_id(single->front()); id >= 0) v.bos_ = id, v.add_bos_ = true;
    if (single->size() > 1)
      if (int32_t id = special_id(single->back()); id >= 0) v.eos_ = id, v.add_eos_ = true;
  }

  void read_config(Vocab& v) const {
    auto set = [&](const char* key, int32_t& out) {
      const int32_t id = config_token(v.table_, cfg, key);
      if (id != -2) out = id;
    };
    set("bos_token", v.bos_);
    set("eos_token", v.eos_);
    set("unk_token", v.unk_);
    set("pad_token", v.pad_);
    v.add_bos_ = flag_or(cfg, "add_bos_token", v.add_bos_);
    v.add_eos_ = flag_or(cfg, "add_eos_token", v.add_eos_);
  }
};

Vocab Vocab::from_hf_json(const nlohmann::json& tokenizer, const nlohmann::json& config) {
  if (!tokenizer.is_object()) fail(ErrorCode::kInvalidFile, "tokenizer.json: not a JSON object");
  return HfVocabLoader{tokenizer, config}.load();
}

Vocab Vocab::from_hf_file(const std::string& tokenizer_json) {
  const nlohmann::json tok = read_json_file(tokenizer_json);
  const auto cfg_path = std::filesystem::path(tokenizer_json).parent_path() / "tokenizer_config.json";
  const nlohmann::json cfg = std::filesystem::exists(cfg_path) ? read_json_file(cfg_path.string()) : nlohmann::json();
  try {
    return from_hf_json(tok, cfg);
  } catch (const Error& e) {
    throw e.with_context(tokenizer_json);
  }
}

Vocab Vocab::from_checkpoint(const Checkpoint& checkpoint) {
  if (checkpoint.format() == "gguf") {
    try {
      return from_gguf_metadata(checkpoint.metadata());
    } catch (const Error& e) {
      throw e.with_context(checkpoint.path());
    }
  }
  const auto path = std::filesystem::path(checkpoint.path()) / "tokenizer.json";
  if (!std::filesystem::exists(path))
    fail(ErrorCode::kNotFound, "{}: no tokenizer.json in the checkpoint folder", checkpoint.path());
  return from_hf_file(path.string());
}

}  // namespace ft
