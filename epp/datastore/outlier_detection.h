#pragma once
// Passive health of the pool's pods, as Envoy's outlier detection does it: a pod is ejected
// only after several consecutive failures of the requests sent to it (one broken stream is
// bad luck, five in a row are a broken pod), for a time that grows with each repeat and shrinks
// again while it behaves; at most a share of the pool is ejected at once; and below a panic
// threshold of healthy pods the EPP routes over every pod rather than answering 503 (losing
// most of a pool at once says more about the detector than about the pods, and the few pods
// left could not carry the load anyway).
//
// Plain data guarded by PodRegistry's mutex; the caller passes the time in, so tests need no
// clock.
#include <chrono>
#include <cstdint>
#include <string>

namespace llmd::epp {

struct OutlierDetectionOptions {
  // Consecutive failures (connect error, timeout, 5xx, broken stream) that eject a pod; Envoy's
  // consecutive_5xx default. 0 disables ejection.
  int consecutive_failures = 5;
  // The first ejection lasts this long, the n-th n times as long (Envoy's base_ejection_time).
  std::chrono::milliseconds base_ejection{30000};
  // No ejection lasts longer (Envoy's max_ejection_time).
  std::chrono::milliseconds max_ejection{300000};
  // At most this share of the pool is ejected at once, and always at least one pod (Envoy's
  // max_ejection_percent, default 10).
  double max_ejection_percent = 10;
  // Below this share of healthy pods (scraped recently and not ejected) every pod that ever
  // answered a scrape is a candidate (Envoy's healthy_panic_threshold). 0 disables panic.
  double panic_threshold_percent = 50;

  // Empty when valid, else what is wrong (names the option).
  std::string validate() const;
  bool operator==(const OutlierDetectionOptions&) const = default;
};

class PodOutlierState {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // A request to the pod failed. Ejects it when this completes a run of
  // `consecutive_failures` and `may_eject` (the pool's ejection cap allows one more); returns
  // the length of the ejection it started, or zero.
  std::chrono::milliseconds on_failure(const OutlierDetectionOptions& options, bool may_eject,
                                       TimePoint now);
  // A request to the pod got an answer that was not a server error: the run is broken.
  void on_success() { consecutive_ = 0; }

  bool ejected(TimePoint now) const { return now < ejected_until_; }
  TimePoint ejected_until() const { return ejected_until_; }
  int consecutive_failures() const { return consecutive_; }
  // How many times the pod was ejected since it joined the pool.
  int64_t ejections() const { return ejections_; }

 private:
  int consecutive_ = 0;
  // Multiplier of the next ejection's length: one more per ejection, one less per base
  // ejection time spent back in the pool.
  int multiplier_ = 0;
  TimePoint ejected_until_{};
  int64_t ejections_ = 0;
};

}  // namespace llmd::epp
