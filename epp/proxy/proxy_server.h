#pragma once
// The EPP's data plane: an HTTP/1.1 reverse proxy for /v1/completions and
// /v1/chat/completions. Per request: read (bounded) -> the request flow (epp/request: parse,
// route, queue, schedule, retry decision, response scanning and bookkeeping) -> forward to the
// picked pod -> relay the response as it streams (SSE chunk by chunk), adding
// x-gateway-destination-endpoint. A connect failure or a 5xx before any byte reached the client
// is retried once on the next-ranked pod (RequestFlow::next_pod()). The client side (listener,
// connection limits, header timeout, 413/431, body budget, HTTP/1.0, drain) is the project's one
// server core (common/http/stream_server.h); the pod side (keep-alive pool per pod, connect /
// first-byte / idle timeouts, a body read only as fast as the client takes it) is its one client
// core (common/http/client_core.h). Beast/Asio stay in the .cc files.
//
// Threading: `io_threads` workers (common/http/io_workers.h), each an io_context with one thread,
// serve both sides; a request is a coroutine on its connection's worker, which also runs its
// scheduling and its exchange with the pod (a keep-alive pool per pod on each worker): waiting
// for predictions suspends it (the predictor client's callback posts the cycle back), so no
// thread blocks on a predictor. Each request's slots and tickets belong to its RequestFlow.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "epp/datastore/pod_registry.h"
#include "epp/request/completed_request.h"
#include "epp/request/scheduling_port.h"

namespace prometheus {
class Counter;
}

namespace llmd::http {
class IoWorkers;   // common/http/io_workers.h
class BodyBudget;  // common/http/body_budget.h
}  // namespace llmd::http

namespace llmd::epp {

struct ProxyOptions {
  std::string host = "0.0.0.0";
  uint16_t port = 8080;
  int io_threads = 2;
  std::size_t body_limit = 16 * 1024 * 1024;
  // Request bodies held at once (from their headers to the end of their response), across all
  // connections; a request that would exceed it gets 503 + Retry-After before its body is read.
  // Bounds the memory that large concurrent uploads can take (a parsed body costs a few times
  // its size).
  std::size_t body_budget = 256 * 1024 * 1024;
  // Set: the process's budget, shared with the gateway port (body_budget is then its size).
  std::shared_ptr<llmd::http::BodyBudget> shared_body_budget;
  std::chrono::milliseconds header_timeout{10000};
  std::chrono::milliseconds idle_timeout{60000};
  std::chrono::milliseconds upstream_connect_timeout{2000};
  std::chrono::milliseconds upstream_first_byte_timeout{30000};
  std::chrono::milliseconds upstream_idle_timeout{60000};
  // Connections to pods opened, and kept-alive ones reused (null: not counted).
  prometheus::Counter* upstream_opened = nullptr;
  prometheus::Counter* upstream_reused = nullptr;
  bool default_prediction = true;  // x-prediction-based-scheduling when absent
  bool forward_priority = true;    // soft priority -> vLLM `priority` (see upstream_body)
  // Active-passive replicas: nullopt while this replica serves, else why it does not (a standby
  // of the leader election); every request then gets 503 with that message. Called once per
  // request, from the I/O threads: thread-safe and cheap. Null: always serves.
  std::function<std::optional<std::string>()> not_serving;
  // x-llmd-debug asks for the scheduling decision in the x-llmd-decision response header.
  bool allow_debug_header = false;
};

class AdmissionGate;  // epp/queue/admission_gate.h

class ProxyServer {
 public:
  // `gate` (may be null: no router queue) outlives the server. `workers` (null: the server's
  // own, `io_threads` of them) are the owner's, who keeps them running until the server is
  // destroyed (e.g. because the predictor client calls back on them too).
  ProxyServer(ProxyOptions options, SchedulingPort& scheduler, PodRegistry& registry,
              CompletionSink& sink, AdmissionGate* gate = nullptr,
              llmd::http::IoWorkers* workers = nullptr);
  ~ProxyServer();
  void start();  // binds; throws std::runtime_error
  uint16_t port() const;
  // Kept-alive connections to pods waiting for their next request.
  std::size_t idle_upstream_connections() const;
  void run();   // blocks until stop()
  void stop();  // thread-safe, idempotent
  // Graceful stop, blocking (call from a thread that does not run the server): stops
  // accepting, answers queued requests and new requests on kept-alive connections 503, lets
  // requests in flight (streams included) finish for up to `timeout`, then stop().
  void drain(std::chrono::milliseconds timeout);
  int active_requests() const;  // requests read and not yet answered in full

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::epp
