#pragma once
// Public entry of the Jinja interpreter: parse once, render many times. The environment matches
// Hugging Face's chat-template environment: jinja2 ImmutableSandboxedEnvironment(trim_blocks=True,
// lstrip_blocks=True), loop controls, the {% generation %} tag, tojson as json.dumps(ensure_ascii=False),
// raise_exception() and strftime_now() globals, default (lenient) Undefined, no autoescape.
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/interpreter.h"

namespace ft::jinja {

class Template {
 public:
  /** Parses source. Throws TemplateError naming the line for syntax errors (unknown tag, bad
   *  expression) and for unknown filters/tests outside a conditional. */
  explicit Template(std::string_view source);

  /** Renders with `vars` as template variables (key -> value). Thread-safe: the tree is read-only.
   *  Throws TemplateError: raise_exception(msg) gives what() == msg; other failures name the kind
   *  (TypeError, UndefinedError, SecurityError, ...) and the template line. */
  std::string render(const Dict& vars, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace ft::jinja
