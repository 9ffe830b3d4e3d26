// Regex lists for GGUF `tokenizer.ggml.pre` values. The patterns are the tokenizers' own
// definitions (their tokenizer.json Split regexes, as collected in llama.cpp's llama-vocab.cpp,
// llm_tokenizer_bpe); each list runs as a Sequence of Split(pattern, Isolated).
#include <initializer_list>

#include "tokenizer/pretokenizer.h"
#include "util/error.h"

namespace ft {
namespace {

constexpr std::string_view kLlama3 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kQwen2 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kQwen35 =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kGpt2NoTail = R"re('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))re";
constexpr std::string_view kGpt4o =
    R"re([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";
constexpr std::string_view kCjk = R"re([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)re";

bool is_one_of(std::string_view s, std::initializer_list<std::string_view> names) {
  for (auto n : names)
    if (s == n) return true;
  return false;
}

PreTokenizer isolated(std::initializer_list<std::string_view> patterns) {
  PreTokenizer p;
  for (auto pat : patterns) p.add_split(pat, SplitBehavior::kIsolated);
  return p;
}

}  // namespace

PreTokenizer gguf_pre_tokenizer(std::string_view pre) {
  if (pre.empty() || pre == "default") {
    return isolated({R"re([\p{P}\$\+<=>\^~\|]+)re", kGpt2NoTail, R"re(\p{N}+)re", "[0-9][0-9][0-9]"});
  }
  if (is_one_of(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "dbrx", "smaug-bpe", "glm4",
                      "chatglm-bpe"})) {
    return isolated({kLlama3});
  }
  if (is_one_of(pre, {"qwen2", "stablelm2", "deepseek-r1-qwen", "megrez", "hunyuan"})) return isolated({kQwen2});
  if (pre == "qwen35") return isolated({kQwen35});
  if (pre == "deepseek-llm") {
    return isolated({
        R"re([\r\n])re",
        R"re(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)re",
        R"re(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)re",
        R"re(\s+$)re",
        kCjk,
        R"re(\p{N}+)re",
    });
  }
  if (pre == "deepseek-coder") {
    return isolated({R"re([\r\n])re", R"re(\s?\p{L}+)re", R"re(\s?\p{P}+)re", kCjk, R"re(\p{N})re"});
  }
  if (pre == "deepseek-v3") {
    return isolated({
        R"re(\p{N}{1,3})re",
        R"re([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)re",
        R"re([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re",
    });
  }
  if (pre == "falcon") {
    return isolated({R"re([\p{P}\$\+<=>\^~\|`]+)re", kGpt2NoTail, "[0-9][0-9][0-9]"});
  }
  if (is_one_of(pre, {"gpt-2", "mpt", "olmo", "phi-2", "jais", "jina-es", "jina-de", "jina-v2-es", "jina-v2-de",
                      "roberta-bpe", "exaone4"})) {
    return isolated({kGpt2NoTail});
  }
  if (is_one_of(pre, {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"})) {
    return isolated({R"re(\p{N})re", kGpt2NoTail});
  }
  if (is_one_of(pre, {"gpt-4o", "llama4", "minimax-m2"})) return isolated({kGpt4o});
  if (pre == "gemma4") return isolated({R"re([^\n]+|[\n]+)re"});
  fail(ErrorCode::kUnsupported, "tokenizer.ggml.pre '{}' is not a known pre-tokenizer", pre);
}

}  // namespace ft
