#pragma once
// One immutable generation of the scheduling pipeline: data producers and admitters (run for
// every request, in config order) and the profiles. Built by the config loader, shared as
// shared_ptr<const Pipeline> by every scheduling thread; a reload builds a new generation and
// swaps it in (SchedulingCycle::set_pipeline), requests in flight finish on the one they started
// with.
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epp/interface/plugin.h"
#include "epp/scheduler/profile.h"

namespace llmd::epp {

struct Pipeline {
  std::vector<Stage<DataProducer>> producers;
  std::vector<Stage<Admitter>> admitters;
  std::vector<Profile> profiles;   // profiles.front() is the default
  std::vector<PluginPtr> plugins;  // every instance (config order, then added defaults)
  // Some plugin is configured to ignore predictions (latency-scorer composite-only): every
  // request runs as with x-prediction-based-scheduling: false, so the predictor is not asked
  // and its absence costs nothing.
  bool predictions_ignored = false;
  // How the pool is trained (Plugin::training_streaming_mode of its producer: true = TTFT at
  // the first streamed token, false = TTFT := end-to-end latency). nullopt when no plugin
  // trains the pool (no predicted-latency producer, e.g. a heuristic pipeline): the trainer is
  // sent nothing, as upstream, where training is the latency plugin's. Sending whole-request
  // latencies as TTFT there would poison a model that another pipeline uses.
  std::optional<bool> streaming_mode;

  const Profile* profile(std::string_view name) const;  // null when unknown
  PluginPtr plugin(std::string_view name) const;        // null when unknown
  std::string describe() const;                         // multi-line summary for start-up logs
};

using PipelineConstPtr = std::shared_ptr<const Pipeline>;

}  // namespace llmd::epp
