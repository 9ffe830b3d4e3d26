#include "tools/demo_model.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "formats/gguf_writer.h"
#include "tokenizer/byte_level.h"
#include "util/error.h"

namespace ft {

namespace {

/** splitmix64 stream -> uniform values with standard deviation `std`. */
struct Rng {
  uint64_t state;
  float next(float std) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const double u = static_cast<double>(z >> 11) / 9007199254740992.0;  // [0, 1)
    return static_cast<float>((2.0 * u - 1.0) * std::sqrt(3.0) * std);
  }
};

const char* kDemoTemplate =
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + (message['content'] or '') + "
    "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

}  // namespace

std::string demo_model_gguf(const DemoModelSpec& s) {
  if (s.n_layer < 1 || s.n_expert < 1 || s.n_expert_used < 1 || s.n_expert_used > s.n_expert || s.n_embd < 1 ||
      s.n_head < 1 || s.n_head_kv < 1 || s.n_head % s.n_head_kv != 0 || s.head_dim < 2 || s.head_dim % 2 != 0 ||
      s.n_ff_exp < 1 || s.n_ctx < 2)
    fail(ErrorCode::kInvalidArgument, "demo model: invalid spec (layers {}, experts {}/{}, embd {}, heads {}/{}, head_dim {})",
         s.n_layer, s.n_expert_used, s.n_expert, s.n_embd, s.n_head, s.n_head_kv, s.head_dim);
  GgufWriter w;
  const std::string a = "qwen3moe.";
  w.add("general.architecture", GgufValue::string("qwen3moe"));
  w.add("general.name", GgufValue::string("FreeToken demo (random weights: its text is noise)"));
  w.add(a + "block_count", GgufValue::u32(static_cast<uint32_t>(s.n_layer)));
  w.add(a + "context_length", GgufValue::u32(static_cast<uint32_t>(s.n_ctx)));
  w.add(a + "embedding_length", GgufValue::u32(static_cast<uint32_t>(s.n_embd)));
  w.add(a + "feed_forward_length", GgufValue::u32(static_cast<uint32_t>(s.n_ff_exp)));
  w.add(a + "attention.head_count", GgufValue::u32(static_cast<uint32_t>(s.n_head)));
  w.add(a + "attention.head_count_kv", GgufValue::u32(static_cast<uint32_t>(s.n_head_kv)));
  w.add(a + "attention.key_length", GgufValue::u32(static_cast<uint32_t>(s.head_dim)));
  w.add(a + "attention.value_length", GgufValue::u32(static_cast<uint32_t>(s.head_dim)));
  w.add(a + "attention.layer_norm_rms_epsilon", GgufValue::f32(1e-6f));
  w.add(a + "rope.freq_base", GgufValue::f32(1000000.0f));
  w.add(a + "expert_count", GgufValue::u32(static_cast<uint32_t>(s.n_expert)));
  w.add(a + "expert_used_count", GgufValue::u32(static_cast<uint32_t>(s.n_expert_used)));
  w.add(a + "expert_feed_forward_length", GgufValue::u32(static_cast<uint32_t>(s.n_ff_exp)));

  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(byte_level_encode(std::string(1, static_cast<char>(b))));
    types.push_back(1);  // normal
  }
  for (const char* sp : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.emplace_back(sp);
    types.push_back(3);  // control
  }
  w.add("tokenizer.ggml.model", GgufValue::string("gpt2"));
  w.add("tokenizer.ggml.pre", GgufValue::string("qwen2"));
  w.add("tokenizer.ggml.tokens", GgufValue::string_array(tokens));
  w.add("tokenizer.ggml.token_type", GgufValue::numeric_array(GgufType::I32, types.data(), types.size()));
  w.add("tokenizer.ggml.merges", GgufValue::string_array({}));
  w.add("tokenizer.ggml.bos_token_id", GgufValue::u32(kDemoImStart));
  w.add("tokenizer.ggml.eos_token_id", GgufValue::u32(kDemoImEnd));
  w.add("tokenizer.ggml.padding_token_id", GgufValue::u32(kDemoEndOfText));
  w.add("tokenizer.ggml.add_bos_token", GgufValue::boolean(false));
  w.add("tokenizer.chat_template", GgufValue::string(kDemoTemplate));

  Rng rng{s.seed};
  const int64_t H = s.n_embd, V = kDemoVocab, E = s.n_expert, F = s.n_ff_exp, D = s.head_dim;
  auto tensor = [&](const std::string& name, std::vector<int64_t> shape, float std, float constant = 0.0f) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = std > 0 ? rng.next(std) : constant;
    w.add_tensor(name, DType::F32, shape, v.data(), n * 4);
  };
  const float sd = 1.0f / std::sqrt(static_cast<float>(H));
  tensor("token_embd.weight", {V, H}, 1.0f);
  for (int32_t l = 0; l < s.n_layer; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    tensor(p + "attn_norm.weight", {H}, 0, 1.0f);
    tensor(p + "attn_q.weight", {s.n_head * D, H}, sd);
    tensor(p + "attn_k.weight", {s.n_head_kv * D, H}, sd);
    tensor(p + "attn_v.weight", {s.n_head_kv * D, H}, sd);
    tensor(p + "attn_q_norm.weight", {D}, 0, 1.0f);
    tensor(p + "attn_k_norm.weight", {D}, 0, 1.0f);
    tensor(p + "attn_output.weight", {H, s.n_head * D}, 1.0f / std::sqrt(static_cast<float>(s.n_head * D)));
    tensor(p + "ffn_norm.weight", {H}, 0, 1.0f);
    tensor(p + "ffn_gate_inp.weight", {E, H}, sd);
    tensor(p + "ffn_gate_exps.weight", {E, F, H}, sd);
    tensor(p + "ffn_up_exps.weight", {E, F, H}, sd);
    tensor(p + "ffn_down_exps.weight", {E, H, F}, 1.0f / std::sqrt(static_cast<float>(F)));
  }
  tensor("output_norm.weight", {H}, 0, 1.0f);
  // LM head: rows of printable ASCII (and newline, and the end token) are random and large, the other
  // rows zero, so the noise the demo produces is readable characters that end now and then.
  std::vector<float> head(static_cast<size_t>(V * H), 0.0f);
  for (int64_t v = 0; v < V; ++v) {
    const bool readable = (v >= 32 && v < 127) || v == '\n' || v == kDemoImEnd;
    for (int64_t i = 0; i < H; ++i) {
      const float x = rng.next(4.0f * sd);
      if (readable) head[static_cast<size_t>(v * H + i)] = x;
    }
  }
  w.add_tensor("output.weight", DType::F32, {V, H}, head.data(), V * H * 4);
  return w.serialize();
}

std::string write_demo_model(const DemoModelSpec& spec) {
  const std::string bytes = demo_model_gguf(spec);
  const char* dir = std::getenv("TMPDIR");
  std::string path = std::string(dir && *dir ? dir : "/tmp") + "/freetoken-demo-XXXXXX";
  std::vector<char> buf(path.begin(), path.end());
  buf.push_back('\0');
  const int fd = mkstemp(buf.data());
  if (fd < 0) fail(ErrorCode::kIo, "demo model: cannot create a temporary file {}", path);
  path.assign(buf.data());
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n <= 0) {
      ::close(fd);
      ::unlink(path.c_str());
      fail(ErrorCode::kIo, "demo model: cannot write {}", path);
    }
    off += static_cast<size_t>(n);
  }
  ::close(fd);
  return path;
}

}  // namespace ft
