// TrainingFeedback's delivery bookkeeping with a scripted sender (no sockets): a batch without
// an answer is sent again with the same batch_id, and produced = acknowledged + dropped + queued
// after every step.
#include "epp/feedback/training_feedback.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <deque>

namespace llmd::epp {
namespace {

CompletedRequest streamed() {
  CompletedRequest d;
  d.success = true;
  d.request.streaming = true;
  d.request.input_tokens = 100;
  d.first_token = true;
  d.ttft_ms = 50;
  return d;
}

struct ScriptedTrainer {
  std::deque<int> statuses;  // answers in order; 202 once the script is used up
  std::vector<nlohmann::json> bodies;
  FeedbackSender sender() {
    return [this](const std::string& body, std::string& error) {
      bodies.push_back(nlohmann::json::parse(body));
      error = "timed out";
      if (statuses.empty()) {
        return 202;
      }
      int s = statuses.front();
      statuses.pop_front();
      return s;
    };
  }
};

FeedbackOptions options() {
  FeedbackOptions o;
  o.trainer_url = "http://127.0.0.1:1";
  o.streaming_mode = [] { return true; };  // the samples below are streams' first tokens
  return o;
}

void expect_balanced(const FeedbackCounts& c) {
  EXPECT_EQ(c.produced, c.acknowledged + c.dropped() + c.queued);
}

TEST(TrainingFeedback, AnUnansweredBatchIsResentWithItsIdBeforeAnythingNewer) {
  ScriptedTrainer trainer;
  trainer.statuses = {0, 503};
  prometheus::Registry registry;
  TrainingFeedback fb(options(), &registry, trainer.sender());
  for (int i = 0; i < 5; ++i) {
    fb.on_first_token(streamed());
  }
  fb.flush();  // no answer
  auto c = fb.counts();
  EXPECT_EQ(c.sent, 5u);
  EXPECT_EQ(c.queued, 5u);
  expect_balanced(c);
  fb.on_first_token(streamed());
  fb.on_first_token(streamed());
  fb.flush();  // 503: still pending
  fb.flush();  // 202
  c = fb.counts();
  ASSERT_EQ(trainer.bodies.size(), 3u);
  for (const auto& b : trainer.bodies) {
    EXPECT_EQ(b["batch_id"], trainer.bodies[0]["batch_id"]);
    EXPECT_EQ(b["entries"].size(), 5u);
  }
  EXPECT_EQ(trainer.bodies[0]["batch_id"], fb.sender_id() + ":1");
  EXPECT_EQ(c.acknowledged, 5u);
  EXPECT_EQ(c.retried, 10u);
  EXPECT_EQ(c.queued, 2u);
  expect_balanced(c);
  fb.flush();  // the two newer samples, under the next sequence number
  EXPECT_EQ(trainer.bodies.back()["batch_id"], fb.sender_id() + ":2");
  EXPECT_EQ(trainer.bodies.back()["entries"].size(), 2u);
  c = fb.counts();
  EXPECT_EQ(c.acknowledged, 7u);
  EXPECT_EQ(c.queued, 0u);
  expect_balanced(c);
  // The registry carries the same numbers.
  bool found = false;
  for (const auto& family : registry.Collect()) {
    if (family.name == "llmd_epp_feedback_samples_acknowledged_total") {
      found = true;
      EXPECT_DOUBLE_EQ(family.metric.at(0).counter.value, 7.0);
    }
  }
  EXPECT_TRUE(found);
}

TEST(TrainingFeedback, DropsAreCountedByReason) {
  ScriptedTrainer trainer;
  trainer.statuses = {503, 503, 422};
  FeedbackOptions o = options();
  o.max_send_attempts = 2;
  o.max_buffer = 3;
  TrainingFeedback fb(o, nullptr, trainer.sender());
  for (int i = 0; i < 5; ++i) {
    fb.on_first_token(streamed());
  }
  EXPECT_EQ(fb.counts().dropped_buffer_full, 2u);
  fb.flush();
  fb.flush();  // second 5xx answer: given up
  auto c = fb.counts();
  EXPECT_EQ(c.dropped_send_failed, 3u);
  expect_balanced(c);
  fb.on_first_token(streamed());
  fb.flush();  // 422: final at once
  c = fb.counts();
  EXPECT_EQ(c.dropped_rejected, 1u);
  EXPECT_EQ(c.produced, 6u);
  EXPECT_EQ(c.queued, 0u);
  expect_balanced(c);
}

// A trainer that is down (no answer) for longer than max_send_attempts intervals loses none of
// the pending batch: it is delivered, once, when the trainer is back; the buffer behind it
// stays bounded by shedding its oldest samples.
TEST(TrainingFeedback, AnOutageKeepsThePendingBatchAndBoundsTheBuffer) {
  ScriptedTrainer trainer;
  trainer.statuses = std::deque<int>(10, 0);  // ten intervals without an answer, then 202s
  FeedbackOptions o = options();
  o.max_send_attempts = 2;
  o.max_buffer = 4;
  TrainingFeedback fb(o, nullptr, trainer.sender());
  for (int i = 0; i < 3; ++i) {
    fb.on_first_token(streamed());
  }
  for (int i = 0; i < 10; ++i) {
    fb.flush();
    fb.on_first_token(streamed());  // traffic goes on during the outage
  }
  auto c = fb.counts();
  EXPECT_EQ(c.dropped_send_failed, 0u);
  EXPECT_EQ(c.dropped_buffer_full, 6u);  // 10 new samples into a buffer of 4
  EXPECT_EQ(c.queued, 3u + 4u);
  expect_balanced(c);
  fb.flush();  // the trainer is back: the pending batch, with the id it had from the start
  ASSERT_EQ(trainer.bodies.size(), 11u);
  EXPECT_EQ(trainer.bodies.back()["batch_id"], trainer.bodies.front()["batch_id"]);
  EXPECT_EQ(trainer.bodies.back()["entries"].size(), 3u);
  fb.flush();  // then what the buffer kept
  c = fb.counts();
  EXPECT_EQ(c.acknowledged, 7u);
  EXPECT_EQ(c.queued, 0u);
  expect_balanced(c);
}

// A pipeline without a predicted-latency producer (a heuristic) trains nothing: its
// whole-request latencies must not reach the trainer as TTFTs of the model another pipeline
// uses. The mode is read per request, so a reload to a trained pipeline sends again.
TEST(TrainingFeedback, APipelineThatTrainsNothingSendsNoSample) {
  ScriptedTrainer trainer;
  std::optional<bool> mode;  // what the current pipeline says
  FeedbackOptions o = options();
  o.streaming_mode = [&mode] { return mode; };
  TrainingFeedback fb(o, nullptr, trainer.sender());
  CompletedRequest whole = streamed();
  whole.e2e_ms = 900;
  fb.on_first_token(streamed());
  fb.on_completed(whole);
  fb.flush();
  EXPECT_TRUE(trainer.bodies.empty());
  EXPECT_EQ(fb.counts().produced, 0u);
  mode = false;  // reloaded: a trained pipeline in end-to-end mode
  fb.on_completed(whole);
  fb.flush();
  ASSERT_EQ(trainer.bodies.size(), 1u);
  EXPECT_EQ(trainer.bodies[0]["entries"][0]["actual_ttft_ms"], 900.0);
  // No mode source at all is the same as a pipeline that trains nothing.
  ScriptedTrainer none;
  FeedbackOptions unset = options();
  unset.streaming_mode = nullptr;
  TrainingFeedback quiet(unset, nullptr, none.sender());
  quiet.on_completed(whole);
  quiet.flush();
  EXPECT_TRUE(none.bodies.empty());
}

}  // namespace
}  // namespace llmd::epp
