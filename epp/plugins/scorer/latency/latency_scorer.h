#pragma once
// latency-scorer: scores candidates by predicted latency headroom (spec section 2 step 5), with
// the composite KV/queue/prefix fallback when no candidate has a prediction, and (we improve)
// also within a bucket whose predictions are all equal: the trainer's cold-start models predict
// a constant, and a model that cannot tell the pods apart should not turn the pick into a coin
// toss when the scraped load can. Stateless and immutable.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class LatencyScorer final : public PluginBase<Scorer> {
 public:
  static constexpr std::string_view kType = "latency-scorer";
  static constexpr std::string_view kStrategyEnv = "HEADROOM_SELECTION_STRATEGY";

  enum class Strategy {
    kLeast,
    kMost,
    kCompositeLeast,
    kCompositeMost,
    kCompositeOnly,
    kLatencyComposite,
    kLatencyCost
  };
  static std::optional<Strategy> parse_strategy(std::string_view s);  // case-insensitive

  struct Config {
    double ttftWeight = 0.8;  // >= 0; share of TTFT headroom in the blend
    double tpotWeight = 0.2;  // >= 0; share of TPOT headroom (weights are normalised)
    // least | most | composite-least | composite-most | composite-only | latency-composite.
    // latency-composite (ours): the positive bucket scored by the composite load/prefix score
    // times the latency ratio (lowest prediction / the pod's, blended by the weights), so the
    // predictions rank pods they tell apart and the pool's cost (prefix hit, queue, KV) ranks
    // pods within the model's error. latency-cost (ours): the pods ranked by what the request
    // costs everyone, lowest / the pod's: its predicted TTFT plus the delay its own prefill adds
    // to the requests that arrive behind it (score_latency_cost); no weights. Default: env
    // HEADROOM_SELECTION_STRATEGY when set, else "least".
    std::string headroomSelectionStrategy = "least";
    double compositeKvWeight = 1;      // >= 0; composite weights are normalised, sum > 0
    double compositeQueueWeight = 1;   // >= 0
    double compositePrefixWeight = 1;  // >= 0
    // When no pod meets the SLOs, upstream first prefers pods with nothing in flight from this
    // EPP, whatever their predictions. Without SLO headers every pod is "negative", so this
    // overrides predictions and prefix affinity at low load (an idle pod without the cache
    // beats a busy pod with it). false = rank every negative bucket by its predictions only.
    bool preferIdlePods = true;
    // How a bucket's headrooms become scores. "minmax" (upstream): (h - min) / (max - min), so
    // 18.0 vs 18.5 ms predicted spans the whole 0..1 range and a sharp picker herds on noise.
    // "ratio": the blend of min/h ("least") or h/max ("most") per dimension: a pod predicted
    // 10% slower scores ~0.9, so a picker's concentration follows real differences only.
    std::string normalization = "minmax";
    // A request with SLO headers that no candidate is predicted to meet. "least" (upstream):
    // the pod closest to meeting it. "composite": the composite load/prefix score, i.e. the
    // pod where the request costs the pool least (a prefix hit, a short queue): in overload
    // the SLO is missed anyway, and prefill spent on cache misses is capacity every later
    // request loses. "latency-composite": that composite times the latency ratio, as the
    // positive bucket's latency-composite, so a slower pod (a slower GPU class, a longer
    // queue) costs what the predictions say it does. "concentrate": the busiest pod by that score,
    // so that in overload the requests that miss anyway queue on one pod and the others keep
    // meeting their SLOs (attainment and goodput up, the missed requests' latency far worse:
    // opt-in). Requests without SLO headers are always ranked by their predictions.
    std::string sloMissStrategy = "least";
    // Pods a bucket's predictions do not tell apart (every prediction equal: the constant of a
    // model not trained yet). "composite": the composite load/prefix score. "prefill-work":
    // the prompt tokens the request would wait behind and prefill itself on the pod (uncached
    // tokens in flight, from the EPP's own bookkeeping, plus its own uncached tokens), scored
    // lowest / the pod's: what a first token waits for, known at once, unlike a scrape.
    std::string indistinctPredictions = "composite";
    std::string validate() const;
  };

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  LatencyScorer(std::string name, Config config);

  // Scorer
  std::vector<double> score(CycleContext& ctx, std::span<const Endpoint> endpoints) const override;
  std::vector<AttributeKey> consumes() const override {
    return {AttributeKey::kLatencyPrediction, AttributeKey::kPrefixCacheMatch};
  }

  bool ignores_predictions() const override { return strategy_ == Strategy::kCompositeOnly; }

  const Config& config() const { return config_; }
  Strategy strategy() const { return strategy_; }

 private:
  // Writes scores of endpoints[idx...] into `out` (others untouched).
  // `notes` (null unless the cycle is explained) gets what ranked pods whose predictions tie.
  void score_bucket(const SchedulingRequest& request, std::span<const Endpoint> endpoints,
                    const std::vector<std::size_t>& idx, bool most, std::vector<double>& out,
                    DecisionNotes* notes) const;
  // The scores for pods whose predictions tell none apart (indistinctPredictions).
  void score_indistinct(const SchedulingRequest& request, std::span<const Endpoint> endpoints,
                        const std::vector<std::size_t>& idx, std::vector<double>& out,
                        DecisionNotes* notes) const;
  void score_prefill_work(const SchedulingRequest& request, std::span<const Endpoint> endpoints,
                          const std::vector<std::size_t>& idx, std::vector<double>& out) const;
  // `worth_for` (latency-composite): the prefix term weighs the hit the request would get by
  // the prefill already queued on the pod (README); absent: upstream's plain prefix score.
  void score_composite(std::span<const Endpoint> endpoints, const std::vector<std::size_t>& idx,
                       bool invert, std::vector<double>& out,
                       const SchedulingRequest* worth_for = nullptr) const;
  // latency-composite: the composite score times the latency ratio (score_ratio, not packing).
  void score_latency_composite(const SchedulingRequest& request,
                               std::span<const Endpoint> endpoints,
                               const std::vector<std::size_t>& idx, std::vector<double>& out,
                               DecisionNotes* notes) const;
  // latency-cost: the blend of lowest cost / the pod's (TTFT) and the TPOT ratio.
  void score_latency_cost(const SchedulingRequest& request, std::span<const Endpoint> endpoints,
                          const std::vector<std::size_t>& idx, std::vector<double>& out,
                          DecisionNotes* notes) const;
  // Ratio normalization: the blend (weights alpha, beta) of lowest prediction / prediction per
  // dimension, or prediction / highest prediction when packing; in [0.01, 1].
  void score_ratio(std::span<const Endpoint> endpoints, const std::vector<std::size_t>& idx,
                   bool pack, double alpha, double beta, std::vector<double>& out) const;

  Config config_;
  Strategy strategy_;
};

}  // namespace llmd::epp
