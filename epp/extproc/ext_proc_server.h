#pragma once
// The EPP's gateway mode: Envoy's external processing service
// (envoy.service.ext_proc.v3.ExternalProcessor/Process, one bidirectional gRPC stream per HTTP
// request) plus the gRPC health service (services "liveness", "readiness" and
// "envoy.service.ext_proc.v3.ExternalProcessor", as the endpoint picker protocol names them).
// Each stream is an ExtProcStream on the EPP's own gRPC server (grpc_server.h: HTTP/2 by
// nghttp2 on the EPP's I/O workers, no gRPC library threads): a gateway connection lives on one
// worker, and its streams' messages, the continuations they post (predictions, router queue
// wake-ups) and their answers all run on that thread. No thread waits for a stream, a
// prediction or the router queue.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "epp/extproc/ext_proc_stream.h"
#include "epp/extproc/grpc_server.h"

namespace boost::asio::ssl {
class context;
}
namespace llmd::http {
class IoWorkers;
class BodyBudget;
}  // namespace llmd::http

namespace llmd::epp::extproc {

struct ExtProcServerOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 9002;  // 0 = any free port (see port())
  int threads = 2;       // workers of its own ("epp-extproc-N") when `workers` is null
  // The EPP's I/O workers, shared with the proxy. They must run until the server is destroyed:
  // its destructor waits for the work its streams queued there.
  http::IoWorkers* workers = nullptr;
  ExtProcOptions stream;
  // The process's request-body budget (the proxy's too): a message takes its bytes while the
  // server holds it, a request body while its stream does (ExtProcServices::body_budget). A
  // body that does not fit is refused 503 + Retry-After. Null: no budget.
  std::shared_ptr<http::BodyBudget> body_budget;
  // Largest message; 0 = the body limit + 64 KiB (a BUFFERED body travels in one message).
  std::size_t max_message_bytes = 0;
  // Timeouts, header-list size and per-connection budget share (grpc_server.h).
  GrpcLimits limits;
  // Gateway connections open at once; at the cap the listener waits (connections stay in the
  // kernel's backlog). 0 = half the process's descriptor budget, so peers on this port (a
  // gateway needs a few connections) cannot take the descriptors the proxy port needs.
  std::size_t max_connections = 0;
  // Set: TLS with h2 by ALPN (GrpcServerOptions::tls_context).
  std::function<std::shared_ptr<boost::asio::ssl::context>()> tls_context;
};

class ExtProcServer {
 public:
  ExtProcServer(ExtProcServerOptions options, ExtProcServices services);
  ~ExtProcServer();
  ExtProcServer(const ExtProcServer&) = delete;
  ExtProcServer& operator=(const ExtProcServer&) = delete;

  void start();  // binds and serves on the workers; throws std::runtime_error
  uint16_t port() const;
  // Readiness and the ext_proc service's health (liveness stays SERVING while running).
  void set_ready(bool ready);
  // Stops accepting streams; streams in flight finish for up to `timeout`, then are cancelled.
  void shutdown(std::chrono::milliseconds timeout);
  int active_streams() const;
  // What the limits ended (GrpcLimits); null before start().
  const GrpcCounters* counters() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::epp::extproc
