#include "epp/datastore/outlier_detection.h"

#include <gtest/gtest.h>

#include "epp/datastore/pod_registry.h"

namespace llmd::epp {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using TimePoint = std::chrono::steady_clock::time_point;

const TimePoint kT0 = TimePoint{} + std::chrono::hours(1);

OutlierDetectionOptions options(int failures, double max_percent = 10, double panic = 50) {
  OutlierDetectionOptions o;
  o.consecutive_failures = failures;
  o.base_ejection = seconds(30);
  o.max_ejection = seconds(300);
  o.max_ejection_percent = max_percent;
  o.panic_threshold_percent = panic;
  return o;
}

TEST(PodOutlierState, OnlyARunOfFailuresEjectsAndASuccessBreaksIt) {
  PodOutlierState s;
  const auto o = options(3);
  EXPECT_EQ(s.on_failure(o, true, kT0).count(), 0);
  EXPECT_EQ(s.on_failure(o, true, kT0).count(), 0);
  s.on_success();
  EXPECT_EQ(s.on_failure(o, true, kT0).count(), 0);
  EXPECT_EQ(s.on_failure(o, true, kT0).count(), 0);
  EXPECT_FALSE(s.ejected(kT0));
  EXPECT_EQ(s.on_failure(o, true, kT0), seconds(30));
  EXPECT_TRUE(s.ejected(kT0 + seconds(29)));
  EXPECT_FALSE(s.ejected(kT0 + seconds(30)));
  EXPECT_EQ(s.ejections(), 1);
  EXPECT_EQ(s.consecutive_failures(), 0) << "the run starts again after an ejection";
}

TEST(PodOutlierState, RepeatedEjectionsGrowUpToTheMaximumAndShrinkWhileHealthy) {
  PodOutlierState s;
  const auto o = options(1);
  TimePoint t = kT0;
  // Each time the pod is back in the pool it fails at once: 30, 60, 90, ... s, then 300 s.
  for (int n = 1; n <= 12; ++n) {
    const milliseconds length = s.on_failure(o, true, t);
    EXPECT_EQ(length, std::min<milliseconds>(seconds(30) * n, seconds(300))) << n;
    t += length;
  }
  // Back and well behaved for two base ejection times: two steps below the maximum's.
  t += seconds(60);
  EXPECT_EQ(s.on_failure(o, true, t), seconds(270));
  const auto ejections = s.ejections();
  EXPECT_EQ(ejections, 13);
  PodOutlierState calm;
  t = kT0;
  for (int n = 1; n <= 3; ++n) {
    t += calm.on_failure(o, true, t);
  }
  t += seconds(60);  // 90 s was the third; two steps of good behaviour take it to 60 s
  EXPECT_EQ(calm.on_failure(o, true, t), seconds(60));
  // Well behaved for a long time: the multiplier is back to its start.
  t += seconds(60) + seconds(30 * 100);
  EXPECT_EQ(calm.on_failure(o, true, t), seconds(30));
}

TEST(PodOutlierState, NoEjectionWhenTheCapIsReachedOrDetectionIsOff) {
  PodOutlierState capped;
  EXPECT_EQ(capped.on_failure(options(1), false, kT0).count(), 0);
  EXPECT_FALSE(capped.ejected(kT0));
  PodOutlierState off;
  for (int i = 0; i < 100; ++i) {
    EXPECT_EQ(off.on_failure(options(0), true, kT0).count(), 0);
  }
}

TEST(OutlierDetectionOptions, ValidateNamesTheOption) {
  EXPECT_TRUE(options(5).validate().empty());
  auto o = options(5);
  o.max_ejection = milliseconds(10);
  EXPECT_NE(o.validate().find("max ejection time"), std::string::npos);
  o = options(-1);
  EXPECT_NE(o.validate().find("consecutive failures"), std::string::npos);
  o = options(5, 150);
  EXPECT_NE(o.validate().find("max ejection percent"), std::string::npos);
  o = options(5, 10, -1);
  EXPECT_NE(o.validate().find("panic threshold"), std::string::npos);
}

class RegistryHealth : public ::testing::Test {
 protected:
  void make_pool(int n, const OutlierDetectionOptions& o) {
    std::vector<PodConfig> pods;
    for (int i = 0; i < n; ++i) {
      pods.push_back({"p" + std::to_string(i), "127.0.0.1:" + std::to_string(1000 + i), {}});
    }
    registry_.set_pods(pods);
    registry_.configure_outlier_detection(o);
    for (int i = 0; i < n; ++i) {
      scrape(i, kT0);
    }
  }
  void scrape(int pod, TimePoint at) {
    PodMetrics m;
    m.scraped_at = at;
    registry_.update_metrics("p" + std::to_string(pod), m);
  }
  void fail(int pod, int times, TimePoint at = kT0) {
    for (int i = 0; i < times; ++i) {
      registry_.on_pod_failure("p" + std::to_string(pod), at);
    }
  }
  PodRegistry registry_{seconds(2)};
};

TEST_F(RegistryHealth, OneFailureOnEveryPodTakesNoPodOut) {
  make_pool(4, options(5));
  for (int p = 0; p < 4; ++p) {
    fail(p, 1);
  }
  EXPECT_EQ(registry_.candidates(kT0).size(), 4u);
  EXPECT_EQ(registry_.ready_count(kT0), 4u);
  const auto h = registry_.health(kT0);
  EXPECT_EQ(h.healthy, 4u);
  EXPECT_EQ(h.ejected, 0u);
  EXPECT_FALSE(h.panic);
}

TEST_F(RegistryHealth, AtMostTheCappedShareIsEjectedAndAtLeastOnePod) {
  make_pool(4, options(2, 10));
  int64_t heard = 0;
  registry_.set_ejection_listener([&](const std::string& pod, milliseconds length, int64_t n) {
    EXPECT_EQ(pod, "p0");
    EXPECT_EQ(length, seconds(30));
    EXPECT_EQ(n, 1);
    ++heard;
  });
  fail(0, 2);
  fail(1, 2);  // 10 % of 4 pods rounds to none, but one is always allowed: p1 stays
  EXPECT_EQ(heard, 1);
  auto c = registry_.candidates(kT0);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].name(), "p1");
  const auto pods = registry_.pod_health(kT0);
  EXPECT_TRUE(pods[0].ejected);
  EXPECT_EQ(pods[0].ejections, 1);
  EXPECT_FALSE(pods[1].ejected);
  EXPECT_EQ(pods[1].consecutive_failures, 2);
  // p0 returns when its ejection ends, even though p1 kept failing meanwhile.
  EXPECT_EQ(registry_.candidates(kT0 + seconds(30)).size(), 4u);
}

TEST_F(RegistryHealth, BelowThePanicThresholdEveryScrapedPodIsACandidate) {
  make_pool(4, options(1, 50, 50));
  fail(0, 1);
  fail(1, 1);  // 2 of 4 ejected: half the pool is healthy, not below the threshold
  auto h = registry_.health(kT0);
  EXPECT_EQ(h.ejected, 2u);
  EXPECT_FALSE(h.panic);
  EXPECT_EQ(registry_.candidates(kT0).size(), 2u);
  // p3's metrics go stale: 1 of 4 healthy, the pool panics and routes over all four.
  const TimePoint later = kT0 + seconds(3);
  scrape(0, later);
  scrape(1, later);
  scrape(2, later);
  h = registry_.health(later);
  EXPECT_EQ(h.healthy, 1u);
  EXPECT_TRUE(h.panic);
  EXPECT_EQ(registry_.candidates(later).size(), 4u);
  EXPECT_EQ(registry_.ready_count(later), 4u);
  // With the threshold at 0 the same pool routes to its one healthy pod.
  registry_.configure_outlier_detection(options(1, 50, 0));
  EXPECT_EQ(registry_.candidates(later).size(), 1u);
  EXPECT_FALSE(registry_.health(later).panic);
}

TEST_F(RegistryHealth, APodThatNeverAnsweredAScrapeIsNeverACandidate) {
  make_pool(2, options(5));
  registry_.set_pods(
      {{"p0", "127.0.0.1:1000", {}}, {"p1", "127.0.0.1:1001", {}}, {"new", "127.0.0.1:2000", {}}});
  const TimePoint later = kT0 + seconds(10);  // everything stale: panic
  EXPECT_TRUE(registry_.health(later).panic);
  auto c = registry_.candidates(later);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].name(), "p0");
  EXPECT_EQ(c[1].name(), "p1");
  PodRegistry empty;
  EXPECT_EQ(empty.ready_count(kT0), 0u);
  EXPECT_FALSE(empty.health(kT0).panic);
}

}  // namespace
}  // namespace llmd::epp
