#pragma once
// The Responses API's stored responses (POST /v1/responses with "store": true, the default): what
// GET /v1/responses/{id} returns, DELETE removes, and a later request's previous_response_id continues.
// Kept in memory for the server's life, bounded by a count and a byte budget; the least recently
// used response goes first when either is exceeded (OpenAI keeps them 30 days; a local server keeps
// what fits).
#include <cstddef>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

namespace ft::server {

/** One stored response: the response object as it was returned, and the conversation it answered as
 *  Responses input items (previous responses' items first, the request's own `input` last, without
 *  `instructions`, which OpenAI does not carry over to a continuation). */
struct StoredResponse {
  nlohmann::ordered_json response;
  nlohmann::ordered_json input_items = nlohmann::ordered_json::array();
};

/** A thread-safe LRU map from response id to StoredResponse. */
class ResponseStore {
 public:
  static constexpr size_t kDefaultMaxCount = 1024;
  static constexpr size_t kDefaultMaxBytes = size_t{64} << 20;

  explicit ResponseStore(size_t max_count = kDefaultMaxCount, size_t max_bytes = kDefaultMaxBytes)
      : max_count_(max_count), max_bytes_(max_bytes) {}

  /** Stores `r` under `id` (replacing one of that id) as the most recently used, then evicts the least
   *  recently used until at most max_count responses of at most max_bytes (their JSON text) remain. A
   *  response larger than max_bytes by itself is not stored; returns whether it was. */
  bool put(const std::string& id, StoredResponse r);

  /** A copy of the response stored under `id` (marking it most recently used), or nullopt. */
  std::optional<StoredResponse> get(const std::string& id);

  /** Removes `id`; false when it was not stored. */
  bool erase(const std::string& id);

  size_t size() const;
  /** The JSON text bytes of what is stored (what max_bytes bounds). */
  size_t bytes() const;

 private:
  struct Entry {
    std::string id;
    StoredResponse value;
    size_t bytes = 0;
  };
  using List = std::list<Entry>;  // most recently used first

  size_t max_count_, max_bytes_;
  mutable std::mutex mu_;
  List lru_;
  std::unordered_map<std::string, List::iterator> index_;
  size_t bytes_ = 0;
};

}  // namespace ft::server
