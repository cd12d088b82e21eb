#pragma once
// A small HTTP/1.1 server that can stream (chunked transfer, for SSE), listening on several
// ports at once (one per simulated pod) on one io_context. Beast/Asio only in stream_server.cc.
//
// Threads: run() drives `io_threads` threads. Each connection lives on its own strand; the
// handler is called there and must not block. Handlers answer through the ResponseStream
// (response_stream.h), possibly later and from another strand.
// Bounds (like a production server): request body limit (413), header limit (431), header and
// body read timeouts, keep-alive idle timeout, a write timeout while the peer does not read,
// and a cap on open connections (new ones beyond it are closed at once).
// While a response is being produced the server keeps reading the socket, so a client that
// disconnects is noticed (ResponseStream::on_disconnect) before the next write.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "bench/modelsim/response_stream.h"
#include "common/http/message.h"

namespace llmd::modelsim {

struct StreamServerOptions {
  std::string host = "127.0.0.1";
  int io_threads = 1;
  std::size_t body_limit = 32 * 1024 * 1024;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds body_timeout{30000};
  std::chrono::milliseconds idle_timeout{30000};
  std::chrono::milliseconds write_timeout{30000};
  std::size_t max_connections = 8192;
  std::string server_name = "modelsim";
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
      std::function<void(std::size_t listener, http::Request&& request, ResponseStreamPtr stream)>;

  StreamServer(StreamServerOptions options, Handler handler);
  ~StreamServer();
  StreamServer(const StreamServer&) = delete;
  StreamServer& operator=(const StreamServer&) = delete;

  // Binds host:port (0 = any free port) and starts accepting once run() runs. Returns the
  // listener index. Throws std::runtime_error naming the address on failure.
  std::size_t listen(uint16_t port);
  uint16_t port(std::size_t listener) const;

  StrandPtr make_strand();

  // Runs the io threads until stop() or SIGINT/SIGTERM (when handle_signals). Blocks.
  void run(bool handle_signals = true);
  void stop();  // thread-safe, idempotent

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::modelsim
