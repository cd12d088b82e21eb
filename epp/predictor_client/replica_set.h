#pragma once
// ReplicaSet: which predictor replica gets the next batch (epp.md section 3).
// - choose(): the healthy replica with the fewest outstanding dispatches; ties are broken at
//   random with the injected Rng; an excluded replica (the one a retry moves away from) is
//   skipped. No healthy replica -> nullopt (no traffic to a replica that failed until a
//   /readyz probe succeeded).
// - A replica that fails (transport error, 5xx) is marked unhealthy; mark_healthy() after a
//   successful probe lets traffic back.
// - Overload is a slope, not a cliff: each replica has an AIMD window of batches in flight
//   (starts at kInitialWindow; +1/window per answered batch, halved per timeout, at least 1).
//   The client sends no more than the healthy replicas' windows together; the rest of the rows
//   keep coalescing, and callers whose deadline passes use the composite fallback. A timeout
//   alone does not take a replica out; kTimeoutsToUnhealthy timeouts in a row (a stalled
//   replica) do.
// Replicas start healthy. Pure: no threads, no I/O, no clock. Not thread-safe: the owner
// serialises all calls (PredictorClient holds its mutex around every call).
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epp/interface/rng.h"

namespace llmd::epp::predictor_client {

// Splits a comma list of URLs (PREDICTION_SERVER_URL): whitespace around items is trimmed and
// empty items are skipped. Every item must be "http://host[:port][/base]". On a bad item
// returns nullopt and sets `error` to a message naming it.
std::optional<std::vector<std::string>> parse_replica_list(std::string_view list,
                                                           std::string* error = nullptr);

class ReplicaSet {
 public:
  explicit ReplicaSet(std::size_t count);

  std::size_t size() const { return replicas_.size(); }

  // Least outstanding among healthy replicas other than `exclude` that have room in their
  // window (or, when none has, among all of them); random among ties.
  std::optional<std::size_t> choose(Rng& rng, std::optional<std::size_t> exclude = std::nullopt);

  // A dispatch to `replica` starts / ends (whatever its outcome).
  void begin(std::size_t replica);
  void end(std::size_t replica);
  // AIMD: an answered batch widens the window, a timed-out one halves it. on_timeout() returns
  // true when the replica has now timed out kTimeoutsToUnhealthy times in a row.
  void on_answer(std::size_t replica);
  bool on_timeout(std::size_t replica);
  double window(std::size_t replica) const { return replicas_[replica].window; }
  // Batches the healthy replicas accept in flight together (the sum of their windows).
  std::size_t capacity() const;

  static constexpr double kInitialWindow = 4;
  static constexpr double kMaxWindow = 64;
  static constexpr int kTimeoutsToUnhealthy = 3;

  // Returns true when the state changed (for logs and the health gauge).
  bool mark_unhealthy(std::size_t replica);
  bool mark_healthy(std::size_t replica);

  bool healthy(std::size_t replica) const { return replicas_[replica].healthy; }
  int outstanding(std::size_t replica) const { return replicas_[replica].outstanding; }
  std::size_t healthy_count() const;
  // Replicas waiting for a successful /readyz probe.
  std::vector<std::size_t> unhealthy() const;

 private:
  struct State {
    int outstanding = 0;
    bool healthy = true;
    double window = kInitialWindow;
    int timeouts_in_a_row = 0;
  };
  std::vector<State> replicas_;
  std::vector<std::size_t> ties_;  // scratch for choose()
};

}  // namespace llmd::epp::predictor_client
