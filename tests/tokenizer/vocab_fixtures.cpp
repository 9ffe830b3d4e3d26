#include "vocab_fixtures.h"

#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "formats/checkpoint.h"
#include "test_util.h"

namespace ft::testing {
namespace fs = std::filesystem;

namespace {

std::string vocab_dir() { return shared_dir() + "/data/vocab"; }

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> lines;
  std::stringstream ss(s);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  return lines;
}

// GGUF-style metadata for a GPT-2 style encoder.json + vocab.bpe pair.
nlohmann::json gpt2_files_metadata(const std::string& dir, const std::string& pre) {
  const nlohmann::json enc = nlohmann::json::parse(read_file(dir + "/encoder.json"));
  std::vector<std::string> tokens(enc.size());
  for (auto& [text, id] : enc.items()) tokens.at(id.get<size_t>()) = text;
  nlohmann::json merges = nlohmann::json::array();
  for (const std::string& line : split_lines(read_file(dir + "/vocab.bpe"))) {
    if (line.empty() || line.rfind("#version", 0) == 0) continue;
    merges.push_back(line);
  }
  nlohmann::json md;
  md["tokenizer.ggml.model"] = "gpt2";
  md["tokenizer.ggml.pre"] = pre;
  md["tokenizer.ggml.tokens"] = tokens;
  md["tokenizer.ggml.merges"] = merges;
  return md;
}

}  // namespace

VocabVectors read_vocab_vectors(const std::string& name) {
  const std::string base = vocab_dir() + "/ggml-vocab-" + name + ".gguf";
  const std::string inp = read_file(base + ".inp");
  const std::string marker = "\n__ggml_vocab_test__\n";
  VocabVectors v;
  for (size_t pos = 0; pos < inp.size();) {
    size_t hit = inp.find(marker, pos);
    if (hit == std::string::npos) break;  // text after the last marker is not a case
    v.inputs.push_back(inp.substr(pos, hit - pos));
    pos = hit + marker.size();
  }
  for (const std::string& line : split_lines(read_file(base + ".out"))) {
    std::vector<int32_t> ids;
    std::stringstream ss(line);
    for (int32_t id; ss >> id;) ids.push_back(id);
    v.expected.push_back(ids);
  }
  return v;
}

std::vector<std::string> vocab_vector_names() {
  std::vector<std::string> names;
  // Called while gtest lists the tests: a missing folder gives no names (VocabVectors'
  // EveryVectorFileIsTestedOrListed then fails and names it) instead of an exception no test catches.
  std::error_code ec;
  if (!fs::is_directory(vocab_dir(), ec)) return names;
  for (const auto& e : fs::directory_iterator(vocab_dir())) {
    const std::string f = e.path().filename().string();
    const std::string pre = "ggml-vocab-", post = ".gguf.inp";
    if (f.rfind(pre, 0) == 0 && f.size() > pre.size() + post.size() && f.substr(f.size() - post.size()) == post)
      names.push_back(f.substr(pre.size(), f.size() - pre.size() - post.size()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

const Vocab* shared_vocab(const std::string& name) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Vocab>> cache;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(name); it != cache.end()) return it->second.get();
  std::unique_ptr<Vocab> v;
  if (name == "llama-bpe") {
    const std::string dir = shared_dir() + "/data/tokenizers/llama3.2";
    if (fs::exists(dir + "/encoder.json"))
      v = std::make_unique<Vocab>(Vocab::from_gguf_metadata(gpt2_files_metadata(dir, "llama-bpe")));
  } else {
    const std::string file = vocab_dir() + "/ggml-vocab-" + (name == "tinyllama" ? "llama-spm" : name) + ".gguf";
    if (fs::exists(file)) v = std::make_unique<Vocab>(Vocab::from_gguf_metadata(open_checkpoint(file)->metadata()));
  }
  return (cache[name] = std::move(v)).get();
}

std::vector<std::string> loadable_vocab_names() {
  std::vector<std::string> out;
  for (const std::string& n : vocab_vector_names())
    if (shared_vocab(n)) out.push_back(n);
  return out;
}

const std::string& mixed_script_text() {
  static const std::string text = [] {
    const char* parts[] = {
        "The quick brown fox jumps over the lazy dog. It's 3:45 p.m.; we'll see if they've done it!\n",
        "Съешь же ещё этих мягких французских булок, да выпей чаю. Привет, мир!\n",
        "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Γειά σου Κόσμε!\n",
        "我能吞下玻璃而不伤身体。你好，世界！東京は日本の首都です。カタカナとひらがな。\n",
        "한국어 문장도 있습니다: 안녕하세요 세계.\n",
        "أنا قادر على أكل الزجاج و هذا لا يؤلمني. مرحبا بالعالم\n",
        "אני יכול לאכול זכוכית וזה לא מזיק לי. שלום עולם\n",
        "मैं काँच खा सकता हूँ और मुझे उससे कोई चोट नहीं पहुंचती. नमस्ते दुनिया\n",
        "ฉันกินกระจกได้ แต่มันไม่ทำให้ฉันเจ็บ สวัสดีชาวโลก\n",
        "Emoji: 🦙🚀😶‍🌫️👩‍👩‍👧‍👦 ✅ 🇫🇷 👍🏽 — and combining: e\xCC\x81 n\xCC\x83 a\xCC\x8A Cửa Việt résumé naïve\n",
        "Code:\n    def f(x):\n\treturn x**2 + 1  # comment\n    if (a && b || !c) { y = a[0] << 3; }\n",
        "Whitespace:   three  two \t tab\n\n\nnewlines \r\n crlf    end   \n",
        "Numbers: 1234567890 3.14159 1e-10 0xDEADBEEF 1,000,000 ١٢٣ ٤٥٦ ①②③ ½ ¼\n",
        "Punctuation: \"quoted\" 'single' «guillemets» „Anführungszeichen“ …ellipsis… ¿Qué? ¡Sí!\n",
        "Math: ∀x∈ℝ: x²≥0, ∑ᵢ aᵢ = ∫₀¹ f(t) dt ≈ 0.5; α+β=γ. Ω≠Ω K≠K ﬁ ﬀ\n",
        "Mixed: apple工作1314151天～ нещо на Български 'RE you sure? I'VE been 'told he's there.\n",
    };
    std::string t;
    while (t.size() < 4200) {  // ~2,400 characters of mixed scripts (more bytes)
      for (const char* p : parts) t += p;
    }
    return t;
  }();
  return text;
}

}  // namespace ft::testing
