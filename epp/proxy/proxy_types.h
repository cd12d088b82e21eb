#pragma once
// What the proxy needs from the rest of the EPP, as small interfaces so the proxy can be tested
// with fakes and the scheduler without sockets.
#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "epp/interface/endpoint.h"
#include "epp/interface/request.h"
#include "epp/interface/rng.h"
#include "epp/objectives/objectives.h"
#include "epp/scheduler/decision_explanation.h"

namespace llmd::epp {

struct PickResult {
  int status = 200;            // != 200: denied (429 shed, 503 no pods, ...)
  std::string detail;          // JSON detail when denied
  std::vector<Endpoint> ranked;  // best first: [0] is the pick, the next one the retry target
  bool predictions_used = false;
  std::string profile;
  // Why this pick: only for a request that asked (SchedulingRequest::explain).
  std::shared_ptr<const DecisionExplanation> explanation;
};

// The x-llmd-decision response header, from a PickResult's explanation.
inline constexpr char kDecisionHeader[] = "x-llmd-decision";
inline constexpr std::size_t kDecisionHeaderMaxCandidates = 10;
inline constexpr std::size_t kDecisionHeaderMaxBytes = 2048;

// Where a request goes, decided before queueing and scheduling: a pool of pods (scheduled by
// the pipeline, may wait in the router queue) or, by a model-level routing rule, an upstream
// base URL (forwarded as is: no scheduling, no queue, no training sample).
struct Route {
  std::string pool;                  // pool target: pool name ("" = the default pool)
  std::optional<Endpoint> upstream;  // URL target: name = the target string, address host:port
  std::string base_path;             // URL target: path prefix ("" or "/openai")
  std::string rule_id;               // the model-level rule that chose the target ("" = none)
  std::string target;                // the rule's target string
  nlohmann::json override_params;    // merged into the forwarded body (null = none)
  // Gateway mode: the gateway's subset hint (ip:port list); candidates outside it are not
  // picked. Empty = the whole pool.
  std::vector<std::string> endpoint_subset;
};

struct Pipeline;
namespace routing {
class LatencyRouter;
}

// One configuration generation: everything a request's scheduling reads from the config,
// swapped as a whole on reload. A request takes the generation once when it arrives and uses
// it to the end, so it never sees the objectives of one file and the pipeline of the next.
// Immutable (the router's response-time statistics are its own, thread-safe state).
struct SchedulingGeneration {
  uint64_t id = 0;
  std::shared_ptr<const ObjectiveTable> objectives;  // never null
  std::shared_ptr<routing::LatencyRouter> router;    // null: no model-level routing rules
  std::shared_ptr<const Pipeline> pipeline;          // never null
};
using SchedulingGenerationPtr = std::shared_ptr<const SchedulingGeneration>;

// Thread-safe; nothing here blocks. generation() and route() answer at once. pick_async() and
// estimate_service_ms_async() may wait for predictions: they return at once and call `done`
// exactly once, through `resume` when the answer comes later (the proxy posts onto the
// request's strand), or inline. `request`, `route`, `config` and `rng` must outlive `done`.
class SchedulingPort {
 public:
  using Resume = std::function<void(std::function<void()>)>;
  virtual ~SchedulingPort() = default;
  // The current configuration generation (never null).
  virtual SchedulingGenerationPtr generation() = 0;
  virtual Route route(const SchedulingRequest& request, const SchedulingGeneration& config) = 0;
  virtual void pick_async(const SchedulingRequest& request, const Route& route,
                          const SchedulingGeneration& config, Rng& rng, Resume resume,
                          std::function<void(PickResult)> done) = 0;
  // Predicted service time (ms) of the request on an idle pod, for the wspt queue policy.
  virtual void estimate_service_ms_async(const SchedulingRequest& request, int64_t max_tokens,
                                         Resume resume, std::function<void(double)> done) = 0;
};

struct CompletedRequest {
  SchedulingRequest request;
  Endpoint pod;  // as seen at dispatch (features of the training sample)
  std::string target_model;  // the model the pod was asked for (after override_params)
  std::string rule_id;       // model-level routing rule ("" = none)
  std::string target;        // that rule's target
  bool upstream_url = false; // forwarded to an upstream URL (not a pool pod)
  bool success = false;
  bool client_aborted = false;
  // The attempt failed before any byte reached the client: the proxy retries on another pod or
  // answers itself (CompletionSink::on_rejected), so this status is not what the client got.
  bool before_response = false;
  int status = 0;
  double ttft_ms = 0;  // from dispatch; streaming: first content chunk; non-streaming: end-to-end
  // Arrival at the EPP -> dispatch to the pod (router queue, scheduling, earlier attempts).
  // Clients see ttft_ms plus this; the pod's latency (what the models learn) is ttft_ms alone.
  double dispatch_delay_ms = 0;
  double e2e_ms = 0;
  bool first_token = false;  // streaming: a content chunk arrived (ttft_ms is measured)
  // Usage's completion_tokens, or (a stream without usage) the content chunks counted.
  std::optional<int64_t> completion_tokens;
  std::optional<int64_t> cached_tokens;
  std::optional<int64_t> prompt_tokens;  // usage's prompt_tokens (the pod's own count)
  // Bytes of the response body relayed to the client, when the response ran to its end.
  std::optional<int64_t> response_bytes;
  int64_t prompt_chars = 0;  // characters of the request's prompt text (the text is not kept)
  // The prompt text the pod's KV cache now holds: the request's prompt text followed by the
  // generated answer, in the form the conversation's next turn will send it ("" = unknown).
  // The prefix index learns it so the next turn matches the pod that holds the answer.
  std::string continuation_prompt;
  int attempts = 1;

  // A stream's time per output token after the first: (e2e - TTFT) / (tokens - 1), for a
  // streamed request with a first token and more than one token that took longer than its TTFT.
  std::optional<double> measured_tpot_ms() const {
    if (!request.streaming || !first_token || !completion_tokens || *completion_tokens <= 1 ||
        !(e2e_ms > ttft_ms)) {
      return std::nullopt;
    }
    return (e2e_ms - ttft_ms) / static_cast<double>(*completion_tokens - 1);
  }
  // The TTFT this request would have had arriving at an average moment of its pod's step: the
  // measured TTFT minus the step-phase delay the prediction added (LatencyPredictionInfo::
  // ttft_phase_ms). What the model, which sees no clock, is trained on and compared with.
  double phase_neutral_ttft_ms() const {
    const double phase = pod.latency ? pod.latency->ttft_phase_ms : 0.0;
    return std::max(0.0, ttft_ms - phase);
  }
};

// Told once per dispatch to a pod (each attempt: a retry is a second dispatch) when it is sent
// (`request`, `pod`, `target_model`, `attempts` and `dispatch_delay_ms` are set), once when its
// first token arrives (streaming responses only, before on_completed; `ttft_ms` and
// `first_token` are set), and exactly once per dispatch on success, failure or client abort.
class CompletionSink {
 public:
  virtual ~CompletionSink() = default;
  virtual void on_dispatched(const CompletedRequest&) {}
  virtual void on_first_token(const CompletedRequest&) {}
  virtual void on_completed(const CompletedRequest& done) = 0;
  // The EPP answered a client itself with `status` (400, 413, 429, 503, or 502 when no pod
  // answered): once per such answer, `model` empty when the body was not read.
  virtual void on_rejected(const std::string& /*model*/, int /*status*/) {}
};

}  // namespace llmd::epp
