// `ft`: FreeToken's command line. Errors become exit codes here and nowhere below.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>

#include "cli/commands.h"
#include "cli/compat_flags.h"
#include "cli/help_format.h"
#include "util/error.h"
#include "util/log.h"
#include "util/version.h"

namespace {

/** The first word of the command line that is not an option or the value of --log-level or
 *  --log-format: the subcommand the user meant, or "" when there is none. */
std::string first_word(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--log-level" || a == "--log-format") {
      ++i;
      continue;
    }
    if (!a.empty() && a[0] != '-') return a;
  }
  return {};
}

int exit_code_for(ft::ErrorCode code) {
  switch (code) {
    case ft::ErrorCode::kInternal: return 1;
    case ft::ErrorCode::kOutOfMemory: return 3;
    default: return 2;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Logs go to stderr: stdout carries the output (generated text, ids, JSON).
  spdlog::default_logger()->sinks() = {std::make_shared<spdlog::sinks::stderr_color_sink_mt>()};
  CLI::App app{"FreeToken: serve large Mixture-of-Experts models on small GPUs"};
  app.formatter(std::make_shared<ft::cli::HelpFormatter>());  // before the subcommands, which copy it
  app.require_subcommand(1);
  // A flag given twice takes its last value, as llama-server and most CLIs do (a wrapper script's
  // defaults followed by the user's own); subcommands made from here on inherit it.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off");
  std::string log_format = "text";
  app.add_option("--log-format", log_format,
                 "text, or json: one JSON object a line (ts, level, msg; a request line's numbers as typed keys)")
      ->check(CLI::IsMember({"text", "json"}));
  app.set_version_flag("--version", fmt::format("ft {} (FreeToken; backends: {})", ft::kVersion, ft::kBackends));
  // Global options are taken after the subcommand too (`ft serve --log-level debug`): subcommands
  // made from here on pass the options they do not know up to `ft`.
  app.fallthrough();
  ft::cli::Action action;
  ft::cli::add_bench_command(app, action);
  ft::cli::add_inspect_command(app, action);
  ft::cli::add_run_command(app, action);
  ft::cli::add_serve_command(app, action);
  ft::cli::add_tokenize_command(app, action);
  ft::cli::add_template_command(app, action);
  // llama.cpp's -ngl, -np and vLLM's -tp, which CLI11 cannot name, as their long forms.
  const std::vector<std::string> args = ft::cli::expand_multi_letter_flags(argc, argv);
  const std::vector<std::string> typed(argv, argv + argc);
  std::vector<const char*> arg_ptrs;
  for (const std::string& a : args) arg_ptrs.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::ParseError& e) {
    // `ft bogus`: CLI11 would only say that a subcommand is required.
    const std::string word = first_word(argc, argv);
    if (e.get_exit_code() != 0 && app.get_subcommands().empty() && !word.empty()) {
      std::string names;
      for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
        names += (names.empty() ? "" : ", ") + sub->get_name();
      std::fprintf(stderr, "error: unknown subcommand '%s' (subcommands: %s; see ft --help)\n", word.c_str(),
                   names.c_str());
      return 2;
    }
    // --help / --version exit 0; a usage error is bad input like any other: exit 2, printed as every
    // other error is ("error: ...").
    if (e.get_exit_code() == 0) return app.exit(e);
    const std::vector<CLI::App*> parsed = app.get_subcommands();
    std::string message = ft::cli::unexpected_arguments_message(e.what(), parsed.empty() ? nullptr : parsed.front());
    for (const CLI::App* sub : app.get_subcommands()) message = ft::cli::name_flags_as_typed(message, *sub, args, typed);
    std::fprintf(stderr, "error: %s\nRun with --help for more information.\n", message.c_str());
    return 2;
  }
  // An error about a flag names it as the user typed it ("-c (--kv-tokens)" after -c).
  const auto as_typed = [&](std::string message) {
    for (const CLI::App* sub : app.get_subcommands()) message = ft::cli::name_flags_as_typed(message, *sub, args, typed);
    return message;
  };
  try {
    ft::set_log_level(log_level);
    ft::set_log_format(log_format);
    return action ? action() : 0;
  } catch (const ft::Error& e) {
    std::fprintf(stderr, "error: %s\n", as_typed(e.what()).c_str());
    return exit_code_for(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 1;
  }
}
