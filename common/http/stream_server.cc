#include "common/http/stream_server.h"

#include "common/http/body_budget.h"
#include "common/http/io_workers.h"
#include "common/http/listener.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <future>
#include <optional>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/bind_executor.hpp>
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
constexpr std::size_t kLingerBytes = 4 * 1024 * 1024;
constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";

using StrandExecutor = asio::strand<asio::io_context::executor_type>;

Request to_request(bhttp::request<bhttp::string_body>&& msg) {
  Request req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  const auto q = req.target.find('?');
  req.path = req.target.substr(0, q);
  if (q != std::string::npos) {
    req.query = req.target.substr(q + 1);
  }
  for (const auto& field : msg) {
    const auto name = field.name_string();
    req.headers.push_back(
        {to_lower(std::string_view(name.data(), name.size())), std::string(field.value())});
  }
  req.body = std::move(msg.body());
  return req;
}

// Answers in the request's own version (HTTP/1.0 clients get "HTTP/1.0").
std::string status_line(int status, bool http10 = false) {
  const auto reason = bhttp::obsolete_reason(bhttp::int_to_status(static_cast<unsigned>(status)));
  return (http10 ? "HTTP/1.0 " : "HTTP/1.1 ") + std::to_string(status) + " " +
         std::string(reason.data(), reason.size()) + "\r\n";
}

Response default_error(int status, const std::string& message) {
  return Response::detail(status, message);
}

class StrandImpl final : public Strand {
 public:
  explicit StrandImpl(asio::io_context& ioc) : strand_(asio::make_strand(ioc)), timer_(strand_) {}

  void post(std::function<void()> fn) override { asio::post(strand_, std::move(fn)); }

  void arm(std::chrono::steady_clock::time_point when, std::function<void()> fn) override {
    asio::post(strand_, [this, when, fn = std::move(fn)]() mutable {
      const uint64_t gen = ++gen_;
      timer_.expires_at(when);
      timer_.async_wait([this, gen, fn = std::move(fn)](beast::error_code ec) {
        if (!ec && gen == gen_) {
          fn();
        }
      });
    });
  }

  void disarm() override {
    asio::post(strand_, [this] {
      ++gen_;
      timer_.cancel();
    });
  }

  void post_after(std::chrono::milliseconds delay, std::function<void()> fn) override {
    auto t = std::make_shared<asio::steady_timer>(strand_, delay);
    t->async_wait([t, fn = std::move(fn)](beast::error_code) { fn(); });
  }

 private:
  StrandExecutor strand_;
  asio::steady_timer timer_;
  uint64_t gen_ = 0;  // only touched on the strand
};

}  // namespace

struct StreamServer::Impl {
  class Session;

  Impl(StreamServerOptions o, Handler h, IoWorkers* external)
      : options(std::move(o)),
        handler(std::move(h)),
        error_response(options.error_response ? options.error_response : default_error),
        own_workers(
            external ? nullptr
                     : std::make_unique<IoWorkers>(options.io_threads, options.thread_name.empty()
                                                                           ? options.server_name
                                                                           : options.thread_name)),
        workers(external ? *external : *own_workers),
        counts(std::make_shared<ConnectionCounts>(workers.size(), options.max_connections)) {}

  // Reserves `n` body bytes, or answers false when that would pass the budget.
  bool reserve_body(std::size_t n) { return body_budget->try_take(n); }
  void release_body(std::size_t n) { body_budget->give_back(n); }

  // On worker 0: a connection the listener `listener` accepted.
  void adopt(std::size_t listener, tcp::socket socket, ConnectionSlot slot);
  bool register_session(uint64_t id, const std::shared_ptr<Session>& s);
  std::vector<std::shared_ptr<Session>> live_sessions();
  void unregister_session(uint64_t id);

  const StreamServerOptions options;
  const Handler handler;
  const std::function<Response(int, const std::string&)> error_response;
  std::mutex mu;  // guards sessions, stop_requested, hooks
  std::condition_variable cv;
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions;
  uint64_t next_id = 0;
  bool stop_requested = false;
  std::chrono::milliseconds drain_timeout = options.drain_timeout;  // guarded by mu
  std::vector<std::function<void()>> hooks;
  std::atomic<bool> stopping{false};

  // The process's (options.shared_body_budget) or this server's own.
  std::shared_ptr<BodyBudget> body_budget = options.shared_body_budget
                                                ? options.shared_body_budget
                                                : std::make_shared<BodyBudget>(options.body_budget);
  std::atomic<std::size_t> next_strand{0};
  std::unique_ptr<IoWorkers> own_workers;  // null when the caller owns the workers
  IoWorkers& workers;
  // The server's open connections (its cap, their workers), shared by its listeners.
  const std::shared_ptr<ConnectionCounts> counts;
  std::vector<std::unique_ptr<Listener>> listeners;
  std::optional<asio::signal_set> signals;
};

// One connection. Lives on its strand (the socket's executor); ResponseStream calls from other
// threads are posted there, so all state below is strand-local.
class StreamServer::Impl::Session final : public ResponseStream,
                                          public std::enable_shared_from_this<Session> {
 public:
  Session(Impl& server, uint64_t id, std::size_t listener, ConnectionSlot slot, tcp::socket socket)
      : server_(server),
        id_(id),
        listener_(listener),
        slot_(std::move(slot)),
        socket_(std::move(socket)),
        timer_(socket_.get_executor()),
        write_timer_(socket_.get_executor()) {}

  ~Session() override {
    release_reservation();
    slot_ = ConnectionSlot();  // before the server hears the connection is gone
    server_.unregister_session(id_);
  }

  void start() { read_request(); }
  asio::any_io_executor socket_executor() { return socket_.get_executor(); }

  void shutdown_now() {
    disconnect_cb_ = nullptr;
    close();
  }

  // The server stops: an idle connection goes now, one with an answer in progress when it
  // has been written (on_answer_written sees `stopping`).
  void on_server_stop() {
    if (phase_ == Phase::kIdle) {
      graceful_close();
    }
  }

  // ResponseStream
  void respond(Response response) override {
    asio::post(socket_.get_executor(),
               [self = shared_from_this(), r = std::move(response)]() mutable {
                 self->do_respond(std::move(r));
               });
  }
  void begin_stream(int status, std::string content_type, std::vector<Header> headers) override {
    asio::post(socket_.get_executor(),
               [self = shared_from_this(), status, ct = std::move(content_type),
                hs = std::move(headers)]() mutable { self->do_begin(status, ct, hs); });
  }
  void write(std::string data) override {
    buffered_ += data.size();
    asio::post(socket_.get_executor(), [self = shared_from_this(), d = std::move(data)]() mutable {
      self->do_write(std::move(d));
    });
  }
  std::size_t buffered() const override { return buffered_.load(); }
  void when_drained(std::size_t at_most, std::function<void()> callback) override {
    asio::post(socket_.get_executor(),
               [self = shared_from_this(), at_most, cb = std::move(callback)]() mutable {
                 if (self->phase_ == Phase::kClosed || self->buffered_.load() <= at_most) {
                   cb();
                   return;
                 }
                 self->drained_at_most_ = at_most;
                 self->drained_cb_ = std::move(cb);
               });
  }
  void end() override {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->do_end(); });
  }
  void end_incomplete() override {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->do_end_incomplete(); });
  }
  void close_connection() override {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->shutdown_now(); });
  }
  void on_disconnect(std::function<void()> callback) override {
    asio::post(socket_.get_executor(),
               [self = shared_from_this(), cb = std::move(callback)]() mutable {
                 if (self->disconnected_) {
                   cb();
                 } else if (self->phase_ == Phase::kResponding && !self->answer_done_) {
                   self->disconnect_cb_ = std::move(cb);
                 }
               });
  }

 private:
  enum class Phase { kIdle, kHeader, kBody, kResponding, kClosed };

  void arm_timer(std::chrono::milliseconds d) {
    const uint64_t gen = ++timer_gen_;
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
      if (!ec && gen == self->timer_gen_) {
        self->close();  // read timeout: nothing to answer
      }
    });
  }
  void cancel_timer() {
    ++timer_gen_;
    timer_.cancel();
  }

  void read_request() {
    if (server_.stopping) {
      return graceful_close();
    }
    phase_ = Phase::kIdle;
    if (buffer_.size() > 0) {
      return read_header();
    }
    // Between requests a kept-alive connection idles; once a request begins, its headers must
    // arrive within the header timeout (read_header).
    arm_timer(first_ && !server_.options.fresh_connections_idle ? server_.options.header_timeout
                                                                : server_.options.idle_timeout);
    if (!read_pending_) {
      start_read_some();
    }
  }

  // Reads whatever comes next: the next request while idle, or (while responding) the
  // disconnect notice of a peer that went away.
  void start_read_some() {
    read_pending_ = true;
    socket_.async_read_some(buffer_.prepare(16 * 1024),
                            [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                              self->read_pending_ = false;
                              if (ec) {
                                return self->peer_gone();
                              }
                              self->buffer_.commit(n);
                              if (self->phase_ == Phase::kIdle) {
                                self->read_header();
                              }
                              // While responding the bytes wait in the buffer (one read at most:
                              // bounded).
                            });
  }

  void read_header() {
    phase_ = Phase::kHeader;
    over_budget_ = false;
    parser_.emplace();
    parser_->header_limit(kHeaderLimit);
    parser_->body_limit(server_.options.body_limit);
    arm_timer(server_.options.header_timeout);
    bhttp::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (ec) {
      return on_read_error(ec);
    }
    // "chunked" is the only transfer coding this server decodes; any other (gzip, ...) gets
    // 501 (RFC 9112 section 6.1), never a handler's guess at an undecoded body.
    if (const auto te = parser_->get().find(bhttp::field::transfer_encoding);
        te != parser_->get().end()) {
      std::string_view coding(te->value().data(), te->value().size());
      while (!coding.empty() && (coding.front() == ' ' || coding.front() == '\t')) {
        coding.remove_prefix(1);
      }
      while (!coding.empty() && (coding.back() == ' ' || coding.back() == '\t')) {
        coding.remove_suffix(1);
      }
      if (!beast::iequals(beast::string_view(coding.data(), coding.size()), "chunked")) {
        return send_error(501, "Transfer-Encoding '" + std::string(coding) +
                                   "' is not implemented (only chunked)");
      }
    }
    // The body's bytes count against the server's budget from now until the answer is out.
    const std::size_t length = static_cast<std::size_t>(parser_->content_length().value_or(0));
    if (length <= server_.options.body_limit) {  // larger ones get their 413 from the parser
      if (!server_.reserve_body(length)) {
        return send_error(503, "Server is at its request-body memory budget, retry");
      }
      reserved_ = length;
    }
    if (parser_->chunked()) {
      // No Content-Length: each chunk's size counts against the budget as it is announced.
      parser_->on_chunk_header(chunk_budget_);
    }
    if (parser_->is_done()) {
      return dispatch();
    }
    if (beast::iequals(parser_->get()[bhttp::field::expect], "100-continue")) {
      return asio::async_write(socket_, asio::buffer(kContinue, sizeof(kContinue) - 1),
                               [self = shared_from_this()](beast::error_code wec, std::size_t) {
                                 if (wec) {
                                   return self->close();
                                 }
                                 self->read_body();
                               });
    }
    read_body();
  }

  void read_body() {
    phase_ = Phase::kBody;
    arm_timer(server_.options.body_timeout);
    bhttp::async_read(socket_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        if (ec) {
                          return self->on_read_error(ec);
                        }
                        self->dispatch();
                      });
  }

  void on_read_error(beast::error_code ec) {
    if (phase_ == Phase::kClosed || ec == asio::error::operation_aborted) {
      return close();
    }
    if (over_budget_) {
      return send_error(503, "Server is at its request-body memory budget, retry");
    }
    if (ec == bhttp::error::body_limit) {
      return send_error(413, "Request body too large (limit " +
                                 std::to_string(server_.options.body_limit) + " bytes)");
    }
    if (ec == bhttp::error::header_limit) {
      return send_error(431, "Request header fields too large");
    }
    if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() &&
        ec != bhttp::error::partial_message && ec != bhttp::error::end_of_stream) {
      return send_error(400, "Malformed HTTP request");
    }
    close();
  }

  void send_error(int status, const std::string& message) {
    cancel_timer();
    phase_ = Phase::kResponding;
    keep_alive_ = false;
    answer_started_ = true;
    answer_done_ = true;
    linger_after_answer_ = true;
    const Response r = server_.error_response(status, message);
    if (server_.options.on_error_answer) {
      server_.options.on_error_answer(status);
    }
    const bool http10 = parser_ && parser_->get().version() == 10;
    out_ += status_line(status, http10) + "Server: " + server_.options.server_name + "\r\n";
    for (const auto& h : r.headers) {
      out_ += h.name + ": " + h.value + "\r\n";
    }
    const bool has_retry_after =
        std::any_of(r.headers.begin(), r.headers.end(),
                    [](const Header& h) { return beast::iequals(h.name, "retry-after"); });
    if ((status == 429 || status == 503) && !has_retry_after) {
      out_ += "Retry-After: 1\r\n";  // without it, SDKs retry at once
    }
    out_ += "Content-Type: " + r.content_type +
            "\r\nContent-Length: " + std::to_string(r.body.size()) +
            "\r\nConnection: close\r\n\r\n" + r.body;
    flush();
  }

  void dispatch() {
    cancel_timer();
    phase_ = Phase::kResponding;
    answer_started_ = false;
    answer_done_ = false;
    disconnect_cb_ = nullptr;
    auto msg = parser_->release();
    keep_alive_ = msg.keep_alive() && !server_.stopping;
    http10_ = msg.version() < 11;
    Request request = to_request(std::move(msg));
    if (!read_pending_) {
      start_read_some();  // notice a client that goes away while we answer
    }
    try {
      server_.handler(listener_, std::move(request), shared_from_this());
    } catch (const std::exception& e) {
      spdlog::error("http: handler threw: {}", e.what());
      do_respond(server_.error_response(500, "Internal server error"));
    }
  }

  void do_respond(Response r) {
    if (phase_ != Phase::kResponding || answer_started_) {
      return;
    }
    if (r.status < 200 || r.status > 599) {
      spdlog::error("http: handler answered with invalid status {}", r.status);
      r = server_.error_response(500, "Internal server error");
    }
    if (r.status == 204 || r.status == 304) {
      r.body.clear();
    }
    answer_started_ = true;
    answer_done_ = true;
    keep_alive_ = keep_alive_ && !server_.stopping;  // a stop() from the handler itself
    std::string head =
        status_line(r.status, http10_) + "Server: " + server_.options.server_name + "\r\n";
    for (const auto& h : r.headers) {
      head += h.name + ": " + h.value + "\r\n";
    }
    head += "Content-Type: " + r.content_type +
            "\r\nContent-Length: " + std::to_string(r.body.size()) +
            "\r\nConnection: " + (keep_alive_ ? "keep-alive" : "close") + "\r\n\r\n";
    out_ += head;
    out_ += r.body;
    flush();
  }

  void do_begin(int status, const std::string& content_type,
                const std::vector<http::Header>& headers) {
    if (phase_ != Phase::kResponding || answer_started_) {
      return;
    }
    answer_started_ = true;
    keep_alive_ = keep_alive_ && !server_.stopping;
    out_ += status_line(status, http10_) + "Server: " + server_.options.server_name + "\r\n";
    for (const auto& h : headers) {
      out_ += h.name + ": " + h.value + "\r\n";
    }
    if (http10_) {
      // HTTP/1.0 has no chunked encoding: the body goes as it comes and ends with the close.
      keep_alive_ = false;
      out_ += "Content-Type: " + content_type + "\r\nConnection: close\r\n\r\n";
    } else {
      out_ += "Content-Type: " + content_type + "\r\nTransfer-Encoding: chunked\r\nConnection: " +
              (keep_alive_ ? "keep-alive" : "close") + "\r\n\r\n";
    }
    flush();
  }

  void do_write(std::string data) {
    if (phase_ != Phase::kResponding || !answer_started_ || answer_done_ || data.empty()) {
      buffered_ -= data.size();  // never sent
      return;
    }
    out_payload_ += data.size();
    if (http10_) {
      out_ += data;
    } else {
      char size[32];
      std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
      out_ += size;
      out_ += data;
      out_ += "\r\n";
    }
    flush();
  }

  void do_end_incomplete() {
    if (phase_ != Phase::kResponding || answer_done_) {
      return;
    }
    answer_done_ = true;
    incomplete_ = true;
    if (!writing_ && out_.empty()) {
      close();
    }
  }

  void do_end() {
    if (phase_ != Phase::kResponding || !answer_started_ || answer_done_) {
      return;
    }
    answer_done_ = true;
    if (!http10_) {
      out_ += "0\r\n\r\n";
    }
    if (out_.empty() && !writing_) {
      on_answer_written();
      return;
    }
    flush();
  }

  void flush() {
    if (writing_ || out_.empty() || phase_ == Phase::kClosed) {
      return;
    }
    writing_ = true;
    inflight_ = std::move(out_);
    out_.clear();
    inflight_payload_ = out_payload_;
    out_payload_ = 0;
    const uint64_t gen = ++write_gen_;
    write_timer_.expires_after(server_.options.write_timeout);
    write_timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
      if (!ec && gen == self->write_gen_) {
        self->peer_gone();  // the client stopped reading
      }
    });
    asio::async_write(socket_, asio::buffer(inflight_),
                      [self = shared_from_this()](beast::error_code ec, std::size_t) {
                        self->writing_ = false;
                        ++self->write_gen_;
                        self->write_timer_.cancel();
                        self->buffered_ -= self->inflight_payload_;
                        self->inflight_payload_ = 0;
                        if (ec) {
                          return self->peer_gone();
                        }
                        if (self->drained_cb_ && self->buffered_.load() <= self->drained_at_most_) {
                          self->wake_drained();
                        }
                        if (!self->out_.empty()) {
                          return self->flush();
                        }
                        if (self->answer_done_ && self->phase_ == Phase::kResponding) {
                          self->on_answer_written();
                        }
                      });
  }

  void release_reservation() {
    server_.release_body(reserved_);
    reserved_ = 0;
  }

  void on_answer_written() {
    release_reservation();
    if (incomplete_) {
      return close();  // no terminating chunk, no further request on this connection
    }
    if (linger_after_answer_) {
      return linger();
    }
    if (!keep_alive_ || server_.stopping) {
      return graceful_close();
    }
    first_ = false;
    read_request();
  }

  // After an error answer to a request whose body was not read (413, 431, 400): stop sending
  // but keep reading (and discarding) for a while, so the peer's unread bytes do not turn our
  // close into a reset that destroys the answer before the client read it.
  void linger() {
    phase_ = Phase::kClosed;
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    arm_timer(std::min<std::chrono::milliseconds>(std::chrono::milliseconds(1000),
                                                  server_.options.body_timeout));
    linger_read();
  }

  void linger_read() {
    buffer_.consume(buffer_.size());
    socket_.async_read_some(buffer_.prepare(64 * 1024),
                            [self = shared_from_this()](beast::error_code ec, std::size_t n) {
                              self->lingered_ += n;
                              if (ec || self->lingered_ > kLingerBytes) {
                                return self->close();
                              }
                              self->linger_read();
                            });
  }

  void peer_gone() {
    if (phase_ == Phase::kResponding && !answer_done_ && !disconnected_) {
      disconnected_ = true;
      if (auto cb = std::move(disconnect_cb_)) {
        disconnect_cb_ = nullptr;
        cb();
      }
    }
    close();
  }

  void graceful_close() {
    phase_ = Phase::kClosed;
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    socket_.close(ec);
    cancel_timer();
  }

  // Whoever waits for the client to take its bytes goes on (also when it never will).
  void wake_drained() {
    if (auto cb = std::move(drained_cb_)) {
      drained_cb_ = nullptr;
      cb();
    }
  }

  void close() {
    if (phase_ == Phase::kResponding && !answer_done_) {
      disconnected_ = true;  // late on_disconnect() registrations fire at once
    }
    phase_ = Phase::kClosed;
    wake_drained();
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    cancel_timer();
    ++write_gen_;
    write_timer_.cancel();
  }

  Impl& server_;
  const uint64_t id_;
  const std::size_t listener_;
  ConnectionSlot slot_;  // its descriptors, its place under the cap and on its worker
  tcp::socket socket_;
  asio::steady_timer timer_;
  asio::steady_timer write_timer_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  Phase phase_ = Phase::kIdle;
  bool first_ = true;
  bool read_pending_ = false;
  bool keep_alive_ = true;
  bool http10_ = false;
  bool incomplete_ = false;   // end_incomplete(): close once the written bytes are out
  std::size_t reserved_ = 0;  // body budget held by the request being served
  bool over_budget_ = false;  // a chunk of the current body did not fit the budget
  // Parser callback (Beast keeps a reference): reserves each announced chunk of a chunked body.
  std::function<void(std::uint64_t, beast::string_view, beast::error_code&)> chunk_budget_ =
      [this](std::uint64_t size, beast::string_view, beast::error_code& ec) {
        if (!server_.reserve_body(static_cast<std::size_t>(size))) {
          over_budget_ = true;
          ec = bhttp::error::body_limit;  // stops the read; on_read_error answers 503
          return;
        }
        reserved_ += static_cast<std::size_t>(size);
      };
  bool answer_started_ = false;
  bool answer_done_ = false;
  bool disconnected_ = false;
  bool writing_ = false;
  bool linger_after_answer_ = false;
  std::size_t lingered_ = 0;
  uint64_t timer_gen_ = 0;
  uint64_t write_gen_ = 0;
  std::string out_;
  std::string inflight_;
  // Body bytes (without chunk framing) in out_ and inflight_; buffered_ also counts those
  // posted by write() and not yet applied. Only buffered_ is read off the strand.
  std::size_t out_payload_ = 0;
  std::size_t inflight_payload_ = 0;
  std::atomic<std::size_t> buffered_{0};
  std::function<void()> drained_cb_;
  std::size_t drained_at_most_ = 0;
  std::function<void()> disconnect_cb_;
};

void StreamServer::Impl::adopt(std::size_t listener, tcp::socket socket, ConnectionSlot slot) {
  uint64_t id = 0;
  {
    std::lock_guard lock(mu);
    id = next_id++;
  }
  auto session = std::make_shared<Session>(*this, id, listener, std::move(slot), std::move(socket));
  if (register_session(id, session)) {
    asio::post(session->socket_executor(), [session] { session->start(); });
  }
}

bool StreamServer::Impl::register_session(uint64_t id, const std::shared_ptr<Session>& s) {
  // Under the same lock as stop_requested, so the stop never misses a fresh connection.
  std::lock_guard lock(mu);
  if (stop_requested) {
    return false;
  }
  sessions.emplace(id, s);
  return true;
}

void StreamServer::Impl::unregister_session(uint64_t id) {
  std::lock_guard lock(mu);
  sessions.erase(id);
  if (sessions.empty()) {
    cv.notify_all();
  }
}

std::vector<std::shared_ptr<StreamServer::Impl::Session>> StreamServer::Impl::live_sessions() {
  std::vector<std::shared_ptr<Session>> live;
  std::lock_guard lock(mu);
  for (auto& [id, weak] : sessions) {
    if (auto p = weak.lock()) {
      live.push_back(std::move(p));
    }
  }
  return live;
}

StreamServer::StreamServer(StreamServerOptions options, Handler handler)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler), nullptr)) {}

StreamServer::StreamServer(StreamServerOptions options, Handler handler, IoWorkers& workers)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler), &workers)) {}

StreamServer::~StreamServer() = default;

std::size_t StreamServer::listen(uint16_t port) {
  auto& s = *impl_;
  ListenerOptions lo;
  lo.host = s.options.host;
  lo.port = port;
  lo.descriptors_per_connection = s.options.descriptors_per_connection;
  lo.log_name = "http";
  try {
    s.listeners.push_back(std::make_unique<Listener>(std::move(lo), s.workers, s.counts));
  } catch (const std::exception& e) {
    throw std::runtime_error("http: cannot listen on " + s.options.host + ":" +
                             std::to_string(port) + ": " + e.what());
  }
  return s.listeners.size() - 1;
}

uint16_t StreamServer::port(std::size_t listener) const {
  return impl_->listeners.at(listener)->port();
}

StrandPtr StreamServer::make_strand() {
  auto& s = *impl_;
  return std::make_unique<StrandImpl>(s.workers.at(s.next_strand++ % s.workers.size()));
}

void StreamServer::run(bool handle_signals) {
  auto& s = *impl_;
  for (std::size_t i = 0; i < s.listeners.size(); ++i) {
    s.listeners[i]->start([&s, i](tcp::socket socket, ConnectionSlot slot) {
      s.adopt(i, std::move(socket), std::move(slot));
    });
  }
  if (handle_signals) {
    s.signals.emplace(s.workers.at(0), SIGINT, SIGTERM);
    s.signals->async_wait([this](beast::error_code ec, int signo) {
      if (!ec) {
        spdlog::info("http: signal {}, shutting down", signo);
        stop();
      }
    });
  }
  s.workers.start();  // idempotent: an owner may have started them
  {
    std::unique_lock lock(s.mu);
    s.cv.wait(lock, [&s] { return s.stop_requested; });
  }
  // Drain: stop accepting, close idle connections, let answers in progress finish (bounded).
  std::chrono::milliseconds drain;
  {
    std::lock_guard lock(s.mu);
    drain = s.drain_timeout;
  }
  const auto deadline = std::chrono::steady_clock::now() + drain;
  for (auto& l : s.listeners) {
    l->close();
  }
  for (auto& session : s.live_sessions()) {
    asio::post(session->socket_executor(), [session] { session->on_server_stop(); });
  }
  {
    std::unique_lock lock(s.mu);
    if (!s.cv.wait_until(lock, deadline, [&s] { return s.sessions.empty(); })) {
      spdlog::warn("http: {} connection(s) still busy after the drain timeout; closing them",
                   s.sessions.size());
    }
  }
  for (auto& session : s.live_sessions()) {
    asio::post(session->socket_executor(), [session] { session->shutdown_now(); });
  }
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard lock(s.mu);
    hooks.swap(s.hooks);
  }
  for (auto& hook : hooks) {
    try {
      hook();
    } catch (const std::exception& e) {
      spdlog::error("http: shutdown hook threw: {}", e.what());
    }
  }
  if (s.signals) {
    asio::post(s.workers.at(0), [&s] {
      beast::error_code ec;
      s.signals->cancel(ec);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // let the closes run
  if (s.own_workers) {
    s.own_workers->stop();
    s.signals.reset();  // restores the default SIGINT/SIGTERM disposition
  } else if (s.signals) {
    // The owner's loops go on: the set is destroyed on its own worker.
    std::promise<void> reset;
    asio::post(s.workers.at(0), [&s, &reset] {
      s.signals.reset();
      reset.set_value();
    });
    reset.get_future().wait();
  }
}

void StreamServer::stop(std::optional<std::chrono::milliseconds> drain) {
  auto& s = *impl_;
  s.stopping = true;
  std::lock_guard lock(s.mu);
  if (drain && !s.stop_requested) {
    s.drain_timeout = *drain;
  }
  s.stop_requested = true;
  s.cv.notify_all();
}

void StreamServer::on_shutdown(std::function<void()> hook) {
  std::lock_guard lock(impl_->mu);
  impl_->hooks.push_back(std::move(hook));
}

}  // namespace llmd::http
