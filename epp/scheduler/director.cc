#include "epp/scheduler/director.h"

#include <chrono>
#include <exception>

#include <spdlog/spdlog.h>

#include "epp/scheduler/metrics.h"

namespace llmd::epp {
namespace {

void count(prometheus::Counter* c) {
  if (c != nullptr) {
    c->Increment();
  }
}

}  // namespace

Director::Director(PipelineConstPtr pipeline, SchedulerMetrics* metrics)
    : pipeline_(std::move(pipeline)), metrics_(metrics) {}

void Director::set_pipeline(PipelineConstPtr pipeline) {
  std::lock_guard lock(mu_);
  pipeline_ = std::move(pipeline);
}

PipelineConstPtr Director::pipeline() const {
  std::lock_guard lock(mu_);
  return pipeline_;
}

ScheduleResult Director::schedule(const SchedulingRequest& request,
                                  std::vector<Endpoint> candidates, Rng& rng,
                                  std::string_view profile_name) const {
  return schedule(this->pipeline(), request, std::move(candidates), rng, profile_name);
}

ScheduleResult Director::schedule(const PipelineConstPtr& pipeline,
                                  const SchedulingRequest& request,
                                  std::vector<Endpoint> candidates, Rng& rng,
                                  std::string_view profile_name) const {
  using Clock = std::chrono::steady_clock;
  auto cycle_start = Clock::now();
  ScheduleResult result;
  std::optional<SchedulingRequest> without_predictions;
  if (pipeline && pipeline->predictions_ignored && request.prediction_enabled) {
    without_predictions = request;
    without_predictions->prediction_enabled = false;
  }
  CycleContext ctx{without_predictions ? *without_predictions : request, rng};
  auto finish = [&](prometheus::Counter* outcome) {
    count(outcome);
    if (metrics_ != nullptr) {
      observe_since(&metrics_->scheduling_duration, cycle_start);
      count(result.predictions_used ? &metrics_->with_predictions
                                    : &metrics_->without_predictions);
    }
    return std::move(result);
  };

  const Profile* profile = profile_name.empty() || !pipeline ? nullptr
                                                             : pipeline->profile(profile_name);
  if (!pipeline || pipeline->profiles.empty() || (!profile_name.empty() && profile == nullptr)) {
    // Cannot happen with a loaded pipeline and a known profile name: a wiring bug.
    spdlog::error("director: no pipeline or unknown profile '{}'", profile_name);
    result.reason = "scheduler is not configured";
    return finish(metrics_ ? &metrics_->no_candidates : nullptr);
  }
  if (profile == nullptr) {
    profile = &pipeline->profiles.front();
  }
  result.profile = profile->name();
  if (candidates.empty()) {
    result.reason = "no ready endpoints";
    return finish(metrics_ ? &metrics_->no_candidates : nullptr);
  }

  for (const auto& p : pipeline->producers) {
    auto start = Clock::now();
    try {
      p.plugin->produce(ctx, candidates);
    } catch (const std::exception& e) {
      // A failed producer never fails the request; its attribute may stay absent.
      spdlog::warn("producer {} ({}) failed: {}", p.plugin->name(), p.plugin->type(), e.what());
      count(metrics_ ? &metrics_->producer_failures : nullptr);
    }
    observe_since(p.duration, start);
  }
  for (const auto& e : candidates) {
    result.predictions_used |= e.latency.has_value();
  }

  for (const auto& a : pipeline->admitters) {
    auto start = Clock::now();
    AdmitDecision d = a.plugin->admit(ctx, candidates);
    observe_since(a.duration, start);
    if (!d.admit) {
      spdlog::debug("request {} denied by {} ({}): {} {}", request.request_id, a.plugin->name(),
                    a.plugin->type(), d.status, d.reason);
      result.outcome = ScheduleResult::Outcome::kDenied;
      result.status = d.status;
      result.reason = std::move(d.reason);
      return finish(metrics_ ? &metrics_->denied : nullptr);
    }
  }

  ProfileResult run = profile->run(ctx, std::move(candidates));
  for (std::size_t i = 0; i < run.candidates.size(); ++i) {
    const auto& c = run.candidates[i];
    result.scores.push_back({c.name, run.scores[i],
                             c.latency ? std::optional<double>(c.latency->predicted_ttft_ms)
                                       : std::nullopt});
  }
  if (!run.picked) {
    result.reason = run.emptied_by.empty() ? "no candidates"
                                           : "no candidates left after filter " + run.emptied_by;
    return finish(metrics_ ? &metrics_->no_candidates : nullptr);
  }

  std::size_t pick = *run.picked;
  std::optional<std::size_t> second;
  for (std::size_t i = 0; i < run.candidates.size(); ++i) {
    if (i != pick && (!second || run.scores[i] > run.scores[*second])) {
      second = i;
    }
  }
  for (const auto& p : pipeline->producers) {
    p.plugin->on_picked(ctx, run.candidates[pick]);
  }
  result.outcome = ScheduleResult::Outcome::kPicked;
  result.status = 200;
  if (second) {
    result.fallback = run.candidates[*second];
  }
  result.picked = std::move(run.candidates[pick]);
  return finish(metrics_ ? &metrics_->picked : nullptr);
}

void Director::on_response_complete(const SchedulingRequest& continued,
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
