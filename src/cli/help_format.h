#pragma once
// `ft ... --help`: a CLI11 formatter that wraps every line at 100 columns (descriptions continue
// under their column), and the option-group headings the subcommands share.
#include <CLI/CLI.hpp>
#include <cstddef>
#include <string>
#include <string_view>

namespace ft::cli {

// Option groups, in the order a subcommand's --help lists them (CLI11 lists groups in the order
// their first option was added).
inline constexpr const char* kGroupModel = "Model";
inline constexpr const char* kGroupGeneration = "Generation";  // ft run: the prompt and what to print
inline constexpr const char* kGroupServer = "Server";
inline constexpr const char* kGroupMemory = "Memory";
inline constexpr const char* kGroupEngine = "Engine";
inline constexpr const char* kGroupMoe = "MoE expert offload";
inline constexpr const char* kGroupSampling = "Sampling";                    // ft run, ft bench
inline constexpr const char* kGroupSamplingDefaults = "Sampling defaults";  // ft serve: for requests that say none
inline constexpr const char* kGroupLogging = "Logging";
inline constexpr const char* kGroupLlamaCpp = "llama.cpp flags";  // taken for llama-server users, most ignored

/** `text` broken at blanks into lines of at most `width` characters (a word longer than that gets a
 *  line of its own); a '\n' in `text` always breaks. Lines are joined with '\n', no trailing one. */
std::string wrap_words(std::string_view text, size_t width);

/** CLI11's Formatter with lines of at most `width` columns (longer only for a single word that does
 *  not fit, or an option name longer than the line): option and subcommand descriptions start at
 *  column `column` and wrap there, the command's description and footer wrap at `width`. A
 *  subcommand's help also lists its parent's --log-* options (global, taken after the subcommand
 *  too) in its Logging group. */
class HelpFormatter : public CLI::Formatter {
 public:
  explicit HelpFormatter(size_t width = 100, size_t column = 30);

  std::string make_option(const CLI::Option* opt, bool is_positional) const override;
  std::string make_subcommand(const CLI::App* sub) const override;
  std::string make_description(const CLI::App* app) const override;
  std::string make_footer(const CLI::App* app) const override;
  std::string make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const override;

 private:
  /** "  NAME" then `desc` from column `column_width_`, wrapped; NAME alone on its line when it reaches
   *  into the description's column. Ends with '\n'. */
  std::string entry(const std::string& name, const std::string& desc) const;
  /** CLI11's option groups (make_groups, which is not virtual), with the parent's --log-* options
   *  added to the Logging group (made last when the command has none). */
  std::string groups(const CLI::App* app, CLI::AppFormatMode mode) const;

  size_t width_;
};

}  // namespace ft::cli
