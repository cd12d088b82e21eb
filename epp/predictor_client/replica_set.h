#pragma once
// ReplicaSet: which predictor replica gets the next batch (epp.md section 3).
// - choose(): the healthy replica with the fewest outstanding dispatches; ties are broken at
//   random with the injected Rng; an excluded replica (the one a retry moves away from) is
//   skipped. No healthy replica -> nullopt (no traffic to a replica that failed until a
//   /readyz probe succeeded).
// - A replica that fails or times out is marked unhealthy; mark_healthy() after a successful
//   probe lets traffic back.
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

  // Least outstanding among healthy replicas other than `exclude`; random among ties.
  std::optional<std::size_t> choose(Rng& rng, std::optional<std::size_t> exclude = std::nullopt);

  // A dispatch to `replica` starts / ends (whatever its outcome).
  void begin(std::size_t replica);
  void end(std::size_t replica);

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
  };
  std::vector<State> replicas_;
  std::vector<std::size_t> ties_;  // scratch for choose()
};

}  // namespace llmd::epp::predictor_client
