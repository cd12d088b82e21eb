#pragma once
// The project's one HTTP/1.1 server core (Beast/Asio only in stream_server.cc). Handlers answer
// through a ResponseStream (response_stream.h): a whole response, or a streamed one (chunked,
// for SSE), at once or later and from any thread. HttpServer (server.h) is this core with a
// plain request -> response handler; modelsim serves its pods with it directly.
//
// Threads: Envoy's worker model (io_workers.h): `io_threads` workers, each an io_context with one
// thread. A connection is placed on the worker with the fewest and lives there (listener.h,
// shared with the gRPC server); the handler is called on that worker's thread
// (IoWorkers::current() says which) and must not block.
// Bounds (like a production server): request body limit (413, read to the end first so the
// client sees it), header limit (431), header and body read timeouts, keep-alive idle timeout,
// a write timeout while the peer does not read; the listener's cap on open connections and the
// process's descriptor budget (at either, new connections wait in the kernel's backlog) with
// accept back-off. HTTP/1.0 clients get
// their streamed answers without chunking, ended by the close.
// While a response is being produced the server keeps reading the socket, so a client that
// disconnects is noticed (ResponseStream::on_disconnect) before the next write.
// stop() stops accepting, closes idle connections, lets answers in progress finish for up to
// `drain_timeout`, runs the on_shutdown hooks and returns from run().
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/http/message.h"
#include "common/http/response_stream.h"

namespace llmd::http {

class IoWorkers;   // io_workers.h
class BodyBudget;  // body_budget.h

struct StreamServerOptions {
  std::string host = "127.0.0.1";
  int io_threads = 1;
  std::size_t body_limit = 32 * 1024 * 1024;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{30000};
  std::chrono::milliseconds idle_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  std::chrono::milliseconds drain_timeout{5000};
  std::size_t max_connections = 8192;  // open at once; at the cap accept waits (0: no cap)
  // Descriptors one accepted connection will hold (the EPP's proxy: 2, its upstream too), taken
  // from the process's DescriptorBudget before it is accepted. 0: not counted, for health and
  // metrics listeners that must answer while clients hold the budget (give them a small
  // max_connections instead).
  std::size_t descriptors_per_connection = 1;
  // A new connection's wait for its first request byte: the idle timeout (true: client pools
  // open connections ahead of use, as the EPP's clients do) or the header timeout (false: a
  // silent new connection is dropped as fast as a slow header).
  bool fresh_connections_idle = false;
  std::string server_name = "llmd";
  std::string thread_name;  // its own workers' names, "<name>-<i>" (top -H); "" = server_name
  // The body of the server's own error answers (400, 413, 431, 500). Default: the sidecars'
  // {"detail": ...}; modelsim answers in vLLM's error shape.
  std::function<Response(int status, const std::string& message)> error_response;
  // Request bodies held at once (Content-Length, from the headers until the answer is written),
  // across all connections; a request that would pass it gets 503 + Retry-After before its
  // body is read. A chunked body counts each chunk as it is announced (503 at the chunk that
  // does not fit). 0 = no budget.
  std::size_t body_budget = 0;
  // Set: the budget is this one, shared with the process's other ingresses (body_budget is then
  // not used).
  std::shared_ptr<BodyBudget> shared_body_budget;
  // Told of every answer the server writes itself (400, 413, 431, 503), e.g. for request
  // metrics. Called on an io thread.
  std::function<void(int status)> on_error_answer;
};

// A serialised executor with one re-armable timer, on the server's io_context. Used by pods
// to own their engine without locks. Thread-safe.
class Strand {
 public:
  virtual ~Strand() = default;
  virtual void post(std::function<void()> fn) = 0;
  // Runs `fn` on the strand at `when`, replacing a previously armed timer (which is dropped).
  virtual void arm(std::chrono::steady_clock::time_point when, std::function<void()> fn) = 0;
  virtual void disarm() = 0;
  // Runs `fn` on the strand after `delay` (one-shot; independent of arm()).
  virtual void post_after(std::chrono::milliseconds delay, std::function<void()> fn) = 0;
};
using StrandPtr = std::unique_ptr<Strand>;

class StreamServer {
 public:
  // `listener` is the index returned by listen() for the port the request came in on.
  using Handler =
      std::function<void(std::size_t listener, Request&& request, ResponseStreamPtr stream)>;

  StreamServer(StreamServerOptions options, Handler handler);
  // The same on workers the caller owns (the EPP's proxy runs its exchanges with the pods on
  // them); `io_threads` is then theirs. run() starts them if they are not running and leaves
  // them running.
  StreamServer(StreamServerOptions options, Handler handler, IoWorkers& workers);
  ~StreamServer();
  StreamServer(const StreamServer&) = delete;
  StreamServer& operator=(const StreamServer&) = delete;

  // Binds host:port (0 = any free port) and starts accepting once run() runs. Returns the
  // listener index. Throws std::runtime_error naming the address on failure.
  std::size_t listen(uint16_t port);
  uint16_t port(std::size_t listener) const;

  // A strand on the next worker in turn.
  StrandPtr make_strand();

  // Runs the io threads until stop() or SIGINT/SIGTERM (when handle_signals). Blocks.
  void run(bool handle_signals = true);
  // Thread-safe, idempotent; may be called from a handler. `drain` replaces the options'
  // drain_timeout for this stop.
  void stop(std::optional<std::chrono::milliseconds> drain = std::nullopt);
  // Called once on the stop path after the drain, before the io threads are joined.
  void on_shutdown(std::function<void()> hook);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::http
