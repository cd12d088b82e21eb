#pragma once
// Streaming load client: replays a workload trace against an OpenAI-compatible URL (the EPP or
// one modelsim pod) and records per-request timings. Asio/Beast live only in load_runner.cc.
//
// - Arrivals follow the trace's schedule. Requests of one session are sent in order: a turn
//   waits until the previous turn of its conversation finished (its answer becomes part of the
//   next prompt). A turn that waits reports its send time; `scheduled_ms` keeps the plan.
// - At most `max_in_flight` requests run at once (one keep-alive connection each); more wait in
//   a FIFO backlog. A reused connection the server had closed is retried once on a new one.
// - Bounded: at most `max_requests` requests, and after `max_duration_s` of wall time nothing
//   new is sent and requests still running are aborted (recorded as failed "aborted").
// - Loopback only: the target host must be 127.0.0.0/8, ::1 or localhost.
// One io thread inside run_load(); callbacks (on_record) run on it.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "bench/loadclient/openai.h"
#include "bench/loadclient/report.h"
#include "bench/workload/workload.h"
#include "common/http/message.h"

namespace llmd::loadclient {

struct RunnerConfig {
  std::string url = "http://127.0.0.1:8080";  // base URL; the API path is appended
  RequestOptions request;
  std::vector<http::Header> headers;  // sent with every request
  int64_t max_requests = 10000;       // >= 1
  double max_duration_s = 600;        // wall-clock cap (> 0)
  double request_timeout_s = 300;     // per request (> 0)
  int max_in_flight = 256;            // concurrent requests / connections [1, 4096]
};

struct RunResult {
  std::vector<RequestRecord> records;  // sorted by index
  double wall_ms = 0;
  int64_t not_sent = 0;
  bool stopped_by_wall_cap = false;
};

// Throws std::invalid_argument for a bad URL (non-loopback, not http) or config.
RunResult run_load(const workload::Trace& trace, const RunnerConfig& config,
                   const std::function<void(const RequestRecord&)>& on_record = {});

// True for 127.0.0.0/8, ::1 and localhost.
bool is_loopback_host(const std::string& host);

// One request, synchronously (tests and tools): the whole exchange with body pieces as they
// arrived. Loopback only; bounded by `timeout`.
struct FetchResult {
  int status = 0;                                      // 0 = no response (see error)
  std::vector<http::Header> headers;                   // names lower-case
  std::string body;                                    // de-chunked
  std::vector<std::pair<double, std::string>> pieces;  // (ms since the request was sent, bytes)
  bool chunked = false;
  bool keep_alive = false;
  std::string error;  // transport error; empty when the response completed
  std::string_view header(std::string_view name) const;
};
FetchResult fetch(const std::string& host, uint16_t port, const std::string& method,
                  const std::string& target, const std::string& body = {},
                  const std::vector<http::Header>& headers = {},
                  std::chrono::milliseconds timeout = std::chrono::seconds(30));

}  // namespace llmd::loadclient
