// `ft template --model PATH | --template FILE --conversation FILE.json [--now 2026-11-30T00:00:00]`:
// prints the prompt a chat template renders for a conversation, exactly (no newline added). The
// conversation file has the shape of shared/fixtures/chat/conversations/*.json: `messages`, optional
// `tools` and `add_generation_prompt`; every other top-level key (bos_token, enable_thinking, ...) is a
// template variable. A failing render exits 2 with the template's own message.
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "formats/checkpoint.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/model_template.h"
#include "tokenizer/vocab.h"
#include "util/error.h"
#include "util/read_file.h"

namespace ft::cli {
namespace {

struct TemplateArgs {
  std::string model;
  std::string template_file;
  std::string conversation;
  std::string now;
};

int run_template(const TemplateArgs& a) {
  if (a.model.empty() == a.template_file.empty())
    fail(ErrorCode::kInvalidArgument, "give exactly one of --model PATH or --template FILE");
  nlohmann::ordered_json conv;
  try {
    conv = nlohmann::ordered_json::parse(read_text_file(a.conversation));
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kInvalidArgument, "{}: not valid JSON: {}", a.conversation, e.what());
  }
  if (!conv.is_object() || !conv.contains("messages"))
    fail(ErrorCode::kInvalidArgument, "{}: expected an object with a 'messages' array", a.conversation);

  std::string source;
  std::optional<std::string> bos, eos;
  if (!a.model.empty()) {
    auto checkpoint = open_checkpoint(a.model);
    Vocab vocab = Vocab::from_checkpoint(*checkpoint);
    ModelTemplate t = model_chat_template(*checkpoint, vocab);
    source = std::move(t.source);
    bos = std::move(t.bos_token);
    eos = std::move(t.eos_token);
  } else {
    source = read_text_file(a.template_file);
  }
  jinja::RenderOptions options;
  if (!a.now.empty()) options.now = parse_clock(a.now);
  const ChatTemplate tmpl(source, bos, eos);
  const std::string text = tmpl.render_conversation(conv, options);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace

void add_template_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<TemplateArgs>();
  CLI::App* cmd = app.add_subcommand("template", "Render a conversation with a chat template");
  cmd->add_option("-m,--model,--model-path", args->model, "GGUF file or Hugging Face folder whose template (and BOS/EOS) to use");
  cmd->add_option("--template", args->template_file, "Jinja template file");
  cmd->add_option("--conversation", args->conversation,
                  "Conversation JSON file: {\"messages\": [...], \"add_generation_prompt\": true, \"tools\": [...]}; "
                  "other keys are template variables. Without add_generation_prompt (default false, as in "
                  "transformers) the prompt ends after the last message; the server adds it by default")
      ->required();
  cmd->add_option("--now", args->now, "Pin the clock strftime_now() reads (e.g. 2026-11-30T00:00:00)");
  cmd->callback([&action, args] { action = [args] { return run_template(*args); }; });
}

}  // namespace ft::cli
