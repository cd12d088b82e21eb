#pragma once
// GrpcServer: the EPP's gRPC server core, HTTP/2 (nghttp2, cleartext with prior knowledge, as
// Envoy's ext_proc cluster speaks it) on the EPP's own I/O workers.
//
// Why not the gRPC library's server: in gateway mode it ran every stream's messages through its
// own polling and executor threads (8-12 of them) and handed each to an EPP worker and back;
// perf put half of the EPP's CPU in those threads, most of it in the kernel (wake-ups). Here a
// connection lives on one worker, as a proxy connection does: its frames are read, its calls
// run, their prediction calls go out and come back, and their answers are written, all on that
// one thread. Envoy's own ext_proc client is a few HTTP/2 connections with one stream per
// HTTP request, so the streams spread over the workers with the connections.
//
// The protocol is gRPC over HTTP/2 as specified (PROTOCOL-HTTP2.md): POST, content-type
// application/grpc, length-prefixed messages, status in trailers (trailers-only for a call that
// ends before any message), grpc-timeout as the call's deadline. Messages are not compressed
// (the server announces grpc-accept-encoding: identity; a grpc-encoding other than identity
// ends the call with UNIMPLEMENTED, a message with the compressed flag with INTERNAL, as gRPC's
// own servers answer).
//
// Parts: the listener (common/http/listener.h, shared with the HTTP/1 StreamServer), one
// Http2Connection per connection (http2_connection.h, nghttp2), the framing
// (grpc_framing.h, pure) and, in grpc_server.cc, the calls.
//
// Bounds: a message over `max_message_bytes` ends its call with RESOURCE_EXHAUSTED before it is
// buffered, one that does not fit the message budget goes to the handler's
// on_message_over_budget() unread; a connection silent from the start is closed after
// `handshake_timeout`; `max_concurrent_streams` per connection (SETTINGS); connections take
// their descriptor from the process's DescriptorBudget; the timeouts, header-list size and
// per-connection budget share of GrpcLimits and a place under `max_connections`
// (at either limit the listener waits, as the HTTP server's does); a new connection goes to the
// worker with the fewest; unknown methods end with UNIMPLEMENTED; bytes that are not HTTP/2
// close the connection.
//
// Threads: a call's handler and the GrpcCall it is given are used on the call's worker only
// (GrpcCall::post gets there from any thread). start(), shutdown() and the destructor are the
// owner's (not a worker thread); the workers must run until the destructor returns.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "epp/extproc/grpc_status.h"
#include "epp/extproc/http1_probe.h"

namespace boost::asio::ssl {
class context;
}
namespace llmd::http {
class IoWorkers;
class BodyBudget;
}  // namespace llmd::http

namespace llmd::epp::extproc {

// One call (one HTTP/2 stream) as its handler sees it. On the call's worker only, except post().
class GrpcCall {
 public:
  virtual ~GrpcCall() = default;
  // Queues one serialized message to the peer; dropped once the call has ended.
  virtual void send(std::string message) = 0;
  // Ends the call with `status` after the messages sent before it. Later sends are dropped.
  virtual void finish(GrpcStatus status) = 0;
  // True once the call has ended (finished, cancelled, reset or its connection gone).
  virtual bool ended() const = 0;
  // Runs `fn` on the call's worker (from any thread); dropped once the server is destroyed.
  virtual void post(std::function<void()> fn) = 0;
};

// What the server tells a call's handler, on the call's worker, in the order it happened.
class GrpcCallHandler {
 public:
  virtual ~GrpcCallHandler() = default;
  virtual void on_message(std::string message) = 0;
  // The client sent its last message.
  virtual void on_half_close() = 0;
  // The call ended without the handler's finish(): reset by the client, its deadline passed,
  // a bad message, the connection went away or the server shut down. Nothing sent goes out.
  virtual void on_cancel() = 0;
  // A message of `bytes` did not fit the message budget: it is dropped unread. True: the handler
  // answered and the call goes on; false (default): the call ends with RESOURCE_EXHAUSTED.
  virtual bool on_message_over_budget(std::size_t bytes) {
    (void)bytes;
    return false;
  }
};

// What one peer may hold and for how long (the ext_proc port's extProc.* config keys; the
// defaults are Envoy's HTTP/2 codec's where it has one). Each limit that ends something counts
// it in GrpcCounters. 0 for a duration = off.
struct GrpcLimits {
  // A connection whose preface is done and that has no open stream this long gets GOAWAY and is
  // closed (Envoy's idle_timeout and its default, 1 h: a gateway's long-lived connection is
  // left alone, a preface-only peer costs ~75 KB until then and a descriptor of the budget).
  std::chrono::milliseconds idle_timeout{3600000};
  // A stream with no frame either way this long is reset (CANCEL): Envoy's
  // stream_idle_timeout, 5 min.
  std::chrono::milliseconds stream_idle_timeout{300000};
  // A connection this old gets GOAWAY (its streams finish) and is closed `max_connection_age_grace`
  // later (Envoy's max_connection_duration and drain; off by default, as there).
  std::chrono::milliseconds max_connection_age{0};
  std::chrono::milliseconds max_connection_age_grace{300000};
  // A connection the peer has sent nothing on this long gets a PING; no byte back within the
  // timeout closes it (a gateway gone without a FIN). grpc-go's server defaults, upstream's: 2 h
  // and 20 s.
  std::chrono::milliseconds keepalive_interval{7200000};
  std::chrono::milliseconds keepalive_timeout{20000};
  // SETTINGS_MAX_HEADER_LIST_SIZE, advertised and enforced (name + value + 32 per field, per
  // header block): a stream over it is reset. Envoy's max_request_headers_kb is 60 KiB.
  uint32_t max_header_list_bytes = 64 * 1024;
  // The share of the message budget one connection may hold at once (its streams' messages
  // being received together), but never less than one message of `max_message_bytes`. 1 (the
  // default) = no per-connection share: a gateway multiplexes all its requests on one or two
  // connections, so a share of 0.25 refused 12 of 16 concurrent 16-MiB prompts (epp_memory,
  // gateway mode). Below 1 only where several gateways share one EPP.
  double connection_budget_share = 1;
  // Envoy's watermarks on what the EPP has queued for a peer that does not read it: a stream
  // whose response has more than `stream_buffer_bytes` waiting gets no more of its request
  // (its flow-control window stays shut) until half of it has gone, and a connection whose
  // streams together have more than `connection_buffer_bytes` waiting gets nothing more on any
  // of them. Reading is never paused (the peer's WINDOW_UPDATEs must arrive), so what such a
  // peer can make the EPP hold is the limit plus one receive window (4 MiB per stream, 16 MiB
  // per connection) and what the handlers answer to it.
  std::size_t stream_buffer_bytes = 4 * 1024 * 1024;
  std::size_t connection_buffer_bytes = 16 * 1024 * 1024;
};

// What the limits ended, since the server started (read from any thread).
struct GrpcCounters {
  std::atomic<uint64_t> handshake_timeouts{0};       // no complete preface + SETTINGS in time
  std::atomic<uint64_t> idle_closes{0};              // idle_timeout
  std::atomic<uint64_t> age_closes{0};               // max_connection_age (GOAWAY sent)
  std::atomic<uint64_t> keepalive_timeouts{0};       // a PING unanswered
  std::atomic<uint64_t> stream_idle_resets{0};       // stream_idle_timeout
  std::atomic<uint64_t> header_list_resets{0};       // max_header_list_bytes
  std::atomic<uint64_t> messages_over_budget{0};     // the budget or the connection's share used
  std::atomic<uint64_t> stream_input_pauses{0};      // stream_buffer_bytes reached
  std::atomic<uint64_t> connection_input_pauses{0};  // connection_buffer_bytes reached
};

struct GrpcServerOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 0;  // 0 = any free port (see port())
  std::size_t max_message_bytes = 4 * 1024 * 1024;
  uint32_t max_concurrent_streams = 10000;  // per connection
  // A new connection that has not sent the preface and its SETTINGS within this is closed (its
  // descriptor is the budget's).
  std::chrono::milliseconds handshake_timeout{10000};
  // Set: a message takes its bytes from it as they arrive (an announced length reserves
  // nothing), before they are buffered, and gives them back as its handler gets it or its
  // stream ends (null: no budget).
  std::shared_ptr<http::BodyBudget> message_budget;
  GrpcLimits limits;
  // Set: a connection that does not open with the HTTP/2 preface is one HTTP/1.1 request,
  // answered by it and closed (http1_probe.h): the health port's HTTP probes.
  Http1Handler http1;
  // Set: connections are TLS, h2 chosen by ALPN; called per connection, so a reloaded
  // certificate serves the next one.
  std::function<std::shared_ptr<boost::asio::ssl::context>()> tls_context;
  // false: connections take no descriptor from the process's budget (the health port, which
  // must answer while clients hold every descriptor the budget gives); then cap them with
  // max_connections.
  bool take_descriptors = true;
  std::size_t max_connections = 0;  // open at once; 0 = no cap (at the cap accept waits)
};

class GrpcServer {
 public:
  // Creates the call's handler; it is destroyed when the call has ended and been told so.
  using Method = std::function<std::unique_ptr<GrpcCallHandler>(std::shared_ptr<GrpcCall>)>;

  GrpcServer(GrpcServerOptions options, http::IoWorkers& workers);
  ~GrpcServer();  // shutdown(0), then waits for the work posted to the workers
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  // `path` is "/package.Service/Method". Before start().
  void add_method(const std::string& path, Method method);
  // Binds and accepts on the workers (started here if they are not running). Throws
  // std::runtime_error naming the address.
  void start();
  uint16_t port() const;
  // Stops accepting and tells every connection to start no new calls (GOAWAY); calls in flight
  // run for up to `timeout`, then are cancelled and the connections closed. Blocks; idempotent.
  void shutdown(std::chrono::milliseconds timeout);
  // Calls open now (all methods).
  int open_calls() const;
  const GrpcCounters& counters() const;

  struct Impl;  // grpc_server.cc's; the connections and calls hold it

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace llmd::epp::extproc
