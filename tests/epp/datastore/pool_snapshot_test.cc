// The pool snapshot (issue 29 item 6): candidates point into an immutable published snapshot,
// per-request bookkeeping lives in each pod's PodLive. Deterministic: fixed time points; the
// threaded test checks invariants after a fixed amount of work, never timing.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "epp/datastore/pod_registry.h"

namespace llmd::epp {
namespace {

using namespace std::chrono_literals;
const auto kT0 = std::chrono::steady_clock::time_point(std::chrono::hours(1));

PodMetrics scraped(double kv, std::chrono::steady_clock::time_point at = kT0) {
  PodMetrics m;
  m.kv_cache_usage = kv;
  m.models = {"m"};
  m.scraped_at = at;
  return m;
}

class PoolSnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    registry_.set_pods({{"a", "10.0.0.1:8000", {}}, {"b", "10.0.0.2:8000", {}}});
    registry_.update_metrics("a", scraped(0.1));
    registry_.update_metrics("b", scraped(0.2));
  }
  PodRegistry registry_{std::chrono::seconds(2)};
};

TEST_F(PoolSnapshotTest, CandidatesShareThePublishedPodInfoInsteadOfCopyingIt) {
  auto first = registry_.candidates(kT0);
  auto second = registry_.candidates(kT0 + 1s);
  ASSERT_EQ(first.size(), 2u);
  ASSERT_EQ(second.size(), 2u);
  const auto snap = registry_.snapshot();
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(first[i].info.get(), second[i].info.get());
    EXPECT_EQ(first[i].info.get(), snap->pods[i].info.get());
  }
  EXPECT_EQ(first[0].name(), "a");
  EXPECT_EQ(first[1].metrics().kv_cache_usage, 0.2);
}

TEST_F(PoolSnapshotTest, APublishedSnapshotIsNeverChanged) {
  const PoolSnapshotConstPtr before = registry_.snapshot();
  const PodInfo* a_info = before->pods[0].info.get();
  // Every kind of writer: a scrape, a failed scrape, an ejection, a peer report, a reload.
  registry_.update_metrics("a", scraped(0.9, kT0 + 1s));
  registry_.mark_scrape_failed("b");
  OutlierDetectionOptions eject_on_one;
  eject_on_one.consecutive_failures = 1;
  eject_on_one.max_ejection_percent = 100;
  registry_.configure_outlier_detection(eject_on_one);
  registry_.on_pod_failure("a", kT0 + 1s);
  registry_.set_peer_in_flight("peer", {{"a", 5, 0, 0}}, kT0 + 1s);
  registry_.set_pods({{"b", "10.0.0.2:8000", {}}, {"c", "10.0.0.3:8000", {}}});

  ASSERT_EQ(before->pods.size(), 2u);
  EXPECT_EQ(before->pods[0].info.get(), a_info);
  EXPECT_EQ(before->pods[0].info->metrics.kv_cache_usage, 0.1);
  EXPECT_EQ(before->pods[0].ejected_until, std::chrono::steady_clock::time_point{});
  EXPECT_TRUE(before->pods[1].scraped_ok);
  EXPECT_TRUE(before->peers->empty());
  EXPECT_EQ(before->panic_threshold_percent, OutlierDetectionOptions{}.panic_threshold_percent);
  EXPECT_EQ(before->candidates(kT0).size(), 2u);
  EXPECT_EQ(before->candidates(kT0)[0].dispatched, 0);  // the peer's 5 are not in it

  const auto now = registry_.snapshot();
  ASSERT_EQ(now->pods.size(), 2u);
  EXPECT_EQ(now->pods[0].info->name, "b");
  EXPECT_FALSE(now->pods[0].scraped_ok);
}

TEST_F(PoolSnapshotTest, ARemovedPodStaysValidWhileARequestHoldsIt) {
  Endpoint held = registry_.candidates(kT0)[0];
  ASSERT_EQ(held.name(), "a");
  PodLive& live = *held.info->live;
  live.on_dispatch(100);
  registry_.set_pods({{"b", "10.0.0.2:8000", {}}});  // a leaves the pool mid-request
  EXPECT_EQ(registry_.live("a"), nullptr);
  EXPECT_EQ(held.address(), "10.0.0.1:8000");  // the request still knows where it went
  live.on_first_token(100, 16);
  EXPECT_EQ(live.load().decode_tokens, 16);
  live.on_finished(100, 16, true);
  const PodLive::Load end = live.load();
  EXPECT_EQ(end.dispatched, 0);
  EXPECT_EQ(end.prefill_tokens, 0);
  EXPECT_EQ(end.decode_tokens, 0);
}

TEST_F(PoolSnapshotTest, APodReaddedAfterRemovalStartsFromItsOwnCounts) {
  Endpoint old = registry_.candidates(kT0)[0];
  old.info->live->on_dispatch(100);
  registry_.set_pods({{"b", "10.0.0.2:8000", {}}});
  registry_.set_pods({{"a", "10.0.0.1:8000", {}}, {"b", "10.0.0.2:8000", {}}});
  registry_.update_metrics("a", scraped(0.1));
  // The old request ends on the object it started on: the new one never goes negative.
  old.info->live->on_finished(100, 0, false);
  const auto now = registry_.candidates(kT0);
  ASSERT_EQ(now[0].name(), "a");
  EXPECT_NE(now[0].info->live, old.info->live);
  EXPECT_EQ(now[0].dispatched, 0);
  EXPECT_EQ(now[0].prefill_tokens_in_flight, 0);
  EXPECT_EQ(old.info->live->load().dispatched, 0);
}

TEST_F(PoolSnapshotTest, APodKeepsItsLiveStateAcrossScrapesAndReloads) {
  auto live = registry_.live("a");
  live->on_dispatch(7);
  registry_.update_metrics("a", scraped(0.5));
  registry_.set_pods({{"a", "10.0.0.1:8000", {{"class", "h100"}}}, {"b", "10.0.0.2:8000", {}}});
  EXPECT_EQ(registry_.live("a"), live);
  const auto c = registry_.candidates(kT0);
  EXPECT_EQ(c[0].dispatched, 1);
  EXPECT_EQ(c[0].metrics().kv_cache_usage, 0.5);
  EXPECT_EQ(c[0].label("class"), "h100");
  // Another pool label: the pod's learning belongs to the pool it was in, so it starts afresh.
  registry_.set_pods({{"a", "10.0.0.1:8000", {{"pool", "x"}}}, {"b", "10.0.0.2:8000", {}}});
  EXPECT_NE(registry_.live("a"), live);
  live->on_finished(7, 0, false);
}

TEST_F(PoolSnapshotTest, ASuccessBreaksAFailureRun) {
  OutlierDetectionOptions two;
  two.consecutive_failures = 2;
  two.max_ejection_percent = 100;
  two.panic_threshold_percent = 0;
  registry_.configure_outlier_detection(two);
  registry_.on_pod_failure("a", kT0);
  EXPECT_TRUE(registry_.live("a")->failure_run());
  registry_.on_pod_success("a");
  EXPECT_FALSE(registry_.live("a")->failure_run());
  registry_.on_pod_failure("a", kT0);  // one in a row again: not ejected
  EXPECT_EQ(registry_.candidates(kT0).size(), 2u);
  registry_.on_pod_failure("a", kT0);
  EXPECT_EQ(registry_.candidates(kT0).size(), 1u);
}

// The pipeline's endpointRoleLabel names the label each pod's role is read from, for every
// reader of PodInfo::role() (prediction rows, training samples, TPOT neutralisation).
TEST(PodRegistryRoleLabel, TheRoleComesFromThePipelinesLabel) {
  PodRegistry registry;
  registry.set_pods({{"p", "10.0.0.1:8000", {{"role", "decode"}, {"llm-d.ai/role", "prefill"}}}});
  EXPECT_EQ(registry.snapshot()->find("p")->info->role(), "decode") << "ours: label role";
  const uint64_t before = registry.publishes();
  registry.set_role_label("llm-d.ai/role");
  EXPECT_EQ(registry.publishes(), before + 1);
  EXPECT_EQ(registry.snapshot()->find("p")->info->role(), "prefill");
  registry.set_pods({{"p", "10.0.0.1:8000", {{"llm-d.ai/role", "decode"}}}});
  EXPECT_EQ(registry.snapshot()->find("p")->info->role(), "decode") << "kept across set_pods";
  registry.set_role_label("llm-d.ai/role");
  EXPECT_EQ(registry.publishes(), before + 2) << "the same label: nothing to publish";
  registry.set_role_label("");
  EXPECT_EQ(registry.snapshot()->find("p")->info->role(), "") << "upstream's default: no roles";
}

TEST(PodLiveTest, CountersBalanceUnderConcurrentRequests) {
  PodLive live(std::make_shared<PoolLearning>());
  std::atomic<bool> negative{false};
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      const PodLive::Load l = live.load();
      if (l.dispatched < 0 || l.prefill_tokens < 0 || l.decode_tokens < 0) {
        negative = true;
      }
    }
  });
  std::vector<std::thread> requests;
  for (int t = 0; t < 4; ++t) {
    requests.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        live.on_dispatch(10 + t);
        const bool first_token = i % 3 != 0;
        if (first_token) {
          live.on_first_token(10 + t, 5);
        }
        live.on_finished(10 + t, 5, first_token);
      }
    });
  }
  for (auto& r : requests) {
    r.join();
  }
  done = true;
  reader.join();
  EXPECT_FALSE(negative.load());
  const PodLive::Load l = live.load();
  EXPECT_EQ(l.dispatched, 0);
  EXPECT_EQ(l.prefill_tokens, 0);
  EXPECT_EQ(l.decode_tokens, 0);
}

TEST(PodLiveTest, PredictedTtftIsForgottenAfterTheStaleness) {
  PodLive live(std::make_shared<PoolLearning>());
  EXPECT_FALSE(live.predicted_ttft(kT0, 2s));
  live.record_predicted_ttft(120, kT0);
  EXPECT_EQ(live.predicted_ttft(kT0 + 2s, 2s), 120);
  EXPECT_FALSE(live.predicted_ttft(kT0 + 2001ms, 2s));
}

}  // namespace
}  // namespace llmd::epp
