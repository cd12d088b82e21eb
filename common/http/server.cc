#include "common/http/server.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <spdlog/spdlog.h>

namespace llmd::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

namespace {

constexpr std::size_t kHeaderLimit = 64 * 1024;
// After an error response we keep reading (and discarding) for a while before closing, so the
// peer's unread request bytes do not turn our close into a RST that destroys the response.
constexpr std::size_t kLingerBytes = 4 * 1024 * 1024;
constexpr std::chrono::milliseconds kLingerTimeout{1000};
constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

using Executor = asio::strand<asio::io_context::executor_type>;

std::string_view to_sv(beast::string_view s) { return {s.data(), s.size()}; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

Request to_request(bhttp::request<bhttp::string_body>&& msg) {
  Request req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  const auto q = req.target.find('?');
  req.path = req.target.substr(0, q);
  if (q != std::string::npos) {
    req.query = req.target.substr(q + 1);
  }
  req.headers.reserve(8);
  for (const auto& field : msg) {
    req.headers.push_back({lower(to_sv(field.name_string())), std::string(field.value())});
  }
  req.body = std::move(msg.body());
  return req;
}

}  // namespace

struct HttpServer::Impl {
  class Session;

  Impl(ServerOptions options, RequestHandler handler)
      : options_(std::move(options)), handler_(std::move(handler)) {}

  void accept();
  void on_accept(beast::error_code ec, tcp::socket socket);
  bool register_session(uint64_t id, std::weak_ptr<Session> session);
  void unregister_session(uint64_t id);
  // Posts `fn(session)` onto the strand of every live session.
  template <typename Fn>
  void for_each_session(Fn fn);
  void shutdown_and_join(std::vector<std::thread>& threads);

  // Declared before io_context_: sessions destroyed with the io_context unregister here.
  std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions_;
  uint64_t next_id_ = 0;
  bool stop_requested_ = false;
  bool running_ = false;
  std::vector<std::function<void()>> hooks_;
  std::atomic<bool> stopping_{false};

  const ServerOptions options_;
  const RequestHandler handler_;
  uint16_t port_ = 0;

  asio::io_context ioc_{std::max(1, options_.io_threads)};
  Executor accept_strand_{asio::make_strand(ioc_)};
  tcp::acceptor acceptor_{accept_strand_};
  asio::steady_timer accept_retry_{accept_strand_};
  Executor signal_strand_{asio::make_strand(ioc_)};
  std::optional<asio::signal_set> signals_;
};

class HttpServer::Impl::Session : public std::enable_shared_from_this<Session> {
 public:
  Session(Impl& server, uint64_t id, tcp::socket socket)
      : server_(server), id_(id), executor_(socket.get_executor()), stream_(std::move(socket)) {}
  ~Session() { server_.unregister_session(id_); }

  const asio::any_io_executor& executor() const { return executor_; }
  void start() { wait_for_request(); }

  // Runs on the strand when the server stops: idle connections go now, busy ones after replying.
  void on_server_stop() {
    if (state_ == State::kIdle) {
      close();
    }
  }
  void close() {
    state_ = State::kClosed;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.close();
  }

 private:
  enum class State { kIdle, kReading, kHandling, kWriting, kClosed };

  void wait_for_request() {
    if (server_.stopping_) {
      return graceful_close();
    }
    if (buffer_.size() > 0) {  // pipelined bytes already buffered
      return read_header();
    }
    state_ = State::kIdle;
    const auto& o = server_.options_;
    stream_.expires_after(first_request_ ? o.header_timeout : o.idle_timeout);
    stream_.async_read_some(buffer_.prepare(4096), [self = shared_from_this()](
                                                       beast::error_code ec, std::size_t n) {
      if (ec) {
        // Timeout, peer close or server stop while idle: nothing to answer.
        return self->close();
      }
      self->buffer_.commit(n);
      self->read_header();
    });
  }

  void read_header() {
    state_ = State::kReading;
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(server_.options_.body_limit);
    stream_.expires_after(server_.options_.header_timeout);
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = shared_from_this()](beast::error_code ec, std::size_t) {
                               self->on_header(ec);
                             });
  }

  void on_header(beast::error_code ec) {
    if (ec) {
      return on_read_error(ec);
    }
    if (parser_->is_done()) {
      return handle();
    }
    const auto expect = parser_->get()[bhttp::field::expect];
    if (beast::iequals(expect, "100-continue")) {
      // curl waits a second for this before sending large bodies.
      stream_.expires_after(server_.options_.header_timeout);
      return asio::async_write(stream_, asio::buffer(kContinue, sizeof(kContinue) - 1),
                               [self = shared_from_this()](beast::error_code ec, std::size_t) {
                                 if (ec) {
                                   return self->close();
                                 }
                                 self->read_body();
                               });
    }
    read_body();
  }

  void read_body() {
    stream_.expires_after(server_.options_.body_timeout);
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (ec) {
                          return self->on_read_error(ec);
                        }
                        self->handle();
                      });
  }

  void on_read_error(beast::error_code ec) {
    if (ec == asio::error::operation_aborted || state_ == State::kClosed) {
      return;
    }
    if (ec == bhttp::error::end_of_stream) {
      return graceful_close();
    }
    if (ec == bhttp::error::body_limit) {
      const auto limit = std::to_string(server_.options_.body_limit);
      return send_error(Response::detail(
          413, "Request body too large (limit " + limit + " bytes)"));
    }
    if (ec == bhttp::error::header_limit) {
      return send_error(Response::detail(431, "Request header fields too large"));
    }
    if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() &&
        ec != bhttp::error::partial_message) {
      return send_error(Response::detail(400, "Malformed HTTP request"));
    }
    // Timeouts, resets and truncated messages: the peer is gone or too slow to deserve a reply.
    spdlog::debug("http: closing connection: {}", ec.message());
    close();
  }

  void handle() {
    state_ = State::kHandling;
    stream_.expires_never();
    auto msg = parser_->release();
    const unsigned version = msg.version();
    bool keep_alive = msg.keep_alive();
    Request request = to_request(std::move(msg));
    Response response;
    try {
      response = server_.handler_(request);
    } catch (const std::exception& e) {
      spdlog::error("http: handler for {} {} threw: {}", request.method, request.path, e.what());
      response = Response::detail(500, "Internal server error");
    } catch (...) {
      spdlog::error("http: handler for {} {} threw a non-standard exception", request.method,
                    request.path);
      response = Response::detail(500, "Internal server error");
    }
    // A stop() (maybe from this very handler) turns this into the connection's last reply.
    keep_alive = keep_alive && !server_.stopping_;
    write(std::move(response), version, keep_alive);
  }

  void send_error(Response response) {
    // The parser may have failed before seeing a version; never answer "HTTP/0.0".
    const unsigned version = parser_ && parser_->get().version() == 10 ? 10 : 11;
    linger_after_write_ = true;
    write(std::move(response), version, false);
  }

  void write(Response&& response, unsigned version, bool keep_alive) {
    try {
      build(std::move(response), version, keep_alive);
    } catch (const std::exception& e) {
      spdlog::error("http: cannot serialise response: {}", e.what());
      build(Response::detail(500, "Internal server error"), version, keep_alive);
    }
    state_ = State::kWriting;
    stream_.expires_after(server_.options_.body_timeout);
    bhttp::async_write(stream_, res_,
                       [self = shared_from_this()](beast::error_code ec, std::size_t) {
                         self->on_write(ec);
                       });
  }

  void build(Response&& response, unsigned version, bool keep_alive) {
    if (response.status < 200 || response.status > 599) {
      spdlog::error("http: handler returned invalid status {}", response.status);
      response = Response::detail(500, "Internal server error");
    }
    res_ = {};
    res_.version(version);
    res_.result(static_cast<unsigned>(response.status));
    res_.set(bhttp::field::server, server_.options_.server_name);
    for (const auto& h : response.headers) {
      res_.insert(h.name, h.value);
    }
    if (response.status == 204 || response.status == 304) {
      response.body.clear();
    } else {
      res_.set(bhttp::field::content_type, response.content_type);
    }
    res_.body() = std::move(response.body);
    res_.keep_alive(keep_alive);
    res_.prepare_payload();
  }

  void on_write(beast::error_code ec) {
    if (ec) {
      return close();
    }
    if (!res_.keep_alive()) {
      return linger_after_write_ ? linger() : graceful_close();
    }
    first_request_ = false;
    res_ = {};
    wait_for_request();
  }

  void graceful_close() {
    state_ = State::kClosed;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.close();
  }

  // Used after an error reply to a request whose body was not read (413, 400).
  void linger() {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    state_ = State::kClosed;
    stream_.expires_after(std::min(kLingerTimeout, server_.options_.body_timeout));
    linger_read();
  }

  void linger_read() {
    buffer_.consume(buffer_.size());
    stream_.async_read_some(buffer_.prepare(64 * 1024), [self = shared_from_this()](
                                                            beast::error_code ec, std::size_t n) {
      self->lingered_ += n;
      if (ec || self->lingered_ > kLingerBytes) {
        return self->stream_.close();
      }
      self->linger_read();
    });
  }

  Impl& server_;
  const uint64_t id_;
  const asio::any_io_executor executor_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bhttp::response<bhttp::string_body> res_;
  State state_ = State::kIdle;
  bool first_request_ = true;
  bool linger_after_write_ = false;
  std::size_t lingered_ = 0;
};

void HttpServer::Impl::accept() {
  acceptor_.async_accept(asio::make_strand(ioc_), [this](beast::error_code ec, tcp::socket s) {
    on_accept(ec, std::move(s));
  });
}

void HttpServer::Impl::on_accept(beast::error_code ec, tcp::socket socket) {
  if (stopping_ || !acceptor_.is_open()) {
    return;
  }
  if (ec) {
    // Usually EMFILE: back off instead of spinning on a failing accept.
    spdlog::warn("http: accept failed: {}", ec.message());
    accept_retry_.expires_after(std::chrono::milliseconds(50));
    accept_retry_.async_wait([this](beast::error_code wait_ec) {
      if (!wait_ec && !stopping_) {
        accept();
      }
    });
    return;
  }
  socket.set_option(tcp::no_delay(true), ec);
  uint64_t id = 0;
  {
    std::lock_guard lock(mu_);
    id = next_id_++;
  }
  auto session = std::make_shared<Session>(*this, id, std::move(socket));
  if (register_session(id, session)) {
    asio::dispatch(session->executor(), [session] { session->start(); });
  }
  accept();
}

bool HttpServer::Impl::register_session(uint64_t id, std::weak_ptr<Session> session) {
  // Under the same lock as stop_requested_, so stop() never misses a fresh connection.
  std::lock_guard lock(mu_);
  if (stop_requested_) {
    return false;
  }
  sessions_.emplace(id, std::move(session));
  return true;
}

void HttpServer::Impl::unregister_session(uint64_t id) {
  std::lock_guard lock(mu_);
  sessions_.erase(id);
  if (sessions_.empty()) {
    cv_.notify_all();
  }
}

template <typename Fn>
void HttpServer::Impl::for_each_session(Fn fn) {
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard lock(mu_);
    for (auto& [id, weak] : sessions_) {
      if (auto s = weak.lock()) {
        live.push_back(std::move(s));
      }
    }
  }
  for (auto& s : live) {
    asio::post(s->executor(), [s, fn] { fn(*s); });
  }
}

void HttpServer::Impl::shutdown_and_join(std::vector<std::thread>& threads) {
  const auto deadline = std::chrono::steady_clock::now() + options_.drain_timeout;
  std::promise<void> acceptor_closed;
  asio::post(accept_strand_, [this, &acceptor_closed] {
    beast::error_code ec;
    acceptor_.close(ec);
    accept_retry_.cancel();
    acceptor_closed.set_value();
  });
  for_each_session([](Session& s) { s.on_server_stop(); });
  // Hooks must not run while new connections could still be accepted.
  if (acceptor_closed.get_future().wait_until(deadline) != std::future_status::ready) {
    spdlog::warn("http: io threads too busy to close the listener before the drain timeout");
  }
  {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline, [this] { return sessions_.empty(); })) {
      spdlog::warn("http: {} connection(s) still busy after drain timeout; closing them",
                   sessions_.size());
    }
  }
  for_each_session([](Session& s) { s.close(); });
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard lock(mu_);
    hooks.swap(hooks_);
  }
  for (auto& hook : hooks) {
    try {
      hook();
    } catch (const std::exception& e) {
      spdlog::error("http: shutdown hook threw: {}", e.what());
    }
  }
  if (signals_) {
    asio::post(signal_strand_, [this] {
      beast::error_code ec;
      signals_->cancel(ec);
    });
  }
  ioc_.stop();
  for (auto& t : threads) {
    t.join();
  }
  signals_.reset();  // restores the default SIGINT/SIGTERM disposition
}

HttpServer::HttpServer(ServerOptions options, RequestHandler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

HttpServer::~HttpServer() {
  stop();
  // run() may still be draining on another thread; it uses *impl_ until it returns.
  std::unique_lock lock(impl_->mu_);
  impl_->cv_.wait(lock, [this] { return !impl_->running_; });
}

void HttpServer::start() {
  auto& s = *impl_;
  if (s.acceptor_.is_open()) {
    return;
  }
  const auto where = s.options_.host + ":" + std::to_string(s.options_.port);
  try {
    tcp::resolver resolver(s.ioc_);
    const auto results = resolver.resolve(s.options_.host, std::to_string(s.options_.port),
                                          tcp::resolver::passive | tcp::resolver::numeric_service);
    const tcp::endpoint endpoint = results.begin()->endpoint();
    s.acceptor_.open(endpoint.protocol());
    s.acceptor_.set_option(asio::socket_base::reuse_address(true));
    s.acceptor_.bind(endpoint);
    s.acceptor_.listen(asio::socket_base::max_listen_connections);
    s.port_ = s.acceptor_.local_endpoint().port();
  } catch (const std::exception& e) {
    beast::error_code ec;
    s.acceptor_.close(ec);
    throw std::runtime_error("http: cannot listen on " + where + ": " + e.what());
  }
  asio::post(s.accept_strand_, [&s] { s.accept(); });
}

uint16_t HttpServer::port() const { return impl_->port_; }

void HttpServer::run(bool handle_signals) {
  auto& s = *impl_;
  start();
  {
    std::lock_guard lock(s.mu_);
    if (s.running_) {
      throw std::logic_error("HttpServer::run() is already running");
    }
    s.running_ = true;
  }
  if (handle_signals) {
    try {
      s.signals_.emplace(s.signal_strand_, SIGINT, SIGTERM);
    } catch (...) {
      std::lock_guard lock(s.mu_);
      s.running_ = false;  // the destructor waits on this flag
      s.cv_.notify_all();
      throw;
    }
    s.signals_->async_wait([this](beast::error_code ec, int signo) {
      if (!ec) {
        spdlog::info("http: received signal {}, shutting down", signo);
        stop();
      }
    });
  }
  auto work = asio::make_work_guard(s.ioc_);
  std::vector<std::thread> threads;
  for (int i = 0; i < std::max(1, s.options_.io_threads); ++i) {
    threads.emplace_back([&s] {
      while (true) {
        try {
          s.ioc_.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("http: io thread caught: {}", e.what());
        }
      }
    });
  }
  {
    std::unique_lock lock(s.mu_);
    s.cv_.wait(lock, [&s] { return s.stop_requested_; });
  }
  s.shutdown_and_join(threads);
  std::lock_guard lock(s.mu_);
  s.running_ = false;
  s.cv_.notify_all();
}

void HttpServer::stop() {
  auto& s = *impl_;
  std::lock_guard lock(s.mu_);
  s.stop_requested_ = true;
  s.stopping_ = true;
  s.cv_.notify_all();
}

void HttpServer::on_shutdown(std::function<void()> hook) {
  std::lock_guard lock(impl_->mu_);
  impl_->hooks_.push_back(std::move(hook));
}

}  // namespace llmd::http
