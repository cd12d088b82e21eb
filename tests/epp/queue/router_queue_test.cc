#include "epp/queue/router_queue.h"

#include <gtest/gtest.h>

#include <limits>

namespace llmd::epp {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using Ids = std::vector<uint64_t>;

const Clock::time_point kT0 = Clock::time_point{} + 1h;

QueueEntry entry(uint64_t id, Clock::duration at, int64_t priority = 0, int64_t tier = 0) {
  QueueEntry e;
  e.id = id;
  e.arrival = kT0 + at;
  e.priority = priority;
  e.strict_priority = tier;
  return e;
}

QueueEntry with_service(QueueEntry e, double ms) {
  e.predicted_service_ms = ms;
  return e;
}

QueueEntry with_slo(QueueEntry e, double ms) {
  e.slo_ttft_ms = ms;
  return e;
}

QueueSettings settings(QueuePolicy p, std::size_t max_size = 1000) {
  QueueSettings s;
  s.policy = p;
  s.max_size = max_size;
  return s;
}

Ids order_of(QueueSettings s, const std::vector<QueueEntry>& entries) {
  RouterQueue q(s);
  for (const auto& e : entries) {
    EXPECT_TRUE(q.push(e).accepted) << e.id;
  }
  Ids out;
  while (auto e = q.pop()) {
    out.push_back(e->id);
  }
  return out;
}

Ids order_of(QueuePolicy p, const std::vector<QueueEntry>& entries) {
  return order_of(settings(p), entries);
}

Ids ids(const std::vector<QueueEntry>& entries) {
  Ids out;
  for (const auto& e : entries) {
    out.push_back(e.id);
  }
  return out;
}

TEST(QueuePolicyTest, ParsesAndPrintsEveryName) {
  for (auto p :
       {QueuePolicy::kFcfs, QueuePolicy::kLcfs, QueuePolicy::kWspt, QueuePolicy::kSloDeadline}) {
    EXPECT_EQ(parse_queue_policy(to_string(p)), p);
  }
  EXPECT_EQ(parse_queue_policy("slo-deadline"), QueuePolicy::kSloDeadline);
  EXPECT_FALSE(parse_queue_policy("FCFS"));
  EXPECT_FALSE(parse_queue_policy(""));
}

TEST(RouterQueueFcfsTest, EarliestArrivalFirstThenPushOrder) {
  EXPECT_EQ(order_of(QueuePolicy::kFcfs, {entry(1, 2s), entry(2, 0s), entry(3, 1s), entry(4, 0s)}),
            (Ids{2, 4, 3, 1}));
}

TEST(RouterQueueFcfsTest, PriorityIsAJumpInSeconds) {
  // Priority 2 arriving 1.5 s later has effective arrival -0.5 s: ahead of priority 0 at 0 s.
  EXPECT_EQ(order_of(QueuePolicy::kFcfs, {entry(1, 0s), entry(2, 1500ms, 2)}), (Ids{2, 1}));
  // Priority 1 (effective +0.5 s) is not enough.
  EXPECT_EQ(order_of(QueuePolicy::kFcfs, {entry(1, 0s), entry(2, 1500ms, 1)}), (Ids{1, 2}));
  // Equal effective arrival (1 s - 1 x 1 s = 0 s): push order decides.
  EXPECT_EQ(order_of(QueuePolicy::kFcfs, {entry(1, 0s), entry(2, 1s, 1)}), (Ids{1, 2}));
  auto half = settings(QueuePolicy::kFcfs);
  half.priority_bump = 500ms;  // priority 2 = 1 s earlier: effective +0.5 s
  EXPECT_EQ(order_of(half, {entry(1, 0s), entry(2, 1500ms, 2)}), (Ids{1, 2}));
  auto off = settings(QueuePolicy::kFcfs);
  off.priority_bump = 0ms;
  EXPECT_EQ(order_of(off, {entry(1, 0s), entry(2, 1ms, 1000)}), (Ids{1, 2}));
}

TEST(RouterQueueFcfsTest, NegativePriorityOrdersExactlyLikeZero) {
  EXPECT_EQ(order_of(QueuePolicy::kFcfs,
                     {entry(1, 1s, 0), entry(2, 0s, -5), entry(3, 500ms, -5), entry(4, 0s, 0)}),
            (Ids{2, 4, 3, 1}));
  EXPECT_EQ(order_of(QueuePolicy::kFcfs, {entry(1, 0s, 0), entry(2, 0s, -5)}), (Ids{1, 2}));
  EXPECT_EQ(order_of(QueuePolicy::kFcfs, {entry(1, 0s, -5), entry(2, 0s, 0)}), (Ids{1, 2}));
}

TEST(RouterQueueFcfsTest, HugePrioritySaturatesInsteadOfWrapping) {
  constexpr auto kMax = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(order_of(QueuePolicy::kFcfs, {entry(1, 0s, 1000), entry(2, 10s, kMax)}), (Ids{2, 1}));
  EXPECT_EQ(order_of(QueuePolicy::kLcfs, {entry(1, 10s, 1000), entry(2, 0s, kMax)}), (Ids{2, 1}));
}

TEST(RouterQueueLcfsTest, LatestEffectiveArrivalFirst) {
  EXPECT_EQ(order_of(QueuePolicy::kLcfs, {entry(1, 0s), entry(2, 2s), entry(3, 1s)}),
            (Ids{2, 3, 1}));
  // Priority 1 at 0 s is effectively at +1 s, later than priority 0 at 0.5 s.
  EXPECT_EQ(order_of(QueuePolicy::kLcfs, {entry(1, 500ms), entry(2, 0s, 1)}), (Ids{2, 1}));
  // Negative priority is clamped: plain arrival order, latest first.
  EXPECT_EQ(order_of(QueuePolicy::kLcfs, {entry(1, 1s, 0), entry(2, 2s, -3)}), (Ids{2, 1}));
  // Equal keys still leave in push order.
  EXPECT_EQ(order_of(QueuePolicy::kLcfs, {entry(1, 1s), entry(2, 1s)}), (Ids{1, 2}));
}

TEST(RouterQueueWsptTest, ShortestWeightedServiceFirst) {
  EXPECT_EQ(
      order_of(QueuePolicy::kWspt, {with_service(entry(1, 0s), 100), with_service(entry(2, 1s), 50),
                                    with_service(entry(3, 2s), 200)}),
      (Ids{2, 1, 3}));
}

TEST(RouterQueueWsptTest, PriorityAddsWeight) {
  // (1 + 3) / 200 = 0.02 beats 1 / 100 = 0.01 but not 1 / 40 = 0.025.
  EXPECT_EQ(order_of(QueuePolicy::kWspt,
                     {with_service(entry(1, 0s), 100), with_service(entry(2, 0s, 3), 200),
                      with_service(entry(3, 0s), 40)}),
            (Ids{3, 2, 1}));
  // Negative priority weighs 1, like 0: equal rates leave by arrival.
  EXPECT_EQ(order_of(QueuePolicy::kWspt,
                     {with_service(entry(1, 1s), 100), with_service(entry(2, 0s, -4), 100)}),
            (Ids{2, 1}));
}

TEST(RouterQueueWsptTest, ServiceClampedToOneMillisecond) {
  // 0 (unknown), 0.25 ms and 1 ms all weigh 1 / 1 ms: arrival decides.
  EXPECT_EQ(
      order_of(QueuePolicy::kWspt, {with_service(entry(1, 2s), 0), with_service(entry(2, 1s), 0.25),
                                    with_service(entry(3, 0s), 1), with_service(entry(4, 0s), 2)}),
      (Ids{3, 2, 1, 4}));
}

TEST(RouterQueueSloDeadlineTest, EarliestDeadlineFirst) {
  // Deadlines: 1: 1000 ms, 2: 500 ms, 3: 30000 ms (no SLO -> timeout), 4: 29000 ms.
  EXPECT_EQ(order_of(QueuePolicy::kSloDeadline,
                     {with_slo(entry(1, 0s), 1000), with_slo(entry(2, 200ms), 300), entry(3, 0s),
                      with_slo(entry(4, 4s), 25000)}),
            (Ids{2, 1, 4, 3}));
}

TEST(RouterQueueSloDeadlineTest, DefaultDeadlineForRequestsWithoutSlo) {
  auto s = settings(QueuePolicy::kSloDeadline);
  s.default_deadline = 400ms;
  // 1: 0 + 400 ms (default), 2: 100 + 500 ms, 3: 300 ms + 400 ms.
  EXPECT_EQ(order_of(s, {with_slo(entry(2, 100ms), 500), entry(3, 300ms), entry(1, 0s)}),
            (Ids{1, 2, 3}));
}

class RouterQueueTierTest : public ::testing::TestWithParam<QueuePolicy> {};

TEST_P(RouterQueueTierTest, HigherTierAlwaysFirst) {
  // Lower tiers hold entries that would win any comparison within one tier, for every policy.
  auto best = [](uint64_t id, Clock::duration at, int64_t tier) {
    return with_slo(with_service(entry(id, at, 1000, tier), 1), 1);
  };
  auto worst = [](uint64_t id, int64_t tier) { return with_service(entry(id, 5s, -1, tier), 1e6); };
  std::vector<QueueEntry> entries = {best(1, 0s, 0), best(2, 10s, 0), worst(3, 2),
                                     best(4, 0s, 1), best(5, 10s, 1), worst(6, 1)};
  std::vector<int64_t> tiers;
  for (auto id : order_of(GetParam(), entries)) {
    tiers.push_back(entries[id - 1].strict_priority);
  }
  EXPECT_EQ(tiers, (std::vector<int64_t>{2, 1, 1, 1, 0, 0}));
  // Within a tier the policy decides: the worst entry of tier 1 leaves last of its tier.
  EXPECT_EQ(order_of(GetParam(), entries)[3], 6u);
}

INSTANTIATE_TEST_SUITE_P(EveryPolicy, RouterQueueTierTest,
                         ::testing::Values(QueuePolicy::kFcfs, QueuePolicy::kLcfs,
                                           QueuePolicy::kWspt, QueuePolicy::kSloDeadline),
                         [](const auto& info) {
                           std::string n(to_string(info.param));
                           return n == "slo-deadline" ? std::string("slo_deadline") : n;
                         });

TEST(RouterQueueTest, FullQueueEvictsTheWorstForABetterNewcomer) {
  RouterQueue q(settings(QueuePolicy::kFcfs, 2));
  ASSERT_TRUE(q.push(entry(1, 0s)).accepted);
  ASSERT_TRUE(q.push(entry(2, 2s)).accepted);
  auto r = q.push(entry(3, 1s));
  EXPECT_TRUE(r.accepted);
  ASSERT_TRUE(r.evicted);
  EXPECT_EQ(r.evicted->id, 2u);
  EXPECT_EQ(q.size(), 2u);
  EXPECT_FALSE(q.position(2));
  // A higher tier evicts the worst of the lower tier whatever its arrival.
  r = q.push(entry(4, 9s, 0, 1));
  EXPECT_TRUE(r.accepted);
  ASSERT_TRUE(r.evicted);
  EXPECT_EQ(r.evicted->id, 3u);
  EXPECT_EQ(q.pop()->id, 4u);
  EXPECT_EQ(q.pop()->id, 1u);
}

TEST(RouterQueueTest, FullQueueRejectsANewcomerThatIsNotStrictlyBetter) {
  RouterQueue q(settings(QueuePolicy::kFcfs, 2));
  ASSERT_TRUE(q.push(entry(1, 0s)).accepted);
  ASSERT_TRUE(q.push(entry(2, 1s)).accepted);
  for (auto e : {entry(3, 2s), entry(4, 1s), entry(5, 1s, -7)}) {  // worse, equal, equal
    auto r = q.push(e);
    EXPECT_FALSE(r.accepted) << e.id;
    EXPECT_FALSE(r.evicted) << e.id;
  }
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.position(2), 1u);
}

TEST(RouterQueueTest, RejectsDuplicateIdsAndZeroCapacity) {
  RouterQueue q(settings(QueuePolicy::kFcfs));
  ASSERT_TRUE(q.push(entry(1, 1s)).accepted);
  EXPECT_FALSE(q.push(entry(1, 0s)).accepted);
  EXPECT_EQ(q.size(), 1u);
  RouterQueue none(settings(QueuePolicy::kFcfs, 0));
  EXPECT_FALSE(none.push(entry(1, 0s)).accepted);
  EXPECT_TRUE(none.empty());
}

TEST(RouterQueueTest, EmptyQueue) {
  RouterQueue q(settings(QueuePolicy::kWspt));
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.peek(), nullptr);
  EXPECT_FALSE(q.pop());
  EXPECT_FALSE(q.remove(1));
  EXPECT_TRUE(q.expire(kT0 + 1h).empty());
  EXPECT_TRUE(q.pending_by_tier().empty());
}

TEST(RouterQueueTest, ExpireRemovesEntriesPastTheTimeoutOldestFirst) {
  auto s = settings(QueuePolicy::kLcfs);  // queue order differs from arrival order
  s.timeout = 1000ms;
  RouterQueue q(s);
  for (auto e : {entry(2, 500ms), entry(1, 0s), entry(3, 1000ms, 0, 1), entry(4, 400ms)}) {
    ASSERT_TRUE(q.push(e).accepted);
  }
  EXPECT_TRUE(q.expire(kT0 + 999ms).empty());
  EXPECT_EQ(ids(q.expire(kT0 + 1000ms)), (Ids{1}));  // arrival + timeout <= now
  EXPECT_EQ(ids(q.expire(kT0 + 1500ms)), (Ids{4, 2}));
  EXPECT_EQ(q.size(), 1u);
  EXPECT_EQ(q.pending_by_tier(), (std::map<int64_t, std::size_t>{{1, 1}}));
  EXPECT_EQ(q.peek()->id, 3u);
  EXPECT_EQ(ids(q.expire(kT0 + 1h)), (Ids{3}));
  EXPECT_TRUE(q.empty());
}

TEST(RouterQueueTest, RemoveTakesOneEntryOut) {
  RouterQueue q(settings(QueuePolicy::kFcfs));
  for (auto e : {entry(1, 0s), entry(2, 1s), entry(3, 2s)}) {
    ASSERT_TRUE(q.push(e).accepted);
  }
  EXPECT_TRUE(q.remove(2));
  EXPECT_FALSE(q.remove(2));
  EXPECT_FALSE(q.remove(9));
  EXPECT_EQ(q.size(), 2u);
  EXPECT_EQ(q.position(3), 1u);
  EXPECT_TRUE(q.remove(1));
  EXPECT_EQ(q.peek()->id, 3u);
  // The expiry index forgot the removed entries too.
  EXPECT_EQ(ids(q.expire(kT0 + 1h)), (Ids{3}));
}

TEST(RouterQueueTest, PendingByTierCountsQueuedEntries) {
  RouterQueue q(settings(QueuePolicy::kFcfs));
  for (auto e : {entry(1, 0s, 0, 0), entry(2, 0s, 0, 2), entry(3, 1s, 0, 0), entry(4, 0s, 0, 5)}) {
    ASSERT_TRUE(q.push(e).accepted);
  }
  using Tiers = std::map<int64_t, std::size_t>;
  EXPECT_EQ(q.pending_by_tier(), (Tiers{{0, 2}, {2, 1}, {5, 1}}));
  EXPECT_EQ(q.pop()->id, 4u);
  EXPECT_TRUE(q.remove(1));
  EXPECT_EQ(q.pending_by_tier(), (Tiers{{0, 1}, {2, 1}}));
  q.pop();
  q.pop();
  EXPECT_TRUE(q.pending_by_tier().empty());
}

TEST(RouterQueueTest, PositionIsTheZeroBasedRank) {
  RouterQueue q(settings(QueuePolicy::kFcfs));
  for (auto e : {entry(1, 2s), entry(2, 0s), entry(3, 1s), entry(4, 5s, 0, 1)}) {
    ASSERT_TRUE(q.push(e).accepted);
  }
  EXPECT_EQ(q.position(4), 0u);
  EXPECT_EQ(q.position(2), 1u);
  EXPECT_EQ(q.position(3), 2u);
  EXPECT_EQ(q.position(1), 3u);
  EXPECT_FALSE(q.position(7));
  EXPECT_EQ(q.peek()->id, 4u);
  EXPECT_EQ(q.size(), 4u);  // peek does not remove
}

}  // namespace
}  // namespace llmd::epp
