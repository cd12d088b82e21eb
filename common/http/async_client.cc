#include "common/http/async_client.h"

#include <atomic>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "common/http/stale_connection.h"

namespace llmd::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

namespace {

struct Connection {
  explicit Connection(asio::io_context& ioc) : stream(ioc) {}
  beast::tcp_stream stream;
  beast::flat_buffer buffer;
};

}  // namespace

struct AsyncHttpClient::Impl {
  struct Target {
    Url url;
    std::vector<std::unique_ptr<Connection>> idle;  // I/O thread only
    std::atomic<std::uint64_t> opened{0};
  };
  struct Exchange;

  Impl(std::vector<Url> urls, Options opts)
      : options(opts), work(asio::make_work_guard(ioc)), targets(urls.size()) {
    for (std::size_t i = 0; i < urls.size(); ++i) {
      targets[i].url = std::move(urls[i]);
    }
  }

  // Targets named by URL in request(), made on first use; I/O thread only.
  Target& by_url(const Url& url) {
    auto& t = by_address[url.host + ":" + std::to_string(url.port) + url.base_path];
    if (!t) {
      t = std::make_unique<Target>();
      t->url = url;
    }
    return *t;
  }

  // Builds the request and starts it on the I/O thread. `target` null: the one named by `url`.
  static void start(const std::shared_ptr<Impl>& impl, Target* target, const Url& url,
                    std::string_view method, std::string_view path, std::string body,
                    std::chrono::milliseconds timeout, Callback done);

  Options options;
  asio::io_context ioc;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  std::vector<Target> targets;
  std::unordered_map<std::string, std::unique_ptr<Target>> by_address;  // I/O thread only
  std::unordered_set<Exchange*> live;  // I/O thread only
  bool stopping = false;               // I/O thread only
  std::thread thread;

  // One request from start to callback. Owned by the handlers of its pending operation.
  struct Exchange : std::enable_shared_from_this<Exchange> {
    Exchange(std::shared_ptr<Impl> owner, Target* t, Callback cb)
        : impl(std::move(owner)),
          target(t),
          resolver(impl->ioc),
          deadline_timer(impl->ioc),
          done(std::move(cb)) {}

    std::shared_ptr<Impl> impl;
    Target* target;  // null until start() when the request named a URL
    std::optional<Url> url;
    tcp::resolver resolver;
    bhttp::request<bhttp::string_body> req;
    SteadyClock::time_point deadline;
    // One timer for the whole exchange. tcp_stream's own expiry re-arms a timer (a timerfd
    // syscall) for every read_some, and a predictor's 40-KB answer takes many: that was ~5 % of
    // the EPP's CPU at 100 pods. On expiry it closes the socket, which ends the pending operation.
    asio::steady_timer deadline_timer;
    bool timed_out = false;
    Callback done;
    std::unique_ptr<Connection> conn;
    bool reused = false;
    bool resent = false;
    std::optional<bhttp::response_parser<bhttp::string_body>> parser;

    void start() {
      if (impl->stopping) {
        return finish(AsyncResponse{0, {}, "client stopped", false});
      }
      impl->live.insert(this);
      deadline_timer.expires_at(deadline);
      deadline_timer.async_wait([self = shared_from_this()](beast::error_code ec) {
        if (ec || !self->done) {
          return;  // cancelled, or the exchange ended as the timer fired
        }
        self->timed_out = true;
        self->abort();
      });
      if (target == nullptr) {
        target = &impl->by_url(*url);
      }
      auto& idle = target->idle;
      if (!idle.empty()) {
        conn = std::move(idle.back());
        idle.pop_back();
        reused = true;
        return write();
      }
      connect();
    }

    void connect() {
      reused = false;
      conn = std::make_unique<Connection>(impl->ioc);
      target->opened.fetch_add(1, std::memory_order_relaxed);
      const Url& where = target->url;
      resolver.async_resolve(
          where.host, std::to_string(where.port),
          [self = shared_from_this()](beast::error_code ec, tcp::resolver::results_type r) {
            if (ec) {
              return self->fail("resolve", ec);
            }
            if (SteadyClock::now() >= self->deadline) {
              return self->fail("resolve", beast::error::timeout);
            }
            self->conn->stream.async_connect(
                r, [self](beast::error_code ec2, const tcp::endpoint&) {
                  if (ec2) {
                    return self->fail("connect", ec2);
                  }
                  beast::error_code ignored;
                  self->conn->stream.socket().set_option(tcp::no_delay(true), ignored);
                  self->write();
                });
          });
    }

    void write() {
      bhttp::async_write(conn->stream, req,
                         [self = shared_from_this()](beast::error_code ec, std::size_t) {
                           if (ec) {
                             return self->fail("write", ec);
                           }
                           self->read();
                         });
    }

    void read() {
      parser.emplace();
      parser->body_limit(impl->options.response_body_limit);
      bhttp::async_read(conn->stream, conn->buffer, *parser,
                        [self = shared_from_this()](beast::error_code ec, std::size_t) {
                          if (ec) {
                            return self->fail("read", ec);
                          }
                          self->answered();
                        });
    }

    void answered() {
      auto& res = parser->get();
      AsyncResponse out{static_cast<int>(res.result_int()), std::move(res.body()), {}, false};
      auto& idle = target->idle;
      // timed_out here: the timer fired just as the answer completed and closed the socket.
      if (res.keep_alive() && !impl->stopping && !timed_out &&
          idle.size() < impl->options.max_idle_per_target) {
        idle.push_back(std::move(conn));
      }
      finish(std::move(out));
    }

    void fail(const char* stage, beast::error_code ec) {
      conn.reset();
      if (timed_out || ec == beast::error::timeout) {
        timed_out = true;
        ec = beast::error::timeout;  // the timer closed the socket: say why, not "aborted"
      }
      // A reused connection the peer had closed: one fresh connection, the same request.
      if (reused && !resent && !impl->stopping && detail::is_stale_connection(ec) &&
          SteadyClock::now() < deadline) {
        resent = true;
        return connect();
      }
      finish(AsyncResponse{0, {}, std::string(stage) + ": " + ec.message(), timed_out});
    }

    void finish(AsyncResponse r) {
      impl->live.erase(this);
      deadline_timer.cancel();
      if (done) {
        auto cb = std::move(done);
        done = nullptr;
        cb(std::move(r));
      }
    }

    // Shutdown: ends whatever operation is pending (its handler then calls fail()).
    void abort() {
      resolver.cancel();
      if (conn) {
        beast::error_code ignored;
        conn->stream.socket().close(ignored);
      }
    }
  };
};

void AsyncHttpClient::Impl::start(const std::shared_ptr<Impl>& impl, Target* target,
                                  const Url& url, std::string_view method, std::string_view path,
                                  std::string body, std::chrono::milliseconds timeout,
                                  Callback done) {
  const auto verb = bhttp::string_to_verb(beast::string_view(method.data(), method.size()));
  if (verb == bhttp::verb::unknown) {
    asio::post(impl->ioc, [cb = std::move(done), m = std::string(method)] {
      cb(AsyncResponse{0, {}, "unknown method '" + m + "'", false});
    });
    return;
  }
  auto ex = std::make_shared<Exchange>(impl, target, std::move(done));
  if (target == nullptr) {
    ex->url = url;
  }
  ex->deadline = SteadyClock::now() + timeout;
  ex->req.method(verb);
  std::string full = url.base_path;
  full.append(path);
  ex->req.target(full);
  ex->req.version(11);
  ex->req.set(bhttp::field::host, url.host + ":" + std::to_string(url.port));
  if (!body.empty() || verb == bhttp::verb::post || verb == bhttp::verb::put) {
    ex->req.set(bhttp::field::content_type, "application/json");
    ex->req.body() = std::move(body);
  }
  ex->req.prepare_payload();
  asio::post(impl->ioc, [ex] { ex->start(); });
}

AsyncHttpClient::AsyncHttpClient(std::vector<Url> targets, Options options)
    : impl_(std::make_shared<Impl>(std::move(targets), options)) {
  impl_->thread = std::thread([impl = impl_.get()] { impl->ioc.run(); });
}

AsyncHttpClient::~AsyncHttpClient() {
  asio::post(impl_->ioc, [impl = impl_.get()] {
    impl->stopping = true;
    for (auto& t : impl->targets) {
      t.idle.clear();
    }
    for (auto& [_, t] : impl->by_address) {
      t->idle.clear();
    }
    // Copy: abort() makes handlers run later, but be safe against erasure while iterating.
    std::vector<Impl::Exchange*> live(impl->live.begin(), impl->live.end());
    for (auto* e : live) {
      e->abort();
    }
  });
  impl_->work.reset();
  impl_->thread.join();  // returns once every exchange has called back
}

void AsyncHttpClient::request(std::size_t target, std::string_view method,
                              std::string_view path, std::string body,
                              std::chrono::milliseconds timeout, Callback done) {
  if (target >= impl_->targets.size()) {
    asio::post(impl_->ioc, [cb = std::move(done)] {
      cb(AsyncResponse{0, {}, "unknown target", false});
    });
    return;
  }
  Impl::start(impl_, &impl_->targets[target], impl_->targets[target].url, method, path,
              std::move(body), timeout, std::move(done));
}

void AsyncHttpClient::request(const Url& url, std::string_view method, std::string_view path,
                              std::string body, std::chrono::milliseconds timeout,
                              Callback done) {
  Impl::start(impl_, nullptr, url, method, path, std::move(body), timeout, std::move(done));
}

std::uint64_t AsyncHttpClient::connections_opened(std::size_t target) const {
  return target < impl_->targets.size()
             ? impl_->targets[target].opened.load(std::memory_order_relaxed)
             : 0;
}

}  // namespace llmd::http
