#pragma once
// The EPP's gateway mode: Envoy's external processing service
// (envoy.service.ext_proc.v3.ExternalProcessor/Process, one bidirectional gRPC stream per HTTP
// request) plus the gRPC health service (services "liveness", "readiness" and
// "envoy.service.ext_proc.v3.ExternalProcessor", as the endpoint picker protocol names them).
// Each stream is an ExtProcStream on gRPC's callback API: no thread waits for a stream, a
// prediction or the router queue. Each stream runs on a strand of its own: a message from
// gRPC that finds its strand idle runs at once on gRPC's callback thread (no hop, no context
// switch); everything else (a message behind a busy strand, the predictor client's answers,
// the router queue's wake-ups) is posted to the EPP's I/O workers (or a small pool of threads),
// so no stream logic or scheduling runs on the predictor client's or the gate's threads.
// gRPC and Asio headers stay in ext_proc_server.cc.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "epp/extproc/ext_proc_stream.h"

namespace llmd::http {
class IoWorkers;
}

namespace llmd::epp::extproc {

struct ExtProcServerOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 9002;  // 0 = any free port (see port())
  int threads = 2;       // run the strands' posted work (parsing, scheduling, the mapping)
  // The EPP's I/O workers: set, the strands run on them instead of `threads` of their own (a
  // stream stays on one worker). They must run until the server is destroyed: its destructor
  // waits for the work its streams queued there.
  http::IoWorkers* workers = nullptr;
  ExtProcOptions stream;
};

class ExtProcServer {
 public:
  ExtProcServer(ExtProcServerOptions options, ExtProcServices services);
  ~ExtProcServer();
  ExtProcServer(const ExtProcServer&) = delete;
  ExtProcServer& operator=(const ExtProcServer&) = delete;

  void start();  // binds and serves on gRPC's threads; throws std::runtime_error
  uint16_t port() const;
  // Readiness and the ext_proc service's health (liveness stays SERVING while running).
  void set_ready(bool ready);
  // Stops accepting streams; streams in flight finish for up to `timeout`, then are cancelled.
  void shutdown(std::chrono::milliseconds timeout);
  int active_streams() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::epp::extproc
