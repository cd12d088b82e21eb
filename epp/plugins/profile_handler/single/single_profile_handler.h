#pragma once
// single-profile-handler: upstream's default profile handler: the configuration has one
// scheduling profile, and it is the primary one. The loader refuses it beside a second profile
// (as upstream). No parameters. Immutable.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/scheduler/config_plugins.h"
#include "epp/plugins/common/params.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp {

class SingleProfileHandler final : public PluginBase<ProfileHandler> {
 public:
  static constexpr std::string_view kType = "single-profile-handler";

  static PluginOrError create(const std::string& name, const nlohmann::json& params,
                              const Handle&) {
    if (auto e = ParamReader(params).finish(); !e.empty()) {
      return PluginOrError::fail(e);
    }
    return {std::make_shared<SingleProfileHandler>(name), {}};
  }
  explicit SingleProfileHandler(std::string name) : PluginBase(kType, std::move(name)) {}
};

}  // namespace llmd::epp
