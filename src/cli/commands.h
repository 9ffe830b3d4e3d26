#pragma once
// Each `ft` subcommand lives in its own file and registers itself here from main.cpp.
#include <CLI/CLI.hpp>
#include <functional>

namespace ft::cli {

/** A subcommand's action returns the process exit code (0 ok, 1 internal error, 2 bad input, 3 out of memory). */
using Action = std::function<int()>;

void add_bench_command(CLI::App& app, Action& action);
void add_inspect_command(CLI::App& app, Action& action);
void add_run_command(CLI::App& app, Action& action);
void add_serve_command(CLI::App& app, Action& action);
void add_tokenize_command(CLI::App& app, Action& action);
void add_template_command(CLI::App& app, Action& action);

}  // namespace ft::cli
