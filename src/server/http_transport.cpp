#include "server/http_transport.h"

#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>  // before Boost: 1.74's asio/awaitable.hpp uses std::exchange without it
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "util/error.h"
#include "util/log.h"

namespace ft::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using beast::error_code;

namespace {

class Connection;

/** After a refusal the client may still be sending (a 200 MiB body): its bytes are read and dropped
 *  for at most this long, so closing does not reset the connection before the answer is read. */
constexpr auto kLingerTime = std::chrono::milliseconds(5000);
/** Bytes one connection's read buffer may hold (a header is refused well before). */
constexpr size_t kReadBufferBytes = 1 << 20;

}  // namespace

struct HttpTransport::Impl {
  TransportLimits limits;
  TransportHooks hooks;
  // Declared before the io_context: connections destroyed with its pending handlers unregister here.
  std::mutex mu;
  std::unordered_map<uint64_t, std::weak_ptr<Connection>> conns;
  uint64_t next_id = 0;
  std::condition_variable cv;
  bool stop_requested = false, serving = false;
  std::atomic<bool> stopping{false};
  net::io_context ioc;
  tcp::acceptor acceptor{net::make_strand(ioc)};
  std::optional<net::thread_pool> handlers;

  void accept();
  void shut_down();
};

namespace {

/** One TCP connection: reads requests one after another, hands each to a handler thread, writes its
 *  response. Every socket operation runs on the connection's strand. */
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpTransport::Impl& t, tcp::socket s, uint64_t id)
      : t_(t), socket_(std::move(s)), timer_(socket_.get_executor()), buffer_(kReadBufferBytes), id_(id) {}
  ~Connection() {
    std::lock_guard lk(t_.mu);
    t_.conns.erase(id_);
  }

  void start() {
    net::dispatch(socket_.get_executor(), [self = shared_from_this()] { self->read_header(); });
  }

  /** From stop(): a connection between requests closes now; a running request's client is marked
   *  gone (its generation cancels) and the connection closes after its response. */
  void shut_down() {
    net::post(socket_.get_executor(), [self = shared_from_this()] {
      if (self->req_) self->req_->client->gone = true;
      if (!self->in_request_) self->close();
    });
  }

  /** Writes `bytes` from a handler thread; blocks until written. False on a failed or timed-out write
   *  or a client seen gone. */
  bool write_blocking(const std::string& bytes, const std::shared_ptr<ClientState>& client) {
    if (client->gone) return false;
    std::promise<bool> done;
    std::future<bool> f = done.get_future();
    net::post(socket_.get_executor(), [self = shared_from_this(), &bytes, &done] {
      self->arm(self->t_.limits.write_timeout);
      net::async_write(self->socket_, net::buffer(bytes), [self, &done](error_code ec, size_t) {
        self->disarm();
        done.set_value(!ec);
      });
    });
    return f.get() && !client->gone;
  }

 private:
  void read_header() {
    req_.reset();
    in_request_ = false;
    if (t_.stopping) return close();
    head_.emplace();
    head_->header_limit(static_cast<std::uint32_t>(t_.limits.max_header_bytes));
    head_->body_limit(t_.limits.max_body_bytes);
    arm(t_.limits.header_timeout);
    http::async_read_header(socket_, buffer_, *head_, [self = shared_from_this()](error_code ec, size_t) {
      self->on_header(ec);
    });
  }

  void on_header(error_code ec) {
    disarm();
    // A body over the limit is refused once the whole header is known (Content-Length): the error
    // then has the shape of the route's API. Other errors name what the request line gave, if anything.
    if (!ec || ec == http::error::body_limit) {
      if (!make_request()) return;
    } else if (!head_->get().target().empty()) {
      req_ = std::make_shared<HttpRequest>();
      req_->method = std::string(head_->get().method_string());
      req_->target = std::string(head_->get().target());
      split_target(*req_);
    }
    if (ec) {
      if (timed_out_) {
        if (!head_->got_some()) return close();  // an idle keep-alive connection
        return refuse(408, fmt::format("The request header was not complete within {} s",
                                       t_.limits.header_timeout.count() / 1000.0));
      }
      if (ec == http::error::end_of_stream || ec == http::error::partial_message || ec == net::error::eof ||
          ec == net::error::operation_aborted || ec == net::error::connection_reset)
        return close();  // the client left
      if (ec == http::error::header_limit)
        return refuse(431, fmt::format("The request header is larger than {} bytes", t_.limits.max_header_bytes));
      if (ec == http::error::body_limit) return refuse_body_limit();
      return refuse(400, "Malformed HTTP request: " + ec.message());
    }
    const auto& h = head_->get();
    keep_alive_ = h.keep_alive();
    http10_ = h.version() < 11;
    const bool has_body = head_->chunked() || head_->content_length().value_or(0) > 0;
    if (!has_body) return dispatch();
    if (t_.hooks.admit) {
      HttpResponse res;
      if (!t_.hooks.admit(*req_, res)) return answer_and_close(std::move(res));
    }
    if (beast::iequals(h[http::field::expect], "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      arm(t_.limits.write_timeout);
      return net::async_write(socket_, net::buffer(kContinue), [self = shared_from_this()](error_code e, size_t) {
        self->disarm();
        if (e) return self->close();
        self->read_body();
      });
    }
    read_body();
  }

  /** req_ from the parsed header; false (after a 431) past max_header_fields. */
  bool make_request() {
    const auto& h = head_->get();
    req_ = std::make_shared<HttpRequest>();
    req_->method = std::string(h.method_string());
    req_->target = std::string(h.target());
    split_target(*req_);
    size_t n_fields = 0;
    for (const auto& f : h) {
      if (++n_fields > t_.limits.max_header_fields) break;
      req_->headers.emplace(std::string(f.name_string()), std::string(f.value()));
    }
    if (n_fields > t_.limits.max_header_fields) {
      refuse(431, fmt::format("The request has more than {} header fields", t_.limits.max_header_fields));
      return false;
    }
    error_code pe;
    const tcp::endpoint peer = socket_.remote_endpoint(pe);
    if (!pe) {
      req_->remote_addr = peer.address().to_string();
      req_->remote_port = peer.port();
    }
    return true;
  }

  void read_body() {
    body_.emplace(std::move(*head_));
    body_->body_limit(t_.limits.max_body_bytes);
    arm(t_.limits.body_timeout);
    http::async_read(socket_, buffer_, *body_, [self = shared_from_this()](error_code ec, size_t) {
      self->on_body(ec);
    });
  }

  void on_body(error_code ec) {
    disarm();
    if (ec) {
      if (timed_out_)
        return refuse(408, fmt::format("The request body was not complete within {} s",
                                       t_.limits.body_timeout.count() / 1000.0));
      if (ec == http::error::body_limit) return refuse_body_limit();
      if (ec == http::error::end_of_stream || ec == http::error::partial_message || ec == net::error::eof ||
          ec == net::error::operation_aborted || ec == net::error::connection_reset)
        return close();
      return refuse(400, "Malformed HTTP request body: " + ec.message());
    }
    req_->body = std::move(body_->get().body());
    body_.reset();
    dispatch();
  }

  /** Runs the route on a handler thread while the socket is watched for a hang-up. */
  void dispatch() {
    head_.reset();
    if (t_.stopping) return close();
    in_request_ = true;
    watch(req_);
    net::post(*t_.handlers, [self = shared_from_this(), req = req_] { self->run_handler(req); });
  }

  /** Waits for the socket to turn readable while a request runs: end of stream or an error means the
   *  client hung up. Bytes waiting (a pipelined request) end the watch: a hang-up behind them cannot
   *  be seen without reading them. */
  void watch(std::shared_ptr<HttpRequest> req) {
    socket_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), req](error_code ec) {
      if (ec || self->req_ != req || !self->in_request_) return;
      char c = 0;
      const ssize_t n = ::recv(self->socket_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        req->client->gone = true;
        return;
      }
      if (n < 0) self->watch(req);
    });
  }

  /** On a handler thread. */
  void run_handler(const std::shared_ptr<HttpRequest>& req) {
    auto res = std::make_shared<HttpResponse>();
    try {
      t_.hooks.handle(*req, *res);
    } catch (const std::exception& e) {
      spdlog::error("{} {}: {}", req->method, req->path, e.what());
      *res = HttpResponse{};
      t_.hooks.error(*req, *res, 500, std::string("internal error: ") + e.what());
    }
    if (res->streaming()) return run_stream(req, res);
    if (t_.hooks.finished) t_.hooks.finished(*req, *res);
    net::post(socket_.get_executor(), [self = shared_from_this(), req, res] { self->write_response(*req, *res, false); });
  }

  struct ChunkSink : StreamSink {
    Connection* conn;
    std::shared_ptr<ClientState> client;
    bool ok = true, ended = false;
    bool raw = false;  // an HTTP/1.0 client: the body as it is, ended by closing the connection
    bool write(std::string_view data) override {
      if (!ok) return false;
      if (data.empty()) return true;
      if (raw) return ok = conn->write_blocking(std::string(data), client);
      std::string chunk = fmt::format("{:x}\r\n", data.size());
      chunk.append(data);
      chunk += "\r\n";
      return ok = conn->write_blocking(chunk, client);
    }
    void done() override { ended = true; }
  };

  /** On a handler thread: the header, then the provider's chunks until it ends or the client goes. An
   *  HTTP/1.0 client, which cannot read chunked framing (RFC 9112 section 7.1), gets the body as it is,
   *  ended by the connection's close. */
  void run_stream(const std::shared_ptr<HttpRequest>& req, const std::shared_ptr<HttpResponse>& res) {
    const bool keep = keep_alive_ && !t_.stopping && !http10_;
    std::string head = fmt::format("HTTP/1.1 {} {}\r\n", res->status,
                                   std::string(http::obsolete_reason(http::int_to_status(res->status))));
    for (const auto& [name, value] : res->headers) head += name + ": " + value + "\r\n";
    if (!http10_) head += "Transfer-Encoding: chunked\r\n";
    head += keep ? "\r\n" : "Connection: close\r\n\r\n";
    ChunkSink sink;
    sink.conn = this;
    sink.client = req->client;
    sink.raw = http10_;
    sink.ok = write_blocking(head, req->client);
    while (sink.ok && !sink.ended)
      if (!res->provider(sink)) break;
    const bool success = sink.ended && sink.ok && (http10_ || write_blocking("0\r\n\r\n", req->client));
    if (res->on_closed) res->on_closed(success);
    if (t_.hooks.finished) t_.hooks.finished(*req, *res);
    net::post(socket_.get_executor(), [self = shared_from_this(), success, keep] {
      if (success && keep) return self->read_header();
      self->close();
    });
  }

  /** Writes a whole response; then the next request, or a close. */
  void write_response(const HttpRequest& req, HttpResponse& res, bool refusal) {
    auto msg = std::make_shared<http::response<http::string_body>>();
    msg->version(11);
    msg->result(static_cast<unsigned>(res.status));
    for (const auto& [name, value] : res.headers) msg->insert(name, value);
    msg->body() = std::move(res.body);
    const bool keep = keep_alive_ && !refusal && !t_.stopping;
    msg->keep_alive(keep);
    if (keep && http10_) msg->set(http::field::connection, "keep-alive");  // HTTP/1.0 closes unless told
    msg->prepare_payload();
    arm(t_.limits.write_timeout);
    auto after = [self = shared_from_this(), msg, keep, refusal](error_code ec, size_t) {
      self->disarm();
      if (ec) return self->close();
      if (refusal || !keep) return self->linger();
      self->read_header();
    };
    if (req.method == "HEAD") {
      auto sr = std::make_shared<http::response_serializer<http::string_body>>(*msg);
      http::async_write_header(socket_, *sr, [sr, after](error_code ec, size_t n) { after(ec, n); });
    } else {
      http::async_write(socket_, *msg, after);
    }
  }

  /** A transport-level refusal: the error body, then the connection closes. */
  void refuse(int status, const std::string& message) {
    HttpResponse res;
    if (!req_) {
      req_ = std::make_shared<HttpRequest>();
      req_->method = "POST";  // unknown: an error body is always written
    }
    t_.hooks.error(*req_, res, status, message);
    answer_and_close(std::move(res));
  }

  void refuse_body_limit() {
    refuse(413, fmt::format("The request body is larger than the server's limit of {} bytes (--max-body-mb).",
                            t_.limits.max_body_bytes));
  }

  void answer_and_close(HttpResponse res) {
    head_.reset();
    body_.reset();
    in_request_ = true;
    if (t_.hooks.finished) t_.hooks.finished(*req_, res);
    auto r = std::make_shared<HttpResponse>(std::move(res));
    write_response(*req_, *r, true);
  }

  /** Closes the sending side and drops what the client still sends, for at most kLingerTime. */
  void linger() {
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    arm(kLingerTime);
    drain();
  }

  void drain() {
    socket_.async_read_some(net::buffer(discard_), [self = shared_from_this()](error_code ec, size_t) {
      if (ec) return self->close();
      self->drain();
    });
  }

  void close() {
    disarm();
    in_request_ = false;
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
  }

  /** After `d` the socket's pending operations are cancelled (timed_out_ tells why). */
  void arm(std::chrono::milliseconds d) {
    timed_out_ = false;
    const uint64_t g = ++timer_gen_;
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this(), g](error_code ec) {
      if (ec || g != self->timer_gen_) return;
      self->timed_out_ = true;
      error_code ignored;
      self->socket_.cancel(ignored);
    });
  }

  void disarm() {
    ++timer_gen_;
    timer_.cancel();
  }

  HttpTransport::Impl& t_;
  tcp::socket socket_;
  net::steady_timer timer_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::empty_body>> head_;
  std::optional<http::request_parser<http::string_body>> body_;
  std::shared_ptr<HttpRequest> req_;
  std::array<char, 16384> discard_{};
  uint64_t timer_gen_ = 0;
  bool timed_out_ = false;
  bool keep_alive_ = true;
  bool http10_ = false;  // the request's version is HTTP/1.0
  bool in_request_ = false;
  uint64_t id_;
};

}  // namespace

void HttpTransport::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](error_code ec, tcp::socket s) {
    if (stopping || ec == net::error::operation_aborted) return;
    if (ec) {  // out of descriptors, say: try again shortly instead of spinning
      spdlog::warn("accept failed: {}", ec.message());
      auto t = std::make_shared<net::steady_timer>(acceptor.get_executor(), std::chrono::milliseconds(50));
      t->async_wait([this, t](error_code) { accept(); });
      return;
    }
    error_code ignored;
    s.set_option(tcp::no_delay(true), ignored);
    std::shared_ptr<Connection> c;
    {
      std::lock_guard lk(mu);
      const uint64_t id = next_id++;
      c = std::make_shared<Connection>(*this, std::move(s), id);
      conns.emplace(id, c);
    }
    c->start();
    accept();
  });
}

HttpTransport::HttpTransport(TransportLimits limits, TransportHooks hooks) : impl_(std::make_unique<Impl>()) {
  FT_CHECK(hooks.handle && hooks.error);
  impl_->limits = limits;
  impl_->hooks = std::move(hooks);
}

HttpTransport::~HttpTransport() { stop(); }

int HttpTransport::bind(const std::string& host, int port) {
  Impl& t = *impl_;
  error_code ec;
  tcp::resolver resolver(t.ioc);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) fail(ErrorCode::kIo, "cannot bind {}:{}: {}", host, port, ec ? ec.message() : "no address");
  const tcp::endpoint ep = results.begin()->endpoint();
  t.acceptor.open(ep.protocol(), ec);
  if (!ec) t.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) t.acceptor.bind(ep, ec);
  if (!ec) t.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code ignored;
    t.acceptor.close(ignored);
    fail(ErrorCode::kIo, "cannot bind {}:{} (in use, or not an address of this machine?): {}", host, port,
         ec.message());
  }
  return t.acceptor.local_endpoint().port();
}

void HttpTransport::serve() {
  Impl& t = *impl_;
  {
    std::unique_lock lk(t.mu);
    if (t.stop_requested || !t.acceptor.is_open()) return;
    t.serving = true;
  }
  t.handlers.emplace(static_cast<size_t>(std::max(1, t.limits.handler_threads)));
  auto guard = net::make_work_guard(t.ioc);
  net::post(t.acceptor.get_executor(), [&t] { t.accept(); });
  std::vector<std::thread> io;
  for (int i = 0; i < std::max(1, t.limits.io_threads); ++i) io.emplace_back([&t] { t.ioc.run(); });
  {
    std::unique_lock lk(t.mu);
    t.cv.wait(lk, [&] { return t.stop_requested; });
  }
  t.shut_down();
  guard.reset();
  t.ioc.stop();
  for (std::thread& th : io) th.join();
  std::lock_guard lk(t.mu);
  t.serving = false;
  t.cv.notify_all();
}

void HttpTransport::Impl::shut_down() {
  stopping = true;
  net::post(acceptor.get_executor(), [this] {
    error_code ignored;
    acceptor.close(ignored);
  });
  std::vector<std::shared_ptr<Connection>> live;
  {
    std::lock_guard lk(mu);
    for (auto& [id, w] : conns)
      if (auto c = w.lock()) live.push_back(std::move(c));
  }
  for (auto& c : live) c->shut_down();
  live.clear();
  handlers->join();  // running routes end: their clients are marked gone, so generations cancel
  // Responses still being written get a moment; then the io threads stop and what is left is closed
  // with the io_context.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (std::chrono::steady_clock::now() < end) {
    {
      std::lock_guard lk(mu);
      if (conns.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void HttpTransport::stop() {
  Impl& t = *impl_;
  std::unique_lock lk(t.mu);
  t.stop_requested = true;
  t.cv.notify_all();
  t.cv.wait(lk, [&] { return !t.serving; });
}

}  // namespace ft::server
