#include "server/json_body.h"

#include <unordered_map>
#include <utility>
#include <vector>

namespace ft::server {
namespace {

using ojson = nlohmann::ordered_json;
using Members = std::vector<std::pair<const std::string, ojson>>;  // ordered_map's storage

/** A nlohmann SAX handler that builds the ordered_json DOM, indexing each open object's keys. */
class LinearBuilder {
 public:
  explicit LinearBuilder(int max_depth) : max_depth_(max_depth) {}

  bool null() { return put(ojson(nullptr)); }
  bool boolean(bool v) { return put(ojson(v)); }
  bool number_integer(ojson::number_integer_t v) { return put(ojson(v)); }
  bool number_unsigned(ojson::number_unsigned_t v) { return put(ojson(v)); }
  bool number_float(ojson::number_float_t v, const std::string&) { return put(ojson(v)); }
  bool string(std::string& v) { return put(ojson(std::move(v))); }
  bool binary(ojson::binary_t& v) { return put(ojson::binary(std::move(v))); }
  bool start_object(std::size_t) { return open(ojson::object()); }
  bool start_array(std::size_t) { return open(ojson::array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(std::string& k) {
    stack_.back().key = std::move(k);
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at ...": drop the tag
    if (const size_t tag = what.find("] "); what.rfind("[json.exception.", 0) == 0 && tag != std::string::npos)
      what.erase(0, tag + 2);
    throw JsonSyntaxError{std::move(what)};
  }

  ojson take() { return std::move(root_); }

 private:
  static constexpr size_t kIndexFrom = 16;  // members from which an object is looked up by hash
  struct Frame {
    ojson* value = nullptr;
    std::unordered_map<std::string, size_t> index;  // objects of kIndexFrom members or more: key -> member
    std::string key;                                // objects: the key of the value to come
  };

  /** Places v in the innermost open container (or as the root) and returns where it now lives. */
  ojson* place(ojson&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Frame& f = stack_.back();
    if (f.value->is_array()) {
      auto& a = f.value->get_ref<ojson::array_t&>();
      a.push_back(std::move(v));
      return &a.back();
    }
    Members& m = f.value->get_ref<ojson::object_t&>();
    size_t at = m.size();  // the key's member, or m.size() for a new key
    if (m.size() < kIndexFrom) {  // small objects (nearly all): a scan costs less than a hash index
      for (size_t i = 0; i < m.size(); ++i)
        if (m[i].first == f.key) at = i;
    } else {
      if (f.index.empty())
        for (size_t i = 0; i < m.size(); ++i) f.index.emplace(m[i].first, i);
      if (auto it = f.index.find(f.key); it != f.index.end()) at = it->second;
      else f.index.emplace(f.key, m.size());
    }
    if (at < m.size()) {  // a repeated key: the last value wins
      m[at].second = std::move(v);
      return &m[at].second;
    }
    m.emplace_back(std::move(f.key), std::move(v));
    return &m.back().second;
  }
  bool put(ojson&& v) {
    place(std::move(v));
    return true;
  }
  bool open(ojson&& container) {
    if (static_cast<int>(stack_.size()) >= max_depth_) throw JsonTooDeep{};
    ojson* at = place(std::move(container));  // a parent never grows while a child is open
    stack_.push_back(Frame{at, {}, {}});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  int max_depth_;
  ojson root_;
  std::vector<Frame> stack_;
};

}  // namespace

nlohmann::ordered_json parse_json_linear(std::string_view text, int max_depth) {
  LinearBuilder b(max_depth);
  ojson::sax_parse(text.begin(), text.end(), &b);
  return b.take();
}

}  // namespace ft::server
