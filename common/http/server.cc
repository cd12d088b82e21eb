#include "common/http/server.h"

#include <condition_variable>
#include <mutex>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "common/http/stream_server.h"

namespace llmd::http {

// The plain request -> response shape over the one server core (stream_server.h).
struct HttpServer::Impl {
  Impl(const ServerOptions& o, AsyncHandler h)
      : options(o),
        handler(std::move(h)),
        core(core_options(o), [this](std::size_t, Request&& request, ResponseStreamPtr stream) {
          // On the connection's strand (an io thread), as the handler contract says.
          handler(std::move(request), std::move(stream));
        }) {}

  static StreamServerOptions core_options(const ServerOptions& o) {
    StreamServerOptions c;
    c.host = o.host;
    c.io_threads = o.io_threads;
    c.body_limit = o.body_limit;
    c.body_budget = o.body_budget;
    c.header_timeout = o.header_timeout;
    c.idle_timeout = o.idle_timeout;
    c.body_timeout = o.body_timeout;
    c.write_timeout = o.body_timeout;
    c.drain_timeout = o.drain_timeout;
    c.server_name = o.server_name;
    c.thread_name = o.thread_name;
    c.max_connections = o.max_connections;
    c.descriptors_per_connection = o.descriptors_per_connection;
    return c;
  }

  const ServerOptions options;
  const AsyncHandler handler;
  StreamServer core;
  std::mutex mu;
  std::condition_variable cv;
  bool started = false;  // guarded by mu
  bool running = false;  // guarded by mu
  uint16_t port = 0;
};

HttpServer::HttpServer(ServerOptions options, RequestHandler handler)
    : impl_(std::make_unique<Impl>(
          options, [h = std::move(handler)](Request&& request, ResponseStreamPtr stream) {
            stream->respond(h(request));
          })) {}

HttpServer::HttpServer(ServerOptions options, AsyncHandler handler)
    : impl_(std::make_unique<Impl>(options, std::move(handler))) {}

HttpServer::~HttpServer() {
  stop();
  // run() may still be draining on another thread; it uses *impl_ until it returns.
  std::unique_lock lock(impl_->mu);
  impl_->cv.wait(lock, [this] { return !impl_->running; });
}

void HttpServer::start() {
  std::lock_guard lock(impl_->mu);
  if (impl_->started) {
    return;
  }
  impl_->port = impl_->core.port(impl_->core.listen(impl_->options.port));
  impl_->started = true;
}

uint16_t HttpServer::port() const {
  return impl_->port;
}

void HttpServer::run(bool handle_signals) {
  start();
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->running) {
      throw std::logic_error("HttpServer::run() is already running");
    }
    impl_->running = true;
  }
  try {
    impl_->core.run(handle_signals);
  } catch (...) {
    std::lock_guard lock(impl_->mu);
    impl_->running = false;  // the destructor waits on this flag
    impl_->cv.notify_all();
    throw;
  }
  std::lock_guard lock(impl_->mu);
  impl_->running = false;
  impl_->cv.notify_all();
}

void HttpServer::stop() {
  impl_->core.stop();
}

void HttpServer::on_shutdown(std::function<void()> hook) {
  impl_->core.on_shutdown(std::move(hook));
}

}  // namespace llmd::http
