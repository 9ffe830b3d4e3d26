#pragma once
// The model of `ft run`, `ft serve` and `ft bench`, as llama.cpp and the Python FreeToken engine take
// it: a positional path (`ft serve model.gguf`) or -m / --model / --model-path, one of them.
#include <CLI/CLI.hpp>
#include <string>

namespace ft::cli {

struct ModelArg {
  std::string flag;        // -m, --model, --model-path
  std::string positional;  // the positional MODEL
};

/** Registers the positional MODEL and -m,--model,--model-path (group Model) on `cmd`, with `help`
 *  as their description, writing into `m` (which must outlive parsing). */
void add_model_arg(CLI::App* cmd, ModelArg& m, const std::string& help);

/** The model path given, "" when none. Throws CLI::ValidationError (a usage error: exit 2) when both
 *  the positional and the flag are given, naming both values. */
std::string resolve_model(const ModelArg& m);

}  // namespace ft::cli
