#pragma once
// The request and response the routes see, independent of the transport under them
// (http_transport.h reads and writes them with Boost.Beast). A request carries its method, path
// (percent-decoded), the route pattern's groups, query parameters, header fields (names compared
// case-insensitively, RFC 9110 5.1) and the whole body; a response its status, header fields and either
// a body or a stream provider (SSE) that writes through a StreamSink which reports a client gone.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ft::server {

/** Orders header names without regard to ASCII case. */
struct CaseInsensitiveLess {
  bool operator()(std::string_view a, std::string_view b) const;
  using is_transparent = void;
};

using HttpHeaders = std::multimap<std::string, std::string, CaseInsensitiveLess>;

/** Whether the client of a request has hung up (set by the transport, read by the routes). */
struct ClientState {
  std::atomic<bool> gone{false};
};

/** What the routes learned about a request, for its log line (server/request_log.h): the generation's
 *  numbers (server/generation.h trace_generation) and the error an error response carried
 *  (send_error). Written and read on the request's handler thread. */
struct RequestTrace {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();  // the header was read
  std::string model;  // the model that generated (empty: no generation ran)
  std::optional<int64_t> prompt_tokens, cached_tokens, completion_tokens;  // cached: once the engine told
  std::optional<double> ttft_ms;       // from `start` to the first sampled token
  std::optional<double> tokens_per_s;  // decode rate: tokens after the first over the time since it
  std::string finish_reason;           // "stop", "length", "cancelled", "error" (choices': joined by ',')
  std::string error_type, error_code, error_message;  // of an error response or a failed generation
};

struct HttpRequest {
  std::string method;                // "GET", "POST", ...
  std::string target;                // as sent: path and query
  std::string path;                  // the target's path, percent-decoded
  std::vector<std::string> matches;  // the route pattern's match: [0] the path, [i] group i
  std::multimap<std::string, std::string> params;  // the query's name=value pairs, decoded
  HttpHeaders headers;
  std::string body;
  std::string remote_addr;
  int remote_port = 0;
  std::shared_ptr<ClientState> client = std::make_shared<ClientState>();
  std::shared_ptr<RequestTrace> trace = std::make_shared<RequestTrace>();

  /** The first value of header `name`, or "" when absent. */
  std::string get_header_value(std::string_view name) const;
  bool has_header(std::string_view name) const;
  /** The first value of query parameter `name`, or "". */
  std::string get_param_value(std::string_view name) const;
  /** Content-Type is multipart/form-data. */
  bool is_multipart_form_data() const;
  /** True once the client closed or reset the connection while the request was handled. */
  bool client_gone() const { return client->gone.load(); }
};

/** Where a streaming response writes: each write goes out as one HTTP/1.1 chunk before it returns. */
class StreamSink {
 public:
  virtual ~StreamSink() = default;
  /** Writes `data`; false when the client has gone (a failed or timed-out write, or a hang-up seen
   *  on the socket), after which the stream is over. */
  virtual bool write(std::string_view data) = 0;
  /** Ends the stream normally (the last chunk follows); the provider is not called again. */
  virtual void done() = 0;
};

struct HttpResponse {
  /** Called repeatedly until it calls sink.done() (the stream ended) or returns false (abandon it:
   *  the connection closes). */
  using StreamProvider = std::function<bool(StreamSink& sink)>;
  /** Called once the stream is over: `success` when done() ended it. */
  using StreamClosed = std::function<void(bool success)>;

  int status = 200;
  HttpHeaders headers;
  std::string body;
  StreamProvider provider;
  StreamClosed on_closed;

  /** Adds a header field (another one of the same name stays). */
  void set_header(std::string name, std::string value) { headers.emplace(std::move(name), std::move(value)); }
  /** The first value of header `name`, or "". */
  std::string get_header_value(std::string_view name) const;
  /** `body` with Content-Type `content_type`. */
  void set_content(std::string body, std::string content_type);
  /** A streaming body of `content_type` sent with chunked transfer coding (see StreamProvider). */
  void set_stream(std::string content_type, StreamProvider provider, StreamClosed on_closed);
  bool streaming() const { return static_cast<bool>(provider); }
};

/** `s` with %XX escapes decoded (and '+' as a space when `plus_is_space`, as in a query). */
std::string percent_decode(std::string_view s, bool plus_is_space);

/** Fills path, params from `target` ("/p?a=1&b", or the absolute form "http://host/p?a=1&b"). */
void split_target(HttpRequest& req);

}  // namespace ft::server
