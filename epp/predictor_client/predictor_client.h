#pragma once
// PredictorClient: the EPP's PredictionSource backed by predictor replicas (epp.md section 3).
//
// predict_async() hands the caller's rows to a Coalescer and returns; the caller's callback
// runs once with its slice of a batch answer, or nullopt when the batch fails or its deadline
// passes (whatever arrives later is discarded). predict() does the same and blocks the calling
// thread on its own condition variable (for callers without an event loop).
//
// Threads (started by the constructor, joined by the destructor); none waits on the network:
// - callers: any thread in predict_async() (admits, submits and returns) or predict()
//   (admits, submits, waits, cancels).
// - dispatcher (1): wakes at the end of each coalescing window (or when rows reach
//   max_coalesced_rows) and at the earliest async caller's deadline (its callback then gets
//   nullopt), cuts batches, encodes them and starts their first attempt on the transport. It
//   cuts only as many batches as there are free dispatch slots, so under overload rows keep
//   coalescing into larger batches instead of piling up as small ones.
// - the transport's thread (HttpTransport: one Asio I/O thread, a keep-alive connection pool
//   per replica): parses each answer, wakes the batch's callers (async callbacks run there),
//   or retries once on another replica when the first attempt failed and the batch's latest
//   caller deadline has not passed.
// - prober (1): every probe_interval sends GET /readyz to each unhealthy replica; a 200 lets
//   traffic back (on the columnar path again: ColumnarPaths).
// Shared state (Coalescer, ReplicaSet, CallLimiter, waiters, Rng) lives behind one mutex that
// is never held across a network call, JSON encoding or parsing. Config and metrics are
// immutable after construction. Async callbacks must not destroy the client.
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "epp/interface/prediction_source.h"
#include "epp/interface/rng.h"

namespace prometheus {
class Registry;
}

namespace llmd::epp::predictor_client {

class Transport;

struct PredictorClientConfig {
  // Predictor base URLs "http://host:port" (the EPP main splits PREDICTION_SERVER_URL with
  // parse_replica_list). At least one.
  std::vector<std::string> replica_urls;
  // Coalescing window, opened by the first pending submission. Default 1 ms; > 0.
  std::chrono::microseconds coalesce_window{1000};
  // Adaptive window: a batch goes at once while no batch is in flight; the window only runs
  // while one is (Coalescer::Config::adaptive).
  bool adaptive_coalescing = true;
  // Rows per POST; a batch is sent at once when pending rows reach it. Default 10000, which is
  // the predictor's bulk limit; 1..10000.
  std::size_t max_coalesced_rows = 10000;
  // Batches in flight at once (further bounded by the replicas' AIMD windows). Default 36;
  // >= 1.
  std::size_t max_concurrent_dispatches = 36;
  // The deadline of predict(rows) without one, and the dispatcher's longest sleep. A caller
  // that passes a deadline waits until it: the scheduling pipeline's predictionDeadlineMs is
  // the one setting of how long a request waits for predictions. Default 50 ms; > 0.
  std::chrono::milliseconds request_deadline{50};
  // Timeout of one dispatch attempt (further capped by the batch's remaining deadline). The
  // default 25 ms leaves room for the one retry inside the default 50 ms deadline; > 0.
  std::chrono::milliseconds dispatch_timeout{25};
  // How often unhealthy replicas are probed with GET /readyz. Default 500 ms; > 0.
  std::chrono::milliseconds probe_interval{500};
  // Timeout of one /readyz probe. Default 200 ms; > 0.
  std::chrono::milliseconds probe_timeout{200};
  // A replica switched to /predict/bulk/strict (it answered the columnar path 404/405) gets one
  // batch on the columnar path again this often, so a rolling upgrade to our predictor behind
  // the same URL brings the compact exchange back; it is also reset to columnar when it is
  // re-admitted after unhealthiness. Default 2 min: an upgrade takes minutes, and a retry that
  // finds the reference predictor again costs that one batch a round trip (it is resent strict
  // at once, within its deadline): one batch in ~100,000 at 1,000 batches/s. > 0.
  std::chrono::milliseconds columnar_retry_interval{120000};

  // nullopt when valid; otherwise a message naming the field and the bad value.
  std::optional<std::string> validate() const;
};

class PredictorClient final : public PredictionSource {
 public:
  // Production: HTTP transport to config.replica_urls. Metrics are registered on `registry`,
  // which must outlive the client. Throws std::invalid_argument on an invalid config.
  PredictorClient(PredictorClientConfig config, prometheus::Registry& registry);
  // Tests: any transport whose replica indices follow config.replica_urls, and a fixed Rng
  // (null = seeded from std::random_device).
  PredictorClient(PredictorClientConfig config, prometheus::Registry& registry,
                  std::shared_ptr<Transport> transport, std::unique_ptr<Rng> rng = nullptr);
  // Stops and joins every thread; callers still waiting get nullopt. No predict() call may
  // start after destruction begins.
  ~PredictorClient() override;
  PredictorClient(const PredictorClient&) = delete;
  PredictorClient& operator=(const PredictorClient&) = delete;

  // PredictionSource
  std::optional<std::vector<Prediction>> predict(
      const std::vector<features::FeatureInput>& rows,
      std::chrono::steady_clock::time_point deadline) override;
  // The same without blocking: `done` runs once on the transport's thread (the answer), on the
  // dispatcher thread (the deadline), or inline (no rows, deadline already past, shed,
  // stopping, no replica to send to). A batch due at once is encoded and started on the
  // calling thread.
  void predict_async(std::vector<features::FeatureInput> rows,
                     std::chrono::steady_clock::time_point deadline,
                     PredictionCallback done) override;

  // predict() with the configured request_deadline from now.
  std::optional<std::vector<Prediction>> predict(const std::vector<features::FeatureInput>& rows);

  // Probes every unhealthy replica now, on the calling thread (the prober does the same every
  // probe_interval). Returns how many became healthy. Thread-safe.
  std::size_t probe_now();

  // Thread-safe snapshots, for status pages and tests.
  struct Stats {
    std::size_t waiting_callers = 0;      // predict() calls blocked right now
    std::size_t pending_rows = 0;         // rows not yet cut into a batch
    std::size_t batches_in_progress = 0;  // being sent (an attempt on the wire or retrying)
  };
  Stats stats() const;
  bool replica_healthy(std::size_t replica) const;
  double replica_window(std::size_t replica) const;  // AIMD batches-in-flight window
  std::size_t replica_count() const;
  const PredictorClientConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::epp::predictor_client
