// `ft run` with the MoE flags end to end on the qwen3_moe_64e fixture: every strategy prints the
// reference's greedy tokens, --decode-log-interval logs the counters, and bad combinations exit 2
// (bad input) or 3 (out of memory) with a message naming the flags.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "run_ft.h"

namespace ft {
namespace {

struct Fixture {
  std::string dir, ids, greedy;
};

const Fixture& fixture() {
  static const Fixture f = [] {
    Fixture x;
    x.dir = testing::shared_dir() + "/fixtures/hf/qwen3_moe_64e";
    const auto ref = nlohmann::json::parse(testing::read_file(x.dir + "/reference.json"));
    const auto& c = ref.at("cases")[0];
    for (int32_t id : c.at("input_ids").get<std::vector<int32_t>>()) {
      if (!x.ids.empty()) x.ids += ',';
      x.ids += std::to_string(id);
    }
    const auto g = c.at("greedy_new_tokens").get<std::vector<int32_t>>();
    for (size_t i = 0; i < 8; ++i) {
      if (i) x.greedy += ',';
      x.greedy += std::to_string(g[i]);
    }
    return x;
  }();
  return f;
}

Result run_moe(const std::string& flags, const std::string& env = "") {
  const Fixture& f = fixture();
  return run_ft("run --model " + quote(f.dir) + " --prompt-ids " + f.ids +
                    " --max-tokens 8 --temperature 0 --ignore-eos --print-ids --device cpu --threads 1 " + flags,
                env);
}

TEST(RunMoeFlags, EveryStrategyPrintsTheSameTokens) {
  for (const char* flags : {"--moe-strategy fused", "--moe-strategy auto", "--moe-strategy offload --moe-cache-slots 128",
                            "--moe-strategy offload --moe-cache-rate 0.6 --moe-cpu-layers 0,2",
                            "--moe-strategy offload --moe-cache-auto", "--moe-strategy cpu",
                            "--moe-strategy hybrid --moe-fetch-cap 2", "--moe-strategy auto --gpu-memory-limit 0.03",
                            "--moe-strategy offload --moe-cache-slots 128 --moe-prefetch on",
                            "--moe-strategy hybrid --moe-fetch-cap 1 --moe-prefetch on", "--moe-strategy hybrid",
                            "--moe-strategy cpu --moe-cpu-int8 off", "--moe-strategy cpu --moe-cpu-bf16 on",
                            "--moe-strategy cpu --moe-cpu-bf16 auto",
                            "--moe-strategy offload --embed-weights host",
                            "--moe-strategy cpu --moe-bank-format stored"}) {
    SCOPED_TRACE(flags);
    const Result r = run_moe(flags);
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out, fixture().greedy + "\n");
    // --device cpu: offload and hybrid are an emulation there, and say so.
    const bool emulated = std::string(flags).find("offload") != std::string::npos ||
                          std::string(flags).find("hybrid") != std::string::npos;
    EXPECT_EQ(r.err.find("emulates a GPU's expert cache") != std::string::npos, emulated) << r.err;
  }
  // A limit that holds the dense weights and KV but not all experts: auto offloads.
  const Result r = run_moe("--gpu-memory-limit 0.008 --kv-reserve-tokens 1024");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("moe: strategy offload, expert cache"), std::string::npos) << r.err;
}

TEST(RunMoeFlags, DecodeLogInterval) {
  const Result r = run_moe("--moe-strategy offload --moe-cache-slots 128 --decode-log-interval 3");
  ASSERT_EQ(r.code, 0) << r.err;
  // 7 decode steps (the first token comes from prefill): lines after steps 3 and 6.
  size_t n = 0;
  for (size_t p = r.err.find("moe: 3 steps, hit rate "); p != std::string::npos; p = r.err.find("moe: 3 steps", p + 1)) ++n;
  EXPECT_EQ(n, 2u) << r.err;
  EXPECT_NE(r.err.find("moe per layer (hits/misses/fetched/CPU experts): L0 "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" L3 "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(", next-layer prefetch"), std::string::npos) << r.err;  // auto: on for offload
  // The default depth 3 needs 6 x 64 slots or every expert (256) here, and so does 2: the plan says why
  // it runs 1 ahead, naming 256 (what --moe-cache-slots 256 below runs depth 3 with); asked for 1, no note.
  EXPECT_NE(r.err.find("next-layer prefetch (--moe-prefetch-depth 3 needs 256 slots)"), std::string::npos) << r.err;
  const Result d1 = run_moe("--moe-strategy offload --moe-cache-slots 128 --moe-prefetch-depth 1");
  EXPECT_NE(d1.err.find(", next-layer prefetch"), std::string::npos) << d1.err;
  EXPECT_EQ(d1.err.find("needs"), std::string::npos) << d1.err;
  const Result d3 = run_moe("--moe-strategy offload --moe-cache-slots 256");  // every expert: depth 3 runs
  EXPECT_NE(d3.err.find(", prefetch 3 cache layers ahead"), std::string::npos) << d3.err;
  const Result d2 = run_moe("--moe-strategy offload --moe-cache-slots 256 --moe-prefetch-depth 2");
  EXPECT_NE(d2.err.find(", prefetch 2 cache layers ahead"), std::string::npos) << d2.err;
  // Depth 4 is deeper than 4 cache layers reach, and 3 needs 6 x 64 slots (or every expert): with 2 x 64
  // the deepest that fits runs, and the plan says why.
  const Result d4small = run_moe("--moe-strategy offload --moe-cache-slots 128 --moe-prefetch-depth 4");
  EXPECT_NE(d4small.err.find("next-layer prefetch (--moe-prefetch-depth 4: 4 cache layers predict at most 3 ahead, 3 needs 256 "
                                 "slots)"), std::string::npos)
      << d4small.err;
  // Fused has no cache counters: said once at start, not silently ignored.
  const Result fused = run_moe("--moe-strategy fused --decode-log-interval 3");
  ASSERT_EQ(fused.code, 0) << fused.err;
  EXPECT_NE(fused.err.find("--decode-log-interval 3: the fused strategy keeps every expert on the device"),
            std::string::npos) << fused.err;
  EXPECT_EQ(fused.err.find("moe: 3 steps"), std::string::npos) << fused.err;
  EXPECT_EQ(run_moe("--moe-strategy offload --moe-prefetch off").err.find("next-layer prefetch"), std::string::npos);
  const Result hybrid = run_moe("--moe-strategy hybrid --moe-calibrate");  // timed, whatever a file holds
  EXPECT_NE(hybrid.err.find("next-layer prefetch"), std::string::npos) << hybrid.err;  // and for hybrid
  // The fixture's experts are not Q4_K/Q6_K/MXFP4: --moe-cpu-int8 (on by default) changes nothing here.
  EXPECT_NE(hybrid.err.find("int8 activations for Q4_K/Q6_K/MXFP4 unused (no such experts)"), std::string::npos)
      << hybrid.err;
  EXPECT_EQ(run_moe("--moe-strategy hybrid --moe-prefetch off").err.find("next-layer prefetch"), std::string::npos);
  // Hybrid without --moe-fetch-cap times the planner's ten CPU costs at start (offload is auto's
  // candidate only).
  EXPECT_NE(hybrid.err.find("calibrated (misses split between PCIe and the CPU; ms per decode step, cpu 0.125: "),
            std::string::npos) << hybrid.err;
  EXPECT_NE(hybrid.err.find(", cpu 4: "), std::string::npos) << hybrid.err;
  EXPECT_EQ(hybrid.err.find("offload: "), std::string::npos) << hybrid.err;
  EXPECT_EQ(run_moe("--moe-strategy hybrid --moe-fetch-cap 1").err.find("calibrated"), std::string::npos);
  // --moe-cpu-cost pins the planner's costs: no calibration, the split said in the plan line.
  const Result pinned = run_moe("--moe-strategy hybrid --moe-cpu-cost 1,0.25");
  EXPECT_EQ(pinned.err.find("calibrated"), std::string::npos) << pinned.err;
  EXPECT_NE(pinned.err.find("by cost (an expert on the CPU 1 fetches, +0.25 a further token)"), std::string::npos)
      << pinned.err;
  // A prompt shorter than the calibration's own (16 tokens): the engine plans steps of 2 tokens, and
  // the calibration must fit in them (it used to abort start-up).
  const Result tiny = run_ft("run --model " + quote(fixture().dir) +
                             " --prompt-ids 1,2 --max-tokens 3 --temperature 0 --ignore-eos --print-ids --device cpu "
                             "--threads 1 --moe-strategy hybrid --moe-calibrate");
  EXPECT_EQ(tiny.code, 0) << tiny.err;
  EXPECT_NE(tiny.err.find("calibrated"), std::string::npos) << tiny.err;
  // The hybrid calibration's steps stay out of the counters: windows start after it.
  const Result cal = run_moe("--moe-strategy hybrid --decode-log-interval 3 --moe-calibrate");
  ASSERT_EQ(cal.code, 0) << cal.err;
  const size_t calibrated = cal.err.find("calibrated"), first = cal.err.find("moe: 3 steps");
  ASSERT_NE(calibrated, std::string::npos) << cal.err;
  EXPECT_LT(calibrated, first) << cal.err;
  n = 0;
  for (size_t p = first; p != std::string::npos; p = cal.err.find("moe: 3 steps", p + 1)) ++n;
  EXPECT_EQ(n, 2u) << cal.err;
  // Without the flag: no counter lines.
  EXPECT_EQ(run_moe("--moe-strategy offload").err.find("steps, hit rate"), std::string::npos);
}

// The start-up calibration is kept in a file per machine, model and plan (FT_CACHE_DIR here): the next
// start with the same plan reads it instead of timing, --moe-calibrate times again, another plan gets
// its own file, and a corrupt file is reported and replaced.
TEST(RunMoeFlags, TheCalibrationIsKeptPerMachineModelAndPlan) {
  namespace fs = std::filesystem;
  const std::string dir = testing::scratch_path("calibration");
  fs::remove_all(dir);
  const std::string env = "FT_CACHE_DIR=" + quote(dir);
  auto files = [&] {
    std::vector<std::string> out;
    if (fs::exists(dir))
      for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().string());
    return out;
  };
  const Result first = run_moe("--moe-strategy hybrid", env);
  ASSERT_EQ(first.code, 0) << first.err;
  EXPECT_EQ(first.out, fixture().greedy + "\n");
  EXPECT_NE(first.err.find("calibrated (misses split"), std::string::npos) << first.err;
  ASSERT_EQ(files().size(), 1u);
  const std::string file = files()[0];
  const auto kept = nlohmann::json::parse(testing::read_file(file));
  const std::string choice = kept.at("choice").get<std::string>();
  EXPECT_EQ(kept.at("ms_per_step").size(), 10u) << kept.dump();  // cpu 0.125 .. cpu 4
  EXPECT_NE(kept.at("key").get<std::string>().find("qwen3_moe"), std::string::npos) << kept.dump();

  const Result again = run_moe("--moe-strategy hybrid", env);
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.out, fixture().greedy + "\n");
  EXPECT_EQ(again.err.find("calibrated ("), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("moe: " + choice + " from the calibration of " + kept.at("measured_at").get<std::string>() +
                           " in " + file),
            std::string::npos) << again.err;

  const Result forced = run_moe("--moe-strategy hybrid --moe-calibrate", env);
  ASSERT_EQ(forced.code, 0) << forced.err;
  EXPECT_NE(forced.err.find("calibrated (misses split"), std::string::npos) << forced.err;
  EXPECT_EQ(files().size(), 1u);

  const Result other = run_moe("--moe-strategy hybrid --moe-cache-slots 192", env);  // another plan
  ASSERT_EQ(other.code, 0) << other.err;
  EXPECT_NE(other.err.find("calibrated (misses split"), std::string::npos) << other.err;
  EXPECT_EQ(files().size(), 2u);

  std::ofstream(file, std::ios::trunc) << "{\"version\": 1, \"key\": ";
  const Result corrupt = run_moe("--moe-strategy hybrid", env);
  ASSERT_EQ(corrupt.code, 0) << corrupt.err;
  EXPECT_NE(corrupt.err.find("ignoring the calibration file " + file), std::string::npos) << corrupt.err;
  EXPECT_NE(corrupt.err.find("calibrated (misses split"), std::string::npos) << corrupt.err;
  EXPECT_NO_THROW(nlohmann::json::parse(testing::read_file(file)));  // rewritten
  fs::remove_all(dir);
}

TEST(RunMoeFlags, BadCombinationsExitWithAMessage) {
  struct Case {
    const char* flags;
    int code;
    const char* says;
  };
  const Case cases[] = {
      {"--moe-strategy turbo", 2, "--moe-strategy turbo: expected auto, fused, offload, hybrid or cpu"},
      {"--moe-cache-slots 128 --moe-cache-rate 0.5", 2, "are alternatives"},
      {"--moe-cache-auto --moe-cache-slots 128", 2, "are alternatives"},
      {"--moe-strategy fused --moe-cache-slots 128", 2, "--moe-cache-slots needs --moe-strategy auto, offload or hybrid"},
      {"--moe-strategy cpu --moe-cpu-layers 1", 2, "--moe-cpu-layers needs"},
      {"--moe-strategy offload --moe-fetch-cap 1", 2, "--moe-fetch-cap needs --moe-strategy hybrid"},
      {"--moe-strategy offload --moe-cpu-cost 1", 2, "--moe-cpu-cost needs --moe-strategy hybrid"},
      {"--moe-strategy hybrid --moe-cpu-cost 0", 2, "--moe-cpu-cost 0: expected C in (0, 1000]"},
      {"--moe-strategy hybrid --moe-fetch-cap 65", 2, "--moe-fetch-cap 65 exceeds the 64 experts of a layer"},
      {"--moe-cache-rate 1.5", 2, "--moe-cache-rate 1.5 must be in (0, 1]"},
      {"--moe-prefetch yes", 2, "--moe-prefetch yes must be auto, on or off"},
      {"--moe-strategy offload --moe-prefetch-depth 5", 2, "--moe-prefetch-depth 5 must be 1 to 4"},
      {"--moe-strategy offload --moe-prefetch-depth 0", 2, "--moe-prefetch-depth 0 must be 1 to 4"},
      {"--moe-strategy fused --moe-prefetch-depth 1", 2, "--moe-prefetch-depth needs --moe-strategy auto, offload or hybrid (fused"},
      {"--moe-strategy cpu --moe-prefetch-depth 2", 2, "--moe-prefetch-depth needs --moe-strategy auto, offload or hybrid (cpu"},
      {"--moe-strategy offload --moe-prefetch off --moe-prefetch-depth 2", 2, "there is no prefetch to deepen"},
      {"--moe-strategy offload --moe-calibrate", 2, "--moe-calibrate needs --moe-strategy auto or hybrid (offload"},
      {"--moe-strategy hybrid --moe-fetch-cap 1 --moe-calibrate", 2, "--moe-calibrate with --moe-fetch-cap"},
      {"--moe-strategy hybrid --moe-cpu-cost 1 --moe-calibrate", 2, "--moe-calibrate with --moe-cpu-cost"},
      {"--embed-weights pinned", 2, "--embed-weights"},
      {"--moe-strategy cpu --moe-cpu-int8 yes", 2, "--moe-cpu-int8 yes must be on or off"},
      {"--moe-strategy cpu --moe-cpu-bf16 1", 2, "--moe-cpu-bf16 1 must be auto, on or off"},
      {"--moe-bank-format zip", 2, "--moe-bank-format 'zip' must be auto, stored or ec12"},
      {"--moe-strategy fused --moe-bank-format ec12", 2, "--moe-bank-format ec12 needs expert banks"},
      {"--moe-strategy cpu --moe-bank-format ec12", 2, "but layer 0's expert matrices are [48, 128], not multiples"},
      {"--moe-strategy cpu --moe-prefetch on", 2, "--moe-prefetch on needs --moe-strategy auto, offload or hybrid"},
      {"--moe-strategy offload --moe-cache-slots 64", 2, "below the minimum of 128"},
      {"--moe-strategy offload --moe-cache-slots 0", 2, "must be at least 2 x the experts of a MoE layer (the \"experts\" line of `ft inspect MODEL`; in each slot size of a mixed-type file)"},
      {"--moe-strategy offload --moe-cpu-layers 9,", 2, "layer 9 is not one of the model's MoE layers (0-"},
      {"--gpu-memory-limit 0", 2, "--gpu-memory-limit"},
      {"--host-memory-limit 0", 2, "--host-memory-limit 0 GiB must be > 0"},
      {"--moe-strategy offload --host-memory-limit 1e-9 --gpu-memory-limit 0.008 --kv-reserve-tokens 1024", 3,
       "expert banks do not fit host or device memory"},
      {"--kv-reserve-tokens -1", 2, "--kv-reserve-tokens -1 must be >= 0"},
      {"--decode-log-interval -2", 2, "--decode-log-interval -2 must be >= 0"},
      {"--moe-strategy fused --gpu-memory-limit 0.008 --kv-reserve-tokens 1024", 3, "Use --moe-strategy offload"},
      {"--moe-strategy offload --gpu-memory-limit 0.0059 --kv-reserve-tokens 1024", 3,
       "the smallest legal cache (128 slots"},
      {"--moe-strategy offload --gpu-memory-limit 0.001", 3, "Raise --gpu-memory-limit"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags);
    const Result r = run_moe(c.flags);
    EXPECT_EQ(r.code, c.code) << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
  }
}

TEST(RunFlags, UnwritableLogitsOutFailsBeforeGenerating) {
  const Result r = run_moe("--logits-out /nonexistent_dir_ft/x.f32");
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;  // nothing generated
  EXPECT_NE(r.err.find("--logits-out"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace ft
