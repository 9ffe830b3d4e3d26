#pragma once
// Jinja parser: tokens -> syntax tree, following jinja2 3.1 parser.py (operator precedence, tuple
// rules, test-argument shorthand, filter/test name resolution at parse time). Supported statements:
// if/elif/else, for (else, filter, recursive), set (plain, namespace attribute, block), macro, call,
// filter, with, print, break/continue (jinja2.ext.loopcontrols), generation (Hugging Face's
// AssistantTracker). Anything else is a syntax error naming the line.
#include <string_view>

#include "tokenizer/jinja/ast.h"

namespace ft::jinja {

/** Parses template source. Throws TemplateError (kTemplateSyntaxError, or kTemplateAssertionError for
 *  an unknown filter/test outside a conditional, as jinja2's compiler does) with the line. */
Body parse_template(std::string_view source);

}  // namespace ft::jinja
