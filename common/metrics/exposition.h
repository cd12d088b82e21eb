#pragma once
// Prometheus text exposition (format 0.0.4) of a prometheus-cpp registry, served on the same
// port as the API. Components build their metric families once at start-up and keep pointers;
// the request path increments members and never looks a metric up by name.
#include <memory>
#include <string>

namespace prometheus {
class Registry;
}

namespace llmd::metrics {

inline constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";
std::string serialize(const prometheus::Registry& registry);

}  // namespace llmd::metrics
