#pragma once
// round-robin-picker: ignores scores and cycles through the candidates (the Kubernetes default
// baseline). Its only state is an atomic counter, shared by all scheduling threads of one
// pipeline generation (a reload restarts the cycle).
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class RoundRobinPicker final : public PluginBase<Picker> {
 public:
  static constexpr std::string_view kType = "round-robin-picker";

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle& handle);
  explicit RoundRobinPicker(std::string name) : PluginBase(kType, std::move(name)) {}

  // Picker
  std::size_t pick(CycleContext& ctx, std::span<const ScoredEndpoint> scored) const override;

 private:
  mutable std::atomic<uint64_t> next_{0};
};

}  // namespace llmd::epp
