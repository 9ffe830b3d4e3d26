// `ft`: FreeToken's command line. Errors become exit codes here and nowhere below.
#include <cstdio>
#include <memory>

#include <spdlog/sinks/stdout_color_sinks.h>

#include "cli/commands.h"
#include "util/error.h"
#include "util/log.h"

namespace {

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
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, off");
  ft::cli::Action action;
  ft::cli::add_bench_command(app, action);
  ft::cli::add_inspect_command(app, action);
  ft::cli::add_run_command(app, action);
  ft::cli::add_serve_command(app, action);
  ft::cli::add_tokenize_command(app, action);
  ft::cli::add_template_command(app, action);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help / --version exit 0; a usage error is bad input like any other: exit 2.
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    ft::set_log_level(log_level);
    return action ? action() : 0;
  } catch (const ft::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return exit_code_for(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", e.what());
    return 1;
  }
}
