// llama.cpp's tokenizer test vectors: every .inp/.out pair in data/vocab must match exactly.
// Format (tests/test-tokenizer-0.cpp): the .inp cases are separated by the marker line
// "__ggml_vocab_test__" ("\n__ggml_vocab_test__\n" after each case), the .out holds the ids of each
// case on one line; ids come from Hugging Face tokenizers with add_special_tokens=False, and
// special-token text in the input is parsed as special tokens (parse_special).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "test_util.h"
#include "util/error.h"
#include "tokenizer/spm.h"
#include "tokenizer/utf8.h"
#include "vocab_fixtures.h"

namespace ft::testing {
namespace {

// Vector files whose vocabulary is not in shared/data (the GGUF was too large to fetch; see
// data/MANIFEST.md). Every other .inp must be tested: a new vocabulary without a loader fails.
const std::map<std::string, std::string> kSkipped = {
    {"command-r", "ggml-vocab-command-r.gguf is not in shared/data (>4 MiB)"},
    {"gemma-4", "ggml-vocab-gemma-4.gguf is not in shared/data (>4 MiB)"},
    {"qwen2", "ggml-vocab-qwen2.gguf is not in shared/data (>4 MiB); the qwen2 pre-tokenizer is covered by "
              "fixtures/gguf tokenizer_cases.json"},
    {"qwen35", "ggml-vocab-qwen35.gguf is not in shared/data (>4 MiB)"},
};

std::string ids_str(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

TEST(VocabVectors, EveryVectorFileIsTestedOrListed) {
  const auto names = vocab_vector_names();
  ASSERT_GE(names.size(), 16u) << "llama.cpp's vocabulary test vectors (ggml-vocab-*.gguf.inp) in "
                               << shared_dir() << "/data/vocab: set FT_SHARED_DIR to the shared data folder";
  for (const std::string& n : names) {
    const bool skipped = kSkipped.count(n) > 0;
    EXPECT_NE(shared_vocab(n) != nullptr, skipped) << n << (skipped ? " is listed as skipped but loads" : " has no vocabulary");
  }
}

class VocabVectorTest : public ::testing::TestWithParam<std::string> {};

TEST_P(VocabVectorTest, EncodesExactly) {
  const std::string name = GetParam();
  if (kSkipped.count(name)) GTEST_SKIP() << kSkipped.at(name);
  const Vocab* v = shared_vocab(name);
  ASSERT_NE(v, nullptr);
  const VocabVectors vec = read_vocab_vectors(name);
  ASSERT_EQ(vec.inputs.size(), vec.expected.size()) << name;
  ASSERT_GE(vec.inputs.size(), 10u) << name;
  int failures = 0;
  for (size_t i = 0; i < vec.inputs.size(); ++i) {
    const auto ids = v->encode(vec.inputs[i], {.add_special = false, .parse_special = true});
    EXPECT_EQ(ids, vec.expected[i]) << name << " case " << i << " '" << vec.inputs[i] << "'\n got:" << ids_str(ids)
                                    << "\nwant:" << ids_str(vec.expected[i]);
    failures += ids != vec.expected[i];
  }
  EXPECT_EQ(failures, 0) << name;
}

// Decoding the ids gives the input back for lossless vocabularies (byte-level BPE, SentencePiece
// with byte fallback); WordPiece lowercases and drops accents, so it is excluded.
TEST_P(VocabVectorTest, DecodeRoundTrips) {
  const std::string name = GetParam();
  const Vocab* v = shared_vocab(name);
  if (!v) GTEST_SKIP() << "no vocabulary";
  if (v->type() == VocabType::kWordPiece) GTEST_SKIP() << "WordPiece is lossy";
  const VocabVectors vec = read_vocab_vectors(name);
  for (size_t i = 0; i < vec.inputs.size(); ++i) {
    const std::string& text = vec.inputs[i];
    if (name == "tinyllama") continue;  // contains </s>, which decode(skip_special) drops
    EXPECT_EQ(v->decode(vec.expected[i]), text) << name << " case " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllVocabs, VocabVectorTest, ::testing::ValuesIn(vocab_vector_names()),
                         [](const auto& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           return s;
                         });

TEST(VocabGguf, SpecialTokensAndFlags) {
  const Vocab* spm = shared_vocab("llama-spm");
  ASSERT_NE(spm, nullptr);
  EXPECT_EQ(spm->type(), VocabType::kSpm);
  EXPECT_EQ(spm->n_tokens(), 32000);
  EXPECT_EQ(spm->bos(), 1);
  EXPECT_EQ(spm->eos(), 2);
  EXPECT_EQ(spm->unk(), 0);
  EXPECT_TRUE(spm->add_bos());
  EXPECT_FALSE(spm->add_eos());
  EXPECT_TRUE(spm->is_eog(2));
  // BOS by default; "Hello world" = ▁Hello ▁world.
  EXPECT_EQ(spm->encode("Hello world"), (std::vector<int32_t>{1, 15043, 3186}));
  // Special-token text is plain text unless parse_special.
  const auto plain = spm->encode("a</s>b", {.add_special = false, .parse_special = false});
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 2), 0);
  EXPECT_EQ(spm->encode("a</s>b", {.add_special = false, .parse_special = true}), (std::vector<int32_t>{263, 2, 289}));

  const Vocab* gpt2 = shared_vocab("gpt-2");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ(gpt2->type(), VocabType::kBpe);
  EXPECT_EQ(gpt2->eos(), 50256);
  EXPECT_FALSE(gpt2->add_bos());
  EXPECT_EQ(gpt2->encode("<|endoftext|>", {.add_special = true, .parse_special = true}), (std::vector<int32_t>{50256}));
  EXPECT_GT(gpt2->encode("<|endoftext|>", {.add_special = true, .parse_special = false}).size(), 1u);

  const Vocab* dsc = shared_vocab("deepseek-coder");
  ASSERT_NE(dsc, nullptr);
  EXPECT_TRUE(dsc->add_bos());
  const auto with_bos = dsc->encode("Hello");
  ASSERT_FALSE(with_bos.empty());
  EXPECT_EQ(with_bos.front(), 32013);

  const Vocab* bert = shared_vocab("bert-bge");
  ASSERT_NE(bert, nullptr);
  EXPECT_EQ(bert->type(), VocabType::kWordPiece);
  const auto cls = bert->encode("hello world");  // [CLS] hello world [SEP]
  ASSERT_EQ(cls.size(), 4u);
  EXPECT_EQ(cls.front(), 101);
  EXPECT_EQ(cls.back(), 102);
  EXPECT_EQ(bert->decode(cls), "hello world");
}

TEST(VocabGguf, UserDefinedTokensMatchWithoutParseSpecial) {
  // MPT (GPT-NeoX) stores runs of spaces as user-defined tokens 50254.. (24 spaces) .. 50276 (2 spaces).
  const Vocab* mpt = shared_vocab("mpt");
  ASSERT_NE(mpt, nullptr);
  EXPECT_EQ(mpt->encode("a  b", {.add_special = false, .parse_special = false}),
            mpt->encode("a  b", {.add_special = false, .parse_special = true}));
  EXPECT_EQ(mpt->find("  "), 50276);
  const auto ids = mpt->encode("a  b", {.add_special = false});
  EXPECT_NE(std::find(ids.begin(), ids.end(), 50276), ids.end());
}

TEST(VocabGguf, RejectsBadMetadata) {
  nlohmann::json md;
  EXPECT_THROW(Vocab::from_gguf_metadata(md), Error);
  md["tokenizer.ggml.model"] = "gpt2";
  EXPECT_THROW(Vocab::from_gguf_metadata(md), Error);  // no tokens
  md["tokenizer.ggml.tokens"] = {"a", "b", "ab"};
  EXPECT_THROW(Vocab::from_gguf_metadata(md), Error);  // no merges
  md["tokenizer.ggml.merges"] = {"a b"};
  md["tokenizer.ggml.pre"] = "no-such-pre";
  EXPECT_THROW(Vocab::from_gguf_metadata(md), Error);
  md["tokenizer.ggml.pre"] = "gpt-2";
  const Vocab v = Vocab::from_gguf_metadata(md);
  EXPECT_EQ(v.encode("abab", {.add_special = false}), (std::vector<int32_t>{2, 2}));
  md["tokenizer.ggml.model"] = "rwkv";
  try {
    Vocab::from_gguf_metadata(md);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("rwkv"), std::string::npos);
  }
  md["tokenizer.ggml.model"] = "gpt2";
  md["tokenizer.ggml.tokens"] = {"a", "b", "a"};
  EXPECT_THROW(Vocab::from_gguf_metadata(md), Error);  // duplicate token
}

}  // namespace
}  // namespace ft::testing

namespace ft::testing {
namespace {

// Word-by-word SentencePiece merging (spm_encode split_words) must equal one queue over the text.
TEST(VocabGguf, SpmWordSplitMatchesWholeText) {
  const Vocab* v = shared_vocab("llama-spm");
  ASSERT_NE(v, nullptr);
  TokenTable table;
  for (int32_t id = 0; id < v->n_tokens(); ++id) {
    table.tokens.push_back(v->token(id));
    table.index.emplace(v->token(id).text, id);
  }
  ASSERT_TRUE(spm_can_split_words(table));
  std::string text = " " + mixed_script_text();
  for (size_t p; (p = text.find(' ')) != std::string::npos;) text.replace(p, 1, "\xE2\x96\x81");
  std::vector<int32_t> whole, split;
  spm_encode(table, text, v->unk(), false, whole);
  spm_encode(table, text, v->unk(), true, split);
  EXPECT_EQ(split, whole);
  EXPECT_GT(whole.size(), 1000u);
  // A vocabulary with a token that spans a word start cannot be split.
  table.tokens.push_back({"a\xE2\x96\x81" "b", 0.0f, token_attr::kNormal});
  EXPECT_FALSE(spm_can_split_words(table));
}

}  // namespace
}  // namespace ft::testing

namespace ft::testing {
namespace {

// Gemma 4 style GGUF (tokenizer.ggml.model "gemma4"): BPE on raw UTF-8 with spaces as U+2581, no
// word splitting except at newlines, <0xXX> byte fallback, BOS always. No real vocabulary of this
// kind is in shared/data, so a small synthetic one checks the path.
TEST(VocabGguf, Gemma4StyleBpe) {
  nlohmann::json md;
  md["tokenizer.ggml.model"] = "gemma4";
  md["tokenizer.ggml.tokens"] = {"<pad>", "<eos>", "<bos>", "<0xC3>", "<0xA9>", "\xE2\x96\x81", "h", "i",
                                 "\xE2\x96\x81h", "\xE2\x96\x81hi", "\n\n", "\n"};
  md["tokenizer.ggml.token_type"] = {3, 3, 3, 6, 6, 1, 1, 1, 1, 1, 1, 1};
  md["tokenizer.ggml.merges"] = {"\xE2\x96\x81 h", "\xE2\x96\x81h i"};
  md["tokenizer.ggml.bos_token_id"] = 2;
  md["tokenizer.ggml.eos_token_id"] = 1;
  const Vocab v = Vocab::from_gguf_metadata(md);
  EXPECT_EQ(v.pre(), "gemma4");
  EXPECT_TRUE(v.add_bos());
  const auto ids = v.encode("hi hi\n\nh\xC3\xA9");
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 6, 7, 9, 10, 6, 3, 4}));
  EXPECT_EQ(v.decode(ids), "hi hi\n\nh\xC3\xA9");
  EXPECT_TRUE(v.is_eog(1));
}

}  // namespace
}  // namespace ft::testing
