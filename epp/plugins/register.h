#pragma once
// Registers every built-in plugin type. Explicit on purpose: self-registering static objects
// are dropped from static libraries and start in an unspecified order.
#include "epp/scheduler/registry.h"

namespace llmd::epp {

void register_builtin_plugins(PluginRegistry& registry);

}  // namespace llmd::epp
