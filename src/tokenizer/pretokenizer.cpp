#include "tokenizer/pretokenizer.h"

#include <algorithm>

#include "util/error.h"

namespace ft {
namespace {

struct Piece {
  std::string_view text;
  bool at_start;
};

struct Segment {
  size_t b, e;
  bool match;
};

// Applies a split behaviour to the segments covering a piece (tokenizers' NormalizedString::split).
void apply_behavior(std::vector<Segment>& segs, SplitBehavior behavior) {
  std::vector<Segment> out;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      return;
    case SplitBehavior::kRemoved:
      for (const Segment& s : segs)
        if (!s.match) out.push_back(s);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const Segment& s : segs) {
        if (s.match && !prev_match && !out.empty()) out.back().e = s.e;
        else out.push_back(s);
        prev_match = s.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;
      for (size_t i = segs.size(); i-- > 0;) {
        const Segment& s = segs[i];
        if (s.match && !prev_match && !out.empty()) out.back().b = s.b;
        else out.push_back(s);
        prev_match = s.match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (const Segment& s : segs) {
        if (s.match && prev_match && !out.empty()) out.back().e = s.e;
        else out.push_back(s);
        prev_match = s.match;
      }
      break;
    }
  }
  segs.swap(out);
}

void split_piece(const Piece& p, const Regex& re, SplitBehavior behavior, bool invert, std::vector<Piece>& out,
                 std::vector<std::pair<size_t, size_t>>& hits, std::vector<Segment>& segs) {
  hits.clear();
  segs.clear();
  re.find_all(p.text, hits);
  size_t prev = 0;
  for (auto [b, e] : hits) {
    if (b != prev) segs.push_back({prev, b, invert});
    segs.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != p.text.size()) segs.push_back({prev, p.text.size(), invert});
  apply_behavior(segs, behavior);
  for (const Segment& s : segs) {
    if (s.e > s.b) out.push_back({p.text.substr(s.b, s.e - s.b), p.at_start && s.b == 0});
  }
}

}  // namespace

void PreTokenizer::add_split(std::string_view pattern, SplitBehavior behavior, bool invert, bool literal) {
  Step s;
  s.kind = Step::kSplit;
  s.regex = std::make_shared<const Regex>(pattern, literal);
  s.behavior = behavior;
  s.invert = invert;
  steps_.push_back(std::move(s));
}

void PreTokenizer::add_byte_level(bool add_prefix_space, bool use_regex) {
  Step s;
  s.kind = Step::kByteLevel;
  s.add_prefix_space = add_prefix_space;
  if (use_regex) s.regex = std::make_shared<const Regex>(kGpt2Regex);
  steps_.push_back(std::move(s));
}

void PreTokenizer::add_metaspace(std::string replacement, std::string_view prepend, bool split) {
  Step s;
  s.kind = Step::kMetaspace;
  s.replacement = std::move(replacement);
  if (s.replacement.empty()) fail(ErrorCode::kInvalidArgument, "Metaspace pre-tokenizer: empty replacement");
  if (prepend == "always") s.prepend = 0;
  else if (prepend == "first") s.prepend = 1;
  else if (prepend == "never") s.prepend = 2;
  else fail(ErrorCode::kUnsupported, "Metaspace pre-tokenizer: unknown prepend_scheme '{}'", prepend);
  s.split = split;
  s.regex = std::make_shared<const Regex>(s.replacement, /*literal=*/true);
  steps_.push_back(std::move(s));
}

void PreTokenizer::run(std::string_view text, bool at_start, std::vector<std::string_view>& words,
                       std::deque<std::string>& arena) const {
  std::vector<Piece> cur{{text, at_start}}, next;
  std::vector<std::pair<size_t, size_t>> hits;
  std::vector<Segment> segs;
  for (const Step& step : steps_) {
    next.clear();
    for (const Piece& p : cur) {
      switch (step.kind) {
        case Step::kSplit:
          split_piece(p, *step.regex, step.behavior, step.invert, next, hits, segs);
          break;
        case Step::kByteLevel: {
          Piece q = p;
          if (step.add_prefix_space && (q.text.empty() || q.text.front() != ' ')) {
            std::string s;
            s.reserve(q.text.size() + 1);
            s += ' ';
            s.append(q.text);
            arena.push_back(std::move(s));
            q.text = arena.back();
          }
          if (step.regex) split_piece(q, *step.regex, SplitBehavior::kIsolated, false, next, hits, segs);
          else next.push_back(q);
          break;
        }
        case Step::kMetaspace: {
          std::string s;
          s.reserve(p.text.size() + 8);
          for (char c : p.text) {
            if (c == ' ') s += step.replacement;
            else s += c;
          }
          const bool starts = s.compare(0, step.replacement.size(), step.replacement) == 0;
          if (!starts && (step.prepend == 0 || (step.prepend == 1 && p.at_start))) s.insert(0, step.replacement);
          arena.push_back(std::move(s));
          Piece q{arena.back(), p.at_start};
          if (step.split) split_piece(q, *step.regex, SplitBehavior::kMergedWithNext, false, next, hits, segs);
          else next.push_back(q);
          break;
        }
      }
    }
    cur.swap(next);
  }
  for (const Piece& p : cur)
    if (!p.text.empty()) words.push_back(p.text);
}

}  // namespace ft
