// fixtures/gguf/*/tokenizer_cases.json: ids from Hugging Face tokenizers for the trained byte-level
// BPE tokenizer (Qwen2 Split regex + ByteLevel). Checked through both loaders: the tokenizer.json
// (+ tokenizer_config.json) and the GGUF written by llama.cpp's converter (tokenizer.ggml.pre qwen2).
#include <gtest/gtest.h>

#include <filesystem>

#include "formats/checkpoint.h"
#include "test_util.h"
#include "util/error.h"
#include "tokenizer/vocab.h"

namespace ft::testing {
namespace {
namespace fs = std::filesystem;

std::vector<std::string> fixture_dirs() {
  std::vector<std::string> dirs;
  const fs::path root = fs::path(shared_dir()) / "fixtures" / "gguf";
  for (const auto& e : fs::directory_iterator(root))
    if (fs::exists(e.path() / "tokenizer_cases.json")) dirs.push_back(e.path().string());
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

void check_cases(const Vocab& v, const nlohmann::json& cases, const std::string& what) {
  ASSERT_GE(cases["cases"].size(), 10u);
  for (const auto& c : cases["cases"]) {
    const std::string text = c["text"];
    const auto want = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(v.encode(text, {.add_special = false, .parse_special = true}), want) << what << ": '" << text << "'";
    if (c.contains("decoded")) {
      EXPECT_EQ(v.decode(want, /*skip_special=*/false), c["decoded"].get<std::string>()) << what;
    }
  }
  const auto& chat = cases["chat_template_example"];
  EXPECT_EQ(v.encode(chat["text"].get<std::string>(), {.add_special = true, .parse_special = true}),
            chat["ids"].get<std::vector<int32_t>>())
      << what;
  EXPECT_EQ(v.bos(), cases["bos_token_id"].get<int32_t>()) << what;
  EXPECT_EQ(v.eos(), cases["eos_token_id"].get<int32_t>()) << what;
  EXPECT_EQ(v.pad(), cases["pad_token_id"].get<int32_t>()) << what;
  EXPECT_EQ(v.add_bos(), cases["add_bos_token"].get<bool>()) << what;
  EXPECT_EQ(v.n_tokens(), cases["vocab_size"].get<int32_t>()) << what;
  EXPECT_TRUE(v.is_eog(v.eos())) << what;
}

TEST(TokenizerCases, HfTokenizerJson) {
  const auto dirs = fixture_dirs();
  ASSERT_FALSE(dirs.empty());
  for (const std::string& dir : dirs) {
    const Vocab v = Vocab::from_hf_file(dir + "/tokenizer.json");
    check_cases(v, nlohmann::json::parse(read_file(dir + "/tokenizer_cases.json")), dir + "/tokenizer.json");
  }
}

TEST(TokenizerCases, GgufMetadata) {
  int checked = 0;
  for (const std::string& dir : fixture_dirs()) {
    const auto cases = nlohmann::json::parse(read_file(dir + "/tokenizer_cases.json"));
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() != ".gguf") continue;
      const Vocab v = Vocab::from_gguf_metadata(open_checkpoint(e.path().string())->metadata());
      EXPECT_EQ(v.pre(), cases["gguf_tokenizer_pre"].get<std::string>());
      check_cases(v, cases, e.path().string());
      ++checked;
    }
  }
  EXPECT_GE(checked, 9 * 2);  // every converted GGUF (f32, bf16, q8_0) of every fixture
}

TEST(TokenizerCases, SpecialTokensOnlyWhenAllowed) {
  const Vocab v = Vocab::from_hf_file(fixture_dirs().front() + "/tokenizer.json");
  const std::string text = "<|im_start|>user\nhi<|im_end|>";
  const auto parsed = v.encode(text, {.add_special = false, .parse_special = true});
  const auto raw = v.encode(text, {.add_special = false, .parse_special = false});
  EXPECT_EQ(parsed.front(), 1);
  EXPECT_EQ(parsed.back(), 2);
  for (int32_t id : raw) EXPECT_GT(id, 2) << "special token matched without parse_special";
  EXPECT_EQ(v.decode(raw), text);  // user text survives as text
  EXPECT_EQ(v.decode(parsed), "user\nhi");
  EXPECT_EQ(v.decode(parsed, /*skip_special=*/false), text);
}

TEST(TokenizerCases, HfJsonComponents) {
  // A small hand-written tokenizer.json: Metaspace + byte fallback (Llama/Mistral style), added tokens
  // with lstrip/rstrip, TemplateProcessing BOS.
  nlohmann::json tok = nlohmann::json::parse(R"({
    "added_tokens": [
      {"id": 0, "content": "<unk>", "special": true},
      {"id": 1, "content": "<s>", "special": true},
      {"id": 2, "content": "</s>", "special": true},
      {"id": 3, "content": "[INST]", "special": true, "lstrip": true, "rstrip": true}
    ],
    "normalizer": null,
    "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": false},
    "post_processor": {"type": "TemplateProcessing",
                       "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]},
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>", "fuse_unk": true,
      "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "[INST]": 3, "<0xC3>": 4, "<0xA9>": 5, "\u2581": 6, "h": 7,
                "i": 8, "\u2581h": 9, "\u2581hi": 10, "x": 11},
      "merges": ["\u2581 h", "\u2581h i"]}
  })");
  const Vocab v = Vocab::from_hf_json(tok);
  EXPECT_TRUE(v.add_bos());
  EXPECT_EQ(v.bos(), 1);
  EXPECT_TRUE(v.strips_leading_space());
  // "hi hi": ▁hi ▁hi with BOS.
  EXPECT_EQ(v.encode("hi hi"), (std::vector<int32_t>{1, 10, 10}));
  // é has no token: byte fallback <0xC3><0xA9>; decoded back to é.
  const auto ids = v.encode("hé", {.add_special = false});
  EXPECT_EQ(ids, (std::vector<int32_t>{9, 4, 5}));
  EXPECT_EQ(v.decode(ids), "hé");
  // [INST] strips the spaces around it; text after it is not "first" (no ▁ prepended).
  EXPECT_EQ(v.encode("hi [INST] hi", {.add_special = false, .parse_special = true}), (std::vector<int32_t>{10, 3, 7, 8}));
  // Unknown characters without byte tokens -> one fused <unk>.
  EXPECT_EQ(v.encode("xq", {.add_special = false}), (std::vector<int32_t>{6, 11, 0}));

  tok["model"]["type"] = "WordPiece";
  EXPECT_THROW(Vocab::from_hf_json(tok), Error);
}

TEST(TokenizerCases, NormalizersNfcNfkc) {
  nlohmann::json tok = nlohmann::json::parse(R"({
    "normalizer": {"type": "NFKC"},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
    "decoder": {"type": "ByteLevel"},
    "model": {"type": "BPE", "vocab": {}, "merges": []}
  })");
  // Use the fixture's byte-level vocabulary instead of building one by hand.
  const auto fixture = nlohmann::json::parse(read_file(fixture_dirs().front() + "/tokenizer.json"));
  tok["model"]["vocab"] = fixture["model"]["vocab"];
  tok["model"]["merges"] = fixture["model"]["merges"];
  const Vocab nfkc = Vocab::from_hf_json(tok);
  // NFKC: "ﬁ" (U+FB01) -> "fi", "①" -> "1", decomposed e + U+0301 -> "é".
  EXPECT_EQ(nfkc.decode(nfkc.encode("ﬁ①e\xCC\x81", {.add_special = false})), "fi1é");
  tok["normalizer"] = {{"type", "NFC"}};
  const Vocab nfc = Vocab::from_hf_json(tok);
  EXPECT_EQ(nfc.decode(nfc.encode("ﬁ①e\xCC\x81", {.add_special = false})), "ﬁ①é");
  tok["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFD"}}, {{"type", "StripAccents"}}, {{"type", "Lowercase"}}}}};
  const Vocab nfd = Vocab::from_hf_json(tok);
  EXPECT_EQ(nfd.decode(nfd.encode("Héllo WÖRLD", {.add_special = false})), "hello world");
}

}  // namespace
}  // namespace ft::testing

namespace ft::testing {
namespace {

TEST(TokenizerCases, FromCheckpoint) {
  const std::string dir = shared_dir() + "/fixtures/gguf/qwen3";
  const Vocab v = Vocab::from_checkpoint(*open_checkpoint(dir + "/qwen3-f32.gguf"));
  EXPECT_EQ(v.encode("Hello world", {.add_special = false}), (std::vector<int32_t>{42, 71, 278, 81, 404, 297}));
  // The HF fixtures carry no tokenizer.json.
  try {
    Vocab::from_checkpoint(*open_checkpoint(shared_dir() + "/fixtures/hf/qwen3"));
    FAIL() << "expected kNotFound";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace ft::testing
