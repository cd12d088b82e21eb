#pragma once
// Coalescer: the pure bookkeeping of the predictor client (epp.md section 3). Callers submit
// their rows; rows are packed into batches of at most `max_rows`; each batch's answer is cut
// back into per-caller slices.
//
// Rules:
// - A batch opens at the first pending submission and is due when `window` has passed since
//   that submission, or as soon as the pending rows reach `max_rows`. Adaptive (default): it
//   is also due at once while no batch is in flight. Waiting only pays while a batch is on the
//   wire (its answer frees the way for one bigger batch); at low load the window would be pure
//   added latency on every request, at high load batches still merge.
// - Callers are packed first-come first-served and a caller's rows are never split across
//   batches, except for a caller that alone has more than `max_rows` rows: it gets batches of
//   its own (chunks of `max_rows`, due at once) and its slice is reassembled from all of them.
// - An answer for a batch must hold exactly one prediction per row; anything else fails every
//   caller of that batch (kShortResponse). A failure of any batch of a caller fails the caller.
// - A cancelled caller (deadline passed) has its pending rows removed; answers for its
//   in-flight rows are discarded.
// - An empty submission is never batched: it returns kEmptyTicket and needs no answer.
//
// Pure: no threads, no clock of its own (time is passed in), no I/O. Not thread-safe: the owner
// serialises all calls (PredictorClient holds its mutex around every call).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "common/features/schema.h"
#include "epp/interface/prediction_source.h"
#include "epp/predictor_client/error_kind.h"

namespace llmd::epp::predictor_client {

using Clock = std::chrono::steady_clock;
using Ticket = uint64_t;
inline constexpr Ticket kEmptyTicket = 0;

// A batch ready to be sent. Owns its rows (one POST body).
struct Batch {
  uint64_t id = 0;
  std::vector<features::FeatureInput> rows;
  std::size_t callers = 0;     // distinct callers with rows in this batch
  Clock::time_point deadline;  // latest deadline among those callers
};

// The outcome for one caller: its predictions in row order, or the error that ended it.
struct Completion {
  Ticket ticket = kEmptyTicket;
  std::optional<std::vector<Prediction>> predictions;
  ErrorKind error = ErrorKind::kTransport;  // meaningful only when !predictions
};

class Coalescer {
 public:
  struct Config {
    std::chrono::microseconds window{1000};  // > 0
    std::size_t max_rows = 10000;            // >= 1
    bool adaptive = true;                    // due at once while nothing is in flight
  };

  explicit Coalescer(Config config);

  // Queues a caller's rows (moved in). Returns kEmptyTicket for no rows.
  Ticket submit(std::vector<features::FeatureInput> rows, Clock::time_point now,
                Clock::time_point deadline);
  // When take_ready() will next return a batch; nullopt when nothing is pending. A time in the
  // past means "now".
  std::optional<Clock::time_point> next_due() const;
  // Up to `max_batches` batches that are due at `now`, oldest callers first.
  std::vector<Batch> take_ready(Clock::time_point now, std::size_t max_batches = SIZE_MAX);

  // The answer for a batch: completes the callers whose every row is now answered.
  std::vector<Completion> deliver(uint64_t batch_id, std::span<const Prediction> predictions);
  // The batch failed: every still-waiting caller with rows in it completes with `error`.
  std::vector<Completion> fail(uint64_t batch_id, ErrorKind error);
  // Forgets a batch without completing anyone (used when no caller of it is live any more).
  void drop(uint64_t batch_id);
  // True while at least one caller with rows in the batch still waits for an answer.
  bool is_live(uint64_t batch_id) const;

  // The caller gave up: its pending rows are removed, later answers for it are discarded.
  // Returns false when the ticket is unknown (already completed or cancelled).
  bool cancel(Ticket ticket);

  std::size_t pending_rows() const { return pending_rows_; }
  std::size_t pending_callers() const { return pending_.size(); }
  std::size_t in_flight_batches() const { return in_flight_.size(); }
  std::size_t waiting_callers() const { return tickets_.size(); }
  const Config& config() const { return config_; }

 private:
  struct Pending {
    Ticket ticket;
    std::vector<features::FeatureInput> rows;
    std::size_t offset = 0;  // rows before this were already batched (oversized callers only)
    Clock::time_point submitted;
    Clock::time_point deadline;
    bool oversized = false;
  };
  struct Part {
    Ticket ticket;
    std::size_t caller_offset;  // where the slice goes in the caller's result
    std::size_t count;          // rows; the batch offset is the sum of the previous parts
  };
  struct TicketState {
    std::vector<Prediction> out;  // sized to the caller's row count
    std::size_t rows_left = 0;    // rows not answered yet (batched or still pending)
  };

  bool front_due(Clock::time_point now) const;
  Batch cut_batch();
  void remove_pending(Ticket ticket);

  Config config_;
  uint64_t next_ticket_ = 1;
  uint64_t next_batch_ = 1;
  std::deque<Pending> pending_;
  std::size_t pending_rows_ = 0;
  std::unordered_map<uint64_t, std::vector<Part>> in_flight_;
  std::unordered_map<Ticket, TicketState> tickets_;
};

}  // namespace llmd::epp::predictor_client
