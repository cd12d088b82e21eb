#include "common/metrics/exposition.h"

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace llmd::metrics {

std::string serialize(const prometheus::Registry& registry) {
  return prometheus::TextSerializer().Serialize(registry.Collect());
}

}  // namespace llmd::metrics
