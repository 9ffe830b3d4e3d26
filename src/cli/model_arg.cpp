#include "cli/model_arg.h"

#include <fmt/format.h>

#include "cli/help_format.h"

namespace ft::cli {

void add_model_arg(CLI::App* cmd, ModelArg& m, const std::string& help) {
  cmd->add_option("MODEL", m.positional, help + " (or -m/--model)");
  cmd->add_option("-m,--model,--model-path", m.flag, help)->group(kGroupModel);
}

std::string resolve_model(const ModelArg& m) {
  if (!m.flag.empty() && !m.positional.empty())
    throw CLI::ValidationError(fmt::format("the model is given twice: as the positional MODEL '{}' and as --model "
                                           "'{}'; give one of them",
                                           m.positional, m.flag));
  return m.flag.empty() ? m.positional : m.flag;
}

}  // namespace ft::cli
