#pragma once
// What a profile run records beside its result: the decision explanation (filters' removals,
// scorers' clamped outputs, the picker, tie-break notes) when the cycle is explained, and the
// debug log lines when debug logging is on. Keeping it here leaves Profile::run the loop over
// filters, scorers and the picker. One per Profile::run call, on the calling thread; with no
// explanation and debug off every method returns at once.
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "epp/interface/plugin.h"
#include "epp/scheduler/decision_explanation.h"

namespace llmd::epp {

class ProfileTrace {
 public:
  // `explain` (may be null) must already list the profile's candidates by name and keep its
  // size for the trace's life.
  ProfileTrace(const std::string& profile, CycleContext& ctx, DecisionExplanation* explain);

  void candidates(const std::vector<Endpoint>& endpoints) const;

  // Around one filter: before() notes who is still a candidate, after() what it removed.
  void before_filter(const std::vector<Endpoint>& endpoints);
  void after_filter(const Plugin& filter, std::size_t before,
                    const std::vector<Endpoint>& endpoints);

  // Around one scorer (or the picker): the tie-break notes it writes go to the explanation.
  void before_plugin();
  void after_plugin(const Plugin& plugin);

  // Once the filters are done; then scorer() per scorer, score() per candidate it scored.
  void begin_scoring(const std::vector<Endpoint>& endpoints, std::size_t scorers);
  void scorer(const Plugin& scorer, double weight);
  void score(const Plugin& scorer, double weight, const Endpoint& endpoint, std::size_t i,
             double clamped);

  void picked(const Plugin& picker, const std::vector<Endpoint>& endpoints,
              const std::vector<double>& totals, std::size_t pick) const;

 private:
  using CandidatesByName = std::unordered_map<std::string_view, CandidateDecision*>;
  CandidateDecision* find(const Endpoint& e) const;

  const std::string& profile_;
  CycleContext& ctx_;
  DecisionExplanation* explain_;
  bool debug_;
  CandidatesByName by_name_;
  // Filtering: the explained candidates before the filter; scoring: one per candidate (null:
  // not explained).
  std::vector<CandidateDecision*> explained_;
  std::size_t notes_before_ = 0;
};

}  // namespace llmd::epp
