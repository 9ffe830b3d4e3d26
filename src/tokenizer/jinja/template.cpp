#include "tokenizer/jinja/template.h"

#include "tokenizer/jinja/parser.h"

namespace ft::jinja {

Template::Template(std::string_view source) : body_(std::make_shared<Body>(parse_template(source))) {}

std::string Template::render(const Dict& vars, const RenderOptions& options) const {
  auto globals = std::make_shared<Scope>();
  globals->vars.reserve(vars.items.size());
  for (const auto& kv : vars.items) {
    if (!kv.first.is_string()) raise(ErrorKind::kTypeError, "template variable names must be strings");
    globals->vars.emplace_back(kv.first.str(), kv.second);
  }
  Interpreter in(options);
  return in.render(*body_, std::move(globals));
}

}  // namespace ft::jinja
