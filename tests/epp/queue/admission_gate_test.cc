// The router queue gate without sockets: scripted pool state, wake-ups recorded in order.
#include "epp/queue/admission_gate.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

namespace llmd::epp {
namespace {

using Clock = std::chrono::steady_clock;

struct Fixture {
  std::vector<Endpoint> pods;
  prometheus::Registry registry;
  AdmissionGate gate{[this](const std::string&) { return pods; }, &registry};
  std::vector<std::pair<std::string, AdmissionVerdict>> woken;  // (label, verdict) in order

  explicit Fixture(int n_pods, QueueSettings q = {}) {
    for (int i = 0; i < n_pods; ++i) {
      PodInfo pod;
      pod.name = "pod-" + std::to_string(i);
      pods.push_back(Endpoint::of(std::move(pod)));
    }
    RouterQueueConfig c;
    c.queue = q;
    c.saturation = SaturationThresholds{};
    c.saturation.in_flight_requests = 1;  // a pod with one request in flight is saturated
    gate.configure(c);
  }
  void busy(int i, bool b) { pods[static_cast<std::size_t>(i)].dispatched = b ? 1 : 0; }
  AdmissionGate::Ticket enter(const std::string& label, int64_t tier, int64_t priority,
                              Clock::time_point now = Clock::now()) {
    AdmissionRequest r;
    r.strict_priority = tier;
    r.priority = priority;
    return gate.enter(
        r,
        [this, label](AdmissionVerdict v) {
          woken.push_back({label, v});
        },
        now);
  }
  std::vector<std::string> order() const {
    std::vector<std::string> out;
    for (const auto& [l, v] : woken) {
      out.push_back(l + ":" + std::to_string(v.status));
    }
    return out;
  }
};

TEST(AdmissionGate, AdmitsAtOnceWhenAPodHasCapacity) {
  Fixture f(2);
  f.busy(0, true);
  auto t = f.enter("a", 0, 0);
  EXPECT_FALSE(t.queued);
  EXPECT_EQ(t.verdict.status, 200);
}

TEST(AdmissionGate, DisabledAdmitsEverything) {
  Fixture f(1);
  f.busy(0, true);
  f.gate.configure(std::nullopt);
  EXPECT_FALSE(f.enter("a", 0, 0).queued);
}

TEST(AdmissionGate, HoldsWhileSaturatedAndReleasesBestFirst) {
  Fixture f(1);
  f.busy(0, true);
  const auto t0 = Clock::now();
  EXPECT_TRUE(f.enter("low", 0, 0, t0).queued);
  EXPECT_TRUE(f.enter("soft", 0, 5, t0 + std::chrono::milliseconds(1)).queued);
  EXPECT_TRUE(f.enter("tier1", 1, 0, t0 + std::chrono::milliseconds(2)).queued);
  EXPECT_TRUE(f.enter("neg", 0, -3, t0 + std::chrono::milliseconds(3)).queued);
  EXPECT_EQ(f.gate.pending(), 4u);
  std::string text = prometheus::TextSerializer().Serialize(f.registry.Collect());
  EXPECT_NE(text.find("llmd_epp_router_queue_pending{tier=\"0\"} 3"), std::string::npos) << text;
  EXPECT_NE(text.find("llmd_epp_router_queue_pending{tier=\"1\"} 1"), std::string::npos);
  // One slot frees at a time: each finished request admits exactly one waiter.
  for (int i = 0; i < 4; ++i) {
    f.busy(0, false);
    f.gate.on_finished("");
    f.busy(0, true);  // the admitted request is dispatched
    f.gate.on_scheduled("");
  }
  EXPECT_EQ(f.order(), (std::vector<std::string>{"tier1:200", "soft:200", "low:200", "neg:200"}));
  EXPECT_EQ(f.gate.pending(), 0u);
}

TEST(AdmissionGate, InTransitRequestsCountAgainstFreeCapacity) {
  Fixture f(1);
  f.busy(0, true);
  f.enter("a", 0, 0);
  f.enter("b", 0, 0);
  f.busy(0, false);  // capacity for one
  f.gate.tick();
  f.gate.tick();  // still one: "a" is admitted but not yet dispatched
  EXPECT_EQ(f.order(), (std::vector<std::string>{"a:200"}));
  f.gate.on_scheduled("");  // "a" failed to dispatch (e.g. 503): its slot is free again
  EXPECT_EQ(f.order(), (std::vector<std::string>{"a:200", "b:200"}));
}

TEST(AdmissionGate, TimesOutWith503AndADetail) {
  QueueSettings q;
  q.timeout = std::chrono::milliseconds(100);
  Fixture f(1, q);
  f.busy(0, true);
  const auto t0 = Clock::now();
  f.enter("a", 2, 0, t0);
  f.gate.tick(t0 + std::chrono::milliseconds(50));
  EXPECT_TRUE(f.woken.empty());
  f.gate.tick(t0 + std::chrono::milliseconds(100));
  ASSERT_EQ(f.woken.size(), 1u);
  EXPECT_EQ(f.woken[0].second.status, 503);
  EXPECT_NE(f.woken[0].second.detail.find("100 ms"), std::string::npos);
  EXPECT_NE(f.woken[0].second.detail.find("tier 2"), std::string::npos);
}

TEST(AdmissionGate, FullQueueEvictsTheWorstOrRejectsAWorseNewcomer) {
  QueueSettings q;
  q.max_size = 1;
  Fixture f(1, q);
  f.busy(0, true);
  EXPECT_TRUE(f.enter("low", 0, 0).queued);
  auto high = f.enter("high", 1, 0);
  EXPECT_TRUE(high.queued);
  ASSERT_EQ(f.woken.size(), 1u);
  EXPECT_EQ(f.woken[0].first, "low");
  EXPECT_EQ(f.woken[0].second.status, 429);
  auto worse = f.enter("worse", 0, 0);
  EXPECT_FALSE(worse.queued);
  EXPECT_EQ(worse.verdict.status, 429);
  EXPECT_FALSE(worse.verdict.detail.empty());
}

TEST(AdmissionGate, CancelledWaitersAreNeverWoken) {
  Fixture f(1);
  f.busy(0, true);
  auto t = f.enter("a", 0, 0);
  f.gate.cancel(t.id);
  f.busy(0, false);
  f.gate.tick();
  EXPECT_TRUE(f.woken.empty());
  EXPECT_EQ(f.gate.pending(), 0u);
}

TEST(AdmissionGate, EmptyPoolIsNotHeld) {
  Fixture f(0);
  EXPECT_FALSE(f.enter("a", 0, 0).queued);  // the scheduler answers 503 itself
}

TEST(AdmissionGate, DisablingReleasesEveryWaiter) {
  Fixture f(1);
  f.busy(0, true);
  f.enter("a", 0, 0);
  f.enter("b", 1, 0);
  f.gate.configure(std::nullopt);
  EXPECT_EQ(f.woken.size(), 2u);
}

}  // namespace
}  // namespace llmd::epp
