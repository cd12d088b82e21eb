#pragma once
// AsyncHttpClient: HTTP/1.1 requests without a thread per request. One I/O thread of the
// client's own runs the project's client core (common/http/client_core.h) for every exchange:
// a keep-alive pool per origin (a connection carries one exchange at a time; a new one is
// opened when none is idle, and at most `max_idle_per_target` wait for reuse), one timer per
// exchange, a kept-alive connection the peer closed meanwhile replaced and the request resent
// once. Beast/Asio only in the .cc.
//
// The same thread also runs its owner's timers and posted tasks (post(), post_at()), so a
// component that needs periodic work next to its exchanges (the EPP's scraper: a timer per pod)
// needs no thread of its own.
//
// Threads: request(), post() and post_at() are thread-safe and return at once; `done` runs
// exactly once, on the client's I/O thread (or the caller's worker, see on_caller_worker; never
// inline), within the request's timeout (plus scheduling); tasks run there too. The destructor ends
// the exchanges still in flight (their callbacks run with an error before it returns), drops the
// tasks not yet run and joins the thread; no request() or post may start once it has begun, except
// from the I/O thread itself (a callback or a task): what those start is then cancelled or dropped
// like the rest.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/http/client.h"

namespace llmd::http {

struct AsyncResponse {
  int status = 0;  // 0 when the exchange failed before a complete response
  std::string body;
  std::string error;       // what failed when status == 0
  bool timed_out = false;  // the failure was the request's timeout
};

class AsyncHttpClient {
 public:
  using Callback = std::function<void(AsyncResponse)>;
  struct Options {
    std::size_t max_idle_per_target = 64;
    std::uint64_t response_body_limit = 256ull * 1024 * 1024;
    // A request started on a worker thread (io_workers.h) runs on that worker's own client core
    // and calls back there, not on this client's thread: the EPP's prediction call then costs
    // no wake-up of another thread on the way out nor on the way back. Those workers must keep
    // running until every such exchange has called back (the destructor waits for them).
    bool on_caller_worker = false;
    std::string thread_name = "http-client";  // its I/O thread's name (top -H)
    TlsContextPtr tls;                        // for https targets; null fails them
  };

  explicit AsyncHttpClient(std::vector<Url> targets) : AsyncHttpClient(std::move(targets), {}) {}
  AsyncHttpClient(std::vector<Url> targets, Options options);
  ~AsyncHttpClient();
  AsyncHttpClient(const AsyncHttpClient&) = delete;
  AsyncHttpClient& operator=(const AsyncHttpClient&) = delete;

  // `path` is appended to the target's base path. A `body` goes with Content-Type
  // application/json. An unknown target or method fails through `done` like any other error.
  // `timeout` bounds the whole exchange.
  void request(std::size_t target, std::string_view method, std::string_view path, std::string body,
               std::chrono::milliseconds timeout, Callback done);

  // The same to a target named by URL (host:port and base path), e.g. pods that come and go;
  // its keep-alive pool is made on first use.
  void request(const Url& url, std::string_view method, std::string_view path, std::string body,
               std::chrono::milliseconds timeout, Callback done);

  // Runs `task` on the I/O thread, never inline.
  void post(std::function<void()> task);
  // Runs `task` on the I/O thread at `at` (as soon as it can when `at` has passed), never
  // inline. One timer per call, cancelled by the destructor: a task not yet due then is
  // dropped without running, so an owner that destroys the client sees no task afterwards.
  void post_at(std::chrono::steady_clock::time_point at, std::function<void()> task);

  // Connections opened to `target`'s origin so far (tests: keep-alive reuse). Thread-safe.
  std::uint64_t connections_opened(std::size_t target) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::http
