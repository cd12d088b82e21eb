#pragma once
// What the proxy needs from the rest of the EPP, as small interfaces so the proxy can be tested
// with fakes and the scheduler without sockets.
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "epp/interface/endpoint.h"
#include "epp/interface/request.h"

namespace llmd::epp {

struct PickResult {
  int status = 200;            // != 200: denied (429 shed, 503 no pods, ...)
  std::string detail;          // JSON detail when denied
  std::vector<Endpoint> ranked;  // best first: [0] is the pick, the next one the retry target
  bool predictions_used = false;
  std::string profile;
};

// Blocking, thread-safe; runs on a scheduling thread (may wait for predictions).
class SchedulingPort {
 public:
  virtual ~SchedulingPort() = default;
  virtual PickResult pick(const SchedulingRequest& request) = 0;
};

struct CompletedRequest {
  SchedulingRequest request;
  Endpoint pod;  // as seen at dispatch (features of the training sample)
  bool success = false;
  bool client_aborted = false;
  int status = 0;
  double ttft_ms = 0;  // streaming: first content chunk; non-streaming: end-to-end
  double e2e_ms = 0;
  std::optional<int64_t> completion_tokens;
  std::optional<int64_t> cached_tokens;
  int attempts = 1;
};

// Told exactly once per dispatched request, on success, failure or client abort.
class CompletionSink {
 public:
  virtual ~CompletionSink() = default;
  virtual void on_completed(const CompletedRequest& done) = 0;
};

}  // namespace llmd::epp
