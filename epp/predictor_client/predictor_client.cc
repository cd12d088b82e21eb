#include "epp/predictor_client/predictor_client.h"

#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "common/http/client.h"
#include "common/util/thread_name.h"
#include "epp/predictor_client/call_limiter.h"
#include "epp/predictor_client/client_metrics.h"
#include "epp/predictor_client/coalescer.h"
#include "epp/predictor_client/columnar_paths.h"
#include "epp/predictor_client/replica_set.h"
#include "epp/predictor_client/transport.h"
#include "epp/predictor_client/wire.h"

namespace llmd::epp::predictor_client {

namespace {

constexpr std::size_t kPredictorBulkLimit = 10000;  // predictor-api.md section 4
constexpr auto kStuckAfter = std::chrono::seconds(1);

// One blocked predict() call. Lives on the caller's stack; touched only under Impl::mu.
struct Waiter {
  std::condition_variable cv;
  Clock::time_point admitted;
  Clock::time_point deadline;
  bool done = false;
  std::optional<std::vector<Prediction>> result;
};

// One predict_async() call: its callback runs once, outside the mutex, with the answer, or
// with nullopt at its deadline (the dispatcher watches deadlines).
struct AsyncWaiter {
  PredictionCallback callback;
  Clock::time_point admitted;
  Clock::time_point deadline;
};

// A callback ready to run, collected under the mutex and run after it is released.
struct ReadyCallback {
  PredictionCallback callback;
  PredictionResult result;
};

// One batch on its way: its rows' bodies (each encoded when a replica first needs it) and where
// its attempts went. Shared by the callbacks of its attempts, one after the other; the
// transport may call them on any thread.
struct Dispatch {
  Batch batch;
  std::string columnar_body;
  std::string strict_body;
  std::optional<std::size_t> previous;  // the replica of the failed first attempt
  ErrorKind last_error = ErrorKind::kNoReplica;
  int attempt = 0;  // 1 after a failed attempt (one retry)
  int sends = 0;    // exchanges started, including a resend on the strict path
  // The columnar path was answered 404/405: every later attempt goes strict (a replica's
  // columnar retry costs its batch one round trip, never a loop).
  bool strict_only = false;
};

std::chrono::milliseconds attempt_timeout(std::chrono::milliseconds limit,
                                          Clock::duration remaining) {
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(remaining);
  return std::clamp(ms, std::chrono::milliseconds(1), limit);
}

}  // namespace

std::optional<std::string> PredictorClientConfig::validate() const {
  if (replica_urls.empty()) {
    return "replica_urls: at least one predictor URL is required";
  }
  for (const auto& url : replica_urls) {
    if (!http::parse_url(url)) {
      return "replica_urls: invalid URL '" + url + "' (expected http://host[:port][/base])";
    }
  }
  if (coalesce_window.count() <= 0) {
    return "coalesce_window: must be > 0, got " + std::to_string(coalesce_window.count()) + "us";
  }
  if (max_coalesced_rows < 1 || max_coalesced_rows > kPredictorBulkLimit) {
    return "max_coalesced_rows: must be in 1..10000, got " + std::to_string(max_coalesced_rows);
  }
  if (max_concurrent_dispatches < 1) {
    return "max_concurrent_dispatches: must be >= 1, got 0";
  }
  const std::pair<const char*, std::chrono::milliseconds> durations[] = {
      {"request_deadline", request_deadline},
      {"dispatch_timeout", dispatch_timeout},
      {"probe_interval", probe_interval},
      {"probe_timeout", probe_timeout},
      {"columnar_retry_interval", columnar_retry_interval}};
  for (const auto& [name, value] : durations) {
    if (value.count() <= 0) {
      return std::string(name) + ": must be > 0, got " + std::to_string(value.count()) + "ms";
    }
  }
  return std::nullopt;
}

struct PredictorClient::Impl {
  Impl(PredictorClientConfig cfg, prometheus::Registry& registry, std::shared_ptr<Transport> t,
       std::unique_ptr<Rng> r)
      : config(std::move(cfg)),
        transport(std::move(t)),
        metrics(registry, config.replica_urls),
        coalescer(Coalescer::Config{config.coalesce_window, config.max_coalesced_rows,
                                    config.adaptive_coalescing}),
        replicas(config.replica_urls.size()),
        rng(r ? std::move(r) : std::make_unique<Rng>(std::random_device{}())) {
    metrics.call_limit->Set(limiter.limit());  // then on every change (settle)
    dispatcher = named_thread("epp-coalescer", [this] { dispatcher_loop(); });
    prober = named_thread("epp-pred-probe", [this] { prober_loop(); });
  }

  ~Impl() {
    {
      std::unique_lock lk(mu);
      stopping = true;
      for (auto& [ticket, waiter] : waiters) {
        waiter->done = true;
        waiter->result.reset();
        waiter->cv.notify_one();
      }
      waiters.clear();
      for (auto& [ticket, waiter] : async_waiters) {
        ready.push_back({std::move(waiter.callback), std::nullopt});
      }
      async_waiters.clear();
      async_deadlines.clear();
      run_ready(lk);
      callers_gone_cv.wait(lk, [this] { return active_callers == 0; });
    }
    dispatcher_cv.notify_all();
    prober_cv.notify_all();
    dispatcher.join();  // after this no batch starts
    prober.join();
    // Exchanges in flight end within their timeout; their callbacks touch this object.
    std::unique_lock lk(mu);
    dispatches_done_cv.wait(lk, [this] { return in_progress == 0; });
  }

  std::optional<std::vector<Prediction>> predict(const std::vector<features::FeatureInput>& rows,
                                                 Clock::time_point deadline) {
    if (rows.empty()) {
      return std::vector<Prediction>{};
    }
    const auto now = Clock::now();
    if (deadline <= now) {
      metrics.error(ErrorKind::kDeadline);
      return std::nullopt;
    }
    std::vector<features::FeatureInput> copy(rows.begin(), rows.end());
    Waiter waiter;
    waiter.admitted = now;
    waiter.deadline = deadline;
    std::unique_lock lk(mu);
    if (stopping || !admit(copy.size(), now, deadline)) {
      return std::nullopt;
    }
    ++active_callers;
    const bool opens_window = coalescer.pending_callers() == 0;
    const Ticket ticket = coalescer.submit(std::move(copy), now, deadline);
    waiters.emplace(ticket, &waiter);
    // The dispatcher already sleeps until the open window's end; wake it only when this
    // submission opens a window or makes a batch due at once.
    // (A fresh clock: `now` was read before the lock, so another caller's submission time, which
    // next_due() may return, can be later than it.)
    if (opens_window || coalescer.next_due() <= Clock::now()) {
      dispatcher_cv.notify_one();
    }
    std::optional<std::vector<Prediction>> result;
    if (waiter.cv.wait_until(lk, deadline, [&] { return waiter.done; })) {
      result = std::move(waiter.result);
    } else {
      coalescer.cancel(ticket);
      waiters.erase(ticket);
      metrics.error(ErrorKind::kDeadline);
      limiter_miss(Clock::now());
    }
    // The destructor waits for released callers to leave before it frees `mu`.
    if (--active_callers == 0 && stopping) {
      callers_gone_cv.notify_all();
    }
    return result;
  }

  // Overload as a slope, not a cliff: a caller whose rows could not be answered before its
  // deadline, given the rows already ahead of it and the rate the replicas have been
  // answering at, is told at once (composite fallback) instead of joining a batch that would
  // time out for every caller in it. Unknown rates (no answer yet) never shed. Under `mu`.
  bool should_shed(std::size_t rows, Clock::time_point now, Clock::time_point deadline) {
    double rate = 0;  // rows per second, all healthy replicas
    for (std::size_t r = 0; r < row_rate.size(); ++r) {
      if (!replicas.healthy(r)) {
        continue;
      }
      if (row_rate[r] <= 0) {
        return false;
      }
      rate += row_rate[r];
    }
    if (rate <= 0) {
      return false;
    }
    const double ahead = static_cast<double>(in_flight_rows + coalescer.pending_rows() + rows);
    const double needed_s = ahead / rate;
    // Half the time left: what is accepted must finish with room for jitter, or it would
    // still time out with the batch it joins.
    const double left_s = 0.5 * std::chrono::duration<double>(deadline - now).count();
    if (needed_s <= left_s) {
      return false;
    }
    metrics.error(ErrorKind::kShed);
    return true;
  }

  // Admission of one call: the rate-based shedding, then the cap on calls in flight (the cap
  // holds whatever the bottleneck is; see CallLimiter). Under `mu`.
  bool admit(std::size_t rows, Clock::time_point now, Clock::time_point deadline) {
    if (should_shed(rows, now, deadline)) {
      return false;
    }
    if (!limiter.try_admit()) {
      metrics.error(ErrorKind::kShed);
      return false;
    }
    return true;
  }

  // The outcome of an admitted call, for the cap. A timed-out dispatch is the load's doing;
  // other failures (refused, 4xx/5xx, malformed answers) say nothing about it. Under `mu`.
  void settle(const Completion& c, Clock::time_point admitted, Clock::time_point deadline,
              Clock::time_point now) {
    if (c.predictions) {
      metrics.wait_seconds->Observe(std::chrono::duration<double>(now - admitted).count());
      limiter.on_answer(now - admitted, deadline - admitted, now);
    } else if (c.error == ErrorKind::kTimeout || c.error == ErrorKind::kDeadline) {
      return limiter_miss(now);
    } else {
      limiter.on_cancel();
    }
    metrics.call_limit->Set(limiter.limit());
  }

  // An admitted call missed its deadline. Under `mu`.
  void limiter_miss(Clock::time_point now) {
    limiter.on_miss(now);
    metrics.call_limit->Set(limiter.limit());
  }

  // A batch of `rows` sent to `replica` at `start` was answered at `end`. Its service time
  // starts when the replica finished the batch before it, if that was later (batches in flight
  // together queue at the replica): the rate is what the replica gets through, not what one
  // caller waited. Under `mu`.
  void record_rate(std::size_t replica, std::size_t rows, Clock::time_point start,
                   Clock::time_point end) {
    const auto from = std::max(start, last_answer[replica]);
    last_answer[replica] = end;
    const double seconds = std::chrono::duration<double>(end - from).count();
    if (seconds <= 0) {
      return;
    }
    const double sample = static_cast<double>(rows) / seconds;
    double& r = row_rate[replica];
    r = r <= 0 ? sample : 0.8 * r + 0.2 * sample;
  }

  void predict_async(std::vector<features::FeatureInput> rows, Clock::time_point deadline,
                     PredictionCallback done) {
    if (rows.empty()) {
      done(std::vector<Prediction>{});
      return;
    }
    const auto now = Clock::now();
    if (deadline <= now) {
      metrics.error(ErrorKind::kDeadline);
      done(std::nullopt);
      return;
    }
    std::unique_lock lk(mu);
    if (stopping || !admit(rows.size(), now, deadline)) {
      lk.unlock();
      done(std::nullopt);
      return;
    }
    const bool opens_window = coalescer.pending_callers() == 0;
    const Ticket ticket = coalescer.submit(std::move(rows), now, deadline);
    async_waiters.emplace(ticket, AsyncWaiter{std::move(done), now, deadline});
    async_deadlines.emplace(deadline, ticket);
    // A batch due at once (adaptive window, nothing in flight: the usual case below
    // saturation) starts on this thread: waking the dispatcher for it would cost a futex wake
    // and, on a busy host, a wait for a core, on every request.
    std::vector<Batch> batches;
    const auto due_now = Clock::now();
    if (const auto due = coalescer.next_due(); due && *due <= due_now && room() > 0) {
      batches = take_ready_locked(due_now);
    }
    // As in predict() for rows still pending; and the dispatcher wakes for a deadline before
    // the time it sleeps until (it never sleeps past request_deadline, so callers with the
    // usual deadline need no wake-up).
    const bool pending = coalescer.pending_callers() > 0;
    if ((pending && (opens_window || coalescer.next_due() <= Clock::now())) ||
        deadline < dispatcher_sleeps_until) {
      dispatcher_cv.notify_one();
    }
    if (!batches.empty()) {
      lk.unlock();
      for (auto& b : batches) {
        start_dispatch(std::move(b));
      }
    }
  }

  // Under `mu`: takes the batches due at `now` that may start, counted as in flight; the
  // caller starts each with start_dispatch() without `mu`.
  std::vector<Batch> take_ready_locked(Clock::time_point now) {
    auto batches = coalescer.take_ready(now, room());
    for (auto& b : batches) {
      in_flight_rows += b.rows.size();
      ++in_progress;
    }
    return batches;
  }

  Clock::time_point earliest_async_deadline() const {
    return async_deadlines.empty() ? Clock::time_point::max() : async_deadlines.begin()->first;
  }

  void forget_deadline(Clock::time_point deadline, Ticket ticket) {
    auto [first, last] = async_deadlines.equal_range(deadline);
    for (auto it = first; it != last; ++it) {
      if (it->second == ticket) {
        async_deadlines.erase(it);
        return;
      }
    }
  }

  // Async callers past their deadline give up (their rows leave the coalescer). Under `mu`.
  void expire_async(Clock::time_point now) {
    while (!async_deadlines.empty() && async_deadlines.begin()->first <= now) {
      const Ticket ticket = async_deadlines.begin()->second;
      async_deadlines.erase(async_deadlines.begin());
      auto it = async_waiters.find(ticket);
      if (it == async_waiters.end()) {
        continue;  // answered already
      }
      coalescer.cancel(ticket);
      metrics.error(ErrorKind::kDeadline);
      limiter_miss(now);
      ready.push_back({std::move(it->second.callback), std::nullopt});
      async_waiters.erase(it);
    }
  }

  // Runs the collected callbacks without `mu` (they may schedule work, post, or call back in).
  // Called and returns with `lk` held; true when it released it.
  bool run_ready(std::unique_lock<std::mutex>& lk) {
    if (ready.empty()) {
      return false;
    }
    std::vector<ReadyCallback> batch;
    batch.swap(ready);
    lk.unlock();
    for (auto& r : batch) {
      r.callback(std::move(r.result));
    }
    lk.lock();
    return true;
  }

  // Batches that may start now: the configured cap and the replicas' AIMD windows (with no
  // healthy replica, batches go and fail at once: callers must not wait for their deadline).
  std::size_t room() const {
    const std::size_t windows =
        replicas.healthy_count() == 0 ? config.max_concurrent_dispatches : replicas.capacity();
    const std::size_t cap = std::min(config.max_concurrent_dispatches, windows);
    return cap > in_progress ? cap - in_progress : 0;
  }

  // Dispatcher thread.
  void dispatcher_loop() {
    std::unique_lock lk(mu);
    while (!stopping) {
      if (room() > 0) {
        auto batches = take_ready_locked(Clock::now());
        if (!batches.empty()) {
          lk.unlock();
          for (auto& b : batches) {
            start_dispatch(std::move(b));
          }
          lk.lock();
          continue;  // the lock was released: what to wait for may have changed
        }
      }
      expire_async(Clock::now());
      if (run_ready(lk)) {
        continue;  // the lock was released: what to wait for may have changed
      }
      auto wake = async_waiters.empty() ? Clock::time_point::max() : earliest_async_deadline();
      const auto due = coalescer.next_due();
      if (due && room() > 0) {
        wake = std::min(wake, *due);
      }
      // Never longer than the longest deadline a caller can have: a caller with the usual
      // deadline then falls due after this wake-up and need not wake the dispatcher itself.
      wake = std::min(wake, Clock::now() + config.request_deadline);
      dispatcher_sleeps_until = wake;
      dispatcher_cv.wait_until(lk, wake);  // or a submission, or a dispatch freeing a slot
      dispatcher_sleeps_until = Clock::time_point::min();  // awake: it looks at every deadline
    }
  }

  // The dispatcher or a predict_async caller, without `mu`: encodes the batch and starts its
  // first attempt.
  void start_dispatch(Batch batch) {
    auto d = std::make_shared<Dispatch>();
    d->batch = std::move(batch);
    {
      std::unique_lock lk(mu);
      if (!coalescer.is_live(d->batch.id)) {
        coalescer.drop(d->batch.id);  // every caller gave up while it waited for a slot
        return finish_dispatch(lk, *d);
      }
    }
    metrics.batch_rows->Observe(static_cast<double>(d->batch.rows.size()));
    metrics.batch_callers->Observe(static_cast<double>(d->batch.callers));
    send_attempt(std::move(d));
  }

  // Any thread, without `mu`: sends one attempt of a batch to the least outstanding healthy
  // replica (the retry avoids the first one), in the format that replica serves, or fails the
  // batch when none may go. The body is encoded here, outside the lock, the first time a
  // format is needed (the first attempt runs where the batch started).
  void send_attempt(std::shared_ptr<Dispatch> d) {
    std::unique_lock lk(mu);
    if (stopping ||
        (d->sends > 0 && (Clock::now() >= d->batch.deadline || !coalescer.is_live(d->batch.id)))) {
      return fail_dispatch(lk, *d);
    }
    const auto replica = replicas.choose(*rng, d->previous);
    if (!replica) {
      if (d->sends == 0) {
        metrics.error(ErrorKind::kNoReplica);
      }
      return fail_dispatch(lk, *d);
    }
    replicas.begin(*replica);
    const bool columnar = !d->strict_only && columnar_paths.use_columnar(*replica, Clock::now());
    lk.unlock();
    std::string& body = columnar ? d->columnar_body : d->strict_body;
    if (body.empty()) {
      body = columnar ? encode_columnar_request(d->batch.rows) : encode_bulk_request(d->batch.rows);
    }
    ++d->sends;
    metrics.bytes_sent->Increment(static_cast<double>(body.size()));
    const auto now = Clock::now();
    const auto timeout = attempt_timeout(config.dispatch_timeout, d->batch.deadline - now);
    const std::string& sent = body;
    transport->exchange_async(
        *replica, "POST", columnar ? kBulkColumnarPath : kBulkStrictPath, sent, timeout,
        [this, d = std::move(d), r = *replica, now, columnar](TransportResponse response) mutable {
          on_attempt_done(std::move(d), r, now, columnar, std::move(response));
        });
  }

  // Under `mu`: the replica answered the columnar path 404/405 (a reference predictor, which
  // has only the strict one): it gets /predict/bulk/strict until a retry or its re-admission
  // finds the columnar path served (ColumnarPaths). Not a failure: the replica stays healthy
  // and the batch is sent again at once.
  void fall_back_to_strict(std::size_t replica, int status) {
    if (!columnar_paths.not_served(replica, Clock::now())) {
      // Strict already: another batch in flight to it learned it first, or a retry found the
      // reference predictor again.
      spdlog::debug("predictor replica {} still answers {} to {}", config.replica_urls[replica],
                    status, kBulkColumnarPath);
      return;
    }
    metrics.replica_columnar[replica]->Set(0);
    spdlog::warn(
        "predictor replica {} answered {} to {}: sending it {} (columnar tried again in "
        "{} s, or when it is re-admitted after unhealthiness)",
        config.replica_urls[replica], status, kBulkColumnarPath, kBulkStrictPath,
        std::chrono::duration_cast<std::chrono::seconds>(config.columnar_retry_interval).count());
  }

  // Under `mu`: a columnar batch to the replica was answered. A strict replica's retry found our
  // predictor: back on the compact exchange.
  void columnar_served(std::size_t replica) {
    if (columnar_paths.served(replica)) {
      metrics.replica_columnar[replica]->Set(1);
      spdlog::info("predictor replica {} serves {} again: sending it the compact exchange",
                   config.replica_urls[replica], kBulkColumnarPath);
    }
  }

  // The transport's thread, without `mu`: parses the answer (outside the lock), completes the
  // callers or retries once on another replica.
  void on_attempt_done(std::shared_ptr<Dispatch> d, std::size_t replica, Clock::time_point start,
                       bool columnar, TransportResponse response) {
    metrics.dispatch_seconds[replica]->Observe(
        std::chrono::duration<double>(Clock::now() - start).count());
    std::optional<std::vector<Prediction>> predictions;
    ErrorKind kind = ErrorKind::kTransport;
    bool replica_fault = true;
    bool timed_out = false;
    if (response.outcome == TransportResponse::Outcome::kResponse) {
      metrics.bytes_received->Increment(static_cast<double>(response.body.size()));
      if (columnar && (response.status == 404 || response.status == 405)) {
        std::unique_lock lk(mu);
        replicas.end(replica);
        fall_back_to_strict(replica, response.status);
        lk.unlock();
        d->strict_only = true;
        return send_attempt(std::move(d));
      }
    }
    switch (response.outcome) {
      case TransportResponse::Outcome::kTimeout:
        kind = ErrorKind::kTimeout;
        timed_out = true;
        break;
      case TransportResponse::Outcome::kError:
        kind = ErrorKind::kTransport;
        break;
      case TransportResponse::Outcome::kResponse:
        if (response.status != 200) {
          kind = ErrorKind::kHttp;
          // A 4xx (422: rows rejected) would be the same on every replica: no retry and the
          // replica stays healthy. A 5xx (503: models not ready) is the replica's.
          replica_fault = response.status >= 500;
        } else if ((predictions = columnar
                                      ? parse_columnar_response(response.body, d->batch.rows.size())
                                      : parse_bulk_response(response.body))) {
          if (predictions->size() != d->batch.rows.size()) {
            predictions.reset();
            kind = ErrorKind::kShortResponse;
          }
        } else {
          kind = ErrorKind::kBadResponse;
        }
        break;
    }

    std::unique_lock lk(mu);
    replicas.end(replica);
    if (predictions) {
      if (columnar) {
        columnar_served(replica);
      }
      replicas.on_answer(replica);
      record_rate(replica, d->batch.rows.size(), start, Clock::now());
      complete(coalescer.deliver(d->batch.id, *predictions));
      return finish_dispatch(lk, *d);
    }
    metrics.error(kind);
    d->last_error = kind;
    // A slow batch narrows the replica's window (fewer batches, each bigger) instead of taking
    // it out: a replica that still answers other batches is slow, not down; only one that
    // answered nothing for kStuckAfter is taken out by its timeouts.
    const bool stuck = Clock::now() - last_answer[replica] > kStuckAfter;
    const bool unhealthy = timed_out ? replicas.on_timeout(replica) && stuck : replica_fault;
    if (unhealthy && replicas.mark_unhealthy(replica)) {
      metrics.replica_healthy[replica]->Set(0);
      spdlog::warn(
          "predictor replica {} marked unhealthy ({}: {}); probing /readyz",
          config.replica_urls[replica], error_kind_name(kind),
          response.error.empty() ? "status " + std::to_string(response.status) : response.error);
    }
    if (!replica_fault || d->attempt > 0) {
      return fail_dispatch(lk, *d);
    }
    d->previous = replica;
    d->attempt = 1;
    lk.unlock();
    send_attempt(std::move(d));
  }

  // Under `mu`: the batch failed for good; its callers complete with its last error.
  void fail_dispatch(std::unique_lock<std::mutex>& lk, const Dispatch& d) {
    complete(coalescer.fail(d.batch.id, d.last_error));
    finish_dispatch(lk, d);
  }

  // Under `mu` (returns with it held): frees the batch's slot and runs the callbacks it made
  // ready.
  void finish_dispatch(std::unique_lock<std::mutex>& lk, const Dispatch& d) {
    --in_progress;
    in_flight_rows -= d.batch.rows.size();
    run_ready(lk);
    // A freed slot (cap or window), or (adaptive window) the end of the last batch in flight,
    // may let pending rows go now: they start on this thread (as in predict_async, one wake-up
    // fewer per batch); the dispatcher is woken only for rows that must still wait.
    if (coalescer.pending_callers() > 0 && room() > 0) {
      if (const auto due = coalescer.next_due(); due && *due <= Clock::now()) {
        auto batches = take_ready_locked(Clock::now());
        lk.unlock();
        for (auto& b : batches) {
          start_dispatch(std::move(b));
        }
        lk.lock();
      }
    }
    if (coalescer.pending_callers() > 0) {
      dispatcher_cv.notify_one();
    }
    if (in_progress == 0) {
      dispatches_done_cv.notify_all();
    }
  }

  // Wakes the callers of finished tickets (async ones: their callbacks are queued for
  // run_ready). Called with `mu` held.
  void complete(std::vector<Completion> done) {
    const auto now = Clock::now();
    for (auto& c : done) {
      auto it = waiters.find(c.ticket);
      if (it == waiters.end()) {
        auto a = async_waiters.find(c.ticket);
        if (a != async_waiters.end()) {
          settle(c, a->second.admitted, a->second.deadline, now);
          ready.push_back({std::move(a->second.callback), std::move(c.predictions)});
          forget_deadline(a->second.deadline, c.ticket);
          async_waiters.erase(a);
        }
        continue;
      }
      Waiter* w = it->second;
      settle(c, w->admitted, w->deadline, now);
      w->result = std::move(c.predictions);
      w->done = true;
      w->cv.notify_one();
      waiters.erase(it);
    }
  }

  // Prober thread.
  void prober_loop() {
    std::unique_lock lk(mu);
    while (true) {
      prober_cv.wait_for(lk, config.probe_interval, [this] { return stopping; });
      if (stopping) {
        break;
      }
      lk.unlock();
      probe_round();
      lk.lock();
    }
  }

  // Any thread that may block (not the transport's), without `mu` held.
  std::size_t probe_round() {
    std::vector<std::size_t> targets;
    {
      std::lock_guard lk(mu);
      targets = replicas.unhealthy();
    }
    std::size_t recovered = 0;
    for (std::size_t r : targets) {
      const auto response = transport->exchange(r, "GET", kReadyPath, {}, config.probe_timeout);
      if (response.outcome != TransportResponse::Outcome::kResponse || response.status != 200) {
        continue;
      }
      bool changed = false;
      {
        std::lock_guard lk(mu);
        changed = replicas.mark_healthy(r);
        if (changed) {
          metrics.replica_healthy[r]->Set(1);
          // It may be another predictor now (a restart, an upgrade): columnar again, as at
          // start; a reference predictor's 404 puts it back on strict at its first batch.
          if (columnar_paths.reset(r)) {
            metrics.replica_columnar[r]->Set(1);
          }
        }
      }
      if (changed) {
        ++recovered;
        spdlog::info("predictor replica {} healthy again (/readyz 200)", config.replica_urls[r]);
      }
    }
    return recovered;
  }

  const PredictorClientConfig config;
  const std::shared_ptr<Transport> transport;
  const ClientMetrics metrics;

  mutable std::mutex mu;
  Coalescer coalescer;                                       // guarded by mu
  CallLimiter limiter;                                       // guarded by mu
  ReplicaSet replicas;                                       // guarded by mu
  std::unique_ptr<Rng> rng;                                  // guarded by mu
  std::unordered_map<Ticket, Waiter*> waiters;               // guarded by mu
  std::unordered_map<Ticket, AsyncWaiter> async_waiters;     // guarded by mu
  std::multimap<Clock::time_point, Ticket> async_deadlines;  // the same callers; guarded by mu
  std::vector<ReadyCallback> ready;                          // guarded by mu; run by run_ready
  std::size_t in_progress = 0;                               // batches being sent; guarded by mu
  std::size_t in_flight_rows = 0;                            // rows of those batches; guarded by mu
  // Rows per second each replica answers (EWMA; 0 = not measured yet); guarded by mu.
  std::vector<double> row_rate = std::vector<double>(config.replica_urls.size(), 0.0);
  std::vector<Clock::time_point> last_answer =
      std::vector<Clock::time_point>(config.replica_urls.size());  // guarded by mu
  // When the dispatcher will next look at the async deadlines by itself (min while it is
  // awake); guarded by mu.
  Clock::time_point dispatcher_sleeps_until = Clock::time_point::min();
  // Per replica: the columnar or the strict path; guarded by mu.
  ColumnarPaths columnar_paths{config.replica_urls.size(), config.columnar_retry_interval};
  bool stopping = false;           // guarded by mu
  std::size_t active_callers = 0;  // callers inside predict(); guarded by mu
  std::condition_variable callers_gone_cv;
  std::condition_variable dispatcher_cv;
  std::condition_variable dispatches_done_cv;  // in_progress reached 0
  std::condition_variable prober_cv;
  std::thread dispatcher;
  std::thread prober;
};

namespace {

PredictorClientConfig checked(PredictorClientConfig config) {
  if (auto error = config.validate()) {
    throw std::invalid_argument("predictor client config: " + *error);
  }
  return config;
}

}  // namespace

PredictorClient::PredictorClient(PredictorClientConfig config, prometheus::Registry& registry)
    : PredictorClient(checked(config), registry,
                      std::make_shared<HttpTransport>(config.replica_urls)) {}

PredictorClient::PredictorClient(PredictorClientConfig config, prometheus::Registry& registry,
                                 std::shared_ptr<Transport> transport, std::unique_ptr<Rng> rng) {
  config = checked(std::move(config));
  if (!transport) {
    throw std::invalid_argument("predictor client: transport is null");
  }
  impl_ = std::make_unique<Impl>(std::move(config), registry, std::move(transport), std::move(rng));
}

PredictorClient::~PredictorClient() = default;

std::optional<std::vector<Prediction>> PredictorClient::predict(
    const std::vector<features::FeatureInput>& rows,
    std::chrono::steady_clock::time_point deadline) {
  return impl_->predict(rows, deadline);
}

void PredictorClient::predict_async(std::vector<features::FeatureInput> rows,
                                    std::chrono::steady_clock::time_point deadline,
                                    PredictionCallback done) {
  impl_->predict_async(std::move(rows), deadline, std::move(done));
}

std::optional<std::vector<Prediction>> PredictorClient::predict(
    const std::vector<features::FeatureInput>& rows) {
  return impl_->predict(rows, Clock::now() + impl_->config.request_deadline);
}

std::size_t PredictorClient::probe_now() {
  return impl_->probe_round();
}

PredictorClient::Stats PredictorClient::stats() const {
  std::lock_guard lk(impl_->mu);
  Stats s;
  s.waiting_callers = impl_->waiters.size() + impl_->async_waiters.size();
  s.pending_rows = impl_->coalescer.pending_rows();
  s.batches_in_progress = impl_->in_progress;
  return s;
}

bool PredictorClient::replica_healthy(std::size_t replica) const {
  std::lock_guard lk(impl_->mu);
  return impl_->replicas.healthy(replica);
}

double PredictorClient::replica_window(std::size_t replica) const {
  std::lock_guard lk(impl_->mu);
  return impl_->replicas.window(replica);
}

std::size_t PredictorClient::replica_count() const {
  return impl_->config.replica_urls.size();
}

const PredictorClientConfig& PredictorClient::config() const {
  return impl_->config;
}

}  // namespace llmd::epp::predictor_client
