#include "cli/help_format.h"

#include <algorithm>
#include <vector>

namespace ft::cli {

std::string wrap_words(std::string_view text, size_t width) {
  std::string out;
  size_t line_len = 0;
  bool line_empty = true;
  size_t i = 0;
  while (i < text.size()) {
    const char c = text[i];
    if (c == '\n') {
      out += '\n';
      line_len = 0;
      line_empty = true;
      ++i;
      continue;
    }
    if (c == ' ') {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < text.size() && text[end] != ' ' && text[end] != '\n') ++end;
    const std::string_view word = text.substr(i, end - i);
    if (!line_empty && line_len + 1 + word.size() > width) {
      out += '\n';
      line_len = 0;
      line_empty = true;
    }
    if (!line_empty) {
      out += ' ';
      ++line_len;
    }
    out += word;
    line_len += word.size();
    line_empty = false;
    i = end;
  }
  return out;
}

HelpFormatter::HelpFormatter(size_t width, size_t column) : width_(width) { column_width(column); }

std::string HelpFormatter::entry(const std::string& name, const std::string& desc) const {
  std::string out = "  " + name;
  if (desc.empty()) return out + "\n";
  const std::string body = wrap_words(desc, width_ > column_width_ + 20 ? width_ - column_width_ : 20);
  if (out.size() + 1 > column_width_) {
    out += '\n';
    out += std::string(column_width_, ' ');
  } else {
    out += std::string(column_width_ - out.size(), ' ');
  }
  for (const char c : body) {
    out += c;
    if (c == '\n') out += std::string(column_width_, ' ');
  }
  return out + "\n";
}

std::string HelpFormatter::make_option(const CLI::Option* opt, bool is_positional) const {
  return entry(make_option_name(opt, is_positional) + make_option_opts(opt), make_option_desc(opt));
}

std::string HelpFormatter::make_subcommand(const CLI::App* sub) const {
  return entry(sub->get_display_name(true), sub->get_description());
}

std::string HelpFormatter::make_description(const CLI::App* app) const {
  const std::string desc = CLI::Formatter::make_description(app);
  return wrap_words(desc, width_);  // keeps the description's closing '\n'
}

std::string HelpFormatter::make_footer(const CLI::App* app) const {
  const std::string footer = app->get_footer();
  return footer.empty() ? footer : wrap_words(footer, width_) + "\n";
}

std::string HelpFormatter::make_help(const CLI::App* app, std::string name, CLI::AppFormatMode mode) const {
  if (mode == CLI::AppFormatMode::Sub) return make_expanded(app);
  // CLI11's make_help, with groups() for make_groups.
  std::string out;
  if (app->get_name().empty() && app->get_parent() != nullptr && app->get_group() != "Subcommands")
    out += app->get_group() + ':';
  out += make_description(app);
  out += make_usage(app, name);
  out += make_positionals(app);
  out += groups(app, mode);
  out += make_subcommands(app, mode);
  out += '\n' + make_footer(app);
  return out;
}

std::string HelpFormatter::groups(const CLI::App* app, CLI::AppFormatMode mode) const {
  // The parent's logging flags (`ft serve --log-level debug` works through fallthrough).
  std::vector<const CLI::Option*> global_logging;
  if (const CLI::App* parent = app->get_parent())
    for (const CLI::Option* opt : parent->get_options())
      if (opt->nonpositional() && opt->get_name().rfind("--log-", 0) == 0) global_logging.push_back(opt);
  std::vector<std::string> groups = app->get_groups();
  if (!global_logging.empty() && std::find(groups.begin(), groups.end(), kGroupLogging) == groups.end())
    groups.emplace_back(kGroupLogging);
  std::string out;
  for (const std::string& group : groups) {
    std::vector<const CLI::Option*> opts = app->get_options([&](const CLI::Option* opt) {
      return opt->get_group() == group && opt->nonpositional() &&
             (mode != CLI::AppFormatMode::Sub || (opt != app->get_help_ptr() && opt != app->get_help_all_ptr()));
    });
    if (group == kGroupLogging) opts.insert(opts.end(), global_logging.begin(), global_logging.end());
    if (group.empty() || opts.empty()) continue;
    out += make_group(group, false, opts);
  }
  return out;
}

}  // namespace ft::cli
