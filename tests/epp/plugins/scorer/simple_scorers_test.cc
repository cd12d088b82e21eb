#include <gtest/gtest.h>

#include "epp/plugins/scorer/kv_cache/kv_cache_scorer.h"
#include "epp/plugins/scorer/prefix_cache/prefix_cache_scorer.h"
#include "epp/plugins/scorer/queue/queue_scorer.h"
#include "tests/epp/test_util.h"

namespace llmd::epp {
namespace {

using testing::pod;

class SimpleScorersTest : public ::testing::Test {
 protected:
  std::vector<double> score(const Scorer& s, const std::vector<Endpoint>& eps) {
    CycleContext ctx{req_, rng_};
    return s.score(ctx, eps);
  }
  SchedulingRequest req_ = testing::request();
  testing::FixedRng rng_;
};

TEST_F(SimpleScorersTest, QueueScorerMinMaxNormalises) {
  QueueScorer s("q");
  EXPECT_EQ(score(s, {pod("a", 0, 0), pod("b", 0, 10), pod("c", 0, 5)}),
            (std::vector<double>{1.0, 0.0, 0.5}));
  EXPECT_EQ(score(s, {pod("a", 0, 4), pod("b", 0, 4)}), (std::vector<double>{1.0, 1.0}));
}

TEST_F(SimpleScorersTest, KvCacheScorerIsFreeFraction) {
  KvCacheScorer s("kv");
  auto got = score(s, {pod("a", 0.25), pod("b", 1.2)});
  EXPECT_DOUBLE_EQ(got[0], 0.75);
  EXPECT_DOUBLE_EQ(got[1], 0.0);
}

TEST_F(SimpleScorersTest, PrefixCacheScorerUsesMatchInfo) {
  PrefixCacheScorer s("prefix");
  EXPECT_EQ(score(s, {testing::with_prefix(pod("a"), 3, 4), pod("b")}),
            (std::vector<double>{0.75, 0.0}));
}

}  // namespace
}  // namespace llmd::epp
