// `ft bench (MODEL | --model PATH | --model-preset NAME --dummy-weights [--weight-type T] [--dummy-layers N]
//  [--dummy-router-skew S] [--seed N]) [--prompt-tokens N] [--gen-tokens N] [--batch 1,8,32]
//  [--device cpu|cuda|auto] [--activations f32|bf16] [--json] [MoE flags]`: prefill and decode
// throughput per batch size, weight bandwidth and peak memory (tools/benchmark.h; --json prints
// bench_json's object plus, for a synthetic model, "synthetic": {preset, weight_type, layers,
// router_skew, seed, generate_s}). Also
// With --tensor-parallel-size N (-tp, N > 1; --expert-parallel on) a rank group is measured, as ft run
// and ft serve load it (engine/serving_engine.h): a synthetic model generated once and shared by the
// ranks, the JSON's "ranks" saying which figures are rank 0's and holding each rank's plan. Also
// `--write-gguf FILE` (write the synthetic model as GGUF for llama.cpp, then exit) and
// `--list-presets` (shapes, parameter counts and the synthetic weights' GiB for --weight-type and
// --dummy-layers).
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend/cpu/cpu_ops.h"
#include "cli/flag_checks.h"
#include "backend/cuda_factory.h"
#include "backend/profiling_ops.h"
#include "backend/device.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "cli/help_format.h"
#include "cli/int_list.h"
#include "cli/model_arg.h"
#include "tools/benchmark.h"
#include "engine/engine.h"
#include "engine/serving_engine.h"
#include "tools/model_presets.h"
#include "tools/synthetic_checkpoint.h"
#include "tools/synthetic_weights.h"
#include "util/error.h"
#include "util/log.h"
#include "util/progress.h"

namespace ft::cli {
namespace {

struct BenchArgs {
  ModelArg model_arg;  // MODEL, -m, --model, --model-path
  std::string model;   // the path resolved from model_arg ("": a synthetic model)
  std::string preset;
  bool dummy = false;
  std::string weight_type;  // empty: bf16
  std::string expert_type;  // empty: the preset's upstream expert type, else weight_type
  int64_t dummy_layers = 0;
  double router_skew = 0;
  uint64_t seed = 0;
  std::string write_gguf;
  bool list_presets = false;
  int64_t prompt_tokens = 512;
  int64_t gen_tokens = 128;
  std::string batches = "1";
  std::string activations = "f32";
  int64_t max_prefill_tokens = 8192;
  int64_t warmup_steps = 3;
  int64_t route_sample_steps = 4;
  int64_t copy_mib = 0;
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  bool json = false;
  bool profile_ops = false;
  EngineOptions engine;  // --threads, --device, --page-size, MoE flags, ...
  CompatFlags compat;    // llama.cpp / Python-engine flags (cli/compat_flags.h)
  const CLI::App* cmd = nullptr;  // the parsed subcommand (finish_engine_options counts flags on it)
};

/** A parameter count as "30.5B", "12.75B" or, under a billion, "1.31M". */
std::string param_count(int64_t n, int billions_digits) {
  if (n >= 1'000'000'000) return fmt::format("{:.{}f}B", static_cast<double>(n) / 1e9, billions_digits);
  return fmt::format("{:.2f}M", static_cast<double>(n) / 1e6);
}

/** The preset table: shapes, attention kind, leading dense layers, shared experts, the synthetic
 *  weights' GiB in `type` and the parameter counts, for `layers` layers of each (0: the preset's). */
void list_presets(const std::string& type_name, int64_t layers) {
  const DType type = parse_synthetic_weight_type(type_name);
  const std::string gib = fmt::format("{} GiB", user_type_name(type));
  std::printf("%-18s %-14s %-8s %6s %6s %5s %4s %5s %7s %4s %6s %7s %4s %5s %5s %9s %8s %8s  %s\n", "preset", "arch",
              "runnable", "layers", "hidden", "heads", "kv", "hdim", "experts", "top", "ffn_e", "vocab", "attn", "dense",
              "shexp", gib.c_str(), "params", "active", "source");
  for (const ModelPreset& p : model_presets()) {
    const int64_t L = layers > 0 ? layers : p.n_layer;
    std::string bytes = "-";
    if (p.runnable) {
      SyntheticSpec spec;
      spec.preset = p.name;
      spec.weight_type = type;
      spec.n_layer = L;
      // Every tensor, the never-written tables (Qwen4-Exp's n-gram tables) included, as the params column.
      int64_t n = 0;
      for (const TensorInfo& t : synthetic_layout(spec).tensors) n += t.bytes;
      const double g = static_cast<double>(n) / (1 << 30);
      bytes = fmt::format("{:.{}f}", g, g < 1 ? 3 : 1);
    }
    std::printf("%-18s %-14s %-8s %6lld %6lld %5lld %4lld %5lld %7lld %4lld %6lld %7lld %4s %5lld %5lld %9s %8s %8s  %s\n",
                p.name.c_str(), p.gguf_arch.c_str(), p.runnable ? "yes" : "no", static_cast<long long>(L),
                static_cast<long long>(p.n_embd), static_cast<long long>(p.n_head), static_cast<long long>(p.n_head_kv),
                static_cast<long long>(p.head_dim), static_cast<long long>(p.n_expert),
                static_cast<long long>(p.n_expert_used), static_cast<long long>(p.n_ff_exp),
                static_cast<long long>(p.n_vocab), p.is_mla() ? "mla" : "gqa",
                static_cast<long long>(p.dense_layers(L)), static_cast<long long>(p.n_shared_exp), bytes.c_str(),
                param_count(p.total_params(L), 1).c_str(), param_count(p.active_params(L), 2).c_str(),
                p.hf_id.empty() ? "test" : p.hf_id.c_str());
  }
}

SyntheticSpec synthetic_spec(const BenchArgs& a) {
  SyntheticSpec spec;
  spec.preset = a.preset;
  spec.weight_type = parse_synthetic_weight_type(a.weight_type.empty() ? "bf16" : a.weight_type);
  if (!a.expert_type.empty()) spec.expert_type = parse_synthetic_weight_type(a.expert_type, "--expert-weight-type");
  spec.n_layer = a.dummy_layers;
  spec.router_skew = a.router_skew;
  spec.seed = a.seed;
  spec.threads = a.engine.threads;
  return spec;
}

std::unique_ptr<SyntheticCheckpoint> make_synthetic(const BenchArgs& a) {
  return std::make_unique<SyntheticCheckpoint>(synthetic_spec(a));
}

/** The report as JSON (--json; with the synthetic model's spec when `synth` is set) or as the table, on stdout. */
void print_report(const BenchArgs& a, const BenchReport& report, const SyntheticCheckpoint* synth) {
  if (a.json) {
    nlohmann::json j = bench_json(report);
    if (synth) {
      const SyntheticCheckpoint& s = *synth;
      j["synthetic"] = {{"preset", s.preset().name},
                        {"weight_type", user_type_name(s.spec().weight_type)},
                        {"expert_type", user_type_name(synthetic_expert_type(s.spec()))},
                        {"layers", s.n_layer()},
                        {"router_skew", s.spec().router_skew},
                        {"seed", s.spec().seed},
                        {"generate_s", s.generate_seconds()}};
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::fputs(bench_table(report).c_str(), stdout);
  }
  std::fflush(stdout);
}

/** Warns when the benchmark's sequences run past the model's context: `ft run` and `ft serve` refuse
 *  such requests, but a benchmark may measure there on purpose (the positions' rotation is defined). */
void warn_past_context(const BenchOptions& bo, const Engine& engine) {
  if (const int64_t n_ctx = engine.config().n_ctx_train; n_ctx > 0 && bo.prompt_tokens + bo.gen_tokens > n_ctx)
    spdlog::warn("--prompt-tokens {} + --gen-tokens {} is more than the model's context length {}: the positions past "
                 "it are outside what the model was trained for (the timing still holds)",
                 bo.prompt_tokens, bo.gen_tokens, n_ctx);
}

/** ft bench -tp N (N > 1): a rank group (ServingEngine, engine/rank_group.h) measured through its
 *  runner. A synthetic model is generated once and shared by the ranks (formats/shared_checkpoint.h);
 *  --model PATH is opened by each rank. */
int bench_ranks(const BenchArgs& a, const BenchOptions& bo, bool synthetic) {
  const SyntheticCheckpoint* synth = nullptr;
  std::unique_ptr<ServingEngine> served;
  if (synthetic) {
    std::unique_ptr<SyntheticCheckpoint> ckpt = make_synthetic(a);
    synth = ckpt.get();  // lives with the views, as long as the engines
    served = ServingEngine::load_shared(std::move(ckpt), a.engine);
  } else {
    served = ServingEngine::load(open_checkpoint(a.model), a.model, a.engine);
  }
  warn_past_context(bo, served->engine());
  const BenchReport report = run_bench(*served, bo);
  print_report(a, report, synth);
  return 0;
}

int bench(BenchArgs& a) {
  if (a.list_presets) {
    list_presets(a.weight_type.empty() ? "bf16" : a.weight_type, a.dummy_layers);
    return 0;
  }
  const bool synthetic = !a.preset.empty();
  if (synthetic == !a.model.empty())
    fail(ErrorCode::kInvalidArgument, "give exactly one of --model PATH or --model-preset NAME --dummy-weights");
  if (synthetic && !a.dummy)
    fail(ErrorCode::kInvalidArgument, "--model-preset {} needs --dummy-weights (a preset has shapes, not weights)",
         a.preset);
  if (!synthetic && a.dummy) fail(ErrorCode::kInvalidArgument, "--dummy-weights needs --model-preset NAME");
  if (!synthetic && (!a.weight_type.empty() || !a.expert_type.empty() || a.dummy_layers != 0 || a.router_skew != 0.0))
    fail(ErrorCode::kInvalidArgument, "--weight-type, --expert-weight-type, --dummy-layers and --dummy-router-skew shape a synthetic model "
         "(--model-preset NAME --dummy-weights); --model {} runs the file's own weights", a.model);
  if (!a.write_gguf.empty()) {
    if (!synthetic) fail(ErrorCode::kInvalidArgument, "--write-gguf writes a synthetic model: give --model-preset");
    require_synthetic_gguf(synthetic_spec(a));  // FP8 / NVFP4: refused before generating
    auto ckpt = make_synthetic(a);
    ckpt->write_gguf(a.write_gguf);
    std::printf("%s: %s, %zu tensors\n", a.write_gguf.c_str(), ckpt->path().c_str(), ckpt->tensors().size());
    return 0;
  }
  if (a.activations != "f32" && a.activations != "bf16")
    fail(ErrorCode::kInvalidArgument, "--activations must be f32 or bf16 (got '{}')", a.activations);
  if (a.copy_mib < 0) fail(ErrorCode::kInvalidArgument, "--copy-mib {} must be >= 0", a.copy_mib);

  BenchOptions bo;
  bo.prompt_tokens = a.prompt_tokens;
  bo.gen_tokens = a.gen_tokens;
  bo.batches = parse_int_list(a.batches, "--batch", "a batch size", 1, 4096);
  bo.warmup_steps = a.warmup_steps;
  bo.route_sample_steps = a.route_sample_steps;
  bo.max_prefill_tokens = a.max_prefill_tokens;
  bo.copy_bytes = a.copy_mib << 20;
  bo.threads = a.engine.threads;
  bo.seed = a.seed;
  bo.temperature = a.temperature;
  bo.top_k = a.top_k;
  bo.top_p = a.top_p;
  bo.min_p = a.min_p;
  EngineOptions& eo = a.engine;
  refuse_kv_tiers(eo, "ft bench");  // first: the reason it holds for any other flag
  finish_engine_options(*a.cmd, eo, a.compat);
  const int ranks = eo.tensor_parallel;
  if (ranks > 1 && a.profile_ops)
    fail(ErrorCode::kUnsupported, "--profile-ops times the ops of one engine: leave it out with --tensor-parallel-size "
         "{} (or profile -tp 1)", ranks);
  if (ranks > 1 && a.activations != "f32")
    fail(ErrorCode::kUnsupported, "--activations {} with --tensor-parallel-size {}: the ranks compute with f32 "
         "activations (as ft run and ft serve); leave --activations out", a.activations, ranks);
  ProgressReporter progress;  // the load's phases on stderr
  eo.progress = &progress;
  plan_bench_engine(bo, eo);

  const bool cuda =
      eo.device == DeviceChoice::kCuda || (eo.device == DeviceChoice::kAuto && cuda_device_count() > 0);
  if (cuda && ranks > 1) {  // what RankGroup::load refuses, said before a synthetic model is generated
    if (!cuda_built()) make_cuda_ops(0);  // throws the build's reason
    if (const int visible = cuda_device_count(); visible < ranks)
      fail(ErrorCode::kInvalidArgument, "--tensor-parallel-size {} needs {} GPUs, {} visible", ranks, ranks, visible);
    for (int r = 0; r < ranks; ++r) bo.rank_device_free_before.push_back(cuda_free_memory(r));
  }
  if (cuda) bo.device_free_before = cuda_free_memory(0);
  if (!cuda && a.activations != "f32")
    spdlog::warn("--activations {}: the CPU backend computes in f32; the flag applies to --device cuda", a.activations);
  if (ranks > 1) return bench_ranks(a, bo, synthetic);
  // The backend first: a missing GPU is said before a synthetic model's weights are generated.
  std::unique_ptr<Ops> ops = cuda ? make_cuda_ops(0, a.activations == "bf16" ? DType::BF16 : DType::F32)
                                  : std::unique_ptr<Ops>(std::make_unique<CpuOps>(a.engine.threads));
  std::unique_ptr<Checkpoint> ckpt = synthetic ? make_synthetic(a) : open_checkpoint(a.model);
  if (a.profile_ops) ops = std::make_unique<ProfilingOps>(std::move(ops));
  Engine engine(std::move(ckpt), std::move(ops), eo);
  warn_past_context(bo, engine);
  const BenchReport report = run_bench(engine, bo);
  print_report(a, report, synthetic ? &static_cast<const SyntheticCheckpoint&>(engine.checkpoint()) : nullptr);
  return 0;
}

}  // namespace

void add_bench_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill/decode throughput, weight bandwidth and memory");
  add_model_arg(cmd, args->model_arg, "GGUF file or Hugging Face folder");
  const char* s = "Synthetic model";
  cmd->add_option("--model-preset", args->preset, "Real shapes of a known model (see --list-presets)")->group(s);
  cmd->add_flag("--dummy-weights", args->dummy, "Random weights for --model-preset (deterministic per --seed)")->group(s);
  cmd->add_option("--weight-type", args->weight_type,
                  "Weight type of the synthetic matrices (bf16, q8_0, q4_k, ...; default bf16; fp8 = FP8 E4M3 "
                  "with float32 scales per block of 32, as the loader stores a [128, 128]-block FP8 checkpoint, "
                  "nvfp4 = ModelOpt NVFP4 as stored; with fp8 / nvfp4 the embedding and output stay bf16, and "
                  "--write-gguf refuses them)")
      ->group(s);
  cmd->add_option("--expert-weight-type", args->expert_type,
                  "Weight type of the synthetic routed experts (default: as released, MXFP4 for gpt-oss; else "
                  "--weight-type; also fp8 / nvfp4 as for --weight-type)")
      ->group(s);
  cmd->add_option("--dummy-layers", args->dummy_layers, "Layers of the synthetic model (0 = the preset's)")
      ->capture_default_str()
      ->group(s);
  cmd->add_option("--dummy-router-skew", args->router_skew,
                  "Zipf exponent of expert popularity per layer (0 = uniform routing)")
      ->capture_default_str()
      ->group(s);
  cmd->add_option("--seed", args->seed, "Seed of the synthetic weights and the benchmark's token ids")
      ->capture_default_str()
      ->group(s);
  cmd->add_option("--write-gguf", args->write_gguf, "Write the synthetic model to this GGUF file and exit")->group(s);
  cmd->add_flag("--list-presets", args->list_presets,
                "List the model presets (with --weight-type and --dummy-layers: the synthetic weights' size) and exit")
      ->group(s);
  const char* b = "Benchmark";
  cmd->add_option("--prompt-tokens", args->prompt_tokens, "Prompt tokens per sequence (prefill)")
      ->capture_default_str()
      ->group(b);
  cmd->add_option("--gen-tokens", args->gen_tokens, "Timed decode steps per batch size")->capture_default_str()->group(b);
  cmd->add_option("--batch", args->batches, "Batch sizes: sequences decoded together, e.g. 1,8,32")
      ->capture_default_str()
      ->group(b);
  cmd->add_option("--activations", args->activations, "CUDA activation dtype: f32 or bf16")
      ->capture_default_str()
      ->group(b);
  cmd->add_option("--max-prefill-tokens", args->max_prefill_tokens, "Prompt tokens per forward (chunked prefill)")
      ->capture_default_str()
      ->group(b);
  cmd->add_option("--warmup-steps", args->warmup_steps,
                  "Untimed decode steps before each batch size (after an untimed prefill of the same length)")
      ->capture_default_str()
      ->group(b);
  cmd->add_option("--route-sample-steps", args->route_sample_steps,
                  "Untimed decode steps whose routed experts are counted (0 = assume uniform routing)")
      ->capture_default_str()
      ->group(b);
  cmd->add_option("--copy-mib", args->copy_mib, "Size of the bandwidth-probe copy in MiB (0 = 1024 CUDA, 256 CPU)")
      ->capture_default_str()
      ->group(b);
  cmd->add_flag("--json", args->json, "Print one JSON object instead of the table")->group(b);
  cmd->add_flag("--profile-ops", args->profile_ops,
                "Time every op of the decode steps (eager, each op between synchronisations; on CUDA the fused MoE strategy only)")
      ->group(b);
  const char* sampling = kGroupSampling;
  cmd->add_option("--temperature", args->temperature,
                  "Sampling temperature of every step's rows, on the backend (0 = greedy)")
      ->capture_default_str()
      ->group(sampling);
  cmd->add_option("--top-k", args->top_k, "Sampling (with --temperature > 0): keep the k most likely tokens (0 = off)")
      ->capture_default_str()
      ->check(at_least(0))
      ->group(sampling);
  cmd->add_option("--top-p", args->top_p, "Sampling (with --temperature > 0): nucleus mass (1 = off)")
      ->capture_default_str()
      ->group(sampling);
  cmd->add_option("--min-p", args->min_p,
                  "Sampling (with --temperature > 0): drop tokens below min_p x the best probability")
      ->capture_default_str()
      ->group(sampling);
  add_engine_flags(cmd, args->engine, args->compat);  // Engine, Memory, MoE expert offload, Logging
  cmd->callback([args, cmd, &action] {
    args->cmd = cmd;
    args->model = resolve_model(args->model_arg);
    action = [args] { return bench(*args); };
  });
}

}  // namespace ft::cli
