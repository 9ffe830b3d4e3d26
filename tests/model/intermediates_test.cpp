// Named intermediates reach the dump hook with stable names and shapes (attn_norm, ffn_inp,
// ffn_norm, ffn_moe_out / ffn_out, l_out per layer; result_norm, result_output), and a fixture GGUF
// rewritten by our own GGUF writer loads into a model giving bit-identical logits.
#include <filesystem>
#include <map>
#include <set>

#include "fixture_util.h"
#include "formats/gguf_reader.h"
#include "formats/gguf_writer.h"

namespace ft::testing {
namespace {

TEST(Intermediates, DumpHookSeesEveryNamedTensor) {
  auto engine = Engine::load(shared_dir() + "/fixtures/hf/qwen2_moe", small_engine_options());
  const ModelConfig& c = engine->config();
  std::map<int64_t, std::set<std::string>> seen;
  std::map<std::string, std::string> shapes;
  engine->set_dump_hook([&](const std::string& name, int64_t layer, const Tensor& t) {
    seen[layer].insert(name);
    shapes[name] = t.shape_str();
  });
  const std::vector<int32_t> prompt = {1, 5, 9, 13, 17};
  generate(*engine, {greedy_request(prompt, 1)});
  for (int64_t l = 0; l < c.n_layer; ++l)
    for (const char* n : {"attn_norm", "kqv_out", "ffn_inp", "ffn_norm", "ffn_moe_out", "l_out"})
      EXPECT_TRUE(seen[l].count(n)) << n << " of layer " << l;
  EXPECT_TRUE(seen[-1].count("result_norm"));
  EXPECT_TRUE(seen[-1].count("result_output"));
  EXPECT_EQ(shapes["l_out"], "[5, 64]");
  EXPECT_EQ(shapes["result_output"], "[5, 512]");  // prompt_logits: every position
}

TEST(GgufRoundTrip, RewrittenFileGivesIdenticalLogits) {
  const std::string src = shared_dir() + "/fixtures/gguf/qwen2_moe/qwen2_moe-q8_0.gguf";
  const std::string dst = scratch_path("roundtrip_qwen2_moe-q8_0.gguf");
  {
    GgufReader r(src);
    GgufWriter w;
    for (const auto& kv : r.kvs()) w.add(kv.key, kv.value);
    for (const auto& t : r.tensors()) w.add_tensor(t.info.name, t.info.dtype, t.info.shape, t.info.data, t.info.bytes);
    w.write(dst);
  }
  const std::vector<RefCase> cases = read_reference(shared_dir() + "/fixtures/hf/qwen2_moe");
  auto a = Engine::load(src, small_engine_options());
  auto b = Engine::load(dst, small_engine_options());
  const auto ra = generate(*a, {greedy_request(cases[0].input_ids, 8)})[0];
  const auto rb = generate(*b, {greedy_request(cases[0].input_ids, 8)})[0];
  EXPECT_EQ(ra.prompt_logits, rb.prompt_logits);
  EXPECT_EQ(ra.tokens, rb.tokens);
  std::filesystem::remove(dst);
}

}  // namespace
}  // namespace ft::testing
