// `ft bench` and the benchmark it runs (tools/benchmark.h): the JSON has the documented keys and
// self-consistent numbers (weight accounting, experts counted per decode step), `--write-gguf`
// writes the in-memory synthetic model byte for byte, and bad requests fail with exit code 2.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <regex>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_ops.h"
#include "backend/device.h"
#include "cli/run_ft.h"
#include "tools/benchmark.h"
#include "util/error.h"
#include "tools/synthetic_checkpoint.h"
#include "formats/checkpoint.h"

namespace ft {
namespace {

const char* kTinyBench =
    "bench --model-preset tiny-moe --dummy-weights --weight-type q8_0 --json --device cpu --prompt-tokens 16 "
    "--gen-tokens 4 --batch 1,3 --copy-mib 8 --threads 1";

TEST(BenchTable, ExplainsACopyShareOverOneHundredPercent) {
  // A model small enough to stay in the CPU's cache reads its weights faster than the copy probe.
  BenchReport r;
  r.device = "cpu", r.copy_bandwidth = 10e9, r.copy_bytes = int64_t{256} << 20;
  BenchBatch b;
  b.batch = 1, b.decode_steps = 10, b.decode_seconds = 0.01, b.weight_bytes_per_step = 20'000'000;  // 20 GB/s
  r.batches = {b};
  const std::string over = bench_table(r);
  EXPECT_NE(over.find("200.0%"), std::string::npos) << over;
  EXPECT_NE(over.find("% copy over 100%: the weights a step reads stay in a cache that is faster than the 256 MiB"),
            std::string::npos) << over;
  r.batches[0].weight_bytes_per_step = 5'000'000;  // 5 GB/s: no note
  const std::string under = bench_table(r);
  EXPECT_NE(under.find("50.0%"), std::string::npos) << under;
  EXPECT_EQ(under.find("over 100%"), std::string::npos) << under;
}

TEST(BenchTable, SaysWhereTheEmbeddingTablesAre) {
  // --embed-weights host moves Qwen4-Exp's n-gram tables with the token table: the weights line says so
  // for both (it tagged the token table only).
  BenchReport r;
  r.device = "cuda", r.copy_bandwidth = 10e9, r.copy_bytes = int64_t{256} << 20;
  r.embedding_bytes = int64_t{1} << 30, r.ngram_table_bytes = int64_t{50} << 30;
  r.embeddings_on_host = true;
  std::string t = bench_table(r);
  EXPECT_NE(t.find("token embedding 1.00 GiB in host memory, n-gram tables 50.00 GiB in host memory"), std::string::npos)
      << t;
  r.embeddings_on_host = false;
  t = bench_table(r);
  EXPECT_NE(t.find("token embedding 1.00 GiB, n-gram tables 50.00 GiB, "), std::string::npos) << t;
}

// The host-memory ceiling of hybrid and cpu: batch x host read rate / (fetched + CPU-read bytes per
// step), in the JSON and as a line under the cache table; absent when the CPU read nothing.
TEST(BenchTable, HostMemoryCeilingCountsBothPathsReads) {
  BenchReport r;
  r.device = "cuda", r.copy_bandwidth = 4000e9, r.h2d_bandwidth = 50e9, r.host_read_bandwidth = 100e9;
  r.host_read_threads = 15;
  BenchBatch b;
  b.batch = 2, b.decode_steps = 10, b.decode_seconds = 0.5, b.moe_cache = true;  // 40 tok/s
  b.moe.bytes = 10'000'000'000, b.moe.cpu_bytes = 30'000'000'000;  // 1 GB fetched + 3 GB read per step
  b.moe.hits = 10, b.moe.cpu_experts = 100;
  r.batches = {b};
  EXPECT_DOUBLE_EQ(host_memory_ceiling(r, r.batches[0]), 2 * 100e9 / 4e9);  // 50 tok/s
  const nlohmann::json j = bench_json(r);
  EXPECT_DOUBLE_EQ(j["host_read_bandwidth_gbs"].get<double>(), 100.0);
  EXPECT_EQ(j["host_read_threads"], 15);
  const nlohmann::json& m = j["results"][0]["moe_cache"];
  EXPECT_DOUBLE_EQ(m["host_ceiling_tokens_per_s"].get<double>(), 50.0);
  EXPECT_DOUBLE_EQ(m["cpu_bytes_per_step"].get<double>(), 3e9);
  EXPECT_DOUBLE_EQ(m["ceiling_tokens_per_s"].get<double>(), 2 * 50e9 / 1e9);  // the link's, fetched bytes only
  const std::string t = bench_table(r);
  EXPECT_NE(t.find("batch 2: host memory ceiling 50.0 tok/s (80.0% reached) = batch x 100.0 GB/s (host memory read "
                   "on 15 threads)"), std::string::npos) << t;
  r.batches[0].moe.cpu_bytes = 0;  // offload: the link's ceiling only
  EXPECT_EQ(host_memory_ceiling(r, r.batches[0]), 0.0);
  EXPECT_TRUE(bench_json(r)["results"][0]["moe_cache"]["host_ceiling_tokens_per_s"].is_null());
  EXPECT_EQ(bench_table(r).find("host memory ceiling"), std::string::npos);
  r.batches[0].moe.cpu_bytes = 1, r.host_read_bandwidth = 0;  // not measured (CPU backend)
  EXPECT_EQ(host_memory_ceiling(r, r.batches[0]), 0.0);
  EXPECT_TRUE(bench_json(r)["host_read_bandwidth_gbs"].is_null());
}

TEST(BenchRun, HostReadProbeMeasuresAndRejectsBadSizes) {
  EXPECT_GT(measure_host_read_bandwidth(int64_t{16} << 20, 2), 1e8);  // any host reads 100 MB/s
  EXPECT_THROW(measure_host_read_bandwidth(1000, 2), Error);
  EXPECT_THROW(measure_host_read_bandwidth(int64_t{16} << 20, 0), Error);
}

TEST(BenchCli, JsonHasTheDocumentedKeys) {
  const Result r = run_ft(kTinyBench);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* key :
       {"model", "arch", "device", "activation_dtype", "weight_type", "n_layer", "n_expert", "n_expert_used",
        "weight_bytes", "dense_bytes", "routed_expert_bytes", "prompt_tokens", "gen_tokens", "copy_bandwidth_gbs",
        "copy_bytes", "peak_host_rss_bytes", "device_memory_bytes", "device_memory_note", "results", "synthetic",
        "sampling"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["sampling"], "greedy");
  EXPECT_EQ(j["arch"], "qwen3_moe");
  EXPECT_EQ(j["weight_type"], "Q8_0");
  EXPECT_EQ(j["synthetic"]["preset"], "tiny-moe");
  EXPECT_TRUE(j["device_memory_bytes"].is_null());
  EXPECT_GT(j["copy_bandwidth_gbs"].get<double>(), 0);
  EXPECT_GT(j["peak_host_rss_bytes"].get<int64_t>(), 0);
  ASSERT_EQ(j["results"].size(), 2u);
  for (const auto& b : j["results"]) {
    for (const char* key : {"batch", "prefill_tokens", "prefill_s", "prefill_tokens_per_s", "decode_steps", "decode_s",
                            "decode_tokens_per_s", "ms_per_step", "experts_per_layer", "experts_source",
                            "weight_bytes_per_step", "achieved_gbs", "bandwidth_fraction"})
      EXPECT_TRUE(b.contains(key)) << key;
    EXPECT_EQ(b["experts_source"], "measured");
    EXPECT_EQ(b["decode_steps"], 4);
    EXPECT_EQ(b["prefill_tokens"], 16 * b["batch"].get<int>());
    EXPECT_GT(b["decode_tokens_per_s"].get<double>(), 0);
  }
  // One token picks exactly top-2 distinct experts; three tokens pick 2..6.
  EXPECT_EQ(j["results"][0]["experts_per_layer"].get<double>(), 2.0);
  const double e3 = j["results"][1]["experts_per_layer"].get<double>();
  EXPECT_GE(e3, 2.0);
  EXPECT_LE(e3, 6.0);
}

// Weights add up (dense + token embedding + routed experts); a prefill-only run (--gen-tokens 0)
// reports no decode figures instead of zeros, in the JSON and in the table.
TEST(BenchCli, WeightPartsAddUpAndPrefillOnlyRunsHaveNoDecodeFigures) {
  const std::string cmd = std::string(kTinyBench).replace(std::string(kTinyBench).find("--gen-tokens 4"), 14,
                                                          "--gen-tokens 0");
  const Result r = run_ft(cmd);
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["embedding_bytes"].get<int64_t>(), 0);
  EXPECT_EQ(j["weight_bytes"].get<int64_t>(), j["dense_bytes"].get<int64_t>() + j["embedding_bytes"].get<int64_t>() +
                                                  j["routed_expert_bytes"].get<int64_t>());
  for (const auto& b : j["results"]) {
    EXPECT_EQ(b["decode_steps"], 0);
    EXPECT_GT(b["prefill_tokens_per_s"].get<double>(), 0);
    for (const char* key : {"decode_tokens_per_s", "ms_per_step", "achieved_gbs", "bandwidth_fraction"})
      EXPECT_TRUE(b[key].is_null()) << key;
  }
  const Result t = run_ft(cmd.substr(0, cmd.find(" --json")) + cmd.substr(cmd.find(" --json") + 7));
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("token embedding"), std::string::npos) << t.out;
  const size_t row = t.out.find("\n     1 ");
  ASSERT_NE(row, std::string::npos) << t.out;
  const std::string line = t.out.substr(row + 1, t.out.find('\n', row + 1) - row - 1);
  EXPECT_EQ(line.find(" 0.0 "), std::string::npos) << line;
  EXPECT_NE(line.find(" - "), std::string::npos) << line;
}

TEST(BenchCli, ExpertCacheCountersCoverTheTimedDecodeOnly) {
  // tiny-moe: 2 layers of 8 experts, top-2; 16 slots hold every expert once the warm-up ran.
  const Result r = run_ft(std::string(kTinyBench) + " --moe-strategy offload --moe-cache-slots 16");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["h2d_bandwidth_gbs"].is_null());  // CPU backend: no host -> device link
  EXPECT_NE(j["moe_plan"].get<std::string>().find("strategy offload, expert cache 16 slots"), std::string::npos)
      << j["moe_plan"];
  // Every expert has a slot, but 2 cache layers predict 1 ahead at most: the default depth 3 says so.
  EXPECT_NE(j["moe_plan"].get<std::string>().find(
                ", next-layer prefetch (--moe-prefetch-depth 3: 2 cache layers predict at most 1 ahead)"),
            std::string::npos)
      << j["moe_plan"];
  EXPECT_EQ(j["moe_strategy"], "offload");  // the plan as fields too
  EXPECT_EQ(j["moe_cache_slots"], 16);
  EXPECT_EQ(j["moe_prefetch_depth"], 1);
  const int64_t L = j["n_layer"].get<int64_t>(), k = j["n_expert_used"].get<int64_t>();
  const nlohmann::json& m = j["results"][0]["moe_cache"];  // batch 1: exactly k distinct experts per layer
  EXPECT_EQ(m["hits"].get<int64_t>(), 4 * L * k);  // 4 decode steps; the prefill's lookups stay out
  EXPECT_EQ(m["misses"].get<int64_t>(), 0);
  EXPECT_EQ(m["hit_rate"].get<double>(), 1.0);
  EXPECT_EQ(m["fetched_bytes_per_step"].get<double>(), 0.0);
  EXPECT_TRUE(m["ceiling_tokens_per_s"].is_null());  // nothing fetched, nothing measured
  const Result cpu = run_ft(std::string(kTinyBench) + " --moe-strategy cpu");
  ASSERT_EQ(cpu.code, 0) << cpu.err;
  const nlohmann::json c = nlohmann::json::parse(cpu.out)["results"][0]["moe_cache"];
  EXPECT_EQ(c["cpu_experts_per_step"].get<double>(), static_cast<double>(L * k));
  // Every expert record of tiny-moe has one size: the bytes read are the experts' records.
  const double record = static_cast<double>(j["routed_expert_bytes"].get<int64_t>()) /
                        static_cast<double>(L * j["n_expert"].get<int64_t>());
  EXPECT_DOUBLE_EQ(c["cpu_bytes_per_step"].get<double>(), static_cast<double>(L * k) * record);
  EXPECT_TRUE(c["host_ceiling_tokens_per_s"].is_null());  // the CPU backend measures no host read rate
  // The executor's time per step: some, and less than the whole step's.
  EXPECT_GT(c["cpu_ms_per_step"].get<double>(), 0.0);
  EXPECT_LT(c["cpu_ms_per_step"].get<double>(), nlohmann::json::parse(cpu.out)["results"][0]["ms_per_step"].get<double>());
  EXPECT_EQ(m["cpu_ms_per_step"].get<double>(), 0.0);  // offload: nothing on the CPU
  EXPECT_EQ(c["hits"].get<int64_t>() + c["misses"].get<int64_t>(), 0);
  const nlohmann::json fused = nlohmann::json::parse(run_ft(kTinyBench).out);
  EXPECT_FALSE(fused["results"][0].contains("moe_cache"));  // fused: no cache block
  EXPECT_EQ(fused["moe_strategy"], "fused");
  EXPECT_EQ(fused["moe_cache_slots"], 0);
}

TEST(BenchCli, Ec12BanksReadFewerBytesPerExpert) {
  // tiny-moe in bf16: every expert is BF16 with dimensions in whole 64-value groups, so auto codes
  // the banks (EC12), and the CPU reads ~75% of a stored record per expert (12 bits a value).
  std::string bf16 = kTinyBench;
  bf16.replace(bf16.find("q8_0"), 4, "bf16");
  const Result ec12 = run_ft(bf16 + " --moe-strategy cpu"), stored = run_ft(bf16 + " --moe-strategy cpu --moe-bank-format stored");
  ASSERT_EQ(ec12.code, 0) << ec12.err;
  ASSERT_EQ(stored.code, 0) << stored.err;
  const nlohmann::json a = nlohmann::json::parse(ec12.out), b = nlohmann::json::parse(stored.out);
  EXPECT_NE(a["moe_plan"].get<std::string>().find("EC12 expert banks"), std::string::npos) << a["moe_plan"];
  EXPECT_EQ(b["moe_plan"].get<std::string>().find("EC12"), std::string::npos) << b["moe_plan"];
  const double coded = a["results"][0]["moe_cache"]["cpu_bytes_per_step"].get<double>();
  const double plain = b["results"][0]["moe_cache"]["cpu_bytes_per_step"].get<double>();
  EXPECT_GT(coded, 0.70 * plain);
  EXPECT_LT(coded, 0.80 * plain);
  // Explicit ec12 on experts it cannot code: refused, naming why.
  const Result q8 = run_ft(std::string(kTinyBench) + " --moe-strategy cpu --moe-bank-format ec12");
  EXPECT_NE(q8.code, 0);
  EXPECT_NE(q8.err.find("but layer 0's experts are Q8_0, not BF16 (use --moe-bank-format stored or auto)"),
            std::string::npos) << q8.err;
  // Auto's choice is a field of its own too.
  EXPECT_EQ(a["moe_bank_format"], "ec12");
  EXPECT_EQ(b["moe_bank_format"], "stored");
  EXPECT_TRUE(nlohmann::json::parse(run_ft(kTinyBench).out)["moe_bank_format"].is_null());  // fused: no banks
}

TEST(BenchCli, DecodeLogWindowsLeaveThePrefillOut) {
  // --decode-log-interval 2 over batches 1 and 2 of tiny-moe (2 layers of 8 experts, top-2): the
  // batch-2 prefill (32 tokens, every expert of a layer) falls inside a window of decode steps. A
  // window's lookups per layer are then at most 2 steps x 2 sequences x top-2 = 8; the prefill's
  // would add up to 8 more.
  const Result r = run_ft(
      "bench --model-preset tiny-moe --dummy-weights --weight-type q8_0 --json --device cpu --prompt-tokens 16 "
      "--gen-tokens 5 --batch 1,2 --copy-mib 8 --threads 1 --moe-strategy hybrid --moe-cache-slots 16 "
      "--moe-fetch-cap 1 --decode-log-interval 2");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::regex layer(R"(L(\d+) (\d+)/(\d+)/[^/]+/(\d+))");
  int windows = 0;
  for (size_t at = r.err.find("moe per layer"); at != std::string::npos; at = r.err.find("moe per layer", at + 1)) {
    const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
    ++windows;
    for (std::sregex_iterator it(line.begin(), line.end(), layer), end; it != end; ++it) {
      const int64_t lookups = std::stoll((*it)[2]) + std::stoll((*it)[3]) + std::stoll((*it)[4]);
      EXPECT_LE(lookups, 8) << line;
      EXPECT_GT(lookups, 0) << line;
    }
  }
  EXPECT_GE(windows, 4) << r.err;  // 5 decode steps per batch size, and the warm-up's
}

namespace {

/** A synthetic model of `preset` in `type` on one thread (`layers` 0: the preset's). */
std::unique_ptr<SyntheticCheckpoint> synthetic(const char* preset, DType type, int64_t layers = 0) {
  SyntheticSpec spec;
  spec.preset = preset;
  spec.weight_type = type;
  spec.threads = 1;
  spec.n_layer = layers;
  return std::make_unique<SyntheticCheckpoint>(spec);
}

/** Benchmark options of a small CPU run: `prompt` tokens, `gen` decode steps, these batch sizes. */
BenchOptions small_bench(int64_t prompt, int64_t gen, std::vector<int32_t> batches) {
  BenchOptions bo;
  bo.prompt_tokens = prompt;
  bo.gen_tokens = gen;
  bo.batches = std::move(batches);
  bo.copy_bytes = 1 << 20;
  bo.threads = 1;
  return bo;
}

}  // namespace

TEST(BenchRun, WeightAccountingMatchesTheCheckpoint) {
  auto ckpt = synthetic("tiny-mixtral", DType::Q4_0);
  int64_t all = 0, experts = 0, embd = 0;
  for (const TensorInfo& t : ckpt->tensors()) {
    all += t.bytes;
    if (t.name.find("_exps.") != std::string::npos) experts += t.bytes;
    if (t.name == "token_embd.weight") embd = t.bytes;
  }
  const BenchOptions bo = small_bench(8, 2, {1, 2});
  EngineOptions eo;
  eo.threads = 1;
  plan_bench_engine(bo, eo);
  EXPECT_EQ(eo.max_seqs, 2);
  EXPECT_EQ(eo.kv_tokens, 2 * 64);  // (8 + 2 + 4 route samples + 1) tokens -> one page each
  Engine engine(std::move(ckpt), std::make_unique<CpuOps>(1), eo);
  const BenchReport r = run_bench(engine, bo);
  EXPECT_EQ(r.weight_bytes, all);
  EXPECT_EQ(r.routed_expert_bytes, experts);
  EXPECT_EQ(r.dense_bytes, all - experts - embd);
  EXPECT_EQ(r.embedding_row_bytes, embd / 512);
  EXPECT_EQ(r.expert_bytes_all_layers, experts / 4);  // 4 experts, both layers
  ASSERT_EQ(r.batches.size(), 2u);
  const BenchBatch& b1 = r.batches[0];
  EXPECT_EQ(b1.experts_per_layer, 2.0);
  EXPECT_EQ(b1.weight_bytes_per_step, r.dense_bytes + r.embedding_row_bytes + 2 * r.expert_bytes_all_layers);
  EXPECT_NEAR(b1.achieved_bandwidth() * b1.decode_seconds, static_cast<double>(b1.weight_bytes_per_step) * 2, 1.0);
  const std::string table = bench_table(r);
  EXPECT_NE(table.find("decode tok/s"), std::string::npos);
  EXPECT_NE(table.find("mixtral"), std::string::npos);
}

TEST(BenchRun, WarmUpPrefillsAsManyTokensAsTheTimedPrefill) {
  // The warm-up's sequences hold the whole prompt plus its decode steps, so the KV is planned for
  // them too; before, the warm-up stopped at 512 prompt tokens and the timed prefill met its shapes
  // first (a 4k prefill on the H200 read ~1.5% slow).
  BenchOptions bo = small_bench(600, 1, {1});
  bo.warmup_steps = 40;
  bo.route_sample_steps = 0;
  EngineOptions eo;
  eo.threads = 1;
  eo.page_size = 16;
  plan_bench_engine(bo, eo);
  EXPECT_EQ(eo.kv_tokens, 656);  // 600 + 40 + 1 = 641 tokens -> 41 pages of 16
  Engine engine(synthetic("tiny-moe", DType::Q8_0, 1), std::make_unique<CpuOps>(1), eo);
  const BenchReport r = run_bench(engine, bo);
  ASSERT_EQ(r.batches.size(), 1u);
  EXPECT_EQ(r.batches[0].prefill_tokens, 600);
}

TEST(BenchCli, MissingGpuIsSaidBeforeTheWeightsAreGenerated) {
  // A fresh-user trial waited 50 s (16 GB of q4_k weights) for this error on a machine without a GPU.
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible: --device cuda would run the benchmark";
  const Result r = run_ft("bench --model-preset qwen3-30b-a3b --dummy-weights --dummy-layers 1 --weight-type q4_k "
                          "--device cuda --prompt-tokens 4 --gen-tokens 1");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("CUDA"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("generated"), std::string::npos) << r.err;  // the synthetic model's log line
}

TEST(BenchCli, StepsSampleAsAsked) {
  // Every step samples on the backend with --temperature / --top-k / --top-p / --min-p (greedy by default).
  const Result r = run_ft(std::string(kTinyBench) + " --temperature 0.7 --top-k 40 --top-p 0.9 --min-p 0.05");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["sampling"], "temperature 0.7, top-k 40, top-p 0.9, min-p 0.05");
  for (const auto& b : j["results"]) EXPECT_EQ(b["decode_steps"], 4);
}

TEST(BenchCli, WriteGgufWritesTheSyntheticModel) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("ft_bench_" + std::to_string(::getpid()) + ".gguf")).string();
  const Result r = run_ft("bench --model-preset tiny-moe --dummy-weights --weight-type q4_k --dummy-router-skew 1 "
                          "--seed 9 --threads 1 --write-gguf " + quote(path));
  ASSERT_EQ(r.code, 0) << r.err;
  // ft bench loads the written file like any GGUF.
  const Result b = run_ft("bench --model " + quote(path) +
                          " --json --device cpu --prompt-tokens 4 --gen-tokens 1 --copy-mib 1 --threads 1");
  ASSERT_EQ(b.code, 0) << b.err;
  EXPECT_EQ(nlohmann::json::parse(b.out)["model"], path);
  auto file = open_checkpoint(path);
  std::filesystem::remove(path);
  SyntheticSpec spec;
  spec.weight_type = DType::Q4_K;
  spec.router_skew = 1;
  spec.seed = 9;
  SyntheticCheckpoint mem(spec);
  ASSERT_EQ(file->tensors().size(), mem.tensors().size());
  for (size_t i = 0; i < mem.tensors().size(); ++i) {
    ASSERT_EQ(file->tensors()[i].bytes, mem.tensors()[i].bytes);
    EXPECT_EQ(std::memcmp(file->tensors()[i].data, mem.tensors()[i].data, static_cast<size_t>(mem.tensors()[i].bytes)), 0);
  }
}

TEST(BenchCli, BadRequestsExitWithCode2) {
  // Exit code 2 and, where given, the text the error must contain; returns the run for more checks.
  auto refused = [](const std::string& args, const std::string& says = "") {
    Result r = run_ft("bench " + args);
    EXPECT_EQ(r.code, 2) << args;
    if (!says.empty()) {
      EXPECT_NE(r.err.find(says), std::string::npos) << args << ": " << r.err;
    }
    return r;
  };
  refused("--model-preset qwen3-30b-a3b --device cpu", "--dummy-weights");
  refused("--model-preset tiny-moe --dummy-weights --batch 1,x --device cpu");
  refused("--model-preset tiny-moe --dummy-weights --weight-type iq2_xxs --device cpu", "Q4_K");
  // Each step-count flag is named in its own error (one message named both, whichever was wrong).
  refused("--model-preset tiny-moe --dummy-weights --device cpu --warmup-steps -1", "--warmup-steps -1 must be >= 0");
  Result r = refused("--model-preset tiny-moe --dummy-weights --device cpu --route-sample-steps -1",
                     "--route-sample-steps -1 must be >= 0");
  EXPECT_EQ(r.err.find("warmup"), std::string::npos) << r.err;
  // --top-k: a fresh-user trial found it accepted and dropped.
  refused("--model-preset tiny-moe --dummy-weights --device cpu --temperature 1 --top-k -5", "--top-k");
  refused("--model-preset tiny-moe --dummy-weights --device cpu --temperature 0.7 --top-p 0", "top_p must be in (0, 1]");
  // The synthetic model's flags with a file are refused, not ignored (a fresh-user trial ran the file's
  // own weights with --weight-type bf16 --dummy-layers 1 and no word).
  refused("--model /nonexistent/model.gguf --dummy-layers 1 --device cpu", "shape a synthetic model");
  refused("--model /nonexistent/model.gguf --weight-type q4_k --device cpu", "shape a synthetic model");
  r = run_ft("bench --list-presets");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("deepseek-v2-lite"), std::string::npos);
  EXPECT_NE(r.out.find("30.5B    3.04B  Qwen/Qwen3-30B-A3B"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find(" 0.0B"), std::string::npos) << r.out;  // tiny presets in millions, not "0.0B"
}

}  // namespace
}  // namespace ft
