#include "epp/predictor_client/coalescer.h"

#include <algorithm>

namespace llmd::epp::predictor_client {

Coalescer::Coalescer(Config config) : config_(config) {
  config_.max_rows = std::max<std::size_t>(config_.max_rows, 1);
}

Ticket Coalescer::submit(std::vector<features::FeatureInput> rows, Clock::time_point now,
                         Clock::time_point deadline) {
  if (rows.empty()) {
    return kEmptyTicket;
  }
  const Ticket ticket = next_ticket_++;
  const std::size_t n = rows.size();
  TicketState& state = tickets_[ticket];
  state.out.resize(n);
  state.rows_left = n;
  pending_.push_back(Pending{ticket, std::move(rows), 0, now, deadline, n > config_.max_rows});
  pending_rows_ += n;
  return ticket;
}

bool Coalescer::front_due(Clock::time_point now) const {
  if (pending_.empty()) {
    return false;
  }
  const Pending& front = pending_.front();
  return front.oversized || pending_rows_ >= config_.max_rows ||
         (config_.adaptive && in_flight_.empty()) || now - front.submitted >= config_.window;
}

std::optional<Clock::time_point> Coalescer::next_due() const {
  if (pending_.empty()) {
    return std::nullopt;
  }
  const Pending& front = pending_.front();
  if (front.oversized || pending_rows_ >= config_.max_rows ||
      (config_.adaptive && in_flight_.empty())) {
    return front.submitted;
  }
  return front.submitted + config_.window;
}

std::vector<Batch> Coalescer::take_ready(Clock::time_point now, std::size_t max_batches) {
  std::vector<Batch> out;
  while (out.size() < max_batches && front_due(now)) {
    out.push_back(cut_batch());
  }
  return out;
}

Batch Coalescer::cut_batch() {
  Batch batch;
  batch.id = next_batch_++;
  std::vector<Part> parts;
  Pending& first = pending_.front();
  if (first.oversized) {
    // A caller above the limit travels alone, in chunks of max_rows.
    const std::size_t n = std::min(config_.max_rows, first.rows.size() - first.offset);
    const auto begin = first.rows.begin() + static_cast<std::ptrdiff_t>(first.offset);
    batch.rows.assign(begin, begin + static_cast<std::ptrdiff_t>(n));
    parts.push_back(Part{first.ticket, first.offset, n});
    batch.callers = 1;
    batch.deadline = first.deadline;
    first.offset += n;
    pending_rows_ -= n;
    if (first.offset == first.rows.size()) {
      pending_.pop_front();
    }
  } else {
    batch.deadline = Clock::time_point::min();
    while (!pending_.empty()) {
      Pending& p = pending_.front();
      if (p.oversized ||
          (!batch.rows.empty() && batch.rows.size() + p.rows.size() > config_.max_rows)) {
        break;
      }
      const std::size_t n = p.rows.size();
      parts.push_back(Part{p.ticket, 0, n});
      if (batch.rows.empty()) {
        batch.rows = std::move(p.rows);
      } else {
        batch.rows.insert(batch.rows.end(), p.rows.begin(), p.rows.end());
      }
      batch.deadline = std::max(batch.deadline, p.deadline);
      ++batch.callers;
      pending_rows_ -= n;
      pending_.pop_front();
    }
  }
  in_flight_.emplace(batch.id, std::move(parts));
  return batch;
}

std::vector<Completion> Coalescer::deliver(uint64_t batch_id,
                                           std::span<const Prediction> predictions) {
  std::vector<Completion> done;
  auto it = in_flight_.find(batch_id);
  if (it == in_flight_.end()) {
    return done;
  }
  std::size_t total = 0;
  for (const Part& part : it->second) {
    total += part.count;
  }
  if (predictions.size() != total) {
    return fail(batch_id, ErrorKind::kShortResponse);
  }
  std::size_t offset = 0;
  for (const Part& part : it->second) {
    auto t = tickets_.find(part.ticket);
    if (t != tickets_.end()) {
      std::copy_n(predictions.begin() + static_cast<std::ptrdiff_t>(offset), part.count,
                  t->second.out.begin() + static_cast<std::ptrdiff_t>(part.caller_offset));
      t->second.rows_left -= part.count;
      if (t->second.rows_left == 0) {
        done.push_back(Completion{part.ticket, std::move(t->second.out), ErrorKind::kTransport});
        tickets_.erase(t);
      }
    }
    offset += part.count;
  }
  in_flight_.erase(it);
  return done;
}

std::vector<Completion> Coalescer::fail(uint64_t batch_id, ErrorKind error) {
  std::vector<Completion> done;
  auto it = in_flight_.find(batch_id);
  if (it == in_flight_.end()) {
    return done;
  }
  for (const Part& part : it->second) {
    auto t = tickets_.find(part.ticket);
    if (t != tickets_.end()) {
      tickets_.erase(t);
      remove_pending(part.ticket);  // an oversized caller may still have chunks queued
      done.push_back(Completion{part.ticket, std::nullopt, error});
    }
  }
  in_flight_.erase(it);
  return done;
}

void Coalescer::drop(uint64_t batch_id) {
  in_flight_.erase(batch_id);
}

bool Coalescer::is_live(uint64_t batch_id) const {
  auto it = in_flight_.find(batch_id);
  if (it == in_flight_.end()) {
    return false;
  }
  return std::any_of(it->second.begin(), it->second.end(),
                     [this](const Part& p) { return tickets_.count(p.ticket) > 0; });
}

bool Coalescer::cancel(Ticket ticket) {
  if (tickets_.erase(ticket) == 0) {
    return false;
  }
  remove_pending(ticket);
  return true;
}

void Coalescer::remove_pending(Ticket ticket) {
  auto it = std::find_if(pending_.begin(), pending_.end(),
                         [ticket](const Pending& p) { return p.ticket == ticket; });
  if (it != pending_.end()) {
    pending_rows_ -= it->rows.size() - it->offset;
    pending_.erase(it);
  }
}

}  // namespace llmd::epp::predictor_client
