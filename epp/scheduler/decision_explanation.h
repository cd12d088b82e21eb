#pragma once
// Why one request went where it went: the candidates with what the producers wrote about them
// (predicted TTFT/TPOT, prefix score, load), which filter removed which pod, the scores, the
// pick and the reason scheduling fell back from its predictions. Plain data, filled by the
// SchedulingCycle only for a request whose decision is logged (DecisionLog) or asked for
// (x-llmd-debug), so an unexplained request builds none of it. Formatted at the edges: one
// JSON log line, or a compact response header; both bounded, whatever the pool size.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace llmd::epp {

struct CandidateDecision {
  std::string name;
  // What the producers wrote (absent: no prediction / no prefix information for this pod).
  std::optional<double> predicted_ttft_ms;
  std::optional<double> predicted_tpot_ms;
  std::optional<double> prefix_score;  // leading blocks the pod holds / the prompt's blocks
  // SLO - predicted, for each SLO the request has (absent without that SLO or a prediction),
  // as the producer computed it for the admitter, tier filter and scorer (its calibrated bound,
  // the buffered TPOT SLO; TPOT 0 where it is neutral: a request that does not stream):
  // negative = the pod is predicted to miss it.
  std::optional<double> ttft_headroom_ms;
  std::optional<double> tpot_headroom_ms;
  double kv_cache_usage = 0;          // 0..1, scraped
  int64_t waiting = 0;                // scraped queue
  int64_t dispatched = 0;             // this EPP's requests in flight on the pod
  std::optional<double> score;        // weighted total; absent when a filter removed the pod
  std::vector<double> scorer_scores;  // clamped output of each scorer (aligned with `scorers`)
  // The filter instance that removed it; "" when it was kept, and also when no filter ran on
  // it (a denial decides before the filters).
  std::string removed_by;
};

struct FilterDecision {
  std::string name;  // instance name
  std::string type;
  std::size_t in = 0;                // candidates it was given
  std::vector<std::string> removed;  // pods it removed, in candidate order
};

struct ScorerDecision {
  std::string name;
  std::string type;
  double weight = 1;
};

struct DecisionExplanation {
  std::string request_id;
  std::string model;
  // The request as it was scheduled: its objective, SLOs (from headers or the objective) and
  // priority (soft; strict tier).
  std::string objective;
  std::optional<double> slo_ttft_ms;
  std::optional<double> slo_tpot_ms;
  int64_t priority = 0;
  int64_t strict_priority = 0;
  std::string profile;
  std::string outcome = "no_candidates";  // picked | denied | no_candidates
  std::string picked;                     // pod name ("" unless picked)
  std::string retry;   // the next-best pod, tried once when the pick fails before answering
  std::string reason;  // why nothing was picked (denial, empty filter result)
  // Why the cycle ranked pods without (all) predictions: "" when every candidate had one or
  // the pipeline does not predict (round-robin, load+prefix).
  std::string fallback;
  bool predictions_used = false;
  // How the pods the predictions could not tell apart were ranked, one sentence per plugin
  // that broke such a tie, each prefixed with its instance name ("latency-scorer: equal
  // predictions for 4 pods: ranked by ..."); empty when the predictions decided.
  std::vector<std::string> tie_breaks;
  std::vector<FilterDecision> filters;  // in the order they ran
  std::vector<ScorerDecision> scorers;
  std::string picker;
  std::vector<CandidateDecision> candidates;  // every candidate of the cycle, in pool order

  // The candidates a bounded view shows: the pick, the retry target, then the others by score
  // (pods removed by a filter last), at most `max_candidates` in all (the pick always).
  std::vector<const CandidateDecision*> shown(std::size_t max_candidates) const;
};

// One log line's JSON object: {"request_id", "model", "objective" (when named), "slo_ttft_ms",
// "slo_tpot_ms" (when set), "priority", "strict_priority", "profile", "outcome", "pick", "retry",
// "reason", "fallback", "predictions", "tie_breaks" (when any), "picker", "scorers": [...],
// "filters": [{name, type, in, removed (at most max_candidates names), removed_more}],
// "candidates": [{name, ttft_ms, tpot_ms, ttft_headroom_ms, tpot_headroom_ms, prefix, kv,
// waiting, dispatched, score, scores, removed_by}], "candidates_more"}; a candidate's optional
// fields only when known (removed_by only when a filter removed it).
nlohmann::ordered_json decision_to_json(const DecisionExplanation& e, std::size_t max_candidates);

// The x-llmd-decision response header's value: "pick=pod-2 retry=pod-0 profile=default
// predictions=yes slo=ttft:250,tpot:50 priority=10 filters=strict:4>2,loose:2>2
// candidates=pod-2:ttft=12.3,tpot=4.1,ttft_headroom=237.7,tpot_headroom=45.9,prefix=0.80,
// score=0.91;pod-1:ttft=300.2,ttft_headroom=-50.2,removed=strict;+3" (slo= when the request has
// an SLO and each candidate's headroom for it, priority= and tier= when not 0, fallback=,
// tiebreak= and reason= when set, removed= only on a pod a filter removed). Printable ASCII
// only, at most `max_bytes` (candidates past the budget are counted as "+N").
std::string decision_header_value(const DecisionExplanation& e, std::size_t max_candidates,
                                  std::size_t max_bytes);

}  // namespace llmd::epp
