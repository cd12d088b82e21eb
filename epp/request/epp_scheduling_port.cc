#include "epp/request/epp_scheduling_port.h"

#include <algorithm>
#include <atomic>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace llmd::epp {
namespace {

Rng& thread_rng() {
  thread_local Rng rng{std::random_device{}()};
  return rng;
}

}  // namespace

EppSchedulingPort::EppSchedulingPort(SchedulingCycle& cycle, PodRegistry& registry,
                                     PredictionSource* predictions, Now now)
    : cycle_(cycle),
      registry_(registry),
      predictions_(predictions),
      now_(now ? std::move(now) : Now([] { return std::chrono::steady_clock::now(); })) {
  auto first = std::make_shared<SchedulingGeneration>();
  first->objectives = std::make_shared<ObjectiveTable>();
  first->pipeline = cycle_.pipeline();
  generation_ = std::move(first);
}

void EppSchedulingPort::set_config(std::shared_ptr<const ObjectiveTable> objectives,
                                   std::optional<routing::LoadBalancingConfig> rules,
                                   PipelineConstPtr pipeline) {
  const SchedulingGenerationPtr current = generation();
  auto next = std::make_shared<SchedulingGeneration>();
  next->id = current->id + 1;
  next->objectives = objectives ? std::move(objectives) : std::make_shared<ObjectiveTable>();
  next->pipeline = pipeline ? std::move(pipeline) : current->pipeline;
  if (rules) {
    // The router is the rules' response-time statistics, which outlive a generation: it is
    // reconfigured in place (its rule set swaps atomically inside it) and shared.
    if (current->router) {
      current->router->reconfigure(std::move(*rules));
      next->router = current->router;
    } else {
      next->router = std::make_shared<routing::LatencyRouter>(std::move(*rules));
    }
  }
  cycle_.set_pipeline(next->pipeline);
  std::lock_guard lock(mu_);
  generation_ = std::move(next);
}

void EppSchedulingPort::set_objectives(std::shared_ptr<const ObjectiveTable> objectives) {
  auto next = std::make_shared<SchedulingGeneration>(*generation());
  ++next->id;
  next->objectives = objectives ? std::move(objectives) : std::make_shared<ObjectiveTable>();
  std::lock_guard lock(mu_);
  generation_ = std::move(next);
}

std::shared_ptr<routing::LatencyRouter> EppSchedulingPort::latency_router() const {
  std::lock_guard lock(mu_);
  return generation_->router;
}

SchedulingGenerationPtr EppSchedulingPort::generation() {
  std::lock_guard lock(mu_);
  return generation_;
}

Route EppSchedulingPort::route(const SchedulingRequest& request,
                               const SchedulingGeneration& config) {
  Route out;
  const auto& router = config.router;
  if (!router) {
    return out;
  }
  routing::RouteQuery q{request.model, request.subject, &request.metadata};
  auto d = router->route(q, thread_rng(), now_());
  if (!d) {
    return out;  // no rule for this model: the default pool
  }
  out.rule_id = d->rule_id;
  out.target = d->target.target;
  out.override_params = d->target.override_params;
  if (d->target.kind == routing::LoadBalanceTarget::Kind::kUrl) {
    PodInfo upstream;
    upstream.name = d->target.target;
    upstream.address = fmt::format("{}:{}", d->target.host, d->target.port);
    out.upstream = Endpoint::of(std::move(upstream));
    out.base_path = d->target.base_path;
  } else {
    out.pool = d->target.pool;
  }
  spdlog::debug("request {} model {}: rule {} -> {}{}", request.request_id, request.model,
                out.rule_id, out.target, d->warm_up ? " (warm-up)" : "");
  return out;
}

std::vector<Endpoint> EppSchedulingPort::pool_candidates(const std::string& pool) const {
  auto all = registry_.candidates(now_());
  std::erase_if(all, [&pool](const Endpoint& e) { return e.pool() != pool; });
  return all;
}

void EppSchedulingPort::pick_async(const SchedulingRequest& request, const Route& route,
                                   const SchedulingGeneration& config, Rng& rng, Resume resume,
                                   std::function<void(PickResult)> done) {
  auto candidates = pool_candidates(route.pool);
  if (!route.endpoint_subset.empty()) {
    std::erase_if(candidates, [&route](const Endpoint& e) {
      return std::find(route.endpoint_subset.begin(), route.endpoint_subset.end(), e.address()) ==
             route.endpoint_subset.end();
    });
  }
  cycle_.schedule_async(config.pipeline, request, std::move(candidates), rng, std::move(resume),
                        [this, &request, &route, done = std::move(done)](ScheduleResult r) {
                          done(to_pick_result(request, route, std::move(r)));
                        });
}

PickResult EppSchedulingPort::to_pick_result(const SchedulingRequest& request, const Route& route,
                                             ScheduleResult r) {
  // The router queue's predictedTtftMs signal: on each scored pod's live bookkeeping.
  const auto now = now_();
  for (const auto& s : r.scores) {
    if (s.predicted_ttft_ms && s.pod->live) {
      s.pod->live->record_predicted_ttft(*s.predicted_ttft_ms, now);
    }
  }
  PickResult out;
  out.status = r.ok() ? 200 : r.status;
  out.detail = r.reason;
  if (!r.ok() && !route.pool.empty()) {
    out.detail += fmt::format(" (pool '{}')", route.pool);
  }
  out.predictions_used = r.predictions_used;
  out.profile = r.profile;
  out.explanation = std::move(r.explanation);
  if (r.picked) {
    out.ranked.push_back(*r.picked);
    if (r.fallback) {
      out.ranked.push_back(*r.fallback);
    }
  }
  if (spdlog::should_log(spdlog::level::debug)) {
    std::string scores;
    for (const auto& s : r.scores) {
      scores += fmt::format(" {}={:.3f}", s.name(), s.score);
    }
    spdlog::debug(
        "request {} model {} pool '{}' profile {} predictions {} priority {}/{} "
        "scores:{} -> {}",
        request.request_id, request.model, route.pool, r.profile, r.predictions_used,
        request.strict_priority, request.priority, scores,
        r.picked ? r.picked->name() : "(none: " + r.reason + ")");
  }
  return out;
}

void EppSchedulingPort::estimate_service_ms_async(const SchedulingRequest& request,
                                                  int64_t max_tokens, Resume resume,
                                                  std::function<void(double)> done) {
  // No model yet: relative cost in the spirit of Dynamo's token-count WSPT (prefill is cheap
  // per token, each decode step costs a forward pass).
  const double heuristic = 0.05 * static_cast<double>(request.input_tokens) +
                           10.0 * static_cast<double>(std::max<int64_t>(1, max_tokens));
  if (predictions_ == nullptr || !request.prediction_enabled) {
    done(heuristic);
    return;
  }
  // One row: this request on an idle pod without a prefix hit.
  features::FeatureInput row;
  row.input_token_length = request.input_tokens;
  row.num_tokens_generated = 1;
  // As in the SchedulingCycle: only an answer on this stack continues inline.
  auto inline_call = std::make_shared<std::atomic<bool>>(true);
  const auto caller = std::this_thread::get_id();
  predictions_->predict_async(
      {row}, now_() + std::chrono::milliseconds(20),
      [max_tokens, heuristic, inline_call, caller, resume = std::move(resume),
       done = std::move(done)](PredictionResult p) {
        double ms = heuristic;
        if (p && p->size() == 1) {
          ms = (*p)[0].ttft_ms +
               (*p)[0].tpot_ms * static_cast<double>(std::max<int64_t>(0, max_tokens - 1));
        }
        if ((*inline_call && std::this_thread::get_id() == caller) || !resume) {
          done(ms);
        } else {
          resume([done, ms] { done(ms); });
        }
      });
  *inline_call = false;
}

void EppSchedulingPort::on_completed(const CompletedRequest& done) {
  if (done.success && !done.upstream_url && !done.continuation_prompt.empty()) {
    SchedulingRequest continued = done.request;
    continued.prompt_text = done.continuation_prompt;
    if (done.prompt_tokens && *done.prompt_tokens > 0 && done.prompt_chars > 0) {
      continued.measured_text =
          SchedulingRequest::MeasuredText{done.prompt_chars, *done.prompt_tokens};
    }
    cycle_.on_response_complete(continued, done.pod);
  }
  if (done.rule_id.empty() || done.client_aborted) {
    return;
  }
  if (auto router = latency_router()) {
    router->record(done.rule_id, done.target, done.e2e_ms, done.success, now_());
  }
}

}  // namespace llmd::epp
