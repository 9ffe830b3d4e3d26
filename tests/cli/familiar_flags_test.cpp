// The flags users bring from llama-server and from the Python FreeToken engine (issue 41): a
// positional model, -m, --model-path, -c/--ctx-size, -np, -t; -ngl taken with a warning;
// --tensor-parallel-size out of range refused (two ranks give one rank's tokens), the Python flags that
// mean something else refused naming what to use;
// and --help wrapped at 100 columns under group headings.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>

#include "cli/run_ft.h"

namespace ft {
namespace {

std::string stories_path() { return ::ft::testing::shared_dir() + "/data/models/stories260K.gguf"; }
std::string stories() { return quote(stories_path()); }

/** The lines of `text` longer than `width` columns, one per line. */
std::string lines_over(const std::string& text, size_t width) {
  std::istringstream in(text);
  std::string line, over;
  while (std::getline(in, line))
    if (line.size() > width) over += line + "\n";
  return over;
}

/** `text` with every run of blanks and newlines as one space: a wrapped description reads as written. */
std::string unwrapped(const std::string& text) {
  std::string out;
  for (char c : text) {
    const bool blank = c == ' ' || c == '\n';
    if (blank && (out.empty() || out.back() == ' ')) continue;
    out += blank ? ' ' : c;
  }
  return out;
}

TEST(FamiliarFlags, ServeHelpIsWrappedAndGrouped) {
  const Result r = run_ft("serve --help");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(lines_over(r.out, 100), "") << r.out;
  for (const char* heading : {"Model:", "Server:", "Memory:", "Engine:", "MoE expert offload:", "Sampling defaults:",
                              "Logging:"})
    EXPECT_NE(r.out.find(std::string("\n") + heading + "\n"), std::string::npos) << heading << "\n" << r.out;
  // Headings in this order, each flag under its own.
  EXPECT_LT(r.out.find("\nModel:\n"), r.out.find("-m,--model,--model-path"));
  EXPECT_LT(r.out.find("-m,--model,--model-path"), r.out.find("\nServer:\n"));
  EXPECT_LT(r.out.find("\nServer:\n"), r.out.find("--port"));
  EXPECT_LT(r.out.find("\nMemory:\n"), r.out.find("-c,--kv-tokens,--ctx-size,--num-tokens"));
  EXPECT_LT(r.out.find("\nSampling defaults:\n"), r.out.find("--seed"));
  EXPECT_LT(r.out.find("\nEngine:\n"), r.out.find("-t,--threads"));
  EXPECT_LT(r.out.find("\nMoE expert offload:\n"), r.out.find("--moe-cache-slots,--moe-cache-size"));
  EXPECT_LT(r.out.find("\nLogging:\n"), r.out.find("--decode-log-interval"));
  EXPECT_LT(r.out.find("\nLogging:\n"), r.out.find("--log-level"));  // the global flag, taken after serve too
  EXPECT_NE(r.out.find("Usage:"), std::string::npos);
  EXPECT_NE(r.out.find("[MODEL]"), std::string::npos) << r.out;
  // The descriptions keep their words, wrapped.
  const std::string text = unwrapped(r.out);
  for (const char* words :
       {"token embedding table: device; host (host memory the GPU reads a step's rows of, one bus read a decode step, "
        "so its bytes stay out of --gpu-memory-limit;",
        "Whether thinking models think, for requests that do not say (chat_template_kwargs.enable_thinking, "
        "Anthropic's thinking): on or off sets the chat template's enable_thinking; auto leaves the template's default",
        "llama.cpp's -c/--ctx-size means the same"})
    EXPECT_NE(text.find(words), std::string::npos) << words;
}

TEST(FamiliarFlags, EveryHelpFitsIn100Columns) {
  for (const char* args : {"--help", "run --help", "bench --help", "inspect --help", "tokenize --help",
                           "template --help"}) {
    const Result r = run_ft(args);
    ASSERT_EQ(r.code, 0) << args << ": " << r.err;
    EXPECT_EQ(lines_over(r.out, 100), "") << args << "\n" << r.out;
  }
  const Result run = run_ft("run --help");
  for (const char* heading : {"Model:", "Generation:", "Sampling:", "Memory:", "Engine:", "Logging:"})
    EXPECT_NE(run.out.find(std::string("\n") + heading + "\n"), std::string::npos) << heading << "\n" << run.out;
}

TEST(FamiliarFlags, ModelGivenTwiceIsRefused) {
  for (const char* args : {"serve x.gguf --model y.gguf", "serve x.gguf -m y.gguf",
                           "run x.gguf --model-path y.gguf --prompt-ids 1", "bench x.gguf --model y.gguf"}) {
    const Result r = run_ft(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.err;
    // The second model is named as typed: --model, -m (--model), --model-path (--model).
    EXPECT_NE(r.err.find("error: the model is given twice: as the positional MODEL 'x.gguf' and as "),
              std::string::npos)
        << args << "\n" << r.err;
    EXPECT_TRUE(r.err.find("--model) 'y.gguf'; give one of them") != std::string::npos ||
                r.err.find("as --model 'y.gguf'; give one of them") != std::string::npos)
        << args << "\n" << r.err;
    EXPECT_EQ(r.out.find("Loading"), std::string::npos) << args;
  }
  const Result none = run_ft("run --prompt-ids 1");
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("the model (ft run MODEL ..., or -m/--model MODEL) is required"), std::string::npos)
      << none.err;
}

TEST(FamiliarFlags, EverySpellingOfTheModelRunsIt) {
  const std::string gen = " --prompt-ids 1,400,500 --max-tokens 6 --temperature 0 --ignore-eos --print-ids -t 1";
  const Result ref = run_ft("run --model " + stories() + gen);
  ASSERT_EQ(ref.code, 0) << ref.err;
  ASSERT_EQ(std::count(ref.out.begin(), ref.out.end(), ','), 5) << ref.out;
  for (const std::string& model : {stories(), "-m " + stories(), "--model-path " + stories()}) {
    const Result r = run_ft("run " + model + gen);
    EXPECT_EQ(r.code, 0) << model << "\n" << r.err;
    EXPECT_EQ(r.out, ref.out) << model;
  }
  // ft serve and ft bench take the same spellings: each reaches the loader with the path given.
  for (const char* model : {"/nonexistent/a.gguf", "-m /nonexistent/a.gguf", "--model-path /nonexistent/a.gguf"}) {
    const Result serve = run_ft(std::string("serve --port 0 ") + model);
    EXPECT_EQ(serve.code, 2) << model;
    EXPECT_NE(serve.out.find("Loading /nonexistent/a.gguf"), std::string::npos) << model << "\n" << serve.out;
    EXPECT_NE(serve.err.find("/nonexistent/a.gguf"), std::string::npos) << model << "\n" << serve.err;
    const Result bench = run_ft(std::string("bench --device cpu ") + model);
    EXPECT_EQ(bench.code, 2) << model;
    EXPECT_NE(bench.err.find("/nonexistent/a.gguf"), std::string::npos) << model << "\n" << bench.err;
  }
}

TEST(FamiliarFlags, LlamaServerFlagsServe) {
  // ft serve MODEL -c N -np N -t N as llama-server takes them: -c is the KV cache the requests share.
  const std::string dir = ::ft::testing::scratch_path("ft_llama_flags");
  std::filesystem::create_directories(dir);
  const std::string script = "D=" + quote(dir) + "; printf '\\n  s3cret \\n' > $D/key; " + quote(FT_BINARY) + " serve " + stories() +
                             " --port 0 -t 1 -c 128 -np 2 -ngl 99 -a my-model --chat-template-file " +
                             quote(::ft::testing::shared_dir() + "/data/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja") +
                             " --jinja -fa on --metrics --api-key-file $D/key > $D/out 2> $D/err & pid=$!;"
                             "for i in $(seq 400); do grep -q listening $D/out && break; sleep 0.05; done;"
                             "kill -INT $pid; wait $pid";
  const int code = std::system(("bash -c " + quote(script)).c_str());
  const std::string out = ::ft::testing::read_file(dir + "/out"), err = ::ft::testing::read_file(dir + "/err");
  std::filesystem::remove_all(dir);
  ASSERT_EQ(code, 0) << err;
  EXPECT_NE(out.find("KV 128 tokens"), std::string::npos) << out;
  EXPECT_NE(out.find("context 128 tokens"), std::string::npos) << out;
  EXPECT_NE(out.find(", 2 running,"), std::string::npos) << out;
  EXPECT_NE(out.find("device cpu, 1 thread\n"), std::string::npos) << out;
  EXPECT_NE(out.find("model     my-model  [llama"), std::string::npos) << out;  // -a
  EXPECT_NE(out.find("auth on (API key required)"), std::string::npos) << out;  // --api-key-file
  EXPECT_NE(out.find("chat template from " + ::ft::testing::shared_dir() + "/data/chat-templates/Qwen-Qwen2.5-7B-"),
            std::string::npos)
      << out;  // --chat-template-file
  EXPECT_NE(err.find("-ngl/--n-gpu-layers 99 is ignored: FreeToken places the weights itself"), std::string::npos)
      << err;
  // -c 0 is llama.cpp's "the model's context"; here it is refused at the flag.
  const Result zero = run_ft("serve --port 0 -c 0");
  EXPECT_EQ(zero.code, 2);
  EXPECT_NE(zero.err.find("error: -c (--kv-tokens): must be >= 1, got 0 (a KV cache size in tokens; leave the flag "
                          "out for the default"),
            std::string::npos)
      << zero.err;
}

TEST(FamiliarFlags, GpuLayersAreTakenWithAWarning) {
  const std::string gen = " --prompt-ids 1,400 --max-tokens 2 --temperature 0 --print-ids -t 1";
  for (const char* ngl : {"-ngl 99", "--n-gpu-layers 0", "--gpu-layers all", "-ngl -1"}) {
    const Result r = run_ft("run " + stories() + gen + " " + ngl);
    EXPECT_EQ(r.code, 0) << ngl << "\n" << r.err;
    EXPECT_NE(r.err.find("-ngl/--n-gpu-layers"), std::string::npos) << ngl << "\n" << r.err;
    EXPECT_NE(r.err.find("is ignored: FreeToken places the weights itself"), std::string::npos) << r.err;
  }
  const Result bad = run_ft("run " + stories() + gen + " -ngl lots");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("-ngl (--n-gpu-layers): expected a layer count, auto or all (got 'lots')"), std::string::npos)
      << bad.err;
}

TEST(FamiliarFlags, TensorParallelRunsRanksOnTheCpu) {
  for (const char* tp : {"--tensor-parallel-size 0", "-tp 9", "--tp-size 9"}) {
    const Result r = run_ft(std::string("serve --port 0 ") + tp);
    EXPECT_EQ(r.code, 2) << tp;
    EXPECT_NE(r.err.find("tensor-parallel-size"), std::string::npos) << tp << "\n" << r.err;
    EXPECT_EQ(r.out.find("Loading"), std::string::npos) << tp;  // refused before anything loads
  }
  const Result lone = run_ft("run " + stories() + " --prompt-ids 1 --max-tokens 1 --expert-parallel on");
  EXPECT_EQ(lone.code, 2);
  EXPECT_NE(lone.err.find("--expert-parallel on splits the experts over the ranks"), std::string::npos) << lone.err;
  // ft run never uses a KV tier: that is said first, not that ranks cannot have one (trial).
  const Result tiers = run_ft("run " + stories() + " --prompt-ids 1 --max-tokens 1 -tp 2 --kv-host-gib 1");
  EXPECT_EQ(tiers.code, 2);
  EXPECT_NE(tiers.err.find("--kv-host-gib: ft run runs its prompts without the prefix cache"), std::string::npos)
      << tiers.err;
  // ft bench measures the ranks of a model file too (each rank opens it).
  const Result bench = run_ft("bench " + stories() + " -tp 2 --device cpu -t 1 --prompt-tokens 4 --gen-tokens 2 "
                              "--copy-mib 8 --json");
  EXPECT_EQ(bench.code, 0) << bench.err;
  EXPECT_NE(bench.out.find("\"tensor_parallel\":2"), std::string::npos) << bench.out;
  // Two ranks (threads on the CPU backend) give one rank's tokens.
  const std::string gen = " --prompt-ids 1,403,407 --max-tokens 8 --print-ids -t 1 --device cpu --temperature 0";
  const Result one_rank = run_ft("run " + stories() + gen);
  const Result two_ranks = run_ft("run " + stories() + gen + " -tp=2");  // the value attached, as llama.cpp takes it
  EXPECT_EQ(one_rank.code, 0) << one_rank.err;
  EXPECT_EQ(two_ranks.code, 0) << two_ranks.err;
  const auto first_line = [](const std::string& s) { return s.substr(0, s.find('\n')); };
  EXPECT_EQ(first_line(two_ranks.out), "261,378,432,383,286,261,376,298");  // the token ids
  EXPECT_EQ(first_line(two_ranks.out), first_line(one_rank.out));
  EXPECT_NE(two_ranks.err.find("2 ranks (tensor parallel)"), std::string::npos) << two_ranks.err;
  // One GPU is what runs: taken.
  const Result one = run_ft("run " + stories() + " --prompt-ids 1 --max-tokens 1 --print-ids -t 1 -tp 1");
  EXPECT_EQ(one.code, 0) << one.err;
}

TEST(FamiliarFlags, PythonEngineFlags) {
  // Same meaning: aliases. --moe-backend and --moe-cache-size reach --moe-strategy and --moe-cache-slots
  // (this combination is refused by name before anything loads).
  const Result alias = run_ft("run " + stories() + " --prompt-ids 1 --moe-backend fused --moe-cache-size 128");
  EXPECT_EQ(alias.code, 2);
  EXPECT_NE(alias.err.find("--moe-cache-size (--moe-cache-slots) needs --moe-backend (--moe-strategy) auto, offload or "
                           "hybrid (fused has no expert cache)"),
            std::string::npos)
      << alias.err;
  // Another meaning: refused, naming the flag to use.
  struct Case {
    std::string flag, says;
  };
  for (const Case& c : {Case{"--memory-ratio 0.9", "give --gpu-memory-limit GIB"},
                        Case{"--num-pages 100", "give the KV cache in tokens, --kv-tokens N"},
                        Case{"--gpu 1", "CUDA_VISIBLE_DEVICES=1"}}) {
    const Result r = run_ft("serve --port 0 " + c.flag);
    EXPECT_EQ(r.code, 2) << c.flag;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.flag << "\n" << r.err;
    EXPECT_EQ(r.out.find("Loading"), std::string::npos) << c.flag;
  }
}

// What a llama-server command line brings beyond the README's table: taken where it is moot, refused
// naming what to do where ft cannot do it, and every error naming the flag as it was typed.
TEST(FamiliarFlags, OtherLlamaServerFlagsAreTakenOrRefusedByName) {
  const std::string gen = " --prompt-ids 1,400 --temp 0 -n 3 --print-ids -t 1";
  const Result taken = run_ft("run " + stories() + gen +
                              " --jinja -fa --metrics --no-mmap --mlock -b 2048 -ub 512 -cb --no-warmup -tb 2");
  EXPECT_EQ(taken.code, 0) << taken.err;
  EXPECT_EQ(std::count(taken.out.begin(), taken.out.end(), ','), 2) << taken.out;  // -n 3
  EXPECT_NE(taken.err.find("--no-mmap is ignored"), std::string::npos) << taken.err;
  EXPECT_NE(taken.err.find("--mlock is ignored"), std::string::npos) << taken.err;
  EXPECT_NE(taken.err.find("-b/--batch-size and -ub/--ubatch-size are ignored"), std::string::npos) << taken.err;
  EXPECT_NE(taken.err.find("-tb/--threads-batch 2 is ignored"), std::string::npos) << taken.err;
  // -ctk f16 is --kv-cache-dtype bf16, which the CPU backend refuses: the refusal names -ctk f16 and says
  // what it became and why (it named only bf16, a flag the user never gave).
  const Result f16 = run_ft("run " + stories() + gen + " -ctk f16");
  EXPECT_EQ(f16.code, 2);
  EXPECT_NE(f16.err.find("-ctk/-ctv f16 (= --kv-cache-dtype bf16: ft has no f16 KV cache; bf16 takes f16's 2 bytes a "
                         "value and keeps f32's range): the CPU backend keeps the KV cache in f32, fp8 or q8_0"),
            std::string::npos)
      << f16.err;
  // -ctk fp8 is --kv-cache-dtype fp8 (it was refused by a message that listed fp8 as held).
  const Result fp8 = run_ft("run " + stories() + gen + " -ctk fp8");
  EXPECT_EQ(fp8.code, 0) << fp8.err;
  EXPECT_NE(fp8.err.find("64 tokens, 480 B a token, fp8"), std::string::npos) << fp8.err;
  const Result fp8_flag = run_ft("run " + stories() + gen + " --kv-cache-dtype fp8");
  EXPECT_EQ(fp8_flag.out, fp8.out);
  const Result q8 = run_ft("run " + stories() + " -p 'Once upon a time' -n 3 --temp 0 -t 1 -ctk q8_0 -ctv q8_0 -v");
  EXPECT_EQ(q8.code, 0) << q8.err;
  EXPECT_NE(q8.err.find("[debug]"), std::string::npos) << q8.err;  // -v: --log-level debug
  // A flag given twice takes its last value, as llama-server's do (-n 4 -n 2: two tokens).
  const Result twice = run_ft("run " + stories() + " --prompt-ids 1,400 -n 4 -n 2 --temp 0 --print-ids -t 1");
  EXPECT_EQ(twice.code, 0) << twice.err;
  EXPECT_EQ(std::count(twice.out.begin(), twice.out.end(), ','), 1) << twice.out;
  // A bare -fa before the model takes no value: the model is still the model.
  const Result fa = run_ft("run -fa " + stories() + gen);
  EXPECT_EQ(fa.code, 0) << fa.err;
  struct Case {
    std::string args, says;
  };
  for (const Case& c : {
           Case{"serve --port 0 -hf Qwen/Qwen3-30B-A3B-GGUF", "-hf/--hf-repo Qwen/Qwen3-30B-A3B-GGUF: ft does not download"},
           Case{"serve --port 0 -ot exps=CPU", "as -ot exps=CPU"},
           Case{"serve --port 0 --temp 0.7", "--temp 0.7: ft serve has no server-wide sampling defaults"},
           Case{"serve --port 0 -n 128", "-n (--n-predict) 128: ft serve has no server-wide sampling defaults"},
           Case{"serve --port 0 --moe-backend triton", "--moe-backend (--moe-strategy) triton"},
           Case{"serve --port 0 -cmoe --moe-strategy offload", "-cmoe/--cpu-moe means --moe-strategy cpu, not offload"},
           Case{"serve --port 0 -c", "-c (--kv-tokens)"},
           Case{"serve --port 0 -x my-model", "unknown option '-x'"},
           Case{"serve --port 0 -x a b", "unknown option '-x' (also not expected: 'b')"},
           Case{"serve --port 0 --bogus", "unknown option '--bogus'"},
           Case{"serve --port 0 --api-key-file /nonexistent/keys", "/nonexistent/keys"},
           Case{"serve --port 0 --api-key k --api-key-file /dev/null", "--api-key and --api-key-file /dev/null: give one"},
           Case{"serve --port 0 --api-key-file /dev/null", "--api-key-file /dev/null: expected one key (one non-empty line), found 0"},
           Case{"serve --port 0 --max-runing-requests 4",
                "unknown option '--max-runing-requests' (did you mean --max-running-requests?)"},
           // Several letters after one dash are one llama.cpp flag, never bundled one-letter flags (-c tx).
           Case{"serve --port 0 -ctx 4096", "unknown option '-ctx'"},
           Case{"serve --port 0 -ctk q8_0 -ctv f16", "-ctk q8_0 and -ctv f16: ft's KV cache holds K and V in one type"},
           Case{"serve --port 0 -ctk q4_0", "-ctk/-ctv q4_0: ft's KV cache holds f32, bf16 (which f16 means here: ft "
                                             "has no f16 KV cache), fp8 or q8_0; -ctk/-ctv take those names"},
           Case{"serve --port 0 -ts 1,1", "-ts/-sm/-mg/-dev 1,1: llama.cpp's layer split is not how ft splits a model"},
           Case{"serve --port 0 --nnodes 2", "--nnodes 2: multi-node runs are not supported yet"},
           Case{"serve --port 0 --node-rank 1", "--node-rank 1: multi-node runs are not supported yet"},
           Case{"serve --port 0 --master-addr 10.0.0.1", "--master-addr 10.0.0.1: multi-node runs are not supported"},
           Case{"serve --port 0 -nkvo", "-nkvo/--no-kv-offload: the KV cache stays in device memory"},
           Case{"serve --port 0 -hff model.gguf", "-hff/--hf-file model.gguf: ft does not download"},
           // Errors name the flag as typed, also where it was a multi-letter one rewritten before parsing.
           Case{"serve --port 0 -np four", "-np (--max-running-requests) = four"},
           Case{"serve --port 0 -tp 9", "-tp (--tensor-parallel-size): must be <= 8, got 9"},
           Case{"serve --port 0 --n-predict 128", "--n-predict 128: ft serve has no server-wide sampling defaults"},
       }) {
    const Result r = run_ft(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << "\n" << r.err;
    EXPECT_EQ(r.out.find("Loading"), std::string::npos) << c.args;  // refused before anything loads
  }
}

}  // namespace
}  // namespace ft
