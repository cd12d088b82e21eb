#include "epp/plugins/scorer/latency/latency_scorer.h"

#include "epp/features/feature_row.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include <fmt/format.h>

namespace llmd::epp {
namespace {

constexpr double kEps = 1e-9;
// Guards trunc() against binary fractions like 49.99999999999999 for an exact 50.
constexpr double kTruncSlack = 1e-9;

bool positive(const LatencyPredictionInfo& l) {
  return l.ttft_headroom_ms >= 0 && l.tpot_headroom_ms >= 0;
}

}  // namespace

std::optional<LatencyScorer::Strategy> LatencyScorer::parse_strategy(std::string_view s) {
  std::string lower(s);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "least") return Strategy::kLeast;
  if (lower == "most") return Strategy::kMost;
  if (lower == "composite-least") return Strategy::kCompositeLeast;
  if (lower == "composite-most") return Strategy::kCompositeMost;
  if (lower == "composite-only") return Strategy::kCompositeOnly;
  if (lower == "latency-composite") return Strategy::kLatencyComposite;
  if (lower == "latency-cost") return Strategy::kLatencyCost;
  return std::nullopt;
}

std::string LatencyScorer::Config::validate() const {
  for (auto [key, v] : {std::pair{"ttftWeight", ttftWeight},
                        {"tpotWeight", tpotWeight},
                        {"compositeKvWeight", compositeKvWeight},
                        {"compositeQueueWeight", compositeQueueWeight},
                        {"compositePrefixWeight", compositePrefixWeight}}) {
    if (!(v >= 0)) {
      return param_error(key, v, ">= 0");
    }
  }
  if (ttftWeight + tpotWeight <= 0) {
    return "parameters 'ttftWeight' and 'tpotWeight' must not both be 0";
  }
  if (compositeKvWeight + compositeQueueWeight + compositePrefixWeight <= 0) {
    return "composite weights (compositeKvWeight, compositeQueueWeight, compositePrefixWeight) "
           "must not all be 0";
  }
  if (normalization != "minmax" && normalization != "ratio") {
    return "parameter 'normalization' must be minmax or ratio, got '" + normalization + "'";
  }
  if (sloMissStrategy != "least" && sloMissStrategy != "composite" &&
      sloMissStrategy != "latency-composite" && sloMissStrategy != "latency-cost" &&
      sloMissStrategy != "concentrate") {
    return "parameter 'sloMissStrategy' must be least, composite, latency-composite, "
           "latency-cost or concentrate, got '" +
           sloMissStrategy + "'";
  }
  if (indistinctPredictions != "composite" && indistinctPredictions != "prefill-work") {
    return "parameter 'indistinctPredictions' must be composite or prefill-work, got '" +
           indistinctPredictions + "'";
  }
  if (!parse_strategy(headroomSelectionStrategy)) {
    return "parameter 'headroomSelectionStrategy' must be least, most, composite-least, "
           "composite-most, composite-only, latency-composite or latency-cost, got '" +
           headroomSelectionStrategy + "'";
  }
  return {};
}

PluginOrError LatencyScorer::create(const std::string& name, const nlohmann::json& params,
                                    const Handle& handle) {
  Config c;
  // Precedence: parameter > environment > "least".
  if (auto env = handle.getenv(kStrategyEnv); env && !env->empty()) {
    if (!parse_strategy(*env)) {
      return PluginOrError::fail(std::string(kStrategyEnv) + "='" + *env +
                                 "' is not least, most, composite-least, composite-most, "
                                 "composite-only, latency-composite or latency-cost");
    }
    c.headroomSelectionStrategy = *env;
  }
  ParamReader r(params);
  r.get("ttftWeight", c.ttftWeight)
      .get("tpotWeight", c.tpotWeight)
      .get("headroomSelectionStrategy", c.headroomSelectionStrategy)
      .get("compositeKvWeight", c.compositeKvWeight, "compositeKVWeight")  // upstream spelling
      .get("compositeQueueWeight", c.compositeQueueWeight)
      .get("compositePrefixWeight", c.compositePrefixWeight)
      .get("preferIdlePods", c.preferIdlePods)
      .get("normalization", c.normalization)
      .get("sloMissStrategy", c.sloMissStrategy)
      .get("indistinctPredictions", c.indistinctPredictions);
  if (auto e = r.finish(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  if (c.headroomSelectionStrategy == "latency-composite" ||
      c.headroomSelectionStrategy == "latency-cost") {
    // One policy, not four switches: predictions rank the pods they tell apart and the pool's
    // cost ranks the rest, for SLO misses too, with no idle bucket overriding the predictions;
    // under latency-composite the prompt work ahead stands in for a model that tells no pod
    // apart, under latency-cost the composite (the load the predictions would have seen). Each
    // can still be set on its own.
    if (!r.has("sloMissStrategy")) {
      c.sloMissStrategy = c.headroomSelectionStrategy;
    }
    if (!r.has("preferIdlePods")) {
      c.preferIdlePods = false;
    }
    if (!r.has("indistinctPredictions") && c.headroomSelectionStrategy == "latency-composite") {
      c.indistinctPredictions = "prefill-work";
    }
  }
  if (auto e = c.validate(); !e.empty()) {
    return PluginOrError::fail(e);
  }
  return {std::make_shared<LatencyScorer>(name, c), {}};
}

LatencyScorer::LatencyScorer(std::string name, Config config)
    : PluginBase(kType, std::move(name)),
      config_(std::move(config)),
      strategy_(parse_strategy(config_.headroomSelectionStrategy).value_or(Strategy::kLeast)) {}

std::vector<double> LatencyScorer::score(CycleContext& ctx,
                                         std::span<const Endpoint> endpoints) const {
  std::vector<double> out(endpoints.size(), 0.0);
  std::vector<std::size_t> all, pos, neg;
  for (std::size_t i = 0; i < endpoints.size(); ++i) {
    all.push_back(i);
    if (endpoints[i].latency) {
      (positive(*endpoints[i].latency) ? pos : neg).push_back(i);
    }
  }
  if (strategy_ == Strategy::kCompositeOnly || (pos.empty() && neg.empty())) {
    score_composite(endpoints, all, false, out);
    return out;
  }
  if (strategy_ == Strategy::kLatencyCost && !ctx.request.has_slo()) {
    // Without SLO headers every headroom is -predicted (all "negative"): the cost ranks them.
    std::vector<std::size_t> predicted = pos;
    predicted.insert(predicted.end(), neg.begin(), neg.end());
    score_latency_cost(ctx.request, endpoints, predicted, out, ctx.notes);
    return out;
  }
  // We improve on the reference: a pod without a prediction is in no bucket (score 0) instead
  // of being "positive with 0 headroom".
  if (!pos.empty()) {
    switch (strategy_) {
      case Strategy::kCompositeMost:
        score_composite(endpoints, pos, false, out);
        break;
      case Strategy::kCompositeLeast:
        score_composite(endpoints, pos, true, out);
        break;
      case Strategy::kLatencyComposite:
        score_latency_composite(ctx.request, endpoints, pos, out, ctx.notes);
        break;
      case Strategy::kLatencyCost:
        score_latency_cost(ctx.request, endpoints, pos, out, ctx.notes);
        break;
      default:
        score_bucket(ctx.request, endpoints, pos, strategy_ == Strategy::kMost, out, ctx.notes);
    }
    return out;
  }
  if (config_.sloMissStrategy != "least" && ctx.request.has_slo()) {
    if (config_.sloMissStrategy == "latency-composite") {
      score_latency_composite(ctx.request, endpoints, neg, out, ctx.notes);
    } else if (config_.sloMissStrategy == "latency-cost") {
      score_latency_cost(ctx.request, endpoints, neg, out, ctx.notes);
    } else {
      // "concentrate": the inverted composite, so the misses pile onto the busiest pod.
      score_composite(endpoints, neg, config_.sloMissStrategy == "concentrate", out);
    }
    return out;
  }
  // Only negative headroom left. "Most" would favour the most overloaded pod, so every negative
  // bucket is scored "least" (closest to meeting the SLO).
  std::vector<std::size_t> idle, tpot_only, ttft_only, both;
  for (std::size_t i : neg) {
    const auto& l = *endpoints[i].latency;
    if (config_.preferIdlePods && endpoints[i].dispatched == 0) {
      idle.push_back(i);
    }
    bool ttft_neg = l.ttft_headroom_ms < 0, tpot_neg = l.tpot_headroom_ms < 0;
    (ttft_neg && tpot_neg ? both : ttft_neg ? ttft_only : tpot_only).push_back(i);
  }
  for (const auto* bucket : {&idle, &tpot_only, &ttft_only, &both}) {
    if (!bucket->empty()) {
      score_bucket(ctx.request, endpoints, *bucket, false, out, ctx.notes);
      break;
    }
  }
  return out;
}

void LatencyScorer::score_bucket(const SchedulingRequest& request,
                                 std::span<const Endpoint> endpoints,
                                 const std::vector<std::size_t>& idx, bool most,
                                 std::vector<double>& out, DecisionNotes* notes) const {
  double sum = config_.ttftWeight + config_.tpotWeight;
  double alpha = config_.ttftWeight / sum, beta = config_.tpotWeight / sum;
  double min_t = std::numeric_limits<double>::max(), max_t = -min_t;
  double min_p = min_t, max_p = -min_t;
  for (std::size_t i : idx) {
    double t = std::fabs(endpoints[i].latency->ttft_headroom_ms);
    double p = std::fabs(endpoints[i].latency->tpot_headroom_ms);
    min_t = std::min(min_t, t), max_t = std::max(max_t, t);
    min_p = std::min(min_p, p), max_p = std::max(max_p, p);
  }
  double range_t = max_t - min_t, range_p = max_p - min_p;
  if (range_t <= kEps && range_p <= kEps && idx.size() > 1) {
    // No prediction tells these pods apart (e.g. the cold-start constant): the scraped load
    // and prefix affinity can. `most` spreads, so it prefers free capacity, as does `least`
    // here: packing onto the fullest pod needs a prediction that says it still fits.
    score_indistinct(request, endpoints, idx, out, notes);
    return;
  }
  // A dimension where all pods are equal carries no information: give its weight to the other
  // so it does not compress every score towards the middle.
  if (range_t <= kEps && range_p > kEps) {
    alpha = 0, beta = 1;
  } else if (range_p <= kEps && range_t > kEps) {
    alpha = 1, beta = 0;
  }
  if (config_.normalization == "ratio") {
    // Packing ("least" on the positive bucket) prefers the highest prediction that still fits.
    const bool pack = !most && idx.size() > 0 && positive(*endpoints[idx.front()].latency);
    score_ratio(endpoints, idx, pack, alpha, beta, out);
    return;
  }
  for (std::size_t i : idx) {
    double t = std::fabs(endpoints[i].latency->ttft_headroom_ms);
    double p = std::fabs(endpoints[i].latency->tpot_headroom_ms);
    double nt = range_t > kEps ? (t - min_t) / range_t : 0.5;
    double np = range_p > kEps ? (p - min_p) / range_p : 0.5;
    double c = alpha * nt + beta * np;
    double w = std::trunc((most ? c : 1.0 - c) * 100.0 + kTruncSlack) + 1.0;
    out[i] = std::clamp(w / 100.0, 0.0, 1.0);
  }
}

void LatencyScorer::score_latency_composite(const SchedulingRequest& request,
                                            std::span<const Endpoint> endpoints,
                                            const std::vector<std::size_t>& idx,
                                            std::vector<double>& out, DecisionNotes* notes) const {
  // The predictions decide between pods they tell apart; within the model's error the pool's
  // cost (prefix hit, queue, KV) does.
  std::vector<double> ratio(endpoints.size(), 0.0);
  const double sum = config_.ttftWeight + config_.tpotWeight;
  score_ratio(endpoints, idx, false, config_.ttftWeight / sum, config_.tpotWeight / sum, ratio);
  score_composite(endpoints, idx, false, out, &request);
  if (notes != nullptr && idx.size() > 1 && std::all_of(idx.begin(), idx.end(), [&](std::size_t i) {
        return ratio[i] == ratio[idx[0]];
      })) {
    // Equal ratios: the composite factor alone ranked these pods.
    notes->tie_breaks.push_back(fmt::format(
        "equal predictions for {} pods: ranked by the composite load/prefix score (free KV, "
        "queue, prefix hit)",
        idx.size()));
  }
  for (std::size_t i : idx) {
    out[i] = std::clamp(out[i] * ratio[i], 0.0, 1.0);
  }
}

void LatencyScorer::score_latency_cost(const SchedulingRequest& request,
                                       std::span<const Endpoint> endpoints,
                                       const std::vector<std::size_t>& idx,
                                       std::vector<double>& out, DecisionNotes* notes) const {
  // vLLM serves its waiting queue first come, first served: the request's own prefill delays
  // every request that arrives at the pod while it waits, and in a pool kept even about as
  // many arrive during that wait as wait on a pod now (Little's law: the candidates' mean
  // scraped queue). Its own prefill is its uncached tokens (the prefix index) at the pool's
  // prefill rate: the least time per prompt token any candidate is predicted to take for the
  // tokens ahead of its first token (its own and the prefill queued there, the EPP's
  // bookkeeping), the candidate whose prediction the queue inflates least. So a pod costs
  // TTFT + queue x own tokens x rate: the prediction alone when nothing queues; in overload a
  // prefix hit is worth the prefill it spares everyone behind.
  double lo_t = std::numeric_limits<double>::max(), hi_t = -lo_t;
  for (std::size_t i : idx) {
    lo_t = std::min(lo_t, endpoints[i].latency->predicted_ttft_ms);
    hi_t = std::max(hi_t, endpoints[i].latency->predicted_ttft_ms);
  }
  if (idx.size() > 1 && hi_t - lo_t <= kEps) {
    // Predictions that tell no pod apart (a model not trained yet, or pods whose features fall
    // in the same leaves) know nothing of the load: the composite load and prefix score does.
    score_indistinct(request, endpoints, idx, out, notes);
    return;
  }
  double queue = 0;
  double rate = std::numeric_limits<double>::max();  // ms per prompt token
  std::vector<double> own(endpoints.size(), 0.0);    // uncached prompt tokens per pod
  for (std::size_t i : idx) {
    const Endpoint& e = endpoints[i];
    queue += static_cast<double>(std::max<int64_t>(0, e.metrics().waiting));
    own[i] = static_cast<double>(std::max<int64_t>(0, uncached_prompt_tokens(request, e)));
    const double ahead = static_cast<double>(std::max<int64_t>(0, e.prefill_tokens_in_flight));
    rate =
        std::min(rate, std::max(0.0, e.latency->predicted_ttft_ms) / std::max(1.0, own[i] + ahead));
  }
  queue /= static_cast<double>(std::max<std::size_t>(1, idx.size()));
  std::vector<double> cost(endpoints.size(), 0.0);
  double lo = std::numeric_limits<double>::max();
  for (std::size_t i : idx) {
    cost[i] = std::max(0.0, endpoints[i].latency->predicted_ttft_ms) + queue * own[i] * rate;
    lo = std::min(lo, cost[i]);
  }
  std::vector<double> ratio(endpoints.size(), 0.0);
  const double sum = config_.ttftWeight + config_.tpotWeight;
  const double alpha = config_.ttftWeight / sum, beta = config_.tpotWeight / sum;
  score_ratio(endpoints, idx, false, 0.0, 1.0, ratio);  // the TPOT ratio alone
  for (std::size_t i : idx) {
    const double share = cost[i] > kEps ? std::max(lo, 0.0) / cost[i] : 1.0;
    out[i] = std::clamp(alpha * share + beta * ratio[i], 0.01, 1.0);
  }
}

void LatencyScorer::score_ratio(std::span<const Endpoint> endpoints,
                                const std::vector<std::size_t>& idx, bool pack, double alpha,
                                double beta, std::vector<double>& out) const {
  // Ratios of the predicted latencies (not of headrooms, whose ratios shrink as the SLO grows):
  // the lowest prediction scores 1 and a pod predicted twice as slow 0.5; packing scores
  // prediction / highest prediction instead.
  double lo_t = std::numeric_limits<double>::max(), hi_t = 0;
  double lo_p = lo_t, hi_p = 0;
  for (std::size_t i : idx) {
    const auto& l = *endpoints[i].latency;
    lo_t = std::min(lo_t, l.predicted_ttft_ms), hi_t = std::max(hi_t, l.predicted_ttft_ms);
    lo_p = std::min(lo_p, l.predicted_tpot_ms), hi_p = std::max(hi_p, l.predicted_tpot_ms);
  }
  auto share = [pack](double x, double lo, double hi) {
    if (pack) {
      return hi > kEps ? std::max(x, 0.0) / hi : 1.0;
    }
    return x > kEps ? std::max(lo, 0.0) / x : 1.0;
  };
  for (std::size_t i : idx) {
    const auto& l = *endpoints[i].latency;
    double c = alpha * share(l.predicted_ttft_ms, lo_t, hi_t) +
               beta * share(l.predicted_tpot_ms, lo_p, hi_p);
    out[i] = std::clamp(c, 0.01, 1.0);
  }
}

void LatencyScorer::score_indistinct(const SchedulingRequest& request,
                                     std::span<const Endpoint> endpoints,
                                     const std::vector<std::size_t>& idx, std::vector<double>& out,
                                     DecisionNotes* notes) const {
  const bool prefill_work = config_.indistinctPredictions == "prefill-work";
  if (prefill_work) {
    score_prefill_work(request, endpoints, idx, out);
  } else {
    score_composite(endpoints, idx, false, out);
  }
  if (notes != nullptr) {
    notes->tie_breaks.push_back(fmt::format(
        "equal predictions for {} pods: ranked by {}", idx.size(),
        prefill_work ? "prefill work (prompt tokens in flight plus the request's uncached ones)"
                     : "the composite load/prefix score (free KV, queue, prefix hit)"));
  }
}

void LatencyScorer::score_prefill_work(const SchedulingRequest& request,
                                       std::span<const Endpoint> endpoints,
                                       const std::vector<std::size_t>& idx,
                                       std::vector<double>& out) const {
  // One token of slack keeps an empty prompt on idle pods finite (all score 1).
  auto work = [&](const Endpoint& e) {
    return static_cast<double>(std::max<int64_t>(0, e.prefill_tokens_in_flight) +
                               uncached_prompt_tokens(request, e)) +
           1.0;
  };
  double lo = std::numeric_limits<double>::max();
  for (std::size_t i : idx) {
    lo = std::min(lo, work(endpoints[i]));
  }
  for (std::size_t i : idx) {
    out[i] = std::clamp(lo / work(endpoints[i]), 0.01, 1.0);
  }
}

void LatencyScorer::score_composite(std::span<const Endpoint> endpoints,
                                    const std::vector<std::size_t>& idx, bool invert,
                                    std::vector<double>& out,
                                    const SchedulingRequest* worth_for) const {
  double sum =
      config_.compositeKvWeight + config_.compositeQueueWeight + config_.compositePrefixWeight;
  double wkv = config_.compositeKvWeight / sum, wq = config_.compositeQueueWeight / sum,
         wp = config_.compositePrefixWeight / sum;
  // Queue = the larger of the scraped waiting queue and the requests this EPP has in flight on
  // the pod. The scrape is up to one interval old; the in-flight count moves with every
  // dispatch, so a burst decided between two scrapes does not pile onto the pod whose last
  // scrape looked emptiest (with a sharp picker it would get the whole burst).
  auto queue = [](const Endpoint& e) { return std::max(e.metrics().waiting, e.dispatched); };
  int64_t max_q = 0;
  for (std::size_t i : idx) {
    max_q = std::max(max_q, queue(endpoints[i]));
  }
  for (std::size_t i : idx) {
    const Endpoint& e = endpoints[i];
    double rel_q = max_q > 0 ? static_cast<double>(max_q - queue(e)) / max_q : 1.0;
    double kv_free = std::clamp(1.0 - e.metrics().kv_cache_usage, 0.0, 1.0);
    double prefix = e.prefix ? e.prefix->score() : 0.0;
    if (worth_for != nullptr && prefix > 0) {
      // A hit is worth the prefill it saves against the prefill already queued on the pod.
      const double hit =
          prefix * static_cast<double>(std::max<int64_t>(0, worth_for->input_tokens));
      const double ahead = static_cast<double>(std::max<int64_t>(0, e.prefill_tokens_in_flight));
      prefix *= hit + ahead > 0 ? hit / (hit + ahead) : 1.0;
    }
    double w = std::round(100.0 * (wkv * kv_free + wq * rel_q + wp * prefix));
    out[i] = std::clamp((invert ? 100.0 - w : w) / 100.0, 0.0, 1.0);
  }
}

}  // namespace llmd::epp
