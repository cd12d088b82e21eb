// PredictorClient against a fake transport: batching across concurrent callers, failover,
// health and probing, deadlines and late answers. No sleeps and no timing asserts: tests that
// must not wait for a deadline use a 60 s deadline and check that no deadline error occurred.
#include "epp/predictor_client/predictor_client.h"
#include "epp/predictor_client/replica_set.h"

#include <atomic>
#include <future>
#include <mutex>
#include <thread>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "tests/epp/predictor_client/fake_transport.h"

namespace llmd::epp::predictor_client {
namespace {

using namespace std::chrono_literals;
using testing::FakeTransport;
using testing::FixedRng;
using testing::make_rows;
using testing::metric_value;

PredictorClientConfig config(std::size_t replicas) {
  PredictorClientConfig c;
  for (std::size_t i = 0; i < replicas; ++i) {
    c.replica_urls.push_back("http://predictor-" + std::to_string(i) + ":8001");
  }
  c.request_deadline = 60s;  // tests never wait for it unless they set a short deadline
  c.dispatch_timeout = 30s;
  c.probe_interval = 1h;  // probes only through probe_now() unless a test says otherwise
  return c;
}

void expect_own_predictions(const std::optional<std::vector<Prediction>>& got,
                            const std::vector<features::FeatureInput>& rows) {
  ASSERT_TRUE(got.has_value());
  ASSERT_EQ(got->size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ((*got)[i].ttft_ms, testing::fake_ttft(rows[i])) << i;
    ASSERT_EQ((*got)[i].tpot_ms, testing::fake_tpot(rows[i])) << i;
  }
}

double errors(prometheus::Registry& r, const char* kind) {
  return metric_value(r, "llmd_epp_predictor_errors_total", "kind", kind);
}

// Spins (yielding, no sleep) until `done()`; the test's own timeout bounds a hang.
template <typename F>
void wait_until(F done) {
  while (!done()) {
    std::this_thread::yield();
  }
}

// A transport whose exchanges (not /readyz) signal `entered` and wait for `released`.
std::shared_ptr<FakeTransport> blocking_transport(std::promise<void>& entered,
                                                  std::shared_future<void> released) {
  return std::make_shared<FakeTransport>(
      [&entered, released](std::size_t replica, const std::string& path, const auto& rows) {
        if (path != "/readyz") {
          entered.set_value();
          released.wait();
        }
        return FakeTransport::healthy(replica, path, rows);
      });
}

TEST(PredictorClient, EmptyRowsNeedNoRequest) {
  prometheus::Registry registry;
  auto transport = std::make_shared<FakeTransport>();
  PredictorClient client(config(1), registry, transport);
  auto got = client.predict({});
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(got->empty());
  EXPECT_TRUE(transport->calls().empty());
}

TEST(PredictorClient, ConcurrentCallersShareOnePost) {
  prometheus::Registry registry;
  auto transport = std::make_shared<FakeTransport>();
  auto c = config(1);
  c.coalesce_window = std::chrono::hours(1);  // only the row count can close the batch
  c.adaptive_coalescing = false;
  c.max_coalesced_rows = 100;
  PredictorClient client(c, registry, transport);

  constexpr int kCallers = 4;
  std::vector<std::vector<features::FeatureInput>> rows;
  for (int i = 0; i < kCallers; ++i) {
    rows.push_back(make_rows(25, 1000 * i));
  }
  std::vector<std::optional<std::vector<Prediction>>> results(kCallers);
  std::vector<std::thread> threads;
  for (int i = 0; i < kCallers; ++i) {
    threads.emplace_back([&, i] { results[i] = client.predict(rows[i]); });
  }
  for (auto& t : threads) {
    t.join();
  }
  for (int i = 0; i < kCallers; ++i) {
    expect_own_predictions(results[i], rows[i]);
  }
  auto posts = transport->posts();
  ASSERT_EQ(posts.size(), 1u);
  EXPECT_EQ(posts[0].rows, 100u);
  EXPECT_EQ(posts[0].path, "/predict/bulk/columnar");
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_batch_callers", "", "", true), 4.0);
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_batch_rows", "", "", true), 100.0);
  EXPECT_EQ(transport->invalid_bodies(), 0);
}

TEST(PredictorClient, AdaptiveWindowSendsAtOnceWhenNothingIsInFlight) {
  prometheus::Registry registry;
  auto transport = std::make_shared<FakeTransport>();
  auto c = config(1);
  c.coalesce_window = std::chrono::hours(1);  // a fixed window would outlast the deadline
  PredictorClient client(c, registry, transport);
  for (int i = 0; i < 3; ++i) {
    auto rows = make_rows(3, 7 + i);
    expect_own_predictions(client.predict(rows), rows);
  }
  EXPECT_EQ(transport->posts().size(), 3u);
}

// Below saturation the batch is due at once: it starts on the caller's thread (no wake-up of
// the dispatcher on the way), while the answer still comes back on the transport's.
TEST(PredictorClient, AnAsyncBatchDueAtOnceStartsOnTheCallersThread) {
  prometheus::Registry registry;
  auto transport = std::make_shared<FakeTransport>();
  PredictorClient client(config(1), registry, transport);
  const auto caller = std::this_thread::get_id();
  for (int i = 0; i < 3; ++i) {
    auto rows = make_rows(4, 10 * i);
    std::promise<PredictionResult> got;
    std::atomic<bool> inline_call{false};
    client.predict_async(rows, std::chrono::steady_clock::now() + 60s, [&](PredictionResult r) {
      inline_call = std::this_thread::get_id() == caller;
      got.set_value(std::move(r));
    });
    expect_own_predictions(got.get_future().get(), rows);
    EXPECT_FALSE(inline_call);
  }
  auto posts = transport->posts();
  ASSERT_EQ(posts.size(), 3u);
  for (const auto& p : posts) {
    EXPECT_EQ(p.started_on, caller);
  }
}

TEST(PredictorClient, WindowClosesABatchForASingleCaller) {
  prometheus::Registry registry;
  auto transport = std::make_shared<FakeTransport>();
  PredictorClient client(config(1), registry, transport);  // default 1 ms window
  auto rows = make_rows(3, 7);
  expect_own_predictions(client.predict(rows), rows);
  ASSERT_EQ(transport->posts().size(), 1u);
}

TEST(PredictorClient, MoreThanAHundredRowsPerCaller) {
  prometheus::Registry registry;
  auto transport = std::make_shared<FakeTransport>();
  PredictorClient client(config(2), registry, transport);
  auto rows = make_rows(250, 0);
  expect_own_predictions(client.predict(rows), rows);
  auto big = make_rows(1500, 50000);
  expect_own_predictions(client.predict(big), big);
}

TEST(PredictorClient, CallerAboveTheBulkLimitIsSplitAndReassembled) {
  prometheus::Registry registry;
  auto transport = std::make_shared<FakeTransport>();
  PredictorClient client(config(2), registry, transport);
  auto rows = make_rows(25000, 0);
  expect_own_predictions(client.predict(rows), rows);
  auto posts = transport->posts();
  ASSERT_EQ(posts.size(), 3u);
  std::vector<std::size_t> sizes;
  for (auto& p : posts) {
    sizes.push_back(p.rows);
  }
  std::sort(sizes.begin(), sizes.end());
  EXPECT_EQ(sizes, (std::vector<std::size_t>{5000, 10000, 10000}));
}

TEST(PredictorClient, FailsOverToTheOtherReplicaOn500) {
  prometheus::Registry registry;
  auto transport = std::make_shared<FakeTransport>(
      [](std::size_t replica, const std::string& path, const auto& rows) {
        if (replica == 0) {
          return TransportResponse::ok(500, R"({"detail":"boom"})");
        }
        return FakeTransport::healthy(replica, path, rows);
      });
  // Rng 0.0: the tie between two idle replicas goes to replica 0, the broken one.
  PredictorClient client(config(2), registry, transport, std::make_unique<FixedRng>(0.0));
  auto rows = make_rows(10, 0);
  expect_own_predictions(client.predict(rows), rows);
  auto posts = transport->posts();
  ASSERT_EQ(posts.size(), 2u);
  EXPECT_EQ(posts[0].replica, 0u);
  EXPECT_EQ(posts[1].replica, 1u);
  EXPECT_EQ(errors(registry, "http"), 1);
  EXPECT_FALSE(client.replica_healthy(0));
  EXPECT_TRUE(client.replica_healthy(1));
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_replica_healthy", "replica",
                         "http://predictor-0:8001"),
            0);
  // The unhealthy replica gets no traffic until a probe succeeds.
  expect_own_predictions(client.predict(rows), rows);
  posts = transport->posts();
  ASSERT_EQ(posts.size(), 3u);
  EXPECT_EQ(posts[2].replica, 1u);
}

TEST(PredictorClient, FailsOverWhenTheFirstReplicaTimesOut) {
  prometheus::Registry registry;
  auto transport = std::make_shared<FakeTransport>(
      [](std::size_t replica, const std::string& path, const auto& rows) {
        if (replica == 0) {
          return TransportResponse::timeout();
        }
        return FakeTransport::healthy(replica, path, rows);
      });
  PredictorClient client(config(2), registry, transport, std::make_unique<FixedRng>(0.0));
  auto rows = make_rows(5, 0);
  expect_own_predictions(client.predict(rows), rows);
  EXPECT_EQ(errors(registry, "timeout"), 1);
  EXPECT_EQ(errors(registry, "deadline"), 0);
  // One slow batch narrows the replica's window; it stays in (a cliff otherwise: under
  // overload every replica times out once and every call falls back).
  EXPECT_TRUE(client.replica_healthy(0));
  EXPECT_EQ(client.replica_window(0), ReplicaSet::kInitialWindow / 2);
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_dispatch_seconds", "replica",
                         "http://predictor-0:8001"),
            1);
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_dispatch_seconds", "replica",
                         "http://predictor-1:8001"),
            1);
  // One caller, answered after the retry: one wait, the whole of it.
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_wait_seconds"), 1);
}

TEST(PredictorClient, AReplicaThatKeepsTimingOutIsTakenOut) {
  prometheus::Registry registry;
  auto transport = std::make_shared<FakeTransport>(
      [](std::size_t replica, const std::string& path, const auto& rows) {
        if (replica == 0 && path != "/readyz") {
          return TransportResponse::timeout();
        }
        return FakeTransport::healthy(replica, path, rows);
      });
  PredictorClient client(config(2), registry, transport, std::make_unique<FixedRng>(0.0));
  for (int i = 0; i < ReplicaSet::kTimeoutsToUnhealthy; ++i) {
    EXPECT_TRUE(client.replica_healthy(0)) << i;
    auto rows = make_rows(5, 10 * i);
    expect_own_predictions(client.predict(rows), rows);  // retried on replica 1
  }
  EXPECT_FALSE(client.replica_healthy(0));
  EXPECT_EQ(errors(registry, "timeout"), ReplicaSet::kTimeoutsToUnhealthy);
}

TEST(PredictorClient, ShortAnswerIsRetriedOnTheOtherReplica) {
  prometheus::Registry registry;
  auto transport = std::make_shared<FakeTransport>(
      [](std::size_t replica, const std::string& path, const auto& rows) {
        if (replica == 0) {
          return TransportResponse::ok(200, testing::answer_for(path, rows, 1));
        }
        return FakeTransport::healthy(replica, path, rows);
      });
  PredictorClient client(config(2), registry, transport, std::make_unique<FixedRng>(0.0));
  auto rows = make_rows(5, 0);
  expect_own_predictions(client.predict(rows), rows);
  EXPECT_EQ(errors(registry, "short_response"), 1);
}

TEST(PredictorClient, RejectedRowsAreNotRetriedAndKeepTheReplicaHealthy) {
  prometheus::Registry registry;
  auto transport =
      std::make_shared<FakeTransport>([](std::size_t, const std::string&, const auto&) {
        return TransportResponse::ok(422, R"({"detail":[]})");
      });
  PredictorClient client(config(2), registry, transport, std::make_unique<FixedRng>(0.0));
  EXPECT_FALSE(client.predict(make_rows(3, 0)).has_value());
  EXPECT_EQ(transport->posts().size(), 1u);
  EXPECT_EQ(errors(registry, "http"), 1);
  EXPECT_EQ(errors(registry, "deadline"), 0);
  EXPECT_TRUE(client.replica_healthy(0));
}

// A reference predictor answers the columnar path 404 (or 405): the same batch goes to it again
// on the strict path, later batches go there directly, and nothing counts as a failure. A
// 404 on the strict path stays what it was: an HTTP error, not retried.
TEST(PredictorClient, A404OnTheColumnarPathSwitchesThatReplicaToStrict) {
  for (int status : {404, 405}) {
    prometheus::Registry registry;
    auto transport = std::make_shared<FakeTransport>(
        [status](std::size_t replica, const std::string& path, const auto& rows) {
          if (path == "/predict/bulk/columnar") {
            return TransportResponse::ok(status, R"({"detail":"Not Found"})");
          }
          return FakeTransport::healthy(replica, path, rows);
        });
    PredictorClient client(config(1), registry, transport);
    for (int i = 0; i < 3; ++i) {
      auto rows = make_rows(4, 100 * i);
      expect_own_predictions(client.predict(rows), rows);
    }
    auto posts = transport->posts();
    ASSERT_EQ(posts.size(), 4u) << status;
    EXPECT_EQ(posts[0].path, "/predict/bulk/columnar");
    for (std::size_t i = 1; i < posts.size(); ++i) {
      EXPECT_EQ(posts[i].path, "/predict/bulk/strict") << i;
    }
    EXPECT_TRUE(client.replica_healthy(0));
    EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_replica_columnar"), 0);
    for (const char* kind : {"http", "bad_response", "deadline", "no_replica"}) {
      EXPECT_EQ(errors(registry, kind), 0) << kind;
    }
    EXPECT_EQ(transport->invalid_bodies(), 0);
  }
  prometheus::Registry registry;
  auto transport =
      std::make_shared<FakeTransport>([](std::size_t, const std::string&, const auto&) {
        return TransportResponse::ok(404, R"({"detail":"Not Found"})");
      });
  PredictorClient client(config(2), registry, transport, std::make_unique<FixedRng>(0.0));
  EXPECT_FALSE(client.predict(make_rows(3, 0)).has_value());
  auto posts = transport->posts();
  ASSERT_EQ(posts.size(), 2u) << "columnar, then strict once on the same replica";
  EXPECT_EQ(posts[1].path, "/predict/bulk/strict");
  EXPECT_EQ(errors(registry, "http"), 1);
  EXPECT_TRUE(client.replica_healthy(0));
  EXPECT_TRUE(client.replica_healthy(1));
}

// A replica that the strict path served, upgraded to our predictor behind the same URL: while
// its retry is not due, batches stay strict; the retry (one batch on the columnar path) finds
// the path served and the replica is back on the compact exchange, gauge 1.
TEST(PredictorClient, AStrictReplicaTriesTheColumnarPathAgainOncePerRetryInterval) {
  std::atomic<bool> upgraded{false};
  auto transport = std::make_shared<FakeTransport>(
      [&upgraded](std::size_t replica, const std::string& path, const auto& rows) {
        if (path == "/predict/bulk/columnar" && !upgraded) {
          return TransportResponse::ok(404, R"({"detail":"Not Found"})");
        }
        return FakeTransport::healthy(replica, path, rows);
      });
  for (const auto retry : {std::chrono::milliseconds(1h), std::chrono::milliseconds(1)}) {
    prometheus::Registry registry;
    auto c = config(1);
    c.columnar_retry_interval = retry;
    upgraded = false;
    const std::size_t before = transport->posts().size();
    PredictorClient client(c, registry, transport);
    auto rows = make_rows(4, 0);
    expect_own_predictions(client.predict(rows), rows);  // columnar 404, then strict
    EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_replica_columnar"), 0);
    upgraded = true;
    const auto fell_back = std::chrono::steady_clock::now();
    wait_until([&] { return std::chrono::steady_clock::now() - fell_back > 5ms; });
    for (int i = 1; i <= 3; ++i) {
      rows = make_rows(4, 100 * i);
      expect_own_predictions(client.predict(rows), rows);
    }
    auto posts = transport->posts();
    posts.erase(posts.begin(), posts.begin() + static_cast<std::ptrdiff_t>(before));
    ASSERT_EQ(posts.size(), 5u);
    EXPECT_EQ(posts[0].path, "/predict/bulk/columnar");
    EXPECT_EQ(posts[1].path, "/predict/bulk/strict");
    if (retry == std::chrono::milliseconds(1h)) {
      for (std::size_t i = 2; i < posts.size(); ++i) {
        EXPECT_EQ(posts[i].path, "/predict/bulk/strict") << "no retry within the hour: " << i;
      }
      EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_replica_columnar"), 0);
    } else {
      for (std::size_t i = 2; i < posts.size(); ++i) {
        EXPECT_EQ(posts[i].path, "/predict/bulk/columnar") << "the retry, then columnar: " << i;
      }
      EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_replica_columnar"), 1);
    }
    for (const char* kind : {"http", "bad_response", "deadline", "no_replica"}) {
      EXPECT_EQ(errors(registry, kind), 0) << kind;
    }
  }
}

// A retry that finds the reference predictor again costs its batch one round trip: resent
// strict at once, answered, no error; the replica stays strict (gauge 0) until the next retry.
TEST(PredictorClient, AColumnarRetryAnswered404IsResentStrict) {
  prometheus::Registry registry;
  auto transport = std::make_shared<FakeTransport>(
      [](std::size_t replica, const std::string& path, const auto& rows) {
        if (path == "/predict/bulk/columnar") {
          return TransportResponse::ok(404, R"({"detail":"Not Found"})");
        }
        return FakeTransport::healthy(replica, path, rows);
      });
  auto c = config(1);
  c.columnar_retry_interval = 1ms;
  PredictorClient client(c, registry, transport);
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    wait_until([&] { return std::chrono::steady_clock::now() - start > 2ms; });
    auto rows = make_rows(4, 100 * i);
    expect_own_predictions(client.predict(rows), rows);
  }
  auto posts = transport->posts();
  ASSERT_EQ(posts.size(), 6u) << "every batch: a columnar retry, then strict";
  for (std::size_t i = 0; i < posts.size(); ++i) {
    EXPECT_EQ(posts[i].path, i % 2 == 0 ? "/predict/bulk/columnar" : "/predict/bulk/strict") << i;
  }
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_replica_columnar"), 0);
  for (const char* kind : {"http", "bad_response", "deadline", "no_replica"}) {
    EXPECT_EQ(errors(registry, kind), 0) << kind;
  }
  EXPECT_TRUE(client.replica_healthy(0));
}

// A strict replica that becomes unhealthy and is re-admitted may be another predictor now: its
// next batch goes to the columnar path (gauge 1 again), whatever the retry interval.
TEST(PredictorClient, AReplicaReadmittedAfterUnhealthinessGetsTheColumnarPathAgain) {
  std::atomic<int> phase{0};  // 0: reference predictor, 1: down, 2: our predictor
  auto transport = std::make_shared<FakeTransport>(
      [&phase](std::size_t replica, const std::string& path, const auto& rows) {
        if (phase == 1) {
          return TransportResponse::ok(503, R"({"detail":"Models not ready"})");
        }
        if (phase == 0 && path == "/predict/bulk/columnar") {
          return TransportResponse::ok(404, R"({"detail":"Not Found"})");
        }
        return FakeTransport::healthy(replica, path, rows);
      });
  prometheus::Registry registry;
  auto c = config(1);
  c.columnar_retry_interval = std::chrono::hours(1);
  PredictorClient client(c, registry, transport);
  auto rows = make_rows(4, 0);
  expect_own_predictions(client.predict(rows), rows);
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_replica_columnar"), 0);
  phase = 1;
  EXPECT_FALSE(client.predict(make_rows(4, 100)).has_value());
  EXPECT_FALSE(client.replica_healthy(0));
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_replica_columnar"), 0);
  phase = 2;
  EXPECT_EQ(client.probe_now(), 1u);
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_replica_columnar"), 1)
      << "re-admitted: columnar again";
  rows = make_rows(4, 200);
  expect_own_predictions(client.predict(rows), rows);
  auto posts = transport->posts();
  ASSERT_EQ(posts.size(), 4u);
  EXPECT_EQ(posts[2].path, "/predict/bulk/strict") << "the batch that found it down";
  EXPECT_EQ(posts[3].path, "/predict/bulk/columnar");
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_replica_columnar"), 1);
}

TEST(PredictorClient, AllReplicasDownGivesNulloptWithoutWaitingForTheDeadline) {
  prometheus::Registry registry;
  auto transport =
      std::make_shared<FakeTransport>([](std::size_t, const std::string&, const auto&) {
        return TransportResponse::failure("connect: Connection refused");
      });
  PredictorClient client(config(2), registry, transport);
  EXPECT_FALSE(client.predict(make_rows(3, 0)).has_value());  // deadline is 60 s away
  EXPECT_EQ(errors(registry, "deadline"), 0);
  EXPECT_EQ(errors(registry, "transport"), 2);  // first try and the one retry
  EXPECT_FALSE(client.replica_healthy(0));
  EXPECT_FALSE(client.replica_healthy(1));
  // Nobody healthy: fail at once, without touching the network.
  EXPECT_FALSE(client.predict(make_rows(3, 0)).has_value());
  EXPECT_EQ(transport->posts().size(), 2u);
  EXPECT_EQ(errors(registry, "no_replica"), 1);
  EXPECT_EQ(errors(registry, "deadline"), 0);
}

TEST(PredictorClient, ReadyzProbeLetsAReplicaBackIn) {
  prometheus::Registry registry;
  std::atomic<bool> up{false};
  auto transport = std::make_shared<FakeTransport>(
      [&](std::size_t replica, const std::string& path, const auto& rows) {
        if (!up.load() || replica == 0) {
          return path == "/readyz" ? TransportResponse::ok(503, R"({"detail":"no"})")
                                   : TransportResponse::failure("refused");
        }
        return FakeTransport::healthy(replica, path, rows);
      });
  PredictorClient client(config(2), registry, transport);
  EXPECT_FALSE(client.predict(make_rows(2, 0)).has_value());
  EXPECT_EQ(client.probe_now(), 0u);  // both still answer 503
  up = true;
  EXPECT_EQ(client.probe_now(), 1u);  // replica 1 is ready now, replica 0 is not
  EXPECT_FALSE(client.replica_healthy(0));
  EXPECT_TRUE(client.replica_healthy(1));
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_replica_healthy", "replica",
                         "http://predictor-1:8001"),
            1);
  auto rows = make_rows(4, 10);
  expect_own_predictions(client.predict(rows), rows);
  EXPECT_EQ(transport->posts().back().replica, 1u);
}

TEST(PredictorClient, BackgroundProberRestoresAReplica) {
  prometheus::Registry registry;
  std::atomic<int> failures_left{1};
  auto transport = std::make_shared<FakeTransport>(
      [&](std::size_t replica, const std::string& path, const auto& rows) {
        if (path != "/readyz" && failures_left.fetch_sub(1) > 0) {
          return TransportResponse::failure("reset");
        }
        return FakeTransport::healthy(replica, path, rows);
      });
  auto c = config(1);
  c.probe_interval = 1ms;
  PredictorClient client(c, registry, transport);
  EXPECT_FALSE(client.predict(make_rows(2, 0)).has_value());
  wait_until([&] { return client.replica_healthy(0); });
  auto rows = make_rows(2, 0);
  expect_own_predictions(client.predict(rows), rows);
}

TEST(PredictorClient, LateAnswerIsDiscarded) {
  prometheus::Registry registry;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> posts{0};
  auto transport = std::make_shared<FakeTransport>(
      [&](std::size_t replica, const std::string& path, const auto& rows) {
        if (path != "/readyz" && posts.fetch_add(1) == 0) {
          released.wait();  // the first answer arrives after its caller gave up
        }
        return FakeTransport::healthy(replica, path, rows);
      });
  PredictorClient client(config(1), registry, transport);
  auto first = make_rows(3, 100);
  EXPECT_FALSE(client.predict(first, std::chrono::steady_clock::now() + 20ms).has_value());
  EXPECT_EQ(errors(registry, "deadline"), 1);
  release.set_value();
  // The next caller gets its own rows' answer, never the stale one.
  auto second = make_rows(3, 900);
  expect_own_predictions(client.predict(second), second);
  EXPECT_EQ(errors(registry, "deadline"), 1);
  EXPECT_TRUE(client.replica_healthy(0));
}

TEST(PredictorClient, SaturatedDispatchesKeepCoalescingAndSkipExpiredCallers) {
  prometheus::Registry registry;
  std::promise<void> entered;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> posts{0};
  auto transport = std::make_shared<FakeTransport>(
      [&](std::size_t replica, const std::string& path, const auto& rows) {
        if (path != "/readyz" && posts.fetch_add(1) == 0) {
          entered.set_value();
          released.wait();
        }
        return FakeTransport::healthy(replica, path, rows);
      });
  auto c = config(1);
  c.max_concurrent_dispatches = 1;
  PredictorClient client(c, registry, transport);

  auto a = make_rows(2, 0);
  std::optional<std::vector<Prediction>> got_a;
  std::thread ta([&] { got_a = client.predict(a); });
  entered.get_future().wait();  // the only dispatch slot is busy now

  // A caller that gives up while its rows wait for a slot is never sent.
  EXPECT_FALSE(
      client.predict(make_rows(4, 500), std::chrono::steady_clock::now() + 10ms).has_value());

  // Two callers arriving while the slot is busy end up in one batch.
  auto b = make_rows(3, 1000);
  auto d = make_rows(5, 2000);
  std::optional<std::vector<Prediction>> got_b;
  std::optional<std::vector<Prediction>> got_d;
  std::thread tb([&] { got_b = client.predict(b); });
  std::thread td([&] { got_d = client.predict(d); });
  wait_until([&] { return client.stats().waiting_callers == 3; });
  release.set_value();
  ta.join();
  tb.join();
  td.join();
  expect_own_predictions(got_a, a);
  expect_own_predictions(got_b, b);
  expect_own_predictions(got_d, d);
  auto sent = transport->posts();
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0].rows, 2u);
  EXPECT_EQ(sent[1].rows, 8u);
}

TEST(PredictorClient, DestructionReleasesWaitingCallers) {
  prometheus::Registry registry;
  std::promise<void> entered;
  std::promise<void> release;
  auto transport = blocking_transport(entered, release.get_future().share());
  auto client = std::make_unique<PredictorClient>(config(1), registry, transport);
  auto result = std::async(std::launch::async, [&] { return client->predict(make_rows(2, 0)); });
  entered.get_future().wait();
  std::thread destroyer([&] { client.reset(); });
  EXPECT_FALSE(result.get().has_value());  // released by shutdown, not by the 60 s deadline
  release.set_value();
  destroyer.join();
}

// predict_async: the callback gets the answer on a client thread; the caller never waits.
TEST(PredictorClient, AsyncCallersShareOneBatchAndGetTheirOwnSlices) {
  prometheus::Registry registry;
  auto transport = std::make_shared<FakeTransport>();
  auto c = config(1);
  c.coalesce_window = std::chrono::hours(1);  // only the row count closes the batch
  c.adaptive_coalescing = false;
  c.max_coalesced_rows = 10;
  PredictorClient client(c, registry, transport);
  auto a = make_rows(4, 0);
  auto b = make_rows(6, 100);
  std::promise<PredictionResult> got_a;
  std::promise<PredictionResult> got_b;
  const auto caller = std::this_thread::get_id();
  std::atomic<bool> inline_call{false};
  client.predict_async(a, std::chrono::steady_clock::now() + 60s, [&](PredictionResult r) {
    inline_call = inline_call || std::this_thread::get_id() == caller;
    got_a.set_value(std::move(r));
  });
  client.predict_async(b, std::chrono::steady_clock::now() + 60s, [&](PredictionResult r) {
    inline_call = inline_call || std::this_thread::get_id() == caller;
    got_b.set_value(std::move(r));
  });
  expect_own_predictions(got_a.get_future().get(), a);
  expect_own_predictions(got_b.get_future().get(), b);
  EXPECT_FALSE(inline_call);
  ASSERT_EQ(transport->posts().size(), 1u);
  EXPECT_EQ(transport->posts()[0].rows, 10u);
}

TEST(PredictorClient, AsyncCallerPastItsDeadlineGetsNulloptFromTheDispatcher) {
  prometheus::Registry registry;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto transport = std::make_shared<FakeTransport>(
      [&](std::size_t replica, const std::string& path, const auto& rows) {
        if (path != "/readyz") {
          released.wait();  // the answer comes after the caller's deadline
        }
        return FakeTransport::healthy(replica, path, rows);
      });
  PredictorClient client(config(1), registry, transport);
  std::promise<PredictionResult> got;
  client.predict_async(make_rows(3, 0), std::chrono::steady_clock::now() + 20ms,
                       [&](PredictionResult r) { got.set_value(std::move(r)); });
  EXPECT_FALSE(got.get_future().get().has_value());
  EXPECT_EQ(errors(registry, "deadline"), 1);
  release.set_value();
  // The late answer is discarded; the next caller gets its own rows.
  auto rows = make_rows(2, 50);
  std::promise<PredictionResult> next;
  client.predict_async(rows, std::chrono::steady_clock::now() + 60s,
                       [&](PredictionResult r) { next.set_value(std::move(r)); });
  expect_own_predictions(next.get_future().get(), rows);
}

TEST(PredictorClient, DestructionAnswersPendingAsyncCallers) {
  prometheus::Registry registry;
  std::promise<void> entered;
  std::promise<void> release;
  auto transport = blocking_transport(entered, release.get_future().share());
  auto client = std::make_unique<PredictorClient>(config(1), registry, transport);
  std::promise<PredictionResult> got;
  client->predict_async(make_rows(2, 0), std::chrono::steady_clock::now() + 60s,
                        [&](PredictionResult r) { got.set_value(std::move(r)); });
  entered.get_future().wait();
  std::thread destroyer([&] { client.reset(); });
  EXPECT_FALSE(got.get_future().get().has_value());  // by shutdown, not by the deadline
  release.set_value();
  destroyer.join();
}

// Overload as a slope: once the replicas' rate is known, a caller whose rows cannot be
// answered before its deadline is told at once (composite fallback) and its rows never go out.
TEST(PredictorClient, ShedsACallerThatCannotBeAnsweredBeforeItsDeadline) {
  prometheus::Registry registry;
  auto transport = std::make_shared<FakeTransport>();
  PredictorClient client(config(1), registry, transport);
  auto first = make_rows(3, 0);
  expect_own_predictions(client.predict(first), first);  // measures the replica's rate
  // 50,000 rows in 5 ms is far beyond any measured rate of the fake (JSON both ways).
  auto big = make_rows(50000, 1);
  EXPECT_FALSE(client.predict(big, std::chrono::steady_clock::now() + 5ms).has_value());
  EXPECT_EQ(errors(registry, "shed"), 1);
  EXPECT_EQ(errors(registry, "deadline"), 0);
  EXPECT_EQ(transport->posts().size(), 1u) << "the shed rows were never sent";
  std::promise<PredictionResult> async_shed;
  client.predict_async(std::move(big), std::chrono::steady_clock::now() + 5ms,
                       [&](PredictionResult r) { async_shed.set_value(std::move(r)); });
  EXPECT_FALSE(async_shed.get_future().get().has_value());
  EXPECT_EQ(errors(registry, "shed"), 2);
  // A caller with time to spare is served as before.
  auto later = make_rows(3, 9);
  expect_own_predictions(client.predict(later), later);
}

// Whatever the bottleneck (here a replica that stalls), the client holds no more calls than
// its cap (CallLimiter, 64 at start): the rest fall back at once instead of all waiting for a
// deadline they would all miss.
TEST(PredictorClient, CallsBeyondTheCapFallBackAtOnce) {
  prometheus::Registry registry;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto transport = std::make_shared<FakeTransport>(
      [released](std::size_t replica, const std::string& path, const auto& rows) {
        if (path != "/readyz") {
          released.wait();
        }
        return FakeTransport::healthy(replica, path, rows);
      });
  PredictorClient client(config(1), registry, transport);
  constexpr int kCalls = 100;
  std::mutex mu;
  int answered = 0, fell_back = 0;
  std::promise<void> all_done;
  auto on_done = [&](PredictionResult r) {
    std::lock_guard lk(mu);
    (r ? answered : fell_back)++;
    if (answered + fell_back == kCalls) {
      all_done.set_value();
    }
  };
  for (int i = 0; i < kCalls; ++i) {
    client.predict_async(make_rows(2, 10 * i), std::chrono::steady_clock::now() + 60s, on_done);
  }
  {
    std::lock_guard lk(mu);
    EXPECT_EQ(fell_back, kCalls - 64) << "answered at once, before anything came back";
  }
  EXPECT_EQ(errors(registry, "shed"), kCalls - 64);
  release.set_value();
  all_done.get_future().wait();
  EXPECT_EQ(answered, 64);
  EXPECT_EQ(errors(registry, "deadline"), 0);
}

TEST(PredictorClient, NothingIsShedBeforeTheRateIsKnown) {
  prometheus::Registry registry;
  auto transport = std::make_shared<FakeTransport>();
  PredictorClient client(config(1), registry, transport);
  auto big = make_rows(20000, 0);
  expect_own_predictions(client.predict(big), big);
  EXPECT_EQ(errors(registry, "shed"), 0);
}

TEST(PredictorClientConfig, DefaultsFollowTheSpec) {
  PredictorClientConfig c;
  EXPECT_EQ(c.coalesce_window, 1ms);
  EXPECT_EQ(c.max_coalesced_rows, 10000u);
  EXPECT_EQ(c.max_concurrent_dispatches, 36u);
  EXPECT_EQ(c.request_deadline, 50ms);
  EXPECT_EQ(c.probe_interval, 500ms);
  EXPECT_LT(c.dispatch_timeout, c.request_deadline);
}

TEST(PredictorClientConfig, ValidationNamesTheField) {
  auto good = config(1);
  EXPECT_FALSE(good.validate().has_value());
  auto check = [](PredictorClientConfig c, const std::string& field) {
    auto error = c.validate();
    ASSERT_TRUE(error.has_value()) << field;
    EXPECT_EQ(error->rfind(field, 0), 0u) << *error;
  };
  auto c = good;
  c.replica_urls.clear();
  check(c, "replica_urls");
  c = good;
  c.replica_urls.push_back("https://x:1");
  check(c, "replica_urls");
  c = good;
  c.max_coalesced_rows = 10001;
  check(c, "max_coalesced_rows");
  c = good;
  c.max_coalesced_rows = 0;
  check(c, "max_coalesced_rows");
  c = good;
  c.coalesce_window = std::chrono::microseconds(0);
  check(c, "coalesce_window");
  c = good;
  c.max_concurrent_dispatches = 0;
  check(c, "max_concurrent_dispatches");
  c = good;
  c.dispatch_timeout = 0ms;
  check(c, "dispatch_timeout");
  prometheus::Registry registry;
  c = good;
  c.replica_urls.clear();
  EXPECT_THROW(PredictorClient(c, registry, std::make_shared<FakeTransport>()),
               std::invalid_argument);
}

}  // namespace
}  // namespace llmd::epp::predictor_client
