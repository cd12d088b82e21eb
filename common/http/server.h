#pragma once
// HTTP/1.1 server with a plain request -> response handler: the project's one server core
// (stream_server.h, Beast/Asio only in its .cc) with a handler that answers at once.
// `io_threads` workers (io_workers.h), each an event loop on one thread; a connection lives on
// one of them, so a connection's handlers never overlap. The handler is called on an io thread and
// must not block for long (no training, no network calls). Every read is bounded: body limit ->
// 413, header limit -> 431, header read timeout and keep-alive idle timeout close the connection.
// stop() stops accepting, lets in-flight requests finish (bounded by drain_timeout), runs the
// on_shutdown hooks and returns from run().
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/http/message.h"
#include "common/http/response_stream.h"

namespace llmd::http {

struct ServerOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 0;  // 0 = pick a free port; see HttpServer::port()
  int io_threads = 2;
  std::size_t body_limit = 16 * 1024 * 1024;
  // Request bodies held at once (see StreamServerOptions::body_budget); 0 = no budget.
  std::size_t body_budget = 0;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds idle_timeout{60000};
  std::chrono::milliseconds body_timeout{30000};
  std::chrono::milliseconds drain_timeout{5000};
  std::string server_name = "llmd";
  std::string thread_name;  // the workers' names, "<name>-<i>" (top -H); "" = server_name
  // See StreamServerOptions: health and metrics listeners take 0 descriptors from the process's
  // budget and a small max_connections.
  std::size_t max_connections = 8192;
  std::size_t descriptors_per_connection = 1;
};

class HttpServer {
 public:
  using RequestHandler = std::function<Response(Request&)>;
  // A handler that may answer later, from any thread (e.g. after a background job).
  using AsyncHandler = std::function<void(Request&&, ResponseStreamPtr)>;

  HttpServer(ServerOptions options, RequestHandler handler);
  HttpServer(ServerOptions options, AsyncHandler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; throws std::runtime_error with a clear message on failure.
  void start();
  // Port actually bound (valid after start()).
  uint16_t port() const;
  // Runs the io threads until stop() or, when handle_signals, SIGINT/SIGTERM. Blocks.
  void run(bool handle_signals = true);
  // Thread-safe, idempotent. Can be called from any thread, including a handler.
  void stop();
  // Called once on the signal/stop path before the io threads are joined (e.g. final snapshot).
  void on_shutdown(std::function<void()> hook);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::http
