#include "epp/request/admission_ticket.h"

#include "epp/queue/admission_gate.h"

namespace llmd::epp {

AdmissionTicket::AdmissionTicket(AdmissionGate* gate)
    : gate_(gate), state_(std::make_shared<State>()) {}

AdmissionTicket::~AdmissionTicket() {
  leave();
  release();
}

bool AdmissionTicket::needs_service_estimate() const {
  return gate_ != nullptr && gate_->needs_service_estimate();
}

bool AdmissionTicket::waiting() const {
  return state_->waiting;
}

void AdmissionTicket::enter(const AdmissionRequest& request,
                            std::chrono::steady_clock::time_point now, const Post& post,
                            Done done) {
  if (gate_ == nullptr) {
    done(AdmissionVerdict{});
    return;
  }
  pool_ = request.pool;
  state_->done = std::move(done);
  auto wake = [state = state_, gate = gate_, pool = pool_, post](AdmissionVerdict v) {
    post([state, gate, pool, v] {
      if (!state->waiting) {
        // The request left (or ended) before this admission reached it: the slot goes back.
        if (v.status == 200) {
          gate->on_scheduled(pool);
        }
        return;
      }
      state->waiting = false;
      state->holds_slot = v.status == 200;
      auto finish = std::move(state->done);
      state->done = nullptr;
      finish(v);
    });
  };
  auto ticket = gate_->enter(request, std::move(wake), now);
  if (ticket.queued) {
    queue_id_ = ticket.id;
    state_->waiting = true;
    return;
  }
  state_->holds_slot = ticket.verdict.status == 200;
  auto finish = std::move(state_->done);
  state_->done = nullptr;
  finish(ticket.verdict);
}

void AdmissionTicket::leave() {
  if (!state_->waiting) {
    return;
  }
  state_->waiting = false;
  state_->done = nullptr;
  gate_->cancel(queue_id_);
}

void AdmissionTicket::release() {
  if (state_->holds_slot) {
    state_->holds_slot = false;
    gate_->on_scheduled(pool_);
  }
}

}  // namespace llmd::epp
