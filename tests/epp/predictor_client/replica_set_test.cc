#include "epp/predictor_client/replica_set.h"

#include <gtest/gtest.h>

#include "tests/epp/predictor_client/fake_transport.h"

namespace llmd::epp::predictor_client {
namespace {

using testing::FixedRng;

TEST(ParseReplicaList, SplitsTrimsAndSkipsEmptyItems) {
  auto urls = parse_replica_list(" http://p0:8001 ,http://p1:8002,, http://p2:8003/base ");
  ASSERT_TRUE(urls.has_value());
  EXPECT_EQ(*urls,
            (std::vector<std::string>{"http://p0:8001", "http://p1:8002", "http://p2:8003/base"}));
  auto one = parse_replica_list("http://predictor:8001");
  ASSERT_TRUE(one.has_value());
  EXPECT_EQ(one->size(), 1u);
  auto none = parse_replica_list("");
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());
}

TEST(ParseReplicaList, NamesTheBadItem) {
  std::string error;
  EXPECT_FALSE(parse_replica_list("http://ok:1,https://bad:2", &error).has_value());
  EXPECT_NE(error.find("https://bad:2"), std::string::npos) << error;
  EXPECT_FALSE(parse_replica_list("predictor:8001").has_value());
}

TEST(ReplicaSet, ChoosesTheLeastOutstanding) {
  ReplicaSet set(3);
  FixedRng rng(0.0);
  set.begin(0);
  set.begin(0);
  set.begin(1);
  EXPECT_EQ(set.choose(rng), 2u);
  set.begin(2);
  set.begin(2);
  EXPECT_EQ(set.choose(rng), 1u);
  set.end(0);
  set.end(0);
  EXPECT_EQ(set.choose(rng), 0u);
  EXPECT_EQ(set.outstanding(0), 0);
  set.end(0);  // never negative
  EXPECT_EQ(set.outstanding(0), 0);
}

TEST(ReplicaSet, TiesAreBrokenByTheRng) {
  ReplicaSet set(3);
  FixedRng low(0.0);
  FixedRng mid(0.5);
  FixedRng high(0.999);
  EXPECT_EQ(set.choose(low), 0u);
  EXPECT_EQ(set.choose(mid), 1u);
  EXPECT_EQ(set.choose(high), 2u);
  set.begin(0);  // only 1 and 2 tie now
  EXPECT_EQ(set.choose(low), 1u);
  EXPECT_EQ(set.choose(high), 2u);
}

TEST(ReplicaSet, TiesSpreadWithARealRng) {
  ReplicaSet set(4);
  Rng rng(7);
  std::vector<int> hits(4);
  for (int i = 0; i < 4000; ++i) {
    ++hits[*set.choose(rng)];
  }
  for (int h : hits) {
    EXPECT_GT(h, 800);
  }
}

TEST(ReplicaSet, UnhealthyReplicaGetsNoTrafficUntilMarkedHealthy) {
  ReplicaSet set(2);
  FixedRng rng(0.0);
  EXPECT_EQ(set.healthy_count(), 2u);
  EXPECT_TRUE(set.mark_unhealthy(0));
  EXPECT_FALSE(set.mark_unhealthy(0));  // no change the second time
  EXPECT_EQ(set.unhealthy(), std::vector<std::size_t>{0});
  set.begin(1);
  set.begin(1);
  EXPECT_EQ(set.choose(rng), 1u);  // busier, but the only healthy one
  EXPECT_TRUE(set.mark_healthy(0));
  EXPECT_FALSE(set.mark_healthy(0));
  EXPECT_EQ(set.choose(rng), 0u);
  EXPECT_TRUE(set.unhealthy().empty());
}

TEST(ReplicaSet, RetryExcludesTheReplicaThatFailed) {
  ReplicaSet set(3);
  FixedRng rng(0.0);
  EXPECT_EQ(set.choose(rng, 0), 1u);
  set.mark_unhealthy(1);
  EXPECT_EQ(set.choose(rng, 0), 2u);
  ReplicaSet single(1);
  EXPECT_FALSE(single.choose(rng, 0).has_value());
}

TEST(ReplicaSet, NoHealthyReplicaMeansNoChoice) {
  ReplicaSet set(2);
  FixedRng rng(0.0);
  set.mark_unhealthy(0);
  set.mark_unhealthy(1);
  EXPECT_FALSE(set.choose(rng).has_value());
  EXPECT_EQ(set.healthy_count(), 0u);
  EXPECT_EQ(set.unhealthy(), (std::vector<std::size_t>{0, 1}));
}

}  // namespace
}  // namespace llmd::epp::predictor_client
