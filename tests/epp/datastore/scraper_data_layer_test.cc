// The scraper under the pipeline's data layer (ScrapeConfig): the path it asks, the engine
// mapping each pod is read with (its engine label, else the default engine), a path changed
// while it runs, and https to a pod with a self-signed certificate (insecureSkipVerify).
// Real loopback pods; the tests wait for states (with a bound against a hang), not durations.
#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "epp/datastore/scraper.h"
#include "tests/common/http_test_util.h"
#include "tests/common/tls_test_server.h"
#include "tests/epp/datastore/engine_expositions.h"
#include "tests/epp/datastore/vllm_exposition.h"

namespace llmd::epp {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A pod serving `body` at `path` only (404 elsewhere).
class ExpositionPod {
 public:
  ExpositionPod(std::string path, std::string body)
      : path_(std::move(path)),
        body_(std::move(body)),
        server_(options(), [this](http::Request& r) {
          ++requests_;
          if (r.path != path_) {
            return http::Response::detail(404, "Not Found");
          }
          return http::Response::text(200, body_, "text/plain; version=0.0.4");
        }) {}
  std::string address() const { return "127.0.0.1:" + std::to_string(server_.port()); }
  int requests() const { return requests_.load(); }

 private:
  static http::ServerOptions options() {
    auto o = http::testing::local_options();
    o.io_threads = 1;
    return o;
  }
  const std::string path_, body_;
  std::atomic<int> requests_{0};
  http::testing::RunningServer server_;  // last: stops before the state it uses goes
};

template <typename F>
bool wait_for(F done, std::chrono::seconds limit = 30s) {
  const auto end = Clock::now() + limit;
  while (!done()) {
    if (Clock::now() > end) {
      return false;
    }
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

const PodMetrics* scraped(const PoolSnapshotConstPtr& snap, const std::string& name) {
  const auto* p = snap->find(name);
  return p != nullptr && p->scraped_ok ? &p->info->metrics : nullptr;
}

ScraperOptions fast(ScrapeConfig config) {
  ScraperOptions o;
  o.interval = 10ms;
  o.slot = 5ms;
  o.config = std::make_shared<const ScrapeConfig>(std::move(config));
  return o;
}

TEST(ScraperDataLayer, EachPodIsReadWithItsEnginesMappingAtTheConfiguredPath) {
  ExpositionPod sglang("/prometheus/metrics", testing::sglang_exposition(3, 7, 0.25));
  ExpositionPod trtllm("/prometheus/metrics", testing::trtllm_serve_exposition(1, 4, 0.5));
  PodRegistry registry(10s);
  const std::string engine(ScrapeConfig::kDefaultEngineLabel);
  registry.set_pods(
      {{"sg", sglang.address(), {{engine, "sglang"}}}, {"trt", trtllm.address(), {}}});
  ScrapeConfig c;
  c.path = "/prometheus/metrics";
  c.default_engine = "trtllm-serve";
  Scraper scraper(fast(c), registry);
  scraper.start();
  ASSERT_TRUE(wait_for([&] {
    auto snap = registry.snapshot();
    return scraped(snap, "sg") && scraped(snap, "trt");
  }));
  auto snap = registry.snapshot();
  const PodMetrics& s = *scraped(snap, "sg");
  EXPECT_EQ(s.waiting, 3);
  EXPECT_EQ(s.running, 7);
  EXPECT_DOUBLE_EQ(s.kv_cache_usage, 0.25);
  EXPECT_EQ(s.block_size, 32);
  const PodMetrics& t = *scraped(snap, "trt");
  EXPECT_EQ(t.waiting, 1);
  EXPECT_EQ(t.running, 4);
  EXPECT_EQ(t.num_gpu_blocks, 8192);

  // A reload's path: the next scrapes ask /metrics, which these pods do not serve.
  c.path = "/metrics";
  scraper.set_config(std::make_shared<const ScrapeConfig>(c));
  EXPECT_TRUE(wait_for([&] {
    auto now = registry.snapshot();
    return !scraped(now, "sg") && !scraped(now, "trt");
  }));
  EXPECT_EQ(scraper.needs_restart(c), "");
  scraper.stop();
}

TEST(ScraperDataLayer, APodOfAnotherEngineThanItsMappingIsNotReady) {
  ExpositionPod vllm("/metrics", testing::vllm_exposition());
  PodRegistry registry(10s);
  registry.set_pods({{"v", vllm.address(), {}}});
  ScrapeConfig c;
  c.default_engine = "sglang";
  Scraper scraper(fast(c), registry);
  scraper.start();
  ASSERT_TRUE(wait_for([&] { return vllm.requests() >= 3; }));
  EXPECT_FALSE(scraped(registry.snapshot(), "v"));
  scraper.stop();
}

class ScraperHttps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    certs_ = new http::testing::Certificates;
    made_ = certs_->make("pod");
  }
  static void TearDownTestSuite() {
    delete certs_;
    certs_ = nullptr;
  }
  void SetUp() override {
    ASSERT_TRUE(made_) << "openssl req failed";
    pod_ = std::make_unique<http::testing::TlsServer>(
        certs_->cert("pod"), certs_->key("pod"), [](const std::string& head) {
          const std::string body =
              head.starts_with("GET /metrics ") ? testing::vllm_exposition() : std::string();
          return std::string(body.empty() ? "HTTP/1.1 404 Not Found" : "HTTP/1.1 200 OK") +
                 "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
        });
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(pod_->port()); }
  static inline http::testing::Certificates* certs_ = nullptr;
  static inline bool made_ = false;
  std::unique_ptr<http::testing::TlsServer> pod_;
};

TEST_F(ScraperHttps, InsecureSkipVerifyReadsAPodWithASelfSignedCertificate) {
  PodRegistry registry(10s);
  registry.set_pods({{"p", address(), {}}});
  ScrapeConfig c;
  c.scheme = "https";
  c.insecure_skip_verify = true;
  Scraper scraper(fast(c), registry);
  scraper.start();
  ASSERT_TRUE(wait_for([&] { return scraped(registry.snapshot(), "p") != nullptr; }));
  EXPECT_EQ(scraped(registry.snapshot(), "p")->running, 5);
  EXPECT_GE(pod_->handshakes(), 1);
  ScrapeConfig verify = c;
  verify.insecure_skip_verify = false;
  EXPECT_NE(scraper.needs_restart(verify).find("insecureSkipVerify"), std::string::npos);
  ScrapeConfig plain;
  EXPECT_NE(scraper.needs_restart(plain).find("scheme https -> http"), std::string::npos);
  scraper.stop();
}

TEST_F(ScraperHttps, VerifiedTlsRefusesACertificateNoTrustedCaSigned) {
  PodRegistry registry(10s);
  registry.set_pods({{"p", address(), {}}});
  ScrapeConfig c;
  c.scheme = "https";
  c.insecure_skip_verify = false;  // the system's CAs, which did not sign the pod's certificate
  Scraper scraper(fast(c), registry);
  scraper.start();
  ASSERT_TRUE(wait_for([&] { return scraper.scrapes() >= 3; }));
  EXPECT_FALSE(scraped(registry.snapshot(), "p"));
  EXPECT_EQ(pod_->handshakes(), 0);
  scraper.stop();
}

}  // namespace
}  // namespace llmd::epp
