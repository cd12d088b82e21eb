#include "epp/scheduler/scheduling_cycle.h"

#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "epp/scheduler/decision_log.h"
#include "epp/scheduler/metrics.h"

namespace llmd::epp {
namespace {

void count(prometheus::Counter* c) {
  if (c != nullptr) {
    c->Increment();
  }
}

bool predicts_latency(const Pipeline& pipeline) {
  for (const auto& p : pipeline.producers) {
    for (AttributeKey k : p.plugin->produces()) {
      if (k == AttributeKey::kLatencyPrediction) {
        return true;
      }
    }
  }
  return false;
}

// Why a cycle ranked its candidates without (all) predictions; "" when it had every one or the
// pipeline never asks for them.
std::string prediction_fallback(const Pipeline& pipeline, const SchedulingRequest& request,
                                const std::vector<CandidateDecision>& candidates) {
  if (pipeline.predictions_ignored) {
    return "the pipeline ignores predictions (composite-only, or predictInProduce: false)";
  }
  if (!predicts_latency(pipeline)) {
    return "";
  }
  if (!request.prediction_enabled) {
    return "predictions off for this request (x-prediction-based-scheduling or its default)";
  }
  std::size_t with = 0;
  for (const auto& c : candidates) {
    with += c.predicted_ttft_ms.has_value() ? 1 : 0;
  }
  if (with == 0) {
    return "no predictions (predictor absent, failing or past the deadline): scored without";
  }
  if (with < candidates.size()) {
    return fmt::format("predictions for {} of {} candidates", with, candidates.size());
  }
  return "";
}

}  // namespace

SchedulingCycle::SchedulingCycle(PipelineConstPtr pipeline, SchedulerMetrics* metrics,
                                 DecisionLog* decision_log)
    : pipeline_(std::move(pipeline)), metrics_(metrics), decision_log_(decision_log) {}

void SchedulingCycle::set_pipeline(PipelineConstPtr pipeline) {
  std::lock_guard lock(mu_);
  pipeline_ = std::move(pipeline);
}

PipelineConstPtr SchedulingCycle::pipeline() const {
  std::lock_guard lock(mu_);
  return pipeline_;
}

ScheduleResult SchedulingCycle::schedule(const SchedulingRequest& request,
                                         std::vector<Endpoint> candidates, Rng& rng,
                                         std::string_view profile_name) const {
  return schedule(this->pipeline(), request, std::move(candidates), rng, profile_name);
}

// One scheduling cycle, from its candidates to its result. Owned by the chain of producer
// continuations (shared_ptr), touched by one thread at a time: producers run one after another.
struct SchedulingCycle::Run {
  Run(PipelineConstPtr p, const SchedulingRequest& r, std::vector<Endpoint> c, Rng& g, Resume res,
      ScheduleCallback d)
      : pipeline(std::move(p)),
        request_without_predictions(pipeline && pipeline->predictions_ignored &&
                                            r.prediction_enabled
                                        ? std::optional<SchedulingRequest>(r)
                                        : std::nullopt),
        ctx{request_without_predictions ? *request_without_predictions : r, g},
        candidates(std::move(c)),
        resume(std::move(res)),
        done(std::move(d)) {
    if (request_without_predictions) {
      request_without_predictions->prediction_enabled = false;
    }
  }

  PipelineConstPtr pipeline;
  // A pipeline configured to ignore predictions never asks for them.
  std::optional<SchedulingRequest> request_without_predictions;
  CycleContext ctx;
  std::vector<Endpoint> candidates;
  Resume resume;
  ScheduleCallback done;
  const Profile* profile = nullptr;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  ScheduleResult result;
  // Only for a cycle the decision log sampled or whose request asked (null otherwise).
  std::unique_ptr<DecisionExplanation> explain;
  DecisionNotes notes;  // what the plugins say about their decision (only when explained)
  bool logged = false;  // the decision log sampled this cycle
};

ScheduleResult SchedulingCycle::schedule(const PipelineConstPtr& pipeline,
                                         const SchedulingRequest& request,
                                         std::vector<Endpoint> candidates, Rng& rng,
                                         std::string_view profile_name) const {
  std::optional<ScheduleResult> out;
  schedule_async(
      pipeline, request, std::move(candidates), rng, {},
      [&out](ScheduleResult r) { out = std::move(r); }, profile_name);
  if (!out) {
    // Only a producer that answers later (the predictor client) gets here: callers that may
    // meet one use schedule_async.
    spdlog::error("scheduling cycle: schedule() with an asynchronous producer; use schedule_async");
    ScheduleResult r;
    r.reason = "scheduler is not configured";
    return r;
  }
  return std::move(*out);
}

void SchedulingCycle::schedule_async(PipelineConstPtr pipeline, const SchedulingRequest& request,
                                     std::vector<Endpoint> candidates, Rng& rng, Resume resume,
                                     ScheduleCallback done, std::string_view profile_name) const {
  auto cycle = std::make_shared<Run>(std::move(pipeline), request, std::move(candidates), rng,
                                     std::move(resume), std::move(done));
  Run& c = *cycle;
  c.logged = decision_log_ != nullptr && decision_log_->sample();
  if (c.logged || request.explain) {
    c.explain = std::make_unique<DecisionExplanation>();
    c.explain->request_id = request.request_id;
    c.explain->model = request.model;
    c.explain->objective = request.objective;
    c.explain->slo_ttft_ms = request.slo_ttft_ms;
    c.explain->slo_tpot_ms = request.slo_tpot_ms;
    c.explain->priority = request.priority;
    c.explain->strict_priority = request.strict_priority;
    c.ctx.notes = &c.notes;
  }
  auto finish_early = [&](prometheus::Counter* outcome) {
    count(outcome);
    if (metrics_ != nullptr) {
      observe_since(&metrics_->scheduling_duration, c.start);
      count(&metrics_->without_predictions);
    }
    if (c.explain) {
      c.explain->profile = c.result.profile;
      c.explain->reason = c.result.reason;
    }
    deliver(c);
  };
  const Profile* profile =
      profile_name.empty() || !c.pipeline ? nullptr : c.pipeline->profile(profile_name);
  if (!c.pipeline || c.pipeline->profiles.empty() ||
      (!profile_name.empty() && profile == nullptr)) {
    // Cannot happen with a loaded pipeline and a known profile name: a wiring bug.
    spdlog::error("scheduling cycle: no pipeline or unknown profile '{}'", profile_name);
    c.result.reason = "scheduler is not configured";
    return finish_early(metrics_ ? &metrics_->no_candidates : nullptr);
  }
  c.profile = profile != nullptr ? profile : &c.pipeline->profiles.front();
  c.result.profile = c.profile->name();
  if (c.candidates.empty()) {
    c.result.reason = "no ready endpoints";
    return finish_early(metrics_ ? &metrics_->no_candidates : nullptr);
  }
  run_producer(std::move(cycle), 0);
}

// Runs producer `index`, then (when it is done, on whatever thread finished it) the next one,
// and after the last one the rest of the cycle.
void SchedulingCycle::run_producer(std::shared_ptr<Run> cycle, std::size_t index) const {
  Run& c = *cycle;
  if (index == c.pipeline->producers.size()) {
    finish_run(c);
    return;
  }
  const auto& p = c.pipeline->producers[index];
  const auto start = std::chrono::steady_clock::now();
  auto called = std::make_shared<std::atomic<bool>>(false);
  auto next = [this, cycle, index, called, start, duration = p.duration](bool inline_call) {
    *called = true;
    observe_since(duration, start);
    if (inline_call || !cycle->resume) {
      run_producer(cycle, index + 1);
    } else {
      cycle->resume([this, cycle, index] { run_producer(cycle, index + 1); });
    }
  };
  // Answers on this stack (before produce_async returns) continue here; any other (later, or
  // on another thread while produce_async is still running) goes through `resume`, so the
  // rest of the cycle never runs outside the caller's serialisation.
  auto running = std::make_shared<std::atomic<bool>>(true);
  const auto caller = std::this_thread::get_id();
  try {
    p.plugin->produce_async(c.ctx, c.candidates, [next, running, caller] {
      next(*running && std::this_thread::get_id() == caller);
    });
  } catch (const std::exception& e) {
    // A failed producer never fails the request; its attribute may stay absent.
    spdlog::warn("producer {} ({}) failed: {}", p.plugin->name(), p.plugin->type(), e.what());
    count(metrics_ ? &metrics_->producer_failures : nullptr);
    if (!*called) {
      *running = false;
      next(true);
      return;
    }
  }
  *running = false;
}

void SchedulingCycle::finish_run(Run& c) const {
  ScheduleResult& result = c.result;
  auto finish = [&](prometheus::Counter* outcome) {
    count(outcome);
    if (metrics_ != nullptr) {
      observe_since(&metrics_->scheduling_duration, c.start);
      count(result.predictions_used ? &metrics_->with_predictions : &metrics_->without_predictions);
    }
    deliver(c);
  };
  for (const auto& e : c.candidates) {
    result.predictions_used |= e.latency.has_value();
  }
  DecisionExplanation* explain = c.explain.get();
  if (explain != nullptr) {
    explain->profile = result.profile;
    explain->predictions_used = result.predictions_used;
    explain->candidates.reserve(c.candidates.size());
    for (const auto& e : c.candidates) {
      CandidateDecision d;
      d.name = e.name();
      if (e.latency) {
        d.predicted_ttft_ms = e.latency->predicted_ttft_ms;
        d.predicted_tpot_ms = e.latency->predicted_tpot_ms;
        // Only against an SLO the request has: without one the producer's headroom is the
        // negated prediction, which says nothing the prediction does not.
        if (c.ctx.request.slo_ttft_ms) {
          d.ttft_headroom_ms = e.latency->ttft_headroom_ms;
        }
        if (c.ctx.request.slo_tpot_ms) {
          d.tpot_headroom_ms = e.latency->tpot_headroom_ms;
        }
      }
      if (e.prefix) {
        d.prefix_score = e.prefix->score();
      }
      d.kv_cache_usage = e.metrics().kv_cache_usage;
      d.waiting = e.metrics().waiting;
      d.dispatched = e.dispatched;
      explain->candidates.push_back(std::move(d));
    }
    explain->fallback = prediction_fallback(*c.pipeline, c.ctx.request, explain->candidates);
  }

  for (const auto& a : c.pipeline->admitters) {
    auto start = std::chrono::steady_clock::now();
    AdmitDecision d = a.plugin->admit(c.ctx, c.candidates);
    observe_since(a.duration, start);
    if (!d.admit) {
      spdlog::debug("request {} denied by {} ({}): {} {}", c.ctx.request.request_id,
                    a.plugin->name(), a.plugin->type(), d.status, d.reason);
      result.outcome = ScheduleResult::Outcome::kDenied;
      result.status = d.status;
      result.reason = std::move(d.reason);
      if (explain != nullptr) {
        explain->outcome = "denied";
        explain->reason =
            fmt::format("{} from admitter {}: {}", result.status, a.plugin->name(), result.reason);
      }
      return finish(metrics_ ? &metrics_->denied : nullptr);
    }
  }

  const auto run_start = std::chrono::steady_clock::now();
  ProfileResult run = c.profile->run(c.ctx, std::move(c.candidates), explain);
  if (metrics_ != nullptr) {
    // GIE's scheduler: one profile run, and its attempt (the picked pod, or failure).
    observe_since(&metrics_->gie_scheduler_e2e, run_start);
    const SchedulingRequest& r = c.ctx.request;
    const std::string& target = r.target_model.empty() ? r.model : r.target_model;
    if (run.picked) {
      const Endpoint& e = run.candidates[*run.picked];
      metrics_->gie_attempt(target, e.name(), e.address());
    } else {
      metrics_->gie_attempt(target);
    }
  }
  for (std::size_t i = 0; i < run.candidates.size(); ++i) {
    const auto& e = run.candidates[i];
    result.scores.push_back(
        {e.info, run.scores[i],
         e.latency ? std::optional<double>(e.latency->predicted_ttft_ms) : std::nullopt});
  }
  if (!run.picked) {
    result.reason = run.emptied_by.empty() ? "no candidates"
                                           : "no candidates left after filter " + run.emptied_by;
    if (explain != nullptr) {
      explain->reason = result.reason;
    }
    return finish(metrics_ ? &metrics_->no_candidates : nullptr);
  }

  std::size_t pick = *run.picked;
  std::optional<std::size_t> second;
  for (std::size_t i = 0; i < run.candidates.size(); ++i) {
    if (i != pick && (!second || run.scores[i] > run.scores[*second])) {
      second = i;
    }
  }
  for (const auto& p : c.pipeline->producers) {
    p.plugin->on_picked(c.ctx, run.candidates[pick]);
  }
  result.outcome = ScheduleResult::Outcome::kPicked;
  result.status = 200;
  if (second) {
    result.fallback = run.candidates[*second];
  }
  result.picked = std::move(run.candidates[pick]);
  if (explain != nullptr) {
    explain->outcome = "picked";
    explain->picked = result.picked->name();
    explain->retry = result.fallback ? result.fallback->name() : "";
  }
  return finish(metrics_ ? &metrics_->picked : nullptr);
}

void SchedulingCycle::deliver(Run& c) const {
  if (c.explain) {
    if (c.logged) {
      decision_log_->write(*c.explain);
    }
    if (c.ctx.request.explain) {
      c.result.explanation = std::move(c.explain);
    }
  }
  c.done(std::move(c.result));
}

void SchedulingCycle::on_response_complete(const SchedulingRequest& continued,
                                           const Endpoint& pod) const {
  PipelineConstPtr pipeline = this->pipeline();
  if (!pipeline) {
    return;
  }
  Rng rng(0);  // hooks after the response make no random choices
  CycleContext ctx{continued, rng};
  for (const auto& p : pipeline->producers) {
    try {
      p.plugin->on_response_complete(ctx, pod);
    } catch (const std::exception& e) {
      spdlog::warn("producer {} ({}) failed after the response: {}", p.plugin->name(),
                   p.plugin->type(), e.what());
    }
  }
}

}  // namespace llmd::epp
