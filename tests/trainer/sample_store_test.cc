#include "trainer/sample_store.h"

#include <gtest/gtest.h>

#include "trainer/persistence.h"
#include "common/util/files.h"

namespace llmd::trainer {
namespace {

features::FeatureInput row(int64_t waiting, double kv, double prefix) {
  features::FeatureInput f;
  f.num_request_waiting = waiting;
  f.kv_cache_percentage = kv;
  f.prefix_cache_score = prefix;
  f.input_token_length = 100;
  return f;
}

TEST(Buckets, BoundariesMatchTheContract) {
  const std::pair<int64_t, int> waiting[] = {{0, 0}, {1, 1},  {2, 1},  {3, 2},  {5, 2},
                                             {6, 3}, {10, 3}, {11, 4}, {500, 4}};
  for (auto [w, b] : waiting) {
    EXPECT_EQ(queue_bucket(w), b) << w;
  }
  EXPECT_EQ(cache_bucket(0.0), 0);
  EXPECT_EQ(cache_bucket(0.0499), 0);
  EXPECT_EQ(cache_bucket(0.05), 1);
  EXPECT_EQ(cache_bucket(0.999), 19);
  EXPECT_EQ(cache_bucket(1.0), 19);
  EXPECT_EQ(prefix_bucket(0.0), 0);
  EXPECT_EQ(prefix_bucket(0.25), 1);
  EXPECT_EQ(prefix_bucket(0.74), 2);
  EXPECT_EQ(prefix_bucket(1.0), 3);
  EXPECT_EQ(BucketKey({4, 19, 3}).index(), kBucketCount - 1);
  EXPECT_EQ(BucketKey::from_index(BucketKey({2, 7, 1}).index()).name(), "queue_2_cache_7_prefix_1");
}

TEST(SampleStore, FifoWindowPerBucketAndTargetsApart) {
  SampleStoreConfig cfg;
  cfg.max_per_bucket = 3;
  cfg.test_ratio = 0.0;
  SampleStore s(cfg);
  for (int i = 1; i <= 5; ++i) {
    s.add(row(0, 0.1, 0.0), i, 0);  // TTFT only
  }
  s.add(row(0, 0.1, 0.0), 0, 7);  // TPOT only
  EXPECT_EQ(s.training_count(Target::kTtft), 3u);
  EXPECT_EQ(s.training_count(Target::kTpot), 1u);
  auto ttft = s.training_samples(Target::kTtft);
  ASSERT_EQ(ttft.size(), 3u);
  EXPECT_FLOAT_EQ(ttft.front().actual_ms, 3.0f);  // oldest two evicted
  EXPECT_FLOAT_EQ(ttft.back().actual_ms, 5.0f);
  EXPECT_EQ(s.generation(Target::kTtft), 5u);
}

TEST(SampleStore, HoldOutShareAndCap) {
  SampleStoreConfig cfg;
  cfg.test_ratio = 0.1;
  cfg.max_test_per_target = 1000;
  SampleStore s(cfg);
  for (int i = 0; i < 5000; ++i) {
    s.add(row(i % 12, (i % 100) / 100.0, (i % 7) / 7.0), 10, 10);
  }
  EXPECT_GT(s.test_count(Target::kTtft), 400u);
  EXPECT_LT(s.test_count(Target::kTtft), 600u);
  for (int i = 0; i < 20000; ++i) {
    s.add(row(i % 12, (i % 100) / 100.0, (i % 7) / 7.0), 10, 10);
  }
  EXPECT_EQ(s.test_count(Target::kTpot), 1000u);
  auto c = s.clear(true, false);
  EXPECT_GT(c.training[0], 0u);
  EXPECT_EQ(s.training_count(Target::kTtft), 0u);
  EXPECT_EQ(s.test_count(Target::kTtft), 1000u);
}

TEST(Snapshot, RoundTripKeepsOrderAndPlacement) {
  SampleStore a(SampleStoreConfig{});
  for (int i = 0; i < 300; ++i) {
    auto f = row(i % 13, (i % 20) / 20.0, (i % 4) / 4.0);
    f.pod_type = static_cast<features::PodType>(i % 4 - 1);
    f.prefill_tokens_in_flight = i;
    a.add(f, 1 + i, i % 3 == 0 ? 0 : 2 + i);
  }
  std::string bytes = encode_snapshot(a);
  SampleStore b(SampleStoreConfig{});
  auto r = decode_snapshot(bytes, b);
  ASSERT_TRUE(r.ok) << r.error;
  for (Target t : kTargets) {
    auto x = a.training_samples(t), y = b.training_samples(t);
    ASSERT_EQ(x.size(), y.size());
    for (std::size_t i = 0; i < x.size(); ++i) {
      EXPECT_EQ(x[i].actual_ms, y[i].actual_ms);
      EXPECT_EQ(x[i].features.pod_type, y[i].features.pod_type);
      EXPECT_EQ(x[i].features.prefill_tokens_in_flight, y[i].features.prefill_tokens_in_flight);
    }
    EXPECT_EQ(a.test_count(t), b.test_count(t));
  }
}

TEST(SampleStore, APlanLeavesNoTraceUntilCommittedAndThenEqualsAdd) {
  SampleStore planned(SampleStoreConfig{});
  SampleStore added(SampleStoreConfig{});
  for (int round = 0; round < 2; ++round) {
    SampleStore::Plan plan = planned.begin_plan();
    for (int i = 0; i < 500; ++i) {
      planned.plan_add(plan, row(i % 7, (i % 20) / 20.0, 0.5), 10 + i, i % 2 ? 3 : 0);
    }
    EXPECT_EQ(plan.placed.size(), 750u);
    if (round == 0) {
      continue;  // dropped: as if the log append had failed
    }
    EXPECT_EQ(planned.training_count(Target::kTtft) + planned.test_count(Target::kTtft), 0u);
    EXPECT_EQ(planned.generation(Target::kTtft), 0u);
    planned.commit(std::move(plan));
  }
  for (int i = 0; i < 500; ++i) {
    added.add(row(i % 7, (i % 20) / 20.0, 0.5), 10 + i, i % 2 ? 3 : 0);
  }
  for (Target t : kTargets) {
    EXPECT_EQ(planned.training_count(t), added.training_count(t));
    EXPECT_EQ(planned.test_count(t), added.test_count(t));  // the same hold-out draws
    EXPECT_EQ(planned.generation(t), added.generation(t));
  }
}

}  // namespace
}  // namespace llmd::trainer
