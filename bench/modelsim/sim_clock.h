#pragma once
// Maps a pod's wall clock (ms) to its simulated engine clock (ms): sim advances `time_scale`
// times faster than wall time (10 = ten times faster than real time) and can be frozen (the
// "stall" fault). Pure value; the caller passes wall times in, so tests need no real clock.
#include <limits>

namespace llmd::modelsim {

class SimClock {
 public:
  SimClock(double time_scale, double wall_origin_ms)
      : scale_(time_scale), wall_base_(wall_origin_ms) {}

  double scale() const { return scale_; }
  bool frozen() const { return frozen_; }
  double sim(double wall_ms) const {
    return frozen_ || wall_ms <= wall_base_ ? sim_base_
                                            : sim_base_ + (wall_ms - wall_base_) * scale_;
  }
  // Wall time at which the simulated clock reaches `sim_ms` (+inf while frozen).
  double wall_at(double sim_ms) const {
    if (frozen_) {
      return std::numeric_limits<double>::infinity();
    }
    return wall_base_ + (sim_ms - sim_base_) / scale_;
  }
  void freeze(double wall_ms) {
    if (!frozen_) {
      sim_base_ = sim(wall_ms);
      frozen_ = true;
    }
  }
  void thaw(double wall_ms) {
    if (frozen_) {
      wall_base_ = wall_ms;
      frozen_ = false;
    }
  }

 private:
  double scale_;
  double wall_base_;
  double sim_base_ = 0;
  bool frozen_ = false;
};

}  // namespace llmd::modelsim
