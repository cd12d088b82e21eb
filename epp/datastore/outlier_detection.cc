#include "epp/datastore/outlier_detection.h"

#include <algorithm>

namespace llmd::epp {

std::string OutlierDetectionOptions::validate() const {
  if (consecutive_failures < 0) {
    return "outlier consecutive failures must be >= 0 (0 disables ejection)";
  }
  if (base_ejection.count() <= 0) {
    return "outlier base ejection time must be > 0";
  }
  if (max_ejection < base_ejection) {
    return "outlier max ejection time must be >= the base ejection time";
  }
  if (!(max_ejection_percent >= 0 && max_ejection_percent <= 100)) {
    return "outlier max ejection percent must be within [0, 100]";
  }
  if (!(panic_threshold_percent >= 0 && panic_threshold_percent <= 100)) {
    return "panic threshold percent must be within [0, 100]";
  }
  return {};
}

std::chrono::milliseconds PodOutlierState::on_failure(const OutlierDetectionOptions& options,
                                                      bool may_eject, TimePoint now) {
  ++consecutive_;
  if (options.consecutive_failures == 0 || consecutive_ < options.consecutive_failures ||
      ejected(now) || !may_eject) {
    return std::chrono::milliseconds(0);
  }
  // Good behaviour since the last ejection ended earns its multiplier back, one step per base
  // ejection time (Envoy decrements it each detection interval the host stays healthy).
  if (multiplier_ > 0 && ejected_until_ != TimePoint{}) {
    const auto healthy_for = now - ejected_until_;
    const auto steps = static_cast<int>(healthy_for / options.base_ejection);
    multiplier_ = std::max(0, multiplier_ - steps);
  }
  // Past the maximum a larger multiplier would only delay the way back.
  const auto max_multiplier = std::max<int64_t>(1, options.max_ejection / options.base_ejection);
  multiplier_ = static_cast<int>(std::min<int64_t>(multiplier_ + 1, max_multiplier));
  ++ejections_;
  consecutive_ = 0;
  const auto length = std::min(options.base_ejection * multiplier_, options.max_ejection);
  ejected_until_ = now + length;
  return std::chrono::duration_cast<std::chrono::milliseconds>(length);
}

}  // namespace llmd::epp
