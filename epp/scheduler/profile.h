#pragma once
// A scheduling profile: filters -> scorers -> picker. The profile (not the plugins) owns the
// cross-cutting work: it clamps each scorer's output to [0,1], applies weights and sums, times
// every plugin, logs candidates and scores at debug level and stops when filters leave nothing.
// Immutable after construction; run() is const and safe from any number of threads.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "epp/interface/plugin.h"
#include "epp/scheduler/decision_explanation.h"
#include "epp/scheduler/plugin_timer.h"

namespace llmd::epp {

class ProfileTrace;

template <class T>
struct Stage {
  std::shared_ptr<const T> plugin;
  PluginTimer duration{};  // empty: not timed into a metric
};

struct ScorerStage {
  std::shared_ptr<const Scorer> plugin;
  double weight = 1;
  PluginTimer duration{};
};

struct ProfileResult {
  std::vector<Endpoint> candidates;   // what survived the filters, in order
  std::vector<double> scores;         // weighted score per candidate
  std::optional<std::size_t> picked;  // index into candidates
  std::string emptied_by;             // name of the filter that left nothing, if any
};

class Profile {
 public:
  Profile(std::string name, std::vector<Stage<Filter>> filters, std::vector<ScorerStage> scorers,
          Stage<Picker> picker);

  // `explain` (null for almost every request: nothing is recorded) gets the filters' removals,
  // the scorers' outputs, the picker and the tie-breaks the scorers and the picker wrote to
  // ctx.notes (set with it by the SchedulingCycle); its `candidates` must already list
  // `endpoints` by name (the SchedulingCycle fills them).
  ProfileResult run(CycleContext& ctx, std::vector<Endpoint> endpoints,
                    DecisionExplanation* explain = nullptr) const;

  const std::string& name() const { return name_; }
  const std::vector<Stage<Filter>>& filters() const { return filters_; }
  const std::vector<ScorerStage>& scorers() const { return scorers_; }
  const Stage<Picker>& picker() const { return picker_; }

 private:
  std::vector<Endpoint> run_filter(const Stage<Filter>& f, CycleContext& ctx,
                                   std::vector<Endpoint> endpoints, ProfileTrace& trace) const;
  void add_scores(const ScorerStage& s, CycleContext& ctx, const std::vector<Endpoint>& endpoints,
                  std::vector<double>& total, ProfileTrace& trace) const;
  std::size_t run_picker(CycleContext& ctx, std::vector<Endpoint>& endpoints,
                         const std::vector<double>& total, ProfileTrace& trace) const;

  std::string name_;
  std::vector<Stage<Filter>> filters_;
  std::vector<ScorerStage> scorers_;
  Stage<Picker> picker_;
};

}  // namespace llmd::epp
