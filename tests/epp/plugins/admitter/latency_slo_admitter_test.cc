#include "epp/plugins/admitter/latency_slo/latency_slo_admitter.h"

#include <gtest/gtest.h>

#include "tests/epp/test_util.h"

namespace llmd::epp {
namespace {

using testing::predicted;

class LatencySloAdmitterTest : public ::testing::Test {
 protected:
  LatencySloAdmitterTest() {
    req_.priority = -1;
    req_.slo_ttft_ms = 100;
  }
  AdmitDecision admit(std::vector<Endpoint> eps) {
    CycleContext ctx{req_, rng_};
    return admitter_.admit(ctx, eps);
  }
  // Busy, warm, predicted to miss the SLO.
  static Endpoint hopeless(std::string name) {
    Endpoint e = predicted(std::move(name), -50, 0, 3);
    e = testing::with_info(e, [](PodInfo& i) { i.metrics.kv_cache_usage = 0.5; });
    return e;
  }
  LatencySloAdmitter admitter_{"admit", {}};
  SchedulingRequest req_ = testing::request();
  testing::FixedRng rng_;
};

TEST_F(LatencySloAdmitterTest, DeniesSheddableRequestNoPodCanServe) {
  auto d = admit({hopeless("a"), hopeless("b")});
  EXPECT_FALSE(d.admit);
  EXPECT_EQ(d.status, 429);
  EXPECT_FALSE(d.reason.empty());
}

TEST_F(LatencySloAdmitterTest, AdmitsWhenAnyPodIsValidIdleOrCold) {
  Endpoint valid = predicted("v", 10, 0, 3);
  valid = testing::with_info(valid, [](PodInfo& i) { i.metrics.kv_cache_usage = 0.5; });
  EXPECT_TRUE(admit({hopeless("a"), valid}).admit);
  Endpoint idle = hopeless("i");
  idle.dispatched = 0;
  EXPECT_TRUE(admit({hopeless("a"), idle}).admit);
  Endpoint cold = hopeless("c");
  cold = testing::with_info(cold, [](PodInfo& i) { i.metrics.kv_cache_usage = 0.01; });
  EXPECT_TRUE(admit({hopeless("a"), cold}).admit);
}

TEST_F(LatencySloAdmitterTest, OnlySheddableRequestsWithSloAreConsidered) {
  req_.priority = 0;
  EXPECT_TRUE(admit({hopeless("a")}).admit);
  req_.priority = -1;
  req_.slo_ttft_ms.reset();
  EXPECT_TRUE(admit({hopeless("a")}).admit);
}

TEST_F(LatencySloAdmitterTest, FailsOpenWithoutPredictions) {
  Endpoint e = testing::pod("a");
  e.dispatched = 3;
  EXPECT_TRUE(admit({e}).admit);
}

}  // namespace
}  // namespace llmd::epp
