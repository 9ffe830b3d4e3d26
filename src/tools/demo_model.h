#pragma once
// The built-in demo model of `ft serve` without --model: a small Qwen3-MoE-shaped checkpoint (4 layers,
// 8 experts, top-2 by default) with deterministic pseudo-random weights and a byte-level tokenizer
// (256 byte tokens in GPT-2's byte-to-unicode alphabet, no merges, plus <|endoftext|>, <|im_start|>,
// <|im_end|>) and a ChatML template, written as a GGUF file so it loads like any other model.
// Its text is noise: the weights were never trained.
#include <cstdint>
#include <string>

namespace ft {

struct DemoModelSpec {
  int32_t n_layer = 4;
  int32_t n_expert = 8;
  int32_t n_expert_used = 2;
  int32_t n_embd = 128;
  int32_t n_head = 4;
  int32_t n_head_kv = 2;
  int32_t head_dim = 32;
  int32_t n_ff_exp = 128;   // per-expert FFN width
  int32_t n_ctx = 4096;     // context length
  uint64_t seed = 1919;     // same seed -> same bytes
};

/** Token ids of the demo vocabulary: bytes 0..255, then these. */
inline constexpr int32_t kDemoEndOfText = 256;
inline constexpr int32_t kDemoImStart = 257;
inline constexpr int32_t kDemoImEnd = 258;  // EOS
inline constexpr int32_t kDemoVocab = 259;

/** The demo model as GGUF bytes (arch qwen3moe, F32 weights). Throws ft::Error(kInvalidArgument) for a
 *  spec with non-positive sizes or n_expert_used > n_expert. */
std::string demo_model_gguf(const DemoModelSpec& spec = {});

/** Writes demo_model_gguf(spec) to a new file under $TMPDIR (or /tmp) and returns its path; the caller
 *  removes it (after loading: the mapping stays valid). Throws ft::Error(kIo) when it cannot write. */
std::string write_demo_model(const DemoModelSpec& spec = {});

}  // namespace ft
