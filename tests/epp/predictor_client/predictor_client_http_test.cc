// PredictorClient over real loopback sockets: an in-process llmd::http::HttpServer plays the
// predictor (/predict/bulk/columnar and /predict/bulk/strict with deterministic predictions,
// /readyz). The only sleep is
// inside a fake predictor handler, to make a real socket time out.
#include <atomic>
#include <thread>

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "epp/predictor_client/predictor_client.h"
#include "epp/predictor_client/replica_set.h"
#include "epp/predictor_client/transport.h"
#include "tests/common/http_test_util.h"
#include "tests/epp/predictor_client/fake_transport.h"

namespace llmd::epp::predictor_client {
namespace {

using namespace std::chrono_literals;
using http::testing::local_options;
using http::testing::RunningServer;
using testing::FixedRng;
using testing::make_rows;
using testing::metric_value;

// A fake predictor. `ready` false: /readyz and the bulk paths answer 503 like a predictor
// without models. `delay` is slept before answering predictions. `columnar` false: it answers
// /predict/bulk/columnar 404, as a reference (Python) predictor does.
class FakePredictor {
 public:
  explicit FakePredictor(http::ServerOptions options = local_options())
      : server_(std::move(options), [this](http::Request& req) { return handle(req); }) {}

  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_.port()); }
  std::atomic<bool> ready{true};
  std::atomic<int> delay_ms{0};
  std::atomic<bool> columnar{true};
  std::atomic<int> bulk_requests{0};    // answered on either bulk path
  std::atomic<int> strict_requests{0};  // of them, on /predict/bulk/strict
  std::atomic<int> not_found{0};
  std::atomic<int> bad_requests{0};
  std::atomic<int> probes{0};

 private:
  http::Response handle(http::Request& req) {
    if (req.method == "GET" && req.path == "/readyz") {
      ++probes;
      return ready ? http::Response::json(200, {{"status", "ready"}})
                   : http::Response::detail(503, "Models are not ready");
    }
    const bool strict = req.path == "/predict/bulk/strict";
    if (req.method == "POST" && (strict || (columnar && req.path == "/predict/bulk/columnar"))) {
      ++bulk_requests;
      strict_requests += strict ? 1 : 0;
      if (delay_ms > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms.load()));
      }
      if (!ready) {
        return http::Response::detail(503, "Models not ready");
      }
      auto rows =
          strict ? testing::read_bulk_rows(req.body) : testing::read_columnar_rows(req.body);
      if (!rows || rows->empty() || rows->size() > 10000) {
        ++bad_requests;
        return http::Response::json(422, {{"detail", nlohmann::json::array()}});
      }
      return http::Response::text(200, testing::answer_for(req.path, *rows), "application/json");
    }
    ++not_found;
    return http::Response::detail(404, "Not Found");
  }

  RunningServer server_;
};

// A loopback URL nobody listens on: a server's port after it stopped.
std::string dead_url() {
  RunningServer server(local_options(), [](http::Request&) { return http::Response{}; });
  const auto port = server.port();
  server.stop_and_join();
  return "http://127.0.0.1:" + std::to_string(port);
}

PredictorClientConfig config(std::vector<std::string> urls) {
  PredictorClientConfig c;
  c.replica_urls = std::move(urls);
  c.request_deadline = 20s;
  c.dispatch_timeout = 5s;
  c.probe_interval = 1h;
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

TEST(PredictorClientHttp, ConcurrentCallersThroughARealPredictorWithADeadReplica) {
  FakePredictor predictor;
  prometheus::Registry registry;
  // Replica 0 refuses connections; rng 0.0 sends the first batch there to exercise failover.
  auto c = config({dead_url(), predictor.url()});
  PredictorClient client(c, registry, std::make_shared<HttpTransport>(c.replica_urls),
                         std::make_unique<FixedRng>(0.0));
  constexpr int kThreads = 8;
  constexpr int kRounds = 20;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        auto rows = make_rows(static_cast<std::size_t>(20 + 13 * t), 100000 * t + 1000 * round);
        auto got = client.predict(rows);
        if (!got || got->size() != rows.size()) {
          ++wrong;
          continue;
        }
        for (std::size_t i = 0; i < rows.size(); ++i) {
          if ((*got)[i].ttft_ms != testing::fake_ttft(rows[i]) ||
              (*got)[i].tpot_ms != testing::fake_tpot(rows[i])) {
            ++wrong;
            break;
          }
        }
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(predictor.bad_requests.load(), 0);
  EXPECT_FALSE(client.replica_healthy(0));
  EXPECT_TRUE(client.replica_healthy(1));
  EXPECT_GE(metric_value(registry, "llmd_epp_predictor_errors_total", "kind", "transport"), 1);
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_errors_total", "kind", "deadline"), 0);
  // Coalescing: never more POSTs than caller requests (usually far fewer).
  EXPECT_LE(predictor.bulk_requests.load(), kThreads * kRounds);
}

TEST(PredictorClientHttp, ProductionConstructorTalksHttp) {
  FakePredictor predictor;
  prometheus::Registry registry;
  PredictorClient client(config({predictor.url()}), registry);
  auto rows = make_rows(150, 5);
  expect_own_predictions(client.predict(rows), rows);
  auto big = make_rows(12000, 0);  // above the predictor's limit: two POSTs
  expect_own_predictions(client.predict(big), big);
  EXPECT_EQ(predictor.bulk_requests.load(), 3);
}

// A reference predictor has no /predict/bulk/columnar: its 404 is remembered for that replica
// (not a failure: it stays healthy, no error is counted), the batch is resent on the strict path
// at once, and later batches go there directly. A replica that has the path keeps it.
TEST(PredictorClientHttp, AReferencePredictorGetsStrictBatchesAfterOne404) {
  FakePredictor reference;
  reference.columnar = false;
  FakePredictor ours;
  prometheus::Registry registry;
  auto c = config({reference.url(), ours.url()});
  PredictorClient client(c, registry, std::make_shared<HttpTransport>(c.replica_urls),
                         std::make_unique<FixedRng>(0.0));  // ties go to replica 0
  for (int i = 0; i < 10; ++i) {
    auto rows = make_rows(20, 1000 * i);
    expect_own_predictions(client.predict(rows), rows);
  }
  EXPECT_EQ(reference.not_found.load(), 1);
  EXPECT_GE(reference.strict_requests.load(), 1);
  EXPECT_EQ(reference.strict_requests.load(), reference.bulk_requests.load());
  EXPECT_EQ(ours.strict_requests.load(), 0);
  EXPECT_EQ(reference.bulk_requests.load() + ours.bulk_requests.load(), 10);
  EXPECT_TRUE(client.replica_healthy(0));
  const std::string gauge = "llmd_epp_predictor_replica_columnar";
  EXPECT_EQ(metric_value(registry, gauge, "replica", reference.url()), 0);
  EXPECT_EQ(metric_value(registry, gauge, "replica", ours.url()), 1);
  for (const char* kind : {"http", "transport", "bad_response", "deadline"}) {
    EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_errors_total", "kind", kind), 0) << kind;
  }
  EXPECT_EQ(reference.bad_requests.load() + ours.bad_requests.load(), 0);
}

// A rolling upgrade behind the same URL: the reference predictor is replaced by ours. The
// replica's next columnar retry finds the path and it is back on the compact exchange.
TEST(PredictorClientHttp, AReplicaUpgradedToOurPredictorGetsTheCompactExchangeBack) {
  FakePredictor predictor;
  predictor.columnar = false;
  prometheus::Registry registry;
  auto c = config({predictor.url()});
  c.columnar_retry_interval = 1ms;
  PredictorClient client(c, registry, std::make_shared<HttpTransport>(c.replica_urls));
  auto rows = make_rows(20, 0);
  expect_own_predictions(client.predict(rows), rows);
  const std::string gauge = "llmd_epp_predictor_replica_columnar";
  EXPECT_EQ(metric_value(registry, gauge, "replica", predictor.url()), 0);
  EXPECT_EQ(predictor.strict_requests.load(), 1);
  predictor.columnar = true;  // upgraded
  const auto upgraded = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - upgraded < 5ms) {
    std::this_thread::yield();  // past the retry interval
  }
  for (int i = 1; i <= 3; ++i) {
    rows = make_rows(20, 1000 * i);
    expect_own_predictions(client.predict(rows), rows);
  }
  EXPECT_EQ(predictor.strict_requests.load(), 1) << "the retry found the columnar path";
  EXPECT_EQ(predictor.bulk_requests.load(), 4);
  EXPECT_EQ(predictor.not_found.load(), 1);
  EXPECT_EQ(metric_value(registry, gauge, "replica", predictor.url()), 1);
}

TEST(PredictorClientHttp, SlowReplicaTimesOutAndTheBatchMovesOn) {
  FakePredictor slow;
  FakePredictor fast;
  slow.delay_ms = 400;
  prometheus::Registry registry;
  auto c = config({slow.url(), fast.url()});
  c.dispatch_timeout = 100ms;
  PredictorClient client(c, registry, std::make_shared<HttpTransport>(c.replica_urls),
                         std::make_unique<FixedRng>(0.0));
  auto rows = make_rows(10, 0);
  expect_own_predictions(client.predict(rows), rows);
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_errors_total", "kind", "timeout"), 1);
  EXPECT_TRUE(client.replica_healthy(0)) << "one timeout narrows the window, no more";
  EXPECT_LT(client.replica_window(0), ReplicaSet::kInitialWindow);
  EXPECT_EQ(fast.bulk_requests.load(), 1);
}

TEST(PredictorClientHttp, NotReadyPredictorIsProbedBackIn) {
  FakePredictor predictor;
  predictor.ready = false;
  prometheus::Registry registry;
  PredictorClient client(config({predictor.url()}), registry);
  EXPECT_FALSE(client.predict(make_rows(3, 0)).has_value());  // 503, no other replica
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_errors_total", "kind", "http"), 1);
  EXPECT_FALSE(client.replica_healthy(0));
  EXPECT_EQ(client.probe_now(), 0u);
  predictor.ready = true;
  EXPECT_EQ(client.probe_now(), 1u);
  EXPECT_GE(predictor.probes.load(), 2);
  auto rows = make_rows(3, 0);
  expect_own_predictions(client.predict(rows), rows);
}

// No thread per batch and no connection per batch: one I/O thread, kept-alive connections.
TEST(PredictorClientHttp, BatchesReuseKeptAliveConnections) {
  FakePredictor predictor;
  prometheus::Registry registry;
  auto c = config({predictor.url()});
  auto transport = std::make_shared<HttpTransport>(c.replica_urls);
  PredictorClient client(c, registry, transport);
  for (int i = 0; i < 30; ++i) {
    auto rows = make_rows(5, 100 * i);
    expect_own_predictions(client.predict(rows), rows);
  }
  EXPECT_EQ(predictor.bulk_requests.load(), 30);
  EXPECT_EQ(transport->connections_opened(0), 1u);
}

// A kept-alive connection the predictor closed while it was idle is replaced, and the batch
// is resent on a fresh one: the caller never sees the stale connection.
TEST(PredictorClientHttp, AConnectionThePredictorClosedIsReplacedWithoutAnError) {
  auto options = local_options();
  options.idle_timeout = 50ms;
  FakePredictor predictor(options);
  prometheus::Registry registry;
  auto c = config({predictor.url()});
  auto transport = std::make_shared<HttpTransport>(c.replica_urls);
  PredictorClient client(c, registry, transport);
  auto rows = make_rows(4, 0);
  expect_own_predictions(client.predict(rows), rows);
  std::this_thread::sleep_for(1s);  // the server closes the idle connection (50 ms) meanwhile
  expect_own_predictions(client.predict(rows), rows);
  EXPECT_EQ(transport->connections_opened(0), 2u);
  EXPECT_EQ(metric_value(registry, "llmd_epp_predictor_errors_total", "kind", "transport"), 0);
  EXPECT_TRUE(client.replica_healthy(0));
}

TEST(PredictorClientHttp, InvalidUrlIsRejectedAtConstruction) {
  prometheus::Registry registry;
  EXPECT_THROW(PredictorClient(config({"predictor:8001"}), registry), std::invalid_argument);
  EXPECT_THROW(HttpTransport(std::vector<std::string>{"https://x:1"}), std::invalid_argument);
}

}  // namespace
}  // namespace llmd::epp::predictor_client
