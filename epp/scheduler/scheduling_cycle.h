#pragma once
// The scheduling entry point for one request: producers -> admitters -> profile -> on_picked.
// Called concurrently by the proxy's request strands (or the simulator's event loop); each
// cycle works on its own candidates (views of the pool snapshot's pods). Holds the current
// pipeline generation behind a mutex only long enough to copy the shared_ptr.
//
// One code path: schedule() is schedule_async() with producers that answer inline (the
// simulator's in-process model, tests) and the result taken on return. In the EPP a producer
// that waits for predictions hands the cycle back through `resume` when they arrive, so no
// thread waits for a predictor.
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epp/interface/rng.h"
#include "epp/scheduler/decision_explanation.h"
#include "epp/scheduler/pipeline.h"

namespace llmd::epp {

struct SchedulerMetrics;
class DecisionLog;

struct PodScore {
  PodInfoConstPtr pod;                      // the candidate's (shared, never copied)
  double score = 0;                         // weighted sum of the profile's clamped scorer outputs
  std::optional<double> predicted_ttft_ms;  // when the cycle had a prediction for the pod
  const std::string& name() const { return pod->name; }
};

struct ScheduleResult {
  enum class Outcome { kPicked, kDenied, kNoCandidates };
  Outcome outcome = Outcome::kNoCandidates;
  int status = 503;    // 200 picked, admitter's status (429) denied, 503 no candidates
  std::string reason;  // for the JSON detail of a denial / 503
  std::string profile;
  // The chosen pod with the attributes producers wrote (prefix match, prediction): name and
  // address to forward to, and the dispatch-time features for training feedback.
  std::optional<Endpoint> picked;
  std::optional<Endpoint> fallback;  // best other scored pod, for the single retry
  std::vector<PodScore> scores;      // every pod that reached the scorers
  bool predictions_used = false;     // some candidate had a latency prediction
  // Set only for a request that asked (SchedulingRequest::explain): why this pod.
  std::shared_ptr<const DecisionExplanation> explanation;

  bool ok() const { return outcome == Outcome::kPicked; }
};

class SchedulingCycle {
 public:
  // `decision_log` (may be null: no decision log) samples the cycles it writes a line for.
  explicit SchedulingCycle(PipelineConstPtr pipeline, SchedulerMetrics* metrics = nullptr,
                           DecisionLog* decision_log = nullptr);

  // Reload: later schedule() calls use `pipeline`; calls in flight keep the old generation.
  void set_pipeline(PipelineConstPtr pipeline);
  PipelineConstPtr pipeline() const;

  // `profile` empty = the pipeline's default (first) profile.
  ScheduleResult schedule(const SchedulingRequest& request, std::vector<Endpoint> candidates,
                          Rng& rng, std::string_view profile = {}) const;
  // The same with the generation the caller took when the request arrived (the EPP's
  // SchedulingGeneration), so a reload mid-request cannot mix configurations.
  ScheduleResult schedule(const PipelineConstPtr& pipeline, const SchedulingRequest& request,
                          std::vector<Endpoint> candidates, Rng& rng,
                          std::string_view profile = {}) const;

  using ScheduleCallback = std::function<void(ScheduleResult)>;
  // Continues a cycle after an asynchronous producer finished (e.g. posts it onto the
  // request's strand). Empty: continue on the thread that finished the producer.
  using Resume = std::function<void(std::function<void()>)>;
  // `done` runs exactly once, with the result. `request` and `rng` must outlive that call
  // (the caller's request state owns them); the candidates and the pipeline are held by the
  // cycle.
  void schedule_async(PipelineConstPtr pipeline, const SchedulingRequest& request,
                      std::vector<Endpoint> candidates, Rng& rng, Resume resume,
                      ScheduleCallback done, std::string_view profile = {}) const;

  // The pod that schedule() picked has answered: `continued` is the request with its prompt
  // text continued by the generated answer. Tells every producer of the current generation.
  void on_response_complete(const SchedulingRequest& continued, const Endpoint& pod) const;

 private:
  struct Run;
  void run_producer(std::shared_ptr<Run> cycle, std::size_t index) const;
  void finish_run(Run& cycle) const;
  // Hands the result to the caller, after the decision log line of a sampled cycle.
  void deliver(Run& cycle) const;

  mutable std::mutex mu_;
  PipelineConstPtr pipeline_;  // guarded by mu_
  SchedulerMetrics* metrics_;  // may be null; outlives the scheduling cycle
  DecisionLog* decision_log_;  // may be null; outlives the scheduling cycle
};

}  // namespace llmd::epp
