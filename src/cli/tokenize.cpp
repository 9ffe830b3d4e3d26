// `ft tokenize --model PATH [--special] TEXT` prints the token ids of TEXT (one line, comma-separated);
// `ft tokenize --model PATH --ids 1,2,3` prints the text of those ids instead. Exactly one of the two
// is required (exit 2 otherwise).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/int_list.h"
#include "formats/checkpoint.h"
#include "tokenizer/vocab.h"
#include "util/error.h"

namespace ft::cli {
namespace {

struct TokenizeArgs {
  std::string model;
  std::optional<std::string> text;  // none: not given (an empty string is a text: just BOS/EOS if any)
  std::string ids;
  bool special = false;
  bool no_bos = false;
};

int run_tokenize(const TokenizeArgs& a) {
  if (a.text.has_value() == !a.ids.empty())
    fail(ErrorCode::kInvalidArgument, "give the TEXT to encode or --ids 1,2,3 to decode (exactly one)");
  auto checkpoint = open_checkpoint(a.model);
  Vocab vocab = Vocab::from_checkpoint(*checkpoint);
  if (!a.ids.empty()) {
    const std::vector<int32_t> ids = parse_int_list(a.ids, "--ids", "a token id", 0, INT32_MAX);
    const std::string text = vocab.decode(ids, /*skip_special=*/!a.special);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
    return 0;
  }
  EncodeOptions opts;
  opts.parse_special = a.special;
  opts.add_special = !a.no_bos;
  const std::vector<int32_t> ids = vocab.encode(*a.text, opts);
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) line += ',';
    line += std::to_string(ids[i]);
  }
  std::printf("%s\n", line.c_str());
  return 0;
}

}  // namespace

void add_tokenize_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<TokenizeArgs>();
  CLI::App* cmd = app.add_subcommand("tokenize", "Token ids of a text (or the text of ids) under a model's tokenizer");
  cmd->add_option("-m,--model,--model-path", args->model, "GGUF file or Hugging Face folder")->required();
  cmd->add_option("text", args->text, "Text to encode");
  cmd->add_option("--ids", args->ids, "Decode these comma-separated ids instead");
  cmd->add_flag("--special", args->special,
                "Match special tokens such as <|im_start|> in the text (and show them when decoding)");
  cmd->add_flag("--no-bos", args->no_bos, "Do not add BOS/EOS even if the vocabulary asks for them");
  cmd->callback([&action, args] { action = [args] { return run_tokenize(*args); }; });
}

}  // namespace ft::cli
