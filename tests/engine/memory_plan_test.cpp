// The engine's memory plan (engine/memory_plan.h) on the CPU backend: its figures are the KV cache's,
// the checkpoint's and the buffers' real sizes; --gpu-memory-limit holds a dense model exactly when
// weights + KV + buffers fit and otherwise names what is missing and how many KV tokens would fit; a
// MoE model's plan carries the MoE inputs and the budget, and under a limit one byte short of holding
// everything the token embedding table moves to host memory (--embed-weights auto).
#include "../model/fixture_util.h"
#include "backend/cpu/cpu_ops.h"
#include "formats/checkpoint.h"
#include "model/registry.h"
#include "util/format.h"

namespace ft::testing {
namespace {

std::string fixture(const std::string& name) { return shared_dir() + "/fixtures/hf/" + name; }

int64_t checkpoint_bytes(const Engine& e) {
  int64_t bytes = 0;
  for (const TensorInfo& t : e.checkpoint().tensors()) bytes += t.bytes;
  return bytes;
}

/** The message of the ft::Error loading `dir` under `o` throws (fails the test when it loads). */
std::string load_error(const std::string& dir, const EngineOptions& o, ErrorCode code) {
  try {
    Engine::load(dir, o);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    return e.what();
  }
  ADD_FAILURE() << dir << " loaded";
  return {};
}

TEST(MemoryPlan, DenseFiguresAreTheCachesAndTheCheckpoints) {
  EngineOptions o = small_engine_options();  // 1024 KV tokens in pages of 16, steps of 512 tokens
  auto e = Engine::load(fixture("qwen3"), o);
  const MemoryPlan& p = e->memory_plan();
  const ModelConfig& c = e->config();
  EXPECT_EQ(p.gpu_memory_limit, 0);
  EXPECT_EQ(p.weight_bytes, checkpoint_bytes(*e));
  EXPECT_EQ(p.host_mapped_bytes, 0);  // dense: the table stays under auto
  EXPECT_EQ(p.embed_weights, EmbedPlacement::kAuto);
  EXPECT_EQ(p.placed.weights, p.weight_bytes);
  EXPECT_EQ(p.kv_pages, 64);
  EXPECT_EQ(p.kv_tokens, 1024);
  EXPECT_EQ(p.kv.page_size, 16);
  EXPECT_EQ(p.kv.spare_pages, 0);  // no graphs on the CPU backend
  EXPECT_EQ(p.kv.dtype, DType::F32);
  // F32 keys and values of every layer: the plan's, the cache's and the stats' figure.
  const int64_t per_token = c.n_layer * 2 * c.n_head_kv * c.head_dim * 4;
  EXPECT_EQ(p.kv_bytes_per_token, per_token);
  EXPECT_EQ(p.kv_bytes, 1024 * per_token);
  EXPECT_EQ(p.kv_bytes, e->kv().bytes());
  EXPECT_EQ(p.placed.kv, p.kv_bytes);
  EXPECT_EQ(p.placed.kv_per_token, per_token);
  // Step inputs (ids, positions, sequences [512], starts [17], tables [16 x 64], rows [512]) and the
  // F32 logits [512, n_vocab], plus the forward's buffers.
  const int64_t step_inputs = 4 * (3 * 512 + 17 + 16 * 64 + 512), logits = 512 * c.n_vocab * 4;
  EXPECT_GT(p.placed.buffers, step_inputs + logits);
  EXPECT_EQ(p.placed.workspace, 0);  // the CPU backend has no scratch estimate
  EXPECT_FALSE(p.moe_inputs || p.moe || p.budget);
  EXPECT_EQ(e->moe_plan(), nullptr);
  EXPECT_EQ(&e->placed_memory(), &p.placed);
}

TEST(MemoryPlan, DenseLimitFitsExactlyAndNamesWhatIsMissing) {
  EngineOptions o = small_engine_options();
  PlacedMemory m;
  {
    m = Engine::load(fixture("qwen3"), o)->memory_plan().placed;
  }
  const int64_t need = m.weights + m.kv + m.buffers;
  o.gpu_memory_limit = need;
  EXPECT_EQ(Engine::load(fixture("qwen3"), o)->memory_plan().gpu_memory_limit, need);
  // One byte short: 1023 of the 1024 KV tokens fit.
  o.gpu_memory_limit = need - 1;
  std::string what = load_error(fixture("qwen3"), o, ErrorCode::kOutOfMemory);
  EXPECT_NE(what.find("cannot hold the model: " + format_bytes(m.weights) + " of weights, " + format_bytes(m.kv) +
                      " of KV cache (1024 tokens, --kv-tokens)"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("(1 B missing). Raise --gpu-memory-limit or lower --kv-tokens (about 1023 fit)"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("(or --embed-weights host: the embedding tables, 64.0 KiB, then stay in host memory)"),
            std::string::npos)
      << what;  // qwen3's bf16 token table [512, 64]
  // Less than the weights.
  o.gpu_memory_limit = m.weights - 1;
  what = load_error(fixture("qwen3"), o, ErrorCode::kOutOfMemory);
  EXPECT_NE(what.find("Raise --gpu-memory-limit (the weights alone do not fit)"), std::string::npos) << what;
  // Checked once, by EngineOptions::validate (the engine calls it first), for every model.
  o.gpu_memory_limit = -5;
  EXPECT_EQ(load_error(fixture("qwen3"), o, ErrorCode::kInvalidArgument),
            "--gpu-memory-limit must be > 0 (got -5 bytes)");
  o.gpu_memory_limit = 0;
  o.embed_weights = EmbedPlacement::kHost;
  auto host = Engine::load(fixture("qwen3"), o);  // the table in host memory: weights on the device shrink
  const ModelConfig& c = host->config();
  EXPECT_EQ(host->memory_plan().host_mapped_bytes, c.n_vocab * c.n_embd * 2);  // the fixture's table is bf16
  EXPECT_EQ(host->memory_plan().placed.weights, m.weights - host->memory_plan().host_mapped_bytes);
}

TEST(MemoryPlan, MoePlanCarriesItsBudgetAndTheEmbeddingPlacement) {
  EngineOptions o = small_engine_options();
  o.kv_reserve_tokens = 1024;
  o.embed_weights = EmbedPlacement::kDevice;
  auto e = Engine::load(fixture("qwen3_moe_64e"), o);
  const MemoryPlan& p = e->memory_plan();
  ASSERT_TRUE(p.moe_inputs && p.moe && p.budget);
  EXPECT_EQ(p.moe->strategy, MoeStrategy::kFused);  // no limit on the CPU backend
  EXPECT_EQ(e->moe_plan(), &*p.moe);
  const MoeRuntimeConfig& in = *p.moe_inputs;
  EXPECT_EQ(p.kv_tokens, 1024);
  EXPECT_EQ(p.placed.weights, p.weight_bytes);
  // What the budget holds resident: the weights but the routed experts, the KV beyond the reserve's
  // pool (none here: the pool is the reserve), the step buffers and the backend's workspace.
  EXPECT_EQ(p.budget->resident_bytes, p.placed.weights - p.budget->expert_bytes + p.placed.kv - 1024 * p.placed.kv_per_token +
                                          p.placed.buffers + p.placed.workspace);
  EXPECT_GT(p.budget->gpu_memory_limit, int64_t{1} << 60);  // the CPU backend without --gpu-memory-limit: none
  EXPECT_EQ(in.max_tokens, 512);
  EXPECT_EQ(in.stream_min_tokens, 64);  // max(64, --cuda-graph-max-bs 16 + 1)
  EXPECT_EQ(p.budget->kv_reserve_tokens, 1024);
  EXPECT_EQ(p.budget->kv_bytes_per_token, p.placed.kv_per_token);
  // The limit that holds everything, one byte short: under auto the table moves to host memory and
  // then everything fits (fused); kept on the device, offload.
  const int64_t everything =
      p.budget->resident_bytes + p.budget->kv_bytes_per_token * p.budget->kv_reserve_tokens + p.budget->expert_bytes;
  o.gpu_memory_limit = everything - 1;
  EXPECT_EQ(Engine::load(fixture("qwen3_moe_64e"), o)->memory_plan().moe->strategy, MoeStrategy::kOffload);
  o.embed_weights = EmbedPlacement::kAuto;
  auto host = Engine::load(fixture("qwen3_moe_64e"), o);
  const MemoryPlan& h = host->memory_plan();
  const ModelConfig& c = host->config();
  EXPECT_EQ(h.host_mapped_bytes, c.n_vocab * c.n_embd * 2);
  EXPECT_EQ(h.placed.weights, p.weight_bytes - h.host_mapped_bytes);
  EXPECT_EQ(h.budget->gpu_memory_limit, everything - 1);
  EXPECT_EQ(h.moe->strategy, MoeStrategy::kFused);
  EXPECT_EQ(h.budget->resident_bytes, p.budget->resident_bytes - h.host_mapped_bytes);
}

// The start-up banner's table and /v1/stats' memory rows: each row is a real figure of the plan,
// the device column sums to what the budget holds against the limit, the margin is what is left.
TEST(MemoryPlan, TableRowsAreThePlansFigures) {
  EngineOptions o = small_engine_options();
  o.kv_reserve_tokens = 1024;
  o.embed_weights = EmbedPlacement::kDevice;
  o.moe.strategy = MoeStrategy::kOffload;
  o.moe.cache = {CacheSizeMode::kSlots, 128, 0.0};
  o.gpu_memory_limit = int64_t{1} << 30;
  auto e = Engine::load(fixture("qwen3_moe_64e"), o);
  const MemoryPlan& p = e->memory_plan();
  ASSERT_TRUE(p.moe && p.budget);
  const std::vector<MemoryRow> rows = memory_rows(p);
  auto row = [&](const std::string& name) -> const MemoryRow* {
    for (const MemoryRow& r : rows)
      if (r.name == name) return &r;
    return nullptr;
  };
  ASSERT_TRUE(row("dense weights") && row("routed experts") && row("expert slots") && row("KV cache"));
  EXPECT_EQ(row("dense weights")->device, p.placed.weights - p.budget->expert_bytes);
  EXPECT_EQ(row("routed experts")->device, 0);  // offload: in host banks
  EXPECT_EQ(row("routed experts")->host, p.budget->expert_bytes);
  EXPECT_EQ(row("expert slots")->device, 128 * p.budget->slot_bytes);
  EXPECT_EQ(row("expert slots")->detail, "128 slots of " + format_bytes(p.budget->slot_bytes));
  EXPECT_EQ(row("KV cache")->device, p.kv_bytes);
  EXPECT_EQ(row("token embeddings"), nullptr);  // on the device: in the dense weights
  int64_t device = 0;
  for (const MemoryRow& r : rows) device += r.device;
  EXPECT_EQ(device, p.placed.weights - p.budget->expert_bytes + p.kv_bytes + p.placed.buffers + p.placed.workspace +
                        128 * p.budget->slot_bytes);
  EXPECT_EQ(memory_limit(p), int64_t{1} << 30);
  const std::string table = memory_table(p, "GPU");
  EXPECT_NE(table.find("expert slots"), std::string::npos) << table;
  EXPECT_NE(table.find("  limit                 1.00 GiB "), std::string::npos) << table;
  EXPECT_NE(table.find(format_bytes((int64_t{1} << 30) - device) + " left"), std::string::npos) << table;
  // Fused with no limit: the experts are device rows and there is no limit line.
  o.moe = MoeOptions();
  o.gpu_memory_limit = 0;
  auto f = Engine::load(fixture("qwen3_moe_64e"), o);
  const std::vector<MemoryRow> fr = memory_rows(f->memory_plan());
  ASSERT_GE(fr.size(), 2u);
  EXPECT_EQ(fr[1].name, "routed experts");
  EXPECT_EQ(fr[1].device, f->memory_plan().budget->expert_bytes);
  EXPECT_EQ(fr[1].host, 0);
  EXPECT_EQ(memory_limit(f->memory_plan()), 0);
  EXPECT_EQ(memory_table(f->memory_plan(), "device").find("limit"), std::string::npos);
}

TEST(MemoryPlan, KvCacheLayout) {
  EngineOptions o = small_engine_options();
  o.kv_tokens = 1024;
  CpuOps ops(1);
  const ModelConfig gemma = read_model_config(*open_checkpoint(fixture("gemma4")));
  KvCacheConfig kv = plan_kv_cache(o, gemma, ops, /*spare_page=*/true);
  EXPECT_EQ(kv.page_size, 16);
  EXPECT_EQ(kv.token_budget, 1024);
  EXPECT_EQ(kv.spare_pages, 1);
  EXPECT_EQ(kv.dtype, DType::F32);
  EXPECT_EQ(kv.swa_window(), 8);
  // Sliding-window pool: 16 sequences of a window and two pages each, and one step's tokens.
  EXPECT_EQ(kv.swa_token_budget, 16 * (8 + 2 * 16) + 512);
  o.swa_kv_tokens = 5000;
  EXPECT_EQ(plan_kv_cache(o, gemma, ops, false).swa_token_budget, 5000);
  const ModelConfig next = read_model_config(*open_checkpoint(fixture("qwen3_next")));
  EXPECT_EQ(plan_kv_cache(o, next, ops, false).n_state_slots, 16 + 8);  // running + --state-snapshots
  o.kv_cache_dtype = KvCacheDtype::kBf16;
  try {
    plan_kv_cache(o, next, ops, false);
    ADD_FAILURE() << "bf16 KV on the CPU backend";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_STREQ(e.what(), "--kv-cache-dtype bf16: the CPU backend keeps the KV cache in f32, fp8 or q8_0");
  }
}

// Gemma 4's layers differ: sliding layers of more, narrower KV heads over pages sized for the widest
// layer. Quantized pages keep scales per page head, so a layer needing more scales a token is refused
// at load (plan_kv_cache), naming it, rather than at its first forward.
TEST(MemoryPlan, QuantizedKvRefusesLayersOfMoreScalesThanThePagesHold) {
  EngineOptions o = small_engine_options();
  CpuOps ops(1);
  ModelConfig c = read_model_config(*open_checkpoint(fixture("qwen3")));
  c.n_head_kv = 2, c.head_dim = 64;          // pages: 2 heads of 64 a token
  c.layer_kv_heads = {4, 2}, c.layer_head_dim = {32, 64};  // layer 0: 4 heads of 32
  o.kv_cache_dtype = KvCacheDtype::kQ8_0;                 // 4 x 1 scales (a block of 32) = 2 x 2: fits
  EXPECT_EQ(plan_kv_cache(o, c, ops, false).dtype, DType::Q8_0);
  o.kv_cache_dtype = KvCacheDtype::kFp8;                  // one scale a head: 4 > 2
  try {
    plan_kv_cache(o, c, ops, false);
    ADD_FAILURE() << "fp8 KV with a layer of 4 heads over pages of 2";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_STREQ(e.what(), "--kv-cache-dtype fp8: qwen3 layer 0 attends with 4 KV heads of 32 over pages of 2 heads of "
                           "64 (sized for its widest layer), which hold 2 scales a token and it needs 4; use f32 (auto)");
  }
  o.kv_cache_dtype = KvCacheDtype::kAuto;
  EXPECT_EQ(plan_kv_cache(o, c, ops, false).dtype, DType::F32);
}

/** CpuOps that call themselves the CUDA backend: what plan_kv_cache decides for a CUDA engine. */
class CudaNamedOps final : public CpuOps {
 public:
  explicit CudaNamedOps(DType activations = DType::BF16) : CpuOps(1), activations_(activations) {}
  const char* name() const override { return "cuda"; }
  Device device() const override { return Device::kCuda; }
  DType activation_dtype() const override { return activations_; }

 private:
  DType activations_;
};

TEST(MemoryPlan, QuantizedKvDtypesOnTheCpuAndCuda) {
  EngineOptions o = small_engine_options();
  CpuOps cpu(1);
  CudaNamedOps cuda;
  const ModelConfig qwen3 = read_model_config(*open_checkpoint(fixture("qwen3")));
  o.kv_cache_dtype = KvCacheDtype::kFp8;
  EXPECT_EQ(plan_kv_cache(o, qwen3, cpu, false).dtype, DType::F8_E4M3);
  o.kv_cache_dtype = KvCacheDtype::kQ8_0;
  const KvCacheConfig q8 = plan_kv_cache(o, qwen3, cpu, false);
  EXPECT_EQ(q8.dtype, DType::Q8_0);
  // qwen3's fixture: 2 layers of 2 KV heads of 16: bf16 256 bytes a token, q8_0 16 + 2 a head row.
  KvCacheConfig bf16 = q8;
  bf16.dtype = DType::BF16;
  EXPECT_EQ(KvCache::bytes_per_token(bf16), 2 * 2 * 2 * 16 * 2);
  EXPECT_EQ(KvCache::bytes_per_token(q8), 2 * 2 * 2 * (16 + 2));
  o.kv_cache_dtype = KvCacheDtype::kAuto;  // CUDA: bf16 pages whatever the activations (the default F32)
  EXPECT_EQ(plan_kv_cache(o, qwen3, cuda, false).dtype, DType::BF16);
  EXPECT_EQ(plan_kv_cache(o, qwen3, CudaNamedOps(DType::F32), false).dtype, DType::BF16);
  EXPECT_EQ(plan_kv_cache(o, qwen3, cpu, false).dtype, DType::F32);
  // deepseek_v4's compressed-KV kernels read F32 or BF16 pages whatever the activations: bf16 as the
  // others; qwen4_exp's (attention_qsa) keep the activation dtype
  const ModelConfig v4 = read_model_config(*open_checkpoint(fixture("deepseek_v4")));
  EXPECT_EQ(plan_kv_cache(o, v4, CudaNamedOps(DType::F32), false).dtype, DType::BF16);
  EXPECT_EQ(plan_kv_cache(o, v4, cuda, false).dtype, DType::BF16);
  const ModelConfig qsa = read_model_config(*open_checkpoint(fixture("qwen4_exp")));
  EXPECT_EQ(plan_kv_cache(o, qsa, CudaNamedOps(DType::F32), false).dtype, DType::F32);
  EXPECT_EQ(plan_kv_cache(o, qsa, cuda, false).dtype, DType::BF16);
  // CUDA: standard attention layers (full and sliding-window) take both; the plan sizes the pages
  // from the dtype as on the CPU (KvCache::bytes_for does not depend on the device).
  const ModelConfig gpt_oss = read_model_config(*open_checkpoint(fixture("gpt_oss")));
  for (const ModelConfig* c : {&qwen3, &gpt_oss}) {
    o.kv_cache_dtype = KvCacheDtype::kFp8;
    const KvCacheConfig f = plan_kv_cache(o, *c, cuda, false);
    EXPECT_EQ(f.dtype, DType::F8_E4M3) << c->arch;
    o.kv_cache_dtype = KvCacheDtype::kBf16;
    const KvCacheConfig b = plan_kv_cache(o, *c, cuda, false);
    o.kv_cache_dtype = KvCacheDtype::kQ8_0;
    const KvCacheConfig q = plan_kv_cache(o, *c, cuda, false);
    EXPECT_EQ(q.dtype, DType::Q8_0) << c->arch;
    EXPECT_LT(2 * KvCache::bytes_per_token(q), KvCache::bytes_per_token(b) + KvCache::bytes_per_token(b) / 4) << c->arch;
    EXPECT_LT(2 * KvCache::bytes_per_token(f), KvCache::bytes_per_token(b) + KvCache::bytes_per_token(b) / 2) << c->arch;
    EXPECT_LT(KvCache::bytes_for(q), KvCache::bytes_for(b)) << c->arch;
  }
  EXPECT_EQ(KvCache::bytes_per_token(plan_kv_cache(o, qwen3, cuda, false)), 2 * 2 * 2 * (16 + 2));
  // MLA: the latent and RoPE-key pages quantized on CUDA as on the CPU (attention_mla's CUDA-core
  // kernel reads them), the same bytes a token: deepseek_v3's fixture, 3 layers of latent 32 + RoPE key 8:
  // fp8 (32 + 4) + (8 + 4), q8_0 (32 + 2) + (8 + 2).
  const ModelConfig v3 = read_model_config(*open_checkpoint(fixture("deepseek_v3")));
  for (const std::string dt : {"fp8", "q8_0"}) {
    o.kv_cache_dtype = kv_cache_dtype_from_name(dt).value();
    const DType want = dt == "fp8" ? DType::F8_E4M3 : DType::Q8_0;
    const KvCacheConfig on_cpu = plan_kv_cache(o, v3, cpu, false), on_cuda = plan_kv_cache(o, v3, cuda, false);
    EXPECT_EQ(on_cpu.dtype, want) << dt;
    EXPECT_EQ(on_cuda.dtype, want) << dt;
    EXPECT_EQ(KvCache::bytes_per_token(on_cuda), KvCache::bytes_per_token(on_cpu)) << dt;
    EXPECT_EQ(KvCache::bytes_per_token(on_cuda), dt == "fp8" ? 3 * (36 + 12) : 3 * (34 + 10)) << dt;
  }
  // Compressed KV (compress_kv, attention_compressed and attention_qsa read quantized pages on both
  // backends): planned as the others (the model's value-page layout and its bytes a token:
  // tests/model/kv_dtype_test.cpp).
  for (const ModelConfig* c : {&v4, &qsa})
    for (const std::string dt : {"fp8", "q8_0"}) {
      o.kv_cache_dtype = kv_cache_dtype_from_name(dt).value();
      const DType want = dt == "fp8" ? DType::F8_E4M3 : DType::Q8_0;
      EXPECT_EQ(plan_kv_cache(o, *c, cuda, false).dtype, want) << c->arch << " " << dt;
      EXPECT_EQ(plan_kv_cache(o, *c, cpu, false).dtype, want) << c->arch << " " << dt;
    }
}

}  // namespace
}  // namespace ft::testing
