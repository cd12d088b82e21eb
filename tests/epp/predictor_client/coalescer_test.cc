#include "epp/predictor_client/coalescer.h"

#include <gtest/gtest.h>

namespace llmd::epp::predictor_client {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;

// Rows whose input_token_length identifies them: base, base+1, ...
std::vector<features::FeatureInput> rows(std::size_t n, int64_t base) {
  std::vector<features::FeatureInput> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i].input_token_length = base + static_cast<int64_t>(i);
  }
  return out;
}

// The fake predictor: ttft = input_token_length, tpot = ttft / 10.
std::vector<Prediction> answer(const Batch& b) {
  std::vector<Prediction> out;
  for (const auto& r : b.rows) {
    out.push_back({static_cast<double>(r.input_token_length),
                   static_cast<double>(r.input_token_length) / 10});
  }
  return out;
}

class CoalescerTest : public ::testing::Test {
 protected:
  Clock::time_point t0_ = Clock::time_point() + std::chrono::hours(1);
  Clock::time_point far_ = t0_ + std::chrono::seconds(10);
  // The fixed window (the adaptive rule is tested on its own below).
  Coalescer c_{Coalescer::Config{microseconds(1000), 100, false}};
};

TEST(AdaptiveCoalescerTest, IdleSendsAtOnceBusyAccumulatesUntilTheWindowOrTheAnswer) {
  const auto t0 = Clock::time_point() + std::chrono::hours(1);
  const auto far = t0 + std::chrono::seconds(10);
  Coalescer c(Coalescer::Config{microseconds(1000), 100, true});
  // Nothing in flight: no reason to wait.
  c.submit(rows(2, 0), t0, far);
  EXPECT_EQ(*c.next_due(), t0);
  auto first = c.take_ready(t0);
  ASSERT_EQ(first.size(), 1u);
  // One batch on the wire: later callers accumulate into one batch...
  c.submit(rows(1, 10), t0 + microseconds(100), far);
  c.submit(rows(1, 20), t0 + microseconds(300), far);
  EXPECT_EQ(*c.next_due(), t0 + microseconds(1100));
  EXPECT_TRUE(c.take_ready(t0 + microseconds(400)).empty());
  // ...which leaves as soon as the batch in flight is answered (before the window ends).
  c.deliver(first[0].id, answer(first[0]));
  EXPECT_EQ(*c.next_due(), t0 + microseconds(100));
  auto second = c.take_ready(t0 + microseconds(500));
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].callers, 2u);
  // Busy for longer than the window: the window still bounds the wait.
  c.submit(rows(1, 30), t0 + microseconds(600), far);
  EXPECT_TRUE(c.take_ready(t0 + microseconds(1599)).empty());
  EXPECT_EQ(c.take_ready(t0 + microseconds(1600)).size(), 1u);
}

TEST_F(CoalescerTest, EmptySubmissionIsNeverBatched) {
  EXPECT_EQ(c_.submit({}, t0_, far_), kEmptyTicket);
  EXPECT_EQ(c_.pending_rows(), 0u);
  EXPECT_FALSE(c_.next_due().has_value());
  EXPECT_TRUE(c_.take_ready(t0_ + std::chrono::seconds(1)).empty());
  EXPECT_EQ(c_.waiting_callers(), 0u);
  // It does not disturb a real caller either.
  const Ticket a = c_.submit(rows(3, 0), t0_, far_);
  EXPECT_EQ(c_.submit({}, t0_, far_), kEmptyTicket);
  auto batches = c_.take_ready(t0_ + milliseconds(1));
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].rows.size(), 3u);
  auto done = c_.deliver(batches[0].id, answer(batches[0]));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].ticket, a);
}

TEST_F(CoalescerTest, BatchWaitsForTheWindowOpenedByTheFirstSubmission) {
  c_.submit(rows(3, 0), t0_, far_);
  c_.submit(rows(2, 100), t0_ + microseconds(600), far_);
  ASSERT_TRUE(c_.next_due().has_value());
  EXPECT_EQ(*c_.next_due(), t0_ + microseconds(1000));
  EXPECT_TRUE(c_.take_ready(t0_ + microseconds(999)).empty());

  auto batches = c_.take_ready(t0_ + microseconds(1000));
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].callers, 2u);
  ASSERT_EQ(batches[0].rows.size(), 5u);
  EXPECT_EQ(batches[0].rows[0].input_token_length, 0);
  EXPECT_EQ(batches[0].rows[3].input_token_length, 100);
  EXPECT_EQ(c_.pending_rows(), 0u);
  EXPECT_FALSE(c_.next_due().has_value());
  EXPECT_EQ(c_.in_flight_batches(), 1u);
}

TEST_F(CoalescerTest, NextWindowOpensAtTheNextSubmission) {
  c_.submit(rows(1, 0), t0_, far_);
  ASSERT_EQ(c_.take_ready(t0_ + milliseconds(1)).size(), 1u);
  const auto t1 = t0_ + milliseconds(5);
  c_.submit(rows(1, 0), t1, far_);
  EXPECT_EQ(*c_.next_due(), t1 + milliseconds(1));
  EXPECT_TRUE(c_.take_ready(t1 + microseconds(500)).empty());
  EXPECT_EQ(c_.take_ready(t1 + milliseconds(1)).size(), 1u);
}

TEST_F(CoalescerTest, BatchIsDueAtOnceWhenRowsReachTheMaximum) {
  c_.submit(rows(60, 0), t0_, far_);
  EXPECT_TRUE(c_.take_ready(t0_).empty());
  c_.submit(rows(40, 100), t0_ + microseconds(10), far_);
  EXPECT_LE(*c_.next_due(), t0_ + microseconds(10));
  auto batches = c_.take_ready(t0_ + microseconds(10));
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].rows.size(), 100u);
  EXPECT_EQ(batches[0].callers, 2u);
}

TEST_F(CoalescerTest, CallerRowsAreNeverSplitAcrossBatches) {
  const Ticket a = c_.submit(rows(60, 0), t0_, far_);
  const Ticket b = c_.submit(rows(60, 1000), t0_ + microseconds(100), far_);
  // 120 pending >= 100: a goes now, alone, because b does not fit beside it.
  auto first = c_.take_ready(t0_ + microseconds(100));
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].rows.size(), 60u);
  EXPECT_EQ(first[0].callers, 1u);
  // b now waits for its own window (it was submitted at t0 + 100us).
  EXPECT_EQ(c_.pending_rows(), 60u);
  EXPECT_EQ(*c_.next_due(), t0_ + microseconds(1100));
  EXPECT_TRUE(c_.take_ready(t0_ + microseconds(1000)).empty());
  auto second = c_.take_ready(t0_ + microseconds(1100));
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].rows.size(), 60u);

  auto done_b = c_.deliver(second[0].id, answer(second[0]));
  ASSERT_EQ(done_b.size(), 1u);
  EXPECT_EQ(done_b[0].ticket, b);
  auto done_a = c_.deliver(first[0].id, answer(first[0]));
  ASSERT_EQ(done_a.size(), 1u);
  EXPECT_EQ(done_a[0].ticket, a);
  EXPECT_EQ(c_.waiting_callers(), 0u);
}

TEST_F(CoalescerTest, AnswerIsCutIntoEachCallersSliceInOrder) {
  const Ticket a = c_.submit(rows(3, 0), t0_, far_);
  const Ticket b = c_.submit(rows(4, 100), t0_, far_);
  const Ticket c = c_.submit(rows(2, 200), t0_, far_);
  auto batches = c_.take_ready(t0_ + milliseconds(1));
  ASSERT_EQ(batches.size(), 1u);
  auto done = c_.deliver(batches[0].id, answer(batches[0]));
  ASSERT_EQ(done.size(), 3u);
  const std::pair<Ticket, std::pair<int, int>> expected[] = {
      {a, {0, 3}}, {b, {100, 4}}, {c, {200, 2}}};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(done[i].ticket, expected[i].first);
    ASSERT_TRUE(done[i].predictions.has_value());
    const auto& p = *done[i].predictions;
    ASSERT_EQ(p.size(), static_cast<std::size_t>(expected[i].second.second));
    for (std::size_t j = 0; j < p.size(); ++j) {
      EXPECT_EQ(p[j].ttft_ms, expected[i].second.first + static_cast<int>(j));
      EXPECT_DOUBLE_EQ(p[j].tpot_ms, p[j].ttft_ms / 10);
    }
  }
  EXPECT_EQ(c_.in_flight_batches(), 0u);
  EXPECT_EQ(c_.waiting_callers(), 0u);
}

TEST_F(CoalescerTest, FailureReachesEveryCallerOfTheBatch) {
  c_.submit(rows(3, 0), t0_, far_);
  c_.submit(rows(4, 100), t0_, far_);
  auto batches = c_.take_ready(t0_ + milliseconds(1));
  ASSERT_EQ(batches.size(), 1u);
  auto done = c_.fail(batches[0].id, ErrorKind::kTimeout);
  ASSERT_EQ(done.size(), 2u);
  for (const auto& d : done) {
    EXPECT_FALSE(d.predictions.has_value());
    EXPECT_EQ(d.error, ErrorKind::kTimeout);
  }
  EXPECT_EQ(c_.waiting_callers(), 0u);
  // A late answer for a failed batch completes nobody.
  EXPECT_TRUE(c_.deliver(batches[0].id, answer(batches[0])).empty());
}

TEST_F(CoalescerTest, TooFewPredictionsFailEveryCallerOfTheBatch) {
  c_.submit(rows(3, 0), t0_, far_);
  c_.submit(rows(4, 100), t0_, far_);
  auto batches = c_.take_ready(t0_ + milliseconds(1));
  auto short_answer = answer(batches[0]);
  short_answer.pop_back();
  auto done = c_.deliver(batches[0].id, short_answer);
  ASSERT_EQ(done.size(), 2u);
  for (const auto& d : done) {
    EXPECT_FALSE(d.predictions.has_value());
    EXPECT_EQ(d.error, ErrorKind::kShortResponse);
  }
}

TEST_F(CoalescerTest, TooManyPredictionsAlsoFailTheBatch) {
  c_.submit(rows(2, 0), t0_, far_);
  auto batches = c_.take_ready(t0_ + milliseconds(1));
  auto long_answer = answer(batches[0]);
  long_answer.push_back({1, 1});
  auto done = c_.deliver(batches[0].id, long_answer);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].error, ErrorKind::kShortResponse);
}

TEST(CoalescerLimitTest, CallerAboveThePredictorLimitIsSplitAndReassembled) {
  const auto t0 = Clock::time_point() + std::chrono::hours(1);
  Coalescer c(Coalescer::Config{microseconds(1000), 10000});
  const Ticket small = c.submit(rows(5, 900000), t0, t0 + std::chrono::seconds(1));
  const Ticket big = c.submit(rows(25000, 0), t0, t0 + std::chrono::seconds(2));
  // The big caller makes everything due at once; the small one is not mixed with it.
  auto batches = c.take_ready(t0);
  ASSERT_EQ(batches.size(), 4u);
  EXPECT_EQ(batches[0].rows.size(), 5u);
  EXPECT_EQ(batches[1].rows.size(), 10000u);
  EXPECT_EQ(batches[2].rows.size(), 10000u);
  EXPECT_EQ(batches[3].rows.size(), 5000u);
  for (std::size_t i = 1; i < 4; ++i) {
    EXPECT_EQ(batches[i].callers, 1u);
    EXPECT_EQ(batches[i].deadline, t0 + std::chrono::seconds(2));
  }
  EXPECT_EQ(c.pending_rows(), 0u);
  // Answers in any order; the big caller completes with the last one, rows in order.
  EXPECT_TRUE(c.deliver(batches[3].id, answer(batches[3])).empty());
  EXPECT_TRUE(c.deliver(batches[1].id, answer(batches[1])).empty());
  auto done_small = c.deliver(batches[0].id, answer(batches[0]));
  ASSERT_EQ(done_small.size(), 1u);
  EXPECT_EQ(done_small[0].ticket, small);
  auto done = c.deliver(batches[2].id, answer(batches[2]));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].ticket, big);
  ASSERT_TRUE(done[0].predictions.has_value());
  ASSERT_EQ(done[0].predictions->size(), 25000u);
  for (std::size_t i = 0; i < 25000; ++i) {
    ASSERT_EQ((*done[0].predictions)[i].ttft_ms, static_cast<double>(i)) << i;
  }
}

TEST(CoalescerLimitTest, OneFailedChunkFailsTheBigCallerOnce) {
  const auto t0 = Clock::time_point() + std::chrono::hours(1);
  Coalescer c(Coalescer::Config{microseconds(1000), 100});
  c.submit(rows(250, 0), t0, t0 + std::chrono::seconds(1));
  auto first = c.take_ready(t0, 1);  // only one batch taken: the rest stays pending
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(c.pending_rows(), 150u);
  auto done = c.fail(first[0].id, ErrorKind::kHttp);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].error, ErrorKind::kHttp);
  // Its unsent chunks are dropped, not sent for nobody.
  EXPECT_EQ(c.pending_rows(), 0u);
  EXPECT_TRUE(c.take_ready(t0 + std::chrono::seconds(1)).empty());
}

TEST(CoalescerLimitTest, TakeReadyHonoursTheBatchLimitAndRowsKeepCoalescing) {
  const auto t0 = Clock::time_point() + std::chrono::hours(1);
  Coalescer c(Coalescer::Config{microseconds(1000), 100});
  c.submit(rows(10, 0), t0, t0 + std::chrono::seconds(1));
  EXPECT_TRUE(c.take_ready(t0 + milliseconds(1), 0).empty());  // no free dispatch slot
  c.submit(rows(10, 100), t0 + milliseconds(2), t0 + std::chrono::seconds(1));
  auto batches = c.take_ready(t0 + milliseconds(3), 1);
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].rows.size(), 20u);
  EXPECT_EQ(batches[0].callers, 2u);
}

TEST_F(CoalescerTest, BatchDeadlineIsTheLatestCallerDeadline) {
  c_.submit(rows(1, 0), t0_, t0_ + milliseconds(50));
  c_.submit(rows(1, 0), t0_, t0_ + milliseconds(80));
  c_.submit(rows(1, 0), t0_, t0_ + milliseconds(60));
  auto batches = c_.take_ready(t0_ + milliseconds(1));
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].deadline, t0_ + milliseconds(80));
}

TEST_F(CoalescerTest, CancelledPendingCallerIsNotSent) {
  const Ticket a = c_.submit(rows(3, 0), t0_, far_);
  const Ticket b = c_.submit(rows(4, 100), t0_, far_);
  EXPECT_TRUE(c_.cancel(a));
  EXPECT_FALSE(c_.cancel(a));
  EXPECT_EQ(c_.pending_rows(), 4u);
  auto batches = c_.take_ready(t0_ + milliseconds(1));
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_EQ(batches[0].rows.size(), 4u);
  auto done = c_.deliver(batches[0].id, answer(batches[0]));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].ticket, b);
  // Cancelling the only caller empties the coalescer.
  const Ticket c = c_.submit(rows(2, 0), t0_ + milliseconds(2), far_);
  EXPECT_TRUE(c_.cancel(c));
  EXPECT_FALSE(c_.next_due().has_value());
}

TEST_F(CoalescerTest, AnswerForACancelledCallerIsDiscarded) {
  const Ticket a = c_.submit(rows(3, 0), t0_, far_);
  const Ticket b = c_.submit(rows(4, 100), t0_, far_);
  auto batches = c_.take_ready(t0_ + milliseconds(1));
  ASSERT_EQ(batches.size(), 1u);
  EXPECT_TRUE(c_.cancel(a));
  EXPECT_TRUE(c_.is_live(batches[0].id));
  auto done = c_.deliver(batches[0].id, answer(batches[0]));
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].ticket, b);
  EXPECT_EQ((*done[0].predictions)[0].ttft_ms, 100);
}

TEST_F(CoalescerTest, BatchWithOnlyCancelledCallersIsNotLive) {
  const Ticket a = c_.submit(rows(3, 0), t0_, far_);
  auto batches = c_.take_ready(t0_ + milliseconds(1));
  EXPECT_TRUE(c_.is_live(batches[0].id));
  c_.cancel(a);
  EXPECT_FALSE(c_.is_live(batches[0].id));
  c_.drop(batches[0].id);
  EXPECT_EQ(c_.in_flight_batches(), 0u);
  EXPECT_TRUE(c_.deliver(batches[0].id, answer(batches[0])).empty());
}

TEST_F(CoalescerTest, UnknownBatchIsIgnored) {
  EXPECT_TRUE(c_.deliver(42, std::vector<Prediction>(3)).empty());
  EXPECT_TRUE(c_.fail(42, ErrorKind::kHttp).empty());
  EXPECT_FALSE(c_.is_live(42));
}

}  // namespace
}  // namespace llmd::epp::predictor_client
