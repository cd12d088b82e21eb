#include "common/http/client_core.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <unordered_map>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/error.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "common/http/idle_pool.h"
#include "common/http/stale_connection.h"

namespace llmd::http {

namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

class TlsContext {
 public:
  TlsContext(std::string name, bool verify) : server_name(std::move(name)), verify(verify) {}
  ssl::context ctx{ssl::context::tls_client};
  const std::string server_name;  // "" = each origin's host
  const bool verify;              // false: no chain or name check
};

TlsContextPtr make_tls_context(const TlsOptions& options) {
  auto tls = std::make_shared<TlsContext>(options.server_name, options.verify);
  if (!options.verify) {
    tls->ctx.set_verify_mode(ssl::verify_none);
    return tls;
  }
  tls->ctx.set_verify_mode(ssl::verify_peer);
  beast::error_code ec;
  if (options.ca_file.empty()) {
    tls->ctx.set_default_verify_paths(ec);
  } else {
    tls->ctx.load_verify_file(options.ca_file, ec);
  }
  if (ec) {
    throw std::invalid_argument("TLS: cannot read CA " +
                                (options.ca_file.empty() ? "(system default)" : options.ca_file) +
                                ": " + ec.message());
  }
  return tls;
}

namespace {

constexpr std::size_t kChunk = 16 * 1024;  // a streamed body is read in pieces of this size

std::string_view to_sv(beast::string_view s) {
  return {s.data(), s.size()};
}

// One connection to an origin, plain or TLS; the read buffer is the connection's (bytes past
// one response belong to the next).
struct Connection {
  explicit Connection(const asio::any_io_executor& io) : socket(io) {}
  tcp::socket socket;
  std::optional<ssl::stream<tcp::socket&>> tls;  // over `socket` once the handshake starts
  beast::flat_buffer buffer;
};

// RFC 9110 token characters: what a method may consist of.
bool is_token(std::string_view s) {
  if (s.empty()) {
    return false;
  }
  for (const char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    if (!ok) {
      return false;
    }
  }
  return true;
}

std::string origin_key(const Url& origin) {
  std::string key = origin.host;
  key += ':';
  key += std::to_string(origin.port);
  if (origin.tls) {
    key += "+tls";
  }
  return key;
}

class Exchange;

}  // namespace

struct ClientCore::State {
  State(asio::any_io_executor e, Options o)
      : io(std::move(e)),
        options(std::move(o)),
        pool({options.max_idle_per_origin, options.max_idle, options.idle_timeout}) {}

  // A pooled connection to `key` fit for reuse, or null.
  std::unique_ptr<Connection> take(const std::string& key) {
    std::unique_ptr<Connection> conn;
    pool.take(
        key, now(),
        [this](const std::unique_ptr<Connection>& c) {
          // A TLS 1.3 server sends session tickets after the handshake: unread bytes there do not
          // mean the connection is unusable, so only plain connections are probed.
          return !options.probe_idle || c->tls || still_open(c->socket.native_handle());
        },
        conn);
    return conn;
  }

  void give_back(const std::string& key, std::unique_ptr<Connection> conn) {
    if (!stopping) {
      pool.give_back(key, std::move(conn), now());
    }
  }

  // The pool's clock is read only when it has an idle timeout (a syscall-free vDSO read, but
  // the scraper and the predictor calls need none).
  IdlePool<std::unique_ptr<Connection>>::Clock::time_point now() const {
    return options.idle_timeout > ms(0) ? SteadyClock::now() : SteadyClock::time_point{};
  }

  void count_opened(const std::string& key) {
    std::lock_guard lock(mu);
    ++opened[key];
  }

  const asio::any_io_executor io;
  const Options options;
  IdlePool<std::unique_ptr<Connection>> pool;
  std::atomic<bool> stopping{false};
  mutable std::mutex mu;
  std::unordered_map<std::string, std::uint64_t> opened;  // by origin; guarded by mu
  // Exchanges in flight, for shutdown(); guarded by mu.
  std::unordered_map<const void*, std::weak_ptr<ClientCall>> live;
};

namespace {

// One exchange from start to its last byte (or failure). Owned by the handlers of its pending
// operation and, once a streamed header is in, by the caller's ClientCall pointer. Every
// member is touched only on `ex_`.
class Exchange final : public ClientCall, public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(std::shared_ptr<ClientCore::State> state, asio::any_io_executor ex, const Url& origin,
           ClientRequest&& request, const ClientTimeouts& timeouts)
      : state_(std::move(state)),
        ex_(std::move(ex)),
        host_(origin.host),
        port_(origin.port),
        tls_(origin.tls),
        key_(origin_key(origin)),
        timeouts_(timeouts),
        want_headers_(request.want_headers),
        keep_alive_(request.keep_alive),
        started_(SteadyClock::now()),
        timer_(ex_) {
    build(std::move(request));
  }

  ~Exchange() override {
    if (registered_) {
      std::lock_guard lock(state_->mu);
      state_->live.erase(this);
    }
  }

  const asio::any_io_executor& executor() const { return ex_; }
  void set_callback(ClientCore::Done done) { done_ = std::move(done); }
  void set_callback(ClientCore::HeadDone done) {
    head_done_ = std::move(done);
    chunk_ = std::make_unique<std::array<char, kChunk>>();
  }

  void start() {
    if (phase_ != Phase::kIdle) {
      return;
    }
    if (cancelled_) {
      return fail("cancelled");
    }
    if (state_->stopping) {
      return fail("client stopped");
    }
    if (!bad_request_.empty()) {
      return fail(bad_request_);
    }
    if (tls_ && !state_->options.tls) {
      return fail("https: no TLS settings for " + host_);
    }
    {
      std::lock_guard lock(state_->mu);
      state_->live.emplace(this, weak_from_this());
    }
    registered_ = true;
    if (timeouts_.total > ms(0)) {
      total_deadline_ = started_ + timeouts_.total;
    }
    if (auto conn = state_->take(key_)) {
      conn_ = std::move(conn);
      reused_ = true;
      connected_ = true;
      if (state_->options.on_reused) {
        state_->options.on_reused();
      }
      return send();
    }
    connect();
  }

  // ClientCall
  void read(ReadDone done) override {
    if (phase_ == Phase::kDone) {
      BodyPiece piece;
      piece.end = body_complete_;
      if (!body_complete_) {
        piece.error = error_.empty() ? "no body to read" : error_;
        piece.timed_out = timed_out_;
      }
      return post_piece(std::move(done), std::move(piece));
    }
    if (phase_ != Phase::kBody || read_done_ || !piecewise_) {
      BodyPiece piece;
      piece.error = "no body to read";
      return post_piece(std::move(done), std::move(piece));
    }
    read_done_ = std::move(done);
    reading_ = true;
    last_progress_ = SteadyClock::now();
    arm();
    read_some();
  }

  void cancel() override {
    if (phase_ == Phase::kDone || cancelled_) {
      return;
    }
    cancelled_ = true;
    if (phase_ == Phase::kIdle) {
      return;  // start() (posted) reports it
    }
    if (phase_ == Phase::kBody && !reading_) {
      conn_.reset();  // nothing pending: the call simply ends
      end(false);
      error_ = "cancelled";
      return;
    }
    abort_io();  // the pending operation's handler reports it
  }

  bool reused() const override { return reused_; }
  bool connected() const override { return connected_; }

 private:
  enum class Phase { kIdle, kConnect, kResponse, kBody, kDone };

  template <typename F>
  auto bound(F&& f) {
    return asio::bind_executor(ex_, std::forward<F>(f));
  }

  template <typename F>
  void with_stream(F&& f) {
    if (conn_->tls) {
      f(*conn_->tls);
    } else {
      f(conn_->socket);
    }
  }

  void build(ClientRequest&& request) {
    if (!is_token(request.method)) {
      bad_request_ = "bad method '" + request.method + "'";
      return;
    }
    const auto verb = bhttp::string_to_verb(request.method);
    if (verb != bhttp::verb::unknown) {
      req_.method(verb);
    } else {
      req_.method_string(request.method);
    }
    req_.target(request.target.empty() ? "/" : request.target);
    req_.version(11);
    bool has_host = false;
    for (const auto& h : request.headers) {
      has_host = has_host || to_lower(h.name) == "host";
    }
    if (!has_host) {
      const bool ipv6 = host_.find(':') != std::string::npos;
      req_.set(bhttp::field::host,
               (ipv6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_));
    }
    for (const auto& h : request.headers) {
      req_.insert(h.name, h.value);
    }
    if (!request.content_type.empty()) {
      req_.set(bhttp::field::content_type, request.content_type);
    }
    req_.keep_alive(request.keep_alive);
    if (request.borrowed_body.empty()) {
      body_ = std::move(request.body);
      req_.body() = {body_.data(), body_.size()};
    } else {
      req_.body() = {request.borrowed_body.data(), request.borrowed_body.size()};
    }
    req_.prepare_payload();
  }

  // --- timeouts: one timer, re-armed only when the deadline moves earlier ---

  SteadyClock::time_point deadline() const {
    auto d = total_deadline_;
    switch (phase_) {
      case Phase::kConnect:
        d = std::min(d, connect_deadline_);
        break;
      case Phase::kResponse:
        d = std::min({d, response_deadline_, first_byte_deadline_});
        break;
      case Phase::kBody:
        d = std::min(d, response_deadline_);
        if (reading_ && timeouts_.idle > ms(0)) {
          d = std::min(d, last_progress_ + timeouts_.idle);
        }
        break;
      default:
        return SteadyClock::time_point::max();
    }
    return d;
  }

  void arm() {
    const auto d = deadline();
    if (d == SteadyClock::time_point::max() || (armed_ && armed_at_ <= d)) {
      return;  // no bound now, or the pending wait fires first and looks again
    }
    armed_ = true;
    armed_at_ = d;
    const std::uint64_t generation = ++timer_generation_;
    timer_.expires_at(d);
    // A weak pointer: a streamed call between reads is owned by its caller alone, and
    // dropping it must end it even while a deadline is pending.
    timer_.async_wait(bound([weak = weak_from_this(), generation](beast::error_code) {
      if (auto self = weak.lock()) {
        self->on_timer(generation);
      }
    }));
  }

  void on_timer(std::uint64_t generation) {
    if (generation != timer_generation_) {
      return;  // superseded by a re-arm
    }
    armed_ = false;
    if (phase_ == Phase::kDone || phase_ == Phase::kIdle) {
      return;
    }
    const auto d = deadline();
    if (d == SteadyClock::time_point::max()) {
      return;
    }
    if (SteadyClock::now() < d) {
      return arm();  // progress moved the deadline
    }
    timed_out_ = true;
    abort_io();  // the pending operation fails and reports the timeout
  }

  void abort_io() {
    if (resolver_) {
      resolver_->cancel();
    }
    if (conn_) {
      beast::error_code ignored;
      conn_->socket.close(ignored);
    }
  }

  // --- the exchange ---

  void connect() {
    phase_ = Phase::kConnect;
    if (timeouts_.connect > ms(0)) {
      connect_deadline_ = SteadyClock::now() + timeouts_.connect;
    }
    arm();
    reused_ = false;
    connected_ = false;
    state_->count_opened(key_);
    try {
      conn_ = std::make_unique<Connection>(state_->io);
    } catch (const std::exception& e) {
      return fail(std::string("connect: ") + e.what());
    }
    beast::error_code ec;
    const auto address = asio::ip::make_address(host_, ec);
    if (!ec) {
      // Addresses are usually IPs (pods, services' cluster IPs): no resolver (it runs on a
      // helper thread).
      conn_->socket.async_connect(
          tcp::endpoint(address, port_),
          bound([self = shared_from_this()](beast::error_code e) { self->connected(e); }));
      return;
    }
    try {
      resolver_.emplace(ex_);
    } catch (const std::exception& e) {
      return fail(std::string("resolve: ") + e.what());
    }
    resolver_->async_resolve(
        host_, std::to_string(port_),
        bound([self = shared_from_this()](beast::error_code e, tcp::resolver::results_type r) {
          if (e) {
            return self->fail_ec("resolve", e);
          }
          asio::async_connect(self->conn_->socket, r,
                              self->bound([self](beast::error_code e2, const tcp::endpoint&) {
                                self->connected(e2);
                              }));
        }));
  }

  void connected(beast::error_code ec) {
    if (ec) {
      return fail_ec("connect", ec);
    }
    connected_ = true;
    beast::error_code ignored;
    conn_->socket.set_option(tcp::no_delay(true), ignored);
    if (state_->options.on_opened) {
      state_->options.on_opened();
    }
    if (!tls_) {
      return send();
    }
    auto& tls = *state_->options.tls;
    const std::string& name = tls.server_name.empty() ? host_ : tls.server_name;
    try {
      conn_->tls.emplace(conn_->socket, tls.ctx);
    } catch (const std::exception& e) {
      return fail(std::string("tls: ") + e.what());
    }
    if (!SSL_set_tlsext_host_name(conn_->tls->native_handle(), name.c_str())) {
      return fail("tls: cannot set the server name " + name);
    }
    if (tls.verify) {
      conn_->tls->set_verify_callback(ssl::host_name_verification(name));
    }
    conn_->tls->async_handshake(ssl::stream_base::client,
                                bound([self = shared_from_this()](beast::error_code e) {
                                  if (e) {
                                    return self->fail_ec("handshake", e);
                                  }
                                  self->send();
                                }));
  }

  void send() {
    phase_ = Phase::kResponse;
    if (timeouts_.response > ms(0) || timeouts_.first_byte > ms(0)) {
      const auto now = SteadyClock::now();
      if (timeouts_.response > ms(0)) {
        response_deadline_ = now + timeouts_.response;
      }
      if (timeouts_.first_byte > ms(0)) {
        first_byte_deadline_ = now + timeouts_.first_byte;
      }
    }
    arm();
    with_stream([this](auto& stream) {
      bhttp::async_write(stream, req_,
                         bound([self = shared_from_this()](beast::error_code ec, std::size_t) {
                           if (ec) {
                             return self->fail_ec("write", ec);
                           }
                           self->receive();
                         }));
    });
  }

  void receive() {
    if (piecewise_ || head_done_) {
      return receive_head();
    }
    whole_.emplace();
    whole_->header_limit(state_->options.header_limit);
    whole_->body_limit(state_->options.response_body_limit);
    if (timeouts_.first_byte == ms(0)) {
      // One composed read for the whole answer: the hot path (scrapes, predictions).
      return with_stream([this](auto& stream) {
        bhttp::async_read(stream, conn_->buffer, *whole_,
                          bound([self = shared_from_this()](beast::error_code ec, std::size_t) {
                            if (ec) {
                              return self->fail_ec("read", ec);
                            }
                            self->answered();
                          }));
      });
    }
    with_stream([this](auto& stream) {
      bhttp::async_read_header(
          stream, conn_->buffer, *whole_,
          bound([self = shared_from_this()](beast::error_code ec, std::size_t) {
            if (ec) {
              return self->fail_ec("read", ec);
            }
            self->first_byte_deadline_ = SteadyClock::time_point::max();
            self->with_stream([&self](auto& s) {
              bhttp::async_read(s, self->conn_->buffer, *self->whole_,
                                self->bound([self](beast::error_code ec2, std::size_t) {
                                  if (ec2) {
                                    return self->fail_ec("read", ec2);
                                  }
                                  self->answered();
                                }));
            });
          }));
    });
  }

  void answered() {
    auto& res = whole_->get();
    ClientResponse out;
    out.status = static_cast<int>(res.result_int());
    out.body = std::move(res.body());
    if (want_headers_) {
      out.headers = headers_of(res);
    }
    release_connection(res.keep_alive());
    end(true);
    if (auto done = std::move(done_)) {
      done_ = nullptr;
      done(std::move(out));
    }
  }

  void receive_head() {
    piecewise_.emplace();
    piecewise_->header_limit(state_->options.header_limit);
    piecewise_->body_limit(std::numeric_limits<std::uint64_t>::max());  // the caller's to bound
    with_stream([this](auto& stream) {
      bhttp::async_read_header(
          stream, conn_->buffer, *piecewise_,
          bound([self = shared_from_this()](beast::error_code ec, std::size_t) {
            if (ec) {
              return self->fail_ec("read", ec);
            }
            self->headed();
          }));
    });
  }

  void headed() {
    auto& res = piecewise_->get();
    ClientResponse head;
    head.status = static_cast<int>(res.result_int());
    head.headers = headers_of(res);
    phase_ = Phase::kBody;
    if (piecewise_->is_done()) {  // no body (204, 304, Content-Length: 0)
      release_connection(piecewise_->keep_alive());
      end(true);
    }
    auto done = std::move(head_done_);
    head_done_ = nullptr;
    done(std::move(head), shared_from_this());
  }

  void read_some() {
    auto& body = piecewise_->get().body();
    body.data = chunk_->data();
    body.size = chunk_->size();
    with_stream([this](auto& stream) {
      bhttp::async_read_some(stream, conn_->buffer, *piecewise_,
                             bound([self = shared_from_this()](beast::error_code ec, std::size_t) {
                               self->read_some_done(ec);
                             }));
    });
  }

  void read_some_done(beast::error_code ec) {
    if (ec == bhttp::error::need_buffer) {
      ec = {};  // the piece is full
    }
    if (ec) {
      return fail_ec("read", ec);
    }
    const std::size_t got = chunk_->size() - piecewise_->get().body().size;
    const bool complete = piecewise_->is_done();
    if (got == 0 && !complete) {
      last_progress_ = SteadyClock::now();  // framing only (a chunk header): read on
      return read_some();
    }
    reading_ = false;
    if (complete) {
      release_connection(piecewise_->keep_alive());
      end(true);
    }
    BodyPiece piece;
    piece.bytes = std::string_view(chunk_->data(), got);
    piece.end = complete;
    auto done = std::move(read_done_);
    read_done_ = nullptr;
    done(std::move(piece));
  }

  // --- endings ---

  template <typename Message>
  static std::vector<Header> headers_of(const Message& res) {
    std::vector<Header> out;
    for (const auto& field : res) {
      out.push_back({to_lower(to_sv(field.name_string())), std::string(field.value())});
    }
    return out;
  }

  // Pools the connection when its answer ended cleanly on a connection the server keeps open.
  void release_connection(bool server_keeps_it) {
    // timed_out_: the timer closed the socket just as the answer completed.
    if (server_keeps_it && keep_alive_ && !timed_out_ && !cancelled_ && !state_->stopping &&
        conn_) {
      state_->give_back(key_, std::move(conn_));
    }
    conn_.reset();
  }

  // The exchange is over: no timer, not in flight.
  void end(bool body_complete) {
    phase_ = Phase::kDone;
    body_complete_ = body_complete;
    if (armed_) {
      armed_ = false;
      ++timer_generation_;
      timer_.cancel();
    }
    resolver_.reset();
    if (registered_) {
      std::lock_guard lock(state_->mu);
      state_->live.erase(this);
      registered_ = false;
    }
  }

  void fail_ec(const char* stage, beast::error_code ec) {
    const bool answer_started = (conn_ && conn_->buffer.size() > 0) ||
                                (whole_ && whole_->got_some()) ||
                                (piecewise_ && piecewise_->got_some());
    conn_.reset();
    if (timed_out_ || ec == beast::error::timeout) {
      timed_out_ = true;
      return fail(std::string(stage) + ": " + beast::error_code(beast::error::timeout).message());
    }
    if (cancelled_) {
      return fail("cancelled");
    }
    // A reused connection the server had closed before a byte of the answer: once more on a
    // fresh one, if the deadline allows.
    const bool stale = detail::is_stale_connection(ec) || ec == ssl::error::stream_truncated;
    if (phase_ == Phase::kResponse && reused_ && !resent_ && !answer_started && stale &&
        !state_->stopping && SteadyClock::now() < total_deadline_) {
      resent_ = true;
      whole_.reset();
      piecewise_.reset();
      return connect();
    }
    fail(std::string(stage) + ": " + ec.message());
  }

  // Reports the failure to whichever callback waits.
  void fail(std::string error) {
    conn_.reset();
    error_ = std::move(error);
    end(false);
    if (auto done = std::move(done_)) {
      done_ = nullptr;
      ClientResponse r;
      r.error = error_;
      r.timed_out = timed_out_;
      done(std::move(r));
    } else if (auto head = std::move(head_done_)) {
      head_done_ = nullptr;
      ClientResponse r;
      r.error = error_;
      r.timed_out = timed_out_;
      head(std::move(r), nullptr);
    } else if (auto read = std::move(read_done_)) {
      read_done_ = nullptr;
      reading_ = false;
      BodyPiece piece;
      piece.error = error_;
      piece.timed_out = timed_out_;
      read(std::move(piece));
    }
  }

  void post_piece(ReadDone done, BodyPiece piece) {
    // `bytes` is empty here, so the piece owns everything it carries.
    asio::post(ex_, [done = std::move(done), piece = std::move(piece)]() mutable {
      done(std::move(piece));
    });
  }

  const std::shared_ptr<ClientCore::State> state_;
  const asio::any_io_executor ex_;
  const std::string host_;
  const uint16_t port_;
  const bool tls_;
  const std::string key_;
  const ClientTimeouts timeouts_;
  const bool want_headers_;
  const bool keep_alive_;
  const SteadyClock::time_point started_;

  std::string bad_request_;
  std::string body_;  // owned request body (the request's span points here)
  bhttp::request<bhttp::span_body<const char>> req_;
  ClientCore::Done done_;
  ClientCore::HeadDone head_done_;
  ReadDone read_done_;

  Phase phase_ = Phase::kIdle;
  std::unique_ptr<Connection> conn_;
  std::optional<tcp::resolver> resolver_;
  std::optional<bhttp::response_parser<bhttp::string_body>> whole_;      // fetch
  std::optional<bhttp::response_parser<bhttp::buffer_body>> piecewise_;  // open
  std::unique_ptr<std::array<char, kChunk>> chunk_;                      // open
  bool registered_ = false;
  bool reused_ = false;
  bool connected_ = false;
  bool resent_ = false;
  bool reading_ = false;
  bool cancelled_ = false;
  bool timed_out_ = false;
  bool body_complete_ = false;
  std::string error_;

  asio::steady_timer timer_;
  bool armed_ = false;
  SteadyClock::time_point armed_at_{};
  std::uint64_t timer_generation_ = 0;
  SteadyClock::time_point total_deadline_ = SteadyClock::time_point::max();
  SteadyClock::time_point connect_deadline_ = SteadyClock::time_point::max();
  SteadyClock::time_point response_deadline_ = SteadyClock::time_point::max();
  SteadyClock::time_point first_byte_deadline_ = SteadyClock::time_point::max();
  SteadyClock::time_point last_progress_{};
};

}  // namespace

ClientCore::ClientCore(asio::any_io_executor io, Options options) {
  // The timer service (with the reactor's epoll and timer descriptors) is made now, where a
  // failure (EMFILE) is the owner's to report, rather than in an exchange.
  asio::steady_timer probe(io);
  state_ = std::make_shared<State>(std::move(io), std::move(options));
}

ClientCore::~ClientCore() {
  state_->pool.clear();
}

namespace {

void report_failure(ClientCore::Done& done, std::string error) {
  ClientResponse r;
  r.error = std::move(error);
  done(std::move(r));
}

void report_failure(ClientCore::HeadDone& done, std::string error) {
  ClientResponse r;
  r.error = std::move(error);
  done(std::move(r), nullptr);
}

// Makes the exchange and posts its start. Failing to make it (out of memory or descriptors) is
// still a value, reported on `on`.
template <typename Callback>
ClientCallPtr launch(const std::shared_ptr<ClientCore::State>& state, const Url& origin,
                     ClientRequest&& request, const ClientTimeouts& timeouts,
                     const asio::any_io_executor& on, Callback done) {
  std::shared_ptr<Exchange> ex;
  try {
    ex = std::make_shared<Exchange>(state, on, origin, std::move(request), timeouts);
  } catch (const std::exception& e) {
    asio::post(on, [done = std::move(done), error = std::string("request: ") + e.what()]() mutable {
      report_failure(done, std::move(error));
    });
    return nullptr;
  }
  ex->set_callback(std::move(done));
  asio::post(ex->executor(), [ex] { ex->start(); });
  return ex;
}

}  // namespace

ClientCallPtr ClientCore::fetch(const Url& origin, ClientRequest request,
                                const ClientTimeouts& timeouts, Done done) {
  return launch(state_, origin, std::move(request), timeouts, state_->io, std::move(done));
}

ClientCallPtr ClientCore::fetch(const Url& origin, ClientRequest request,
                                const ClientTimeouts& timeouts, asio::any_io_executor on,
                                Done done) {
  return launch(state_, origin, std::move(request), timeouts, on, std::move(done));
}

ClientCallPtr ClientCore::open(const Url& origin, ClientRequest request,
                               const ClientTimeouts& timeouts, HeadDone head_done) {
  return launch(state_, origin, std::move(request), timeouts, state_->io, std::move(head_done));
}

ClientCallPtr ClientCore::open(const Url& origin, ClientRequest request,
                               const ClientTimeouts& timeouts, asio::any_io_executor on,
                               HeadDone head_done) {
  return launch(state_, origin, std::move(request), timeouts, on, std::move(head_done));
}

void ClientCore::shutdown() {
  state_->stopping = true;
  std::vector<std::weak_ptr<ClientCall>> live;
  {
    std::lock_guard lock(state_->mu);
    for (const auto& [_, weak] : state_->live) {
      live.push_back(weak);
    }
  }
  state_->pool.clear(/*for_good=*/true);
  for (const auto& weak : live) {
    if (auto call = std::static_pointer_cast<Exchange>(weak.lock())) {
      asio::post(call->executor(), [call] { call->cancel(); });
    }
  }
}

void ClientCore::close_idle() {
  state_->pool.clear();
}

std::size_t ClientCore::idle() const {
  return state_->pool.idle();
}

std::uint64_t ClientCore::connections_opened(const Url& origin) const {
  std::lock_guard lock(state_->mu);
  auto it = state_->opened.find(origin_key(origin));
  return it == state_->opened.end() ? 0 : it->second;
}

}  // namespace llmd::http
