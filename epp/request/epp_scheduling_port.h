#pragma once
// The proxy's view of the control plane: model-level routing rules pick a target (a pool or an
// upstream URL), the scheduling cycle schedules a pool's candidates, objectives fill request
// defaults, and completed requests feed the rules' response-time windows. One instance per process;
// thread-safe (each piece has its own lock; reload swaps whole generations).
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>

#include "epp/datastore/pod_registry.h"
#include "epp/interface/prediction_source.h"
#include "epp/objectives/objectives.h"
#include "epp/request/completed_request.h"
#include "epp/request/scheduling_port.h"
#include "epp/routing/latency_router.h"
#include "epp/scheduler/scheduling_cycle.h"

namespace llmd::epp {

class EppSchedulingPort final : public SchedulingPort, public CompletionSink {
 public:
  using Now = std::function<std::chrono::steady_clock::time_point()>;
  // `now`: the clock of candidate staleness, rule statistics and recorded predictions
  // (default steady_clock; the virtual-time benchmark passes its virtual clock).
  EppSchedulingPort(SchedulingCycle& cycle, PodRegistry& registry, PredictionSource* predictions,
                    Now now = {});

  // Start-up and reload: one new generation of objectives, routing rules (nullopt = none) and
  // pipeline, published at once (requests in flight keep theirs). Rule statistics of
  // (rule, target) pairs that survive are kept. Also makes `pipeline` the scheduling cycle's
  // current one (for the callbacks after a response).
  void set_config(std::shared_ptr<const ObjectiveTable> objectives,
                  std::optional<routing::LoadBalancingConfig> rules, PipelineConstPtr pipeline);
  // Only the objectives changed (the cluster's InferenceObjectives): a new generation with the
  // current rules and pipeline. Writers (this and set_config) run on one thread at a time (the
  // app's timer thread).
  void set_objectives(std::shared_ptr<const ObjectiveTable> objectives);
  std::shared_ptr<routing::LatencyRouter> latency_router() const;

  // SchedulingPort
  SchedulingGenerationPtr generation() override;
  Route route(const SchedulingRequest& request, const SchedulingGeneration& config) override;
  void pick_async(const SchedulingRequest& request, const Route& route,
                  const SchedulingGeneration& config, Rng& rng, Resume resume,
                  std::function<void(PickResult)> done) override;
  void estimate_service_ms_async(const SchedulingRequest& request, int64_t max_tokens,
                                 Resume resume, std::function<void(double)> done) override;

  // CompletionSink: the prefix index learns each answer; response times of rule-routed requests.
  void on_completed(const CompletedRequest& done) override;

  // Candidates of one pool (pods labelled `pool: <name>`; "" = pods without the label).
  std::vector<Endpoint> pool_candidates(const std::string& pool) const;

 private:
  PickResult to_pick_result(const SchedulingRequest& request, const Route& route, ScheduleResult r);

  SchedulingCycle& cycle_;
  PodRegistry& registry_;
  PredictionSource* predictions_;  // null: no predictor configured
  Now now_;
  mutable std::mutex mu_;  // guards only the pointer swap
  SchedulingGenerationPtr generation_;
};

}  // namespace llmd::epp
