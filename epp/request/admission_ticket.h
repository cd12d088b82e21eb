#pragma once
// AdmissionTicket: a request's place in the router queue (AdmissionGate) and then the
// in-transit slot the gate counts for it until its dispatch shows in the pod bookkeeping.
//
// The slot goes back exactly once on every path, including the race the queue invites: the
// gate may admit the request on another thread at the moment the request gives up (client
// gone, stream cancelled, owner destroyed). The admission then reaches the owner's executor
// after the ticket was left or destroyed, and the slot it carries is given back there.
//
// Threading: owned by one request, used on its executor only (the gate's wake-up is posted
// there through the Post given to enter()). The gate itself is thread-safe.
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace llmd::epp {

class AdmissionGate;
struct AdmissionRequest;
struct AdmissionVerdict;

class AdmissionTicket {
 public:
  // Runs a continuation on the owner's executor (callable from any thread).
  using Post = std::function<void(std::function<void()>)>;
  using Done = std::function<void(const AdmissionVerdict&)>;

  explicit AdmissionTicket(AdmissionGate* gate);  // null: no router queue
  ~AdmissionTicket();
  AdmissionTicket(const AdmissionTicket&) = delete;
  AdmissionTicket& operator=(const AdmissionTicket&) = delete;

  bool has_gate() const { return gate_ != nullptr; }
  bool needs_service_estimate() const;

  // Asks the gate for a slot in `request.pool`, arriving `now` (the owner's clock: queue
  // waits and expiry are measured from it). `done` runs exactly once with the verdict: inline
  // when the gate answers at once, else through `post`, unless leave() or the destructor
  // comes first (then never). Call once.
  void enter(const AdmissionRequest& request, std::chrono::steady_clock::time_point now,
             const Post& post, Done done);
  // The request gives up waiting: it leaves the queue and `done` will not run.
  void leave();
  // The request's dispatch now counts in the pod bookkeeping, or it ends without one: the
  // in-transit slot goes back (if held; idempotent).
  void release();
  bool waiting() const;

 private:
  // Shared with the gate's posted wake-up, which may outlive the ticket; touched only on the
  // owner's executor.
  struct State {
    bool waiting = false;     // queued; the wake-up has not run
    bool holds_slot = false;  // admitted; the slot is not given back yet
    Done done;
  };

  AdmissionGate* gate_;
  std::string pool_;
  uint64_t queue_id_ = 0;
  std::shared_ptr<State> state_;
};

}  // namespace llmd::epp
