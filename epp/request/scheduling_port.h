#pragma once
// What an ingress (the HTTP proxy, the ext_proc gateway port) needs from the scheduling side of
// the EPP: the route, the pick and the configuration generation behind one small interface, so
// each transport can be tested with fakes and the scheduler without sockets.
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
  int status = 200;              // != 200: denied (429 shed, 503 no pods, ...)
  std::string detail;            // JSON detail when denied
  std::vector<Endpoint> ranked;  // best first: [0] is the pick, the next one the retry target
  bool predictions_used = false;
  std::string profile;
  // Why this pick: only for a request that asked (SchedulingRequest::explain).
  std::shared_ptr<const DecisionExplanation> explanation;
};

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

}  // namespace llmd::epp
