#pragma once
// Active-passive EPP replicas: leader election on a coordination.k8s.io/v1 Lease, with the
// semantics of client-go's leaderelection package, so that operators find what they know
// from Kubernetes controllers (and `kubectl get lease` reads the same fields).
//
// - A candidate takes the Lease when it does not exist, names nobody, or has expired: its
//   holder has not changed it for leaseDurationSeconds, measured on this candidate's own
//   clock from the moment it first saw the current version (never from the renewTime written
//   in it, which comes from another machine's clock).
// - Every write is a compare-and-swap: a create (409 = another candidate created it first) or
//   a PUT carrying the resourceVersion read (409 = someone wrote in between: lost the race).
// - The leader renews every retry period. It leads only until `renew_deadline` after the start
//   of its last successful renewal: a leader cut off from the API server stops leading then,
//   whatever its thread is doing, and since renew_deadline < lease duration and a standby
//   counts the lease duration from a moment after that renewal started, it has stopped before
//   any standby may take the Lease. (client-go lets a leader run up to a retry period past its
//   deadline; this one does not.)
// - A leader that stops (SIGTERM) clears the holder, so a standby takes over within its retry
//   period instead of waiting the lease duration out.
//
// LeaderElection is the decision logic alone (no sockets, clocks passed in: unit-testable);
// LeaderElector runs it against the API server on a thread of its own.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "epp/discovery/kube_api_client.h"

namespace llmd::epp::discovery {

struct LeaderElectionConfig {
  std::string identity;         // unique per replica: the pod's name
  std::string lease_namespace;  // where the Lease lives
  std::string lease_name;
  // How long a Lease stays valid without renewal (whole seconds: leaseDurationSeconds).
  std::chrono::seconds lease_duration{15};
  // A leader that could not renew for this long stops leading (< lease_duration).
  std::chrono::milliseconds renew_deadline{10000};
  // Time between attempts to renew (leader) or to acquire (standby, plus up to 1.2x jitter).
  std::chrono::milliseconds retry_period{2000};

  // "" when usable, else what is wrong (the same rules as client-go's).
  std::string validate() const;
};

// A Lease's spec as read and written.
struct LeaseRecord {
  std::string holder;  // "" = nobody (released)
  int64_t lease_duration_seconds = 0;
  std::string acquire_time;  // RFC 3339 with microseconds (a MicroTime), as written
  std::string renew_time;
  int64_t transitions = 0;  // how often the holder changed
  bool operator==(const LeaseRecord&) const = default;
};

// A Lease as the API server holds it.
struct StoredLease {
  LeaseRecord record;
  std::string resource_version;
};

// A MicroTime: "2026-11-26T03:37:23.123456Z".
// The identity a replica holds the Lease under when none is given: the host name plus "_" and
// 16 random hex digits, as client-go's leader election names its callers, so that two replicas
// on one host (or two processes with the same POD_NAME-less host name) never share one.
std::string default_leader_identity(const std::string& host);
std::string micro_time(std::chrono::system_clock::time_point t);
// The Lease object to write (`resource_version` "" on create).
nlohmann::json lease_json(const std::string& lease_namespace, const std::string& name,
                          const LeaseRecord& record, const std::string& resource_version);
// A Lease object read from the API server; nullopt when it is not one.
std::optional<StoredLease> parse_lease(const nlohmann::json& object);

// The decisions of one candidate. Not thread-safe (LeaderElector serialises it).
class LeaderElection {
 public:
  using Clock = std::chrono::steady_clock;

  // What one attempt writes: a create, or an update conditional on `resource_version`.
  struct Write {
    bool create = false;
    LeaseRecord record;
    std::string resource_version;
  };

  explicit LeaderElection(LeaderElectionConfig config);  // throws std::invalid_argument

  // After reading the Lease (nullopt: it does not exist) at `now`: the write that takes or
  // renews it, or nullopt while another candidate holds it validly.
  std::optional<Write> plan(const std::optional<StoredLease>& read, Clock::time_point now,
                            std::chrono::system_clock::time_point wall_now);
  // The API server accepted `write` as `stored` (its new resourceVersion); the attempt had
  // started (before its read) at `attempt_start`.
  void written(const StoredLease& stored, Clock::time_point attempt_start, Clock::time_point now);
  // Stops leading at once and returns the write that hands the Lease over (nullopt when this
  // candidate did not hold it as far as it knows).
  std::optional<Write> release(std::chrono::system_clock::time_point wall_now);

  bool leading(Clock::time_point now) const;
  // Until when this candidate leads (nullopt: it does not).
  std::optional<Clock::time_point> leading_until() const;
  // The holder of the last Lease version seen ("" = none).
  const std::string& observed_holder() const {
    return observed_ ? observed_->record.holder : kNobody;
  }
  const LeaderElectionConfig& config() const { return config_; }

 private:
  static inline const std::string kNobody;
  void observe(const StoredLease& lease, Clock::time_point now);

  LeaderElectionConfig config_;
  std::optional<StoredLease> observed_;          // the last version seen
  Clock::time_point observed_time_{};            // when it was first seen, on this clock
  std::optional<Clock::time_point> renewed_at_;  // start of the last successful renewal
};

// LeaderElection against the API server. Threading: one thread of its own (start() to stop());
// leading() and leader() from any thread.
class LeaderElector {
 public:
  // Throws std::invalid_argument on a bad config or API address.
  LeaderElector(LeaderElectionConfig config, const KubeApiOptions& api);
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  void start();
  // Stops serving at once and campaigning; a leader hands the Lease over first. Returns within
  // about the renew deadline even when the API server does not answer.
  void stop();

  // True while this replica leads; false from its renew deadline on even when the thread is
  // still waiting for the API server. Lock-free (read per request).
  bool leading() const;
  // The leader as last seen ("" = none known).
  std::string leader() const;

 private:
  void loop();
  void attempt();
  void report(LeaderElection::Clock::time_point now);
  void hand_over();

  const std::string lease_path_;  // .../namespaces/<ns>/leases
  KubeApiClient client_;
  KubeTimeouts timeouts_;
  mutable std::mutex mu_;  // guards election_ and the condition variable's state
  LeaderElection election_;
  std::atomic<int64_t> leading_until_ns_{0};  // steady_clock; 0 = not leading
  std::atomic<bool> stopping_{false};
  bool finished_ = false;  // the thread handed over and is about to end (guarded by mu_)
  std::condition_variable cv_;
  // Elector thread only: what was last logged.
  bool reported_leading_ = false;
  std::string reported_holder_;
  std::string last_error_;
  std::thread thread_;
};

}  // namespace llmd::epp::discovery
