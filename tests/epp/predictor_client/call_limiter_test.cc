#include "epp/predictor_client/call_limiter.h"

#include <gtest/gtest.h>

namespace llmd::epp::predictor_client {
namespace {

using namespace std::chrono_literals;
using Clock = CallLimiter::Clock;

CallLimiter::Config small(double initial) {
  CallLimiter::Config c;
  c.initial_limit = initial;
  c.min_limit = 2;
  c.max_limit = 100;
  return c;
}

TEST(CallLimiter, AdmitsUpToTheLimitAndFreesOnEveryOutcome) {
  CallLimiter limiter(small(4));
  const auto t = Clock::now();
  for (int i = 0; i < 4; ++i) {
    EXPECT_TRUE(limiter.try_admit());
  }
  EXPECT_FALSE(limiter.try_admit());
  EXPECT_EQ(limiter.outstanding(), 4u);
  limiter.on_cancel();
  EXPECT_TRUE(limiter.try_admit());
  limiter.on_answer(1ms, 50ms, t);
  limiter.on_miss(t);
  limiter.on_cancel();
  EXPECT_EQ(limiter.outstanding(), 1u);
}

TEST(CallLimiter, FastAnswersWidenOnlyWhileTheCapIsInUse) {
  CallLimiter limiter(small(10));
  const auto t = Clock::now();
  // One call at a time never uses half the cap: answers do not widen it.
  for (int i = 0; i < 50; ++i) {
    ASSERT_TRUE(limiter.try_admit());
    limiter.on_answer(1ms, 50ms, t);
  }
  EXPECT_DOUBLE_EQ(limiter.limit(), 10);
  // With the cap full, ten fast answers add about one call.
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(limiter.try_admit());
  }
  for (int i = 0; i < 10; ++i) {
    limiter.on_answer(1ms, 50ms, t);
  }
  EXPECT_GT(limiter.limit(), 10.3);
  EXPECT_LT(limiter.limit(), 11.1);
}

TEST(CallLimiter, MissesNarrowOncePerSpacingDownToTheFloor) {
  CallLimiter limiter(small(50));
  auto t = Clock::now();
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(limiter.try_admit());
  }
  // A burst of misses within the spacing is one decrease.
  for (int i = 0; i < 20; ++i) {
    limiter.on_miss(t);
  }
  EXPECT_DOUBLE_EQ(limiter.limit(), 40);
  for (int i = 0; i < 40; ++i) {
    t += 20ms;
    ASSERT_TRUE(limiter.try_admit());
    limiter.on_miss(t);
  }
  EXPECT_DOUBLE_EQ(limiter.limit(), 2);
  EXPECT_EQ(limiter.outstanding(), 0u);
}

TEST(CallLimiter, LateAnswersNarrowAndMiddlingOnesHold) {
  CallLimiter limiter(small(20));
  auto t = Clock::now();
  ASSERT_TRUE(limiter.try_admit());
  limiter.on_answer(10ms, 50ms, t);  // 20 % of the budget: neither
  EXPECT_DOUBLE_EQ(limiter.limit(), 20);
  ASSERT_TRUE(limiter.try_admit());
  limiter.on_answer(15ms, 50ms, t);  // 30 %: a congestion signal
  EXPECT_DOUBLE_EQ(limiter.limit(), 16);
}

// The loop the cap exists for: a server that answers `capacity` calls per tick, calls offered
// at twice that. Without a cap every call waits behind all the others and misses; with it the
// accepted calls keep meeting their deadline and goodput stays near capacity.
TEST(CallLimiter, KeepsGoodputNearCapacityUnderTwiceTheLoad) {
  // Starts far too wide (10x what the server gets through within the deadline), as after a
  // period when the replicas were faster: only the decreases can save the goodput.
  CallLimiter::Config c;
  c.initial_limit = 1000;
  c.min_limit = 4;
  CallLimiter limiter(c);
  constexpr int kCapacity = 10;            // answers per 1-ms tick
  constexpr int kOffered = 2 * kCapacity;  // arrivals per tick
  constexpr auto kBudget = 50ms;
  std::vector<Clock::time_point> queue;  // admission times, FIFO
  std::size_t head = 0;
  auto t = Clock::time_point{} + 1s;
  int answered_in_time = 0, offered = 0;
  Clock::duration latency_sum{};
  for (int tick = 0; tick < 2000; ++tick) {
    t += 1ms;
    for (int i = 0; i < kOffered; ++i, ++offered) {
      if (limiter.try_admit()) {
        queue.push_back(t);
      }
    }
    // Deadlines first (the client's dispatcher expires them), then the server's answers.
    while (head < queue.size() && t - queue[head] >= kBudget) {
      limiter.on_miss(t);
      ++head;
    }
    for (int i = 0; i < kCapacity && head < queue.size(); ++i, ++head) {
      limiter.on_answer(t - queue[head], kBudget, t);
      if (tick >= 1000) {
        ++answered_in_time;
        latency_sum += t - queue[head];
      }
    }
  }
  // Second half: at least 90 % of capacity answered in time.
  EXPECT_GE(answered_in_time, 9 * 1000 * kCapacity / 10);
  // ... and they wait little: the cap holds the queue between the widening (5 ms) and the
  // narrowing (12.5 ms) thresholds, far from the deadline.
  EXPECT_LE(latency_sum / answered_in_time, 12500us);
}

}  // namespace
}  // namespace llmd::epp::predictor_client
