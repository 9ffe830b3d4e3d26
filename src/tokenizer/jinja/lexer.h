#pragma once
// Jinja template lexer with Hugging Face's settings: trim_blocks (drop the first newline after a block
// or comment tag), lstrip_blocks (drop spaces/tabs before a block or comment tag that starts a line),
// keep_trailing_newline=False (one trailing newline of the source is dropped), `-`/`+` whitespace
// control, {% raw %} blocks, {# comments #}. Mirrors jinja2 3.1 lexer.py state machine (root, block,
// variable, comment, raw states; block/variable ends only match with balanced brackets).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ft::jinja {

enum class Tok : uint8_t { kData, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

enum class Op : uint8_t {
  kNone, kAdd, kSub, kDiv, kFloorDiv, kMul, kMod, kPow, kTilde, kLBracket, kRBracket, kLParen, kRParen,
  kLBrace, kRBrace, kEq, kNe, kGt, kGe, kLt, kLe, kAssign, kDot, kColon, kPipe, kComma, kSemicolon,
};

struct Token {
  Tok type = Tok::kEof;
  Op op = Op::kNone;
  int line = 1;
  std::string text;  // data, name, unescaped string literal, operator spelling
  int64_t ival = 0;
  double fval = 0;
};

/** Splits a template into tokens (ends with kEof). Throws TemplateError(kTemplateSyntaxError) naming
 *  the line for an unterminated tag/comment/string or an unexpected character. */
std::vector<Token> tokenize(std::string_view source);

/** Printable description of a token for error messages ("end of print statement", "'foo'"). */
std::string describe(const Token& t);

}  // namespace ft::jinja
