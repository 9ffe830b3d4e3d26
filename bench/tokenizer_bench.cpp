// Tokenizer throughput: encoding the first MiB of War and Peace (shared/data/text) with byte-level
// BPE vocabularies (GPT-2 from its GGUF, Llama 3 from encoder.json + vocab.bpe) and SentencePiece
// (Llama 2), plus streaming detokenization. Reports bytes/s of input text (SetBytesProcessed).
// Data: $FT_SHARED_DIR, else ../shared or ../../shared relative to the working directory.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include "formats/checkpoint.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/vocab.h"
#include "util/read_file.h"

namespace {

std::string shared_dir() {
  if (const char* env = std::getenv("FT_SHARED_DIR"); env && *env) return env;
  for (const char* d : {"../shared", "../../shared"})
    if (std::filesystem::exists(std::string(d) + "/data/text/war-and-peace.txt")) return d;
  return "../shared";
}


const std::string& text_1mib() {
  static const std::string t = [] {
    std::string s = ft::read_text_file(shared_dir() + "/data/text/war-and-peace.txt");
    if (s.size() > (1u << 20)) s.resize(1u << 20);
    while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xC0) == 0x80) s.pop_back();  // whole characters
    if (!s.empty() && static_cast<unsigned char>(s.back()) >= 0xC0) s.pop_back();
    return s;
  }();
  return t;
}

std::unique_ptr<ft::Vocab> gguf_vocab(const std::string& name) {
  const std::string path = shared_dir() + "/data/vocab/ggml-vocab-" + name + ".gguf";
  return std::make_unique<ft::Vocab>(ft::Vocab::from_gguf_metadata(ft::open_checkpoint(path)->metadata()));
}

// Llama 3: GPT-2 style files turned into GGUF-style metadata (tokenizer.ggml.pre = llama-bpe).
std::unique_ptr<ft::Vocab> llama3_vocab() {
  const std::string dir = shared_dir() + "/data/tokenizers/llama3.2";
  const nlohmann::json enc = nlohmann::json::parse(ft::read_text_file(dir + "/encoder.json"));
  std::vector<std::string> tokens(enc.size());
  for (auto& [text, id] : enc.items()) tokens.at(id.get<size_t>()) = text;
  nlohmann::json merges = nlohmann::json::array();
  std::stringstream bpe(ft::read_text_file(dir + "/vocab.bpe"));
  for (std::string line; std::getline(bpe, line);)
    if (!line.empty() && line.rfind("#version", 0) != 0) merges.push_back(line);
  nlohmann::json md = {{"tokenizer.ggml.model", "gpt2"}, {"tokenizer.ggml.pre", "llama-bpe"}};
  md["tokenizer.ggml.tokens"] = tokens;
  md["tokenizer.ggml.merges"] = merges;
  return std::make_unique<ft::Vocab>(ft::Vocab::from_gguf_metadata(md));
}

const ft::Vocab& vocab(const std::string& name) {
  static std::map<std::string, std::unique_ptr<ft::Vocab>> cache;
  auto& v = cache[name];
  if (!v) v = name == "llama3" ? llama3_vocab() : gguf_vocab(name);
  return *v;
}

/** The vocabulary and the text, or false with the benchmark marked as failed when the data cannot
 *  be read (no shared folder: the message names the file and FT_SHARED_DIR). */
bool load(benchmark::State& state, const std::string& name, const ft::Vocab*& v, const std::string*& text) {
  try {
    v = &vocab(name);
    text = &text_1mib();
    return true;
  } catch (const std::exception& e) {
    state.SkipWithError((std::string(e.what()) + " (set FT_SHARED_DIR to the shared data folder)").c_str());
    return false;
  }
}

void encode(benchmark::State& state, const std::string& name) {
  const ft::Vocab* vp = nullptr;
  const std::string* tp = nullptr;
  if (!load(state, name, vp, tp)) return;
  const ft::Vocab& v = *vp;
  const std::string& text = *tp;
  size_t n_tokens = 0;
  for (auto _ : state) {
    auto ids = v.encode(text, {.add_special = false});
    n_tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(n_tokens);
}

void stream_decode(benchmark::State& state, const std::string& name) {
  const ft::Vocab* vp = nullptr;
  const std::string* tp = nullptr;
  if (!load(state, name, vp, tp)) return;
  const ft::Vocab& v = *vp;
  const auto ids = v.encode(*tp, {.add_special = false});
  for (auto _ : state) {
    ft::Detokenizer d(v);
    size_t bytes = 0;
    for (int32_t id : ids) bytes += d.feed(id).size();
    bytes += d.flush().size();
    benchmark::DoNotOptimize(bytes);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * tp->size()));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * ids.size()));
}

BENCHMARK_CAPTURE(encode, gpt2_bpe, std::string("gpt-2"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode, llama3_bpe, std::string("llama3"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(encode, llama2_spm, std::string("llama-spm"))->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(stream_decode, llama3_bpe, std::string("llama3"))->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
