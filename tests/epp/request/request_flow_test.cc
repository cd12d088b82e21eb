// RequestFlow as a plain class: no sockets, a manual executor for the continuations, a clock
// the test moves. What the proxy, ext_proc and the simulator rely on: one decision, the retry
// rule, the response scanned and timed, the record written once, every slot given back once.
#include "epp/request/request_flow.h"

#include <deque>

#include <gtest/gtest.h>

#include "epp/datastore/pod_registry.h"
#include "epp/queue/admission_gate.h"
#include "tests/epp/request/request_test_util.h"

namespace llmd::epp {
namespace {

using namespace std::chrono_literals;
using TimePoint = std::chrono::steady_clock::time_point;

using testing::kT0;
using testing::RecordingSink;

// Continuations posted by the flow, run when the test says (the strand of a transport).
struct ManualExecutor {
  std::deque<std::function<void()>> queue;
  RequestFlow::Post post() {
    return [this](std::function<void()> f) { queue.push_back(std::move(f)); };
  }
  void run() {
    while (!queue.empty()) {
      auto f = std::move(queue.front());
      queue.pop_front();
      f();
    }
  }
};

// Answers picks from a script: the ranked pods of the registry by name, at once or on
// release() (predictions that arrive later, through `resume`).
class ScriptedPort final : public SchedulingPort {
 public:
  explicit ScriptedPort(PodRegistry& registry) : registry_(registry) {}
  SchedulingGenerationPtr generation() override { return generation_; }
  Route route(const SchedulingRequest&, const SchedulingGeneration&) override { return route_; }
  void pick_async(const SchedulingRequest& request, const Route&, const SchedulingGeneration&, Rng&,
                  Resume resume, std::function<void(PickResult)> done) override {
    ++picks;
    picked_ids.push_back(request.request_id);
    PickResult r;
    r.status = status;
    for (const auto& name : ranking) {
      for (auto& e : registry_.candidates(kT0)) {
        if (e.name() == name) {
          r.ranked.push_back(e);
        }
      }
    }
    if (!deferred) {
      done(std::move(r));
      return;
    }
    pending_ = [resume, done, r] { resume([done, r] { done(r); }); };
  }
  void estimate_service_ms_async(const SchedulingRequest&, int64_t, Resume,
                                 std::function<void(double)> done) override {
    done(0);
  }
  void release() { std::exchange(pending_, nullptr)(); }

  std::vector<std::string> ranking{"a", "b"};
  int status = 200;
  bool deferred = false;
  int picks = 0;
  std::vector<std::string> picked_ids;
  Route route_;

 private:
  PodRegistry& registry_;
  SchedulingGenerationPtr generation_ = std::make_shared<const SchedulingGeneration>();
  std::function<void()> pending_;
};

constexpr char kChatPath[] = "/v1/chat/completions";
constexpr char kStreamedChat[] =
    R"({"model":"m","stream":true,"max_tokens":8,"messages":[{"role":"user","content":"hi"}]})";

std::string sse(const std::string& content) {
  return "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"" + content + "\"}}]}\n\n";
}

class RequestFlowTest : public ::testing::Test {
 protected:
  RequestFlowTest() { testing::add_two_pods(registry_); }
  std::shared_ptr<RequestFlow> make(AdmissionGate* gate = nullptr) {
    return RequestFlow::create(FlowOptions{}, FlowServices{&port_, &registry_, &sink_, gate},
                               executor_.post(), [this] { return now_; });
  }
  InboundHeaders headers(const std::string& id = "r1") {
    InboundHeaders h;
    h.request_id = id;
    return h;
  }
  Endpoint pod(const std::string& name) {
    for (auto& e : registry_.candidates(now_)) {
      if (e.name() == name) {
        return e;
      }
    }
    ADD_FAILURE() << name;
    return {};
  }

  TimePoint now_ = kT0;
  PodRegistry registry_;
  RecordingSink sink_;
  ScriptedPort port_{registry_};
  ManualExecutor executor_;
};

TEST_F(RequestFlowTest, AStreamIsScannedTimedAndRecordedOnce) {
  auto flow = make();
  std::vector<RequestFlow::Verdict> verdicts;
  flow->start(kChatPath, kStreamedChat, headers(),
              [&](const RequestFlow::Verdict& v) { verdicts.push_back(v); });
  ASSERT_EQ(verdicts.size(), 1u) << "nothing waited: decided inline";
  EXPECT_EQ(verdicts[0].status, 200);
  ASSERT_NE(flow->next_pod(), nullptr);
  EXPECT_EQ(flow->next_pod()->name(), "a");
  now_ += 4ms;  // parsing and scheduling
  flow->dispatch();
  EXPECT_EQ(pod("a").dispatched, 1);
  EXPECT_EQ(flow->next_pod(), nullptr) << "no retry while the attempt runs";
  now_ += 20ms;
  flow->response_bytes("data: {\"choices\":[{\"index\":0,\"del");  // split mid-event
  EXPECT_TRUE(sink_.first.empty());
  flow->response_bytes("ta\":{\"content\":\"Hel\"}}]}\n\n");
  ASSERT_EQ(sink_.first.size(), 1u);
  EXPECT_DOUBLE_EQ(sink_.first[0].ttft_ms, 20);
  EXPECT_DOUBLE_EQ(sink_.first[0].dispatch_delay_ms, 4);
  now_ += 10ms;
  flow->response_bytes(sse("lo") + sse("!"));
  now_ += 6ms;
  flow->response_bytes("data: [DONE]\n\n");
  flow->response_ended(200);
  flow->response_ended(200);  // a second end changes nothing
  flow->client_gone();        // nor a client that leaves afterwards
  ASSERT_EQ(sink_.completed.size(), 1u);
  const CompletedRequest& done = sink_.completed[0];
  EXPECT_TRUE(done.success);
  EXPECT_DOUBLE_EQ(done.e2e_ms, 36);
  EXPECT_DOUBLE_EQ(done.ttft_ms, 20);
  EXPECT_EQ(done.completion_tokens, 3) << "no usage chunk: the content chunks counted";
  EXPECT_EQ(done.continuation_prompt, "hi Hello! ");
  EXPECT_EQ(done.prompt_chars, 3) << "the prompt's size is kept, not its text";
  EXPECT_FALSE(done.prompt_tokens) << "no usage chunk: the pod's token count is unknown";
  ASSERT_TRUE(done.measured_tpot_ms());
  EXPECT_DOUBLE_EQ(*done.measured_tpot_ms(), 8);
  EXPECT_EQ(flow->attempt()->record().e2e_ms, 36) << "the record the sinks saw";
  EXPECT_EQ(pod("a").dispatched, 0);
  EXPECT_TRUE(sink_.rejected.empty());
}

TEST_F(RequestFlowTest, ANonStreamedBodyGivesUsageAndTtftIsItsEnd) {
  auto flow = make();
  flow->start(kChatPath, R"({"model":"m","messages":[{"role":"user","content":"q"}]})", headers(),
              [](const RequestFlow::Verdict&) {});
  flow->dispatch();
  now_ += 50ms;
  flow->response_bytes(R"({"choices":[{"message":{"content":"A"}}],)");
  flow->response_bytes(
      R"("usage":{"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":16}}})");
  flow->response_ended(200);
  ASSERT_EQ(sink_.completed.size(), 1u);
  EXPECT_DOUBLE_EQ(sink_.completed[0].ttft_ms, 50);
  EXPECT_EQ(sink_.completed[0].completion_tokens, 7);
  EXPECT_EQ(sink_.completed[0].cached_tokens, 16);
  EXPECT_TRUE(sink_.first.empty()) << "no stream: no first-token sample";
}

TEST_F(RequestFlowTest, OneRetryOnTheNextPodOnlyWhenNothingReachedTheClient) {
  auto flow = make();
  flow->start(kChatPath, kStreamedChat, headers(), [](const RequestFlow::Verdict&) {});
  flow->dispatch();
  flow->pod_failed(503, true);
  ASSERT_NE(flow->next_pod(), nullptr);
  EXPECT_EQ(flow->next_pod()->name(), "b");
  now_ += 3ms;
  flow->dispatch();
  EXPECT_EQ(pod("b").dispatched, 1);
  flow->pod_failed(502, true);
  EXPECT_EQ(flow->next_pod(), nullptr) << "one retry only";
  const RequestFlow::Verdict v = flow->exhausted();
  EXPECT_EQ(v.status, 502);
  ASSERT_EQ(sink_.completed.size(), 2u);
  EXPECT_EQ(sink_.completed[1].attempts, 2);
  EXPECT_DOUBLE_EQ(sink_.completed[1].dispatch_delay_ms, 3);
  EXPECT_EQ(sink_.rejected, (std::vector<std::pair<std::string, int>>{{"m", 502}}));

  auto broken = make();
  broken->start(kChatPath, kStreamedChat, headers(), [](const RequestFlow::Verdict&) {});
  broken->dispatch();
  broken->response_bytes(sse("x"));
  broken->pod_failed(502, false);
  EXPECT_EQ(broken->next_pod(), nullptr) << "the response had begun: no retry";
}

TEST_F(RequestFlowTest, RefusalsAreReportedOnceWithTheirStatus) {
  auto flow = make();
  std::optional<RequestFlow::Verdict> verdict;
  flow->start(kChatPath, "{not json", headers(),
              [&](const RequestFlow::Verdict& v) { verdict = v; });
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->status, 400);
  EXPECT_EQ(port_.picks, 0);
  port_.status = 503;
  port_.ranking.clear();
  auto none = make();
  none->start(kChatPath, kStreamedChat, headers(),
              [&](const RequestFlow::Verdict& v) { verdict = v; });
  EXPECT_EQ(verdict->status, 503);
  EXPECT_EQ(none->next_pod(), nullptr);
  ASSERT_EQ(sink_.rejected.size(), 2u);
  EXPECT_EQ(sink_.rejected[0].second, 400);
  EXPECT_EQ(sink_.rejected[1], (std::pair<std::string, int>{"m", 503}));
}

TEST_F(RequestFlowTest, PredictionsThatArriveLaterContinueOnTheOwnersExecutor) {
  port_.deferred = true;
  auto flow = make();
  int decided = 0;
  flow->start(kChatPath, kStreamedChat, headers(), [&](const RequestFlow::Verdict&) { ++decided; });
  port_.release();  // the predictor client's thread answers: it only posts
  EXPECT_EQ(decided, 0);
  executor_.run();
  EXPECT_EQ(decided, 1);
  EXPECT_EQ(flow->next_pod()->name(), "a");
}

TEST_F(RequestFlowTest, AClientGoneWhileSchedulingIsNeverDispatchedNorAnswered) {
  port_.deferred = true;
  auto flow = make();
  std::optional<RequestFlow::Verdict> verdict;
  flow->start(kChatPath, kStreamedChat, headers(),
              [&](const RequestFlow::Verdict& v) { verdict = v; });
  flow->client_gone();
  port_.release();
  executor_.run();
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->status, 499);
  EXPECT_EQ(flow->next_pod(), nullptr);
  EXPECT_TRUE(sink_.rejected.empty());
  EXPECT_TRUE(sink_.completed.empty());
}

TEST_F(RequestFlowTest, AnAttemptLeftRunningEndsAs499OnTheFlowsClock) {
  {
    auto flow = make();
    flow->start(kChatPath, kStreamedChat, headers(), [](const RequestFlow::Verdict&) {});
    flow->dispatch();
    now_ += 70ms;
  }
  ASSERT_EQ(sink_.completed.size(), 1u);
  EXPECT_EQ(sink_.completed[0].status, 499);
  EXPECT_DOUBLE_EQ(sink_.completed[0].e2e_ms, 70);
  EXPECT_EQ(pod("a").dispatched, 0);
}

// The router queue: one pod, saturated by one request in flight.
class RequestFlowQueueTest : public RequestFlowTest {
 protected:
  RequestFlowQueueTest() {
    registry_.set_pods({{"a", "10.0.0.1:8000", {}}});
    port_.ranking = {"a"};
    RouterQueueConfig c;
    c.saturation = SaturationThresholds{};
    c.saturation.in_flight_requests = 1;
    gate_.configure(c);
  }
  AdmissionGate gate_{[this](const std::string&) { return registry_.candidates(now_); }, nullptr};
};

TEST_F(RequestFlowQueueTest, AWaiterIsAdmittedWhenASlotFreesAndTheSlotPassesToTheDispatch) {
  auto first = make(&gate_);
  first->start(kChatPath, kStreamedChat, headers("one"), [](const RequestFlow::Verdict&) {});
  first->dispatch();
  auto second = make(&gate_);
  auto third = make(&gate_);
  std::optional<RequestFlow::Verdict> v2, v3;
  second->start(kChatPath, kStreamedChat, headers("two"),
                [&](const RequestFlow::Verdict& v) { v2 = v; });
  EXPECT_FALSE(v2) << "the pod is busy: queued";
  EXPECT_EQ(gate_.pending(), 1u);
  first->response_ended(200);  // a slot frees: the gate wakes `second` (posted)
  EXPECT_FALSE(v2);
  executor_.run();
  ASSERT_TRUE(v2);
  EXPECT_EQ(v2->status, 200);
  EXPECT_EQ(second->next_pod()->name(), "a");
  // `second` holds the in-transit slot: `third` waits although no pod counts it yet.
  third->start(kChatPath, kStreamedChat, headers("three"),
               [&](const RequestFlow::Verdict& v) { v3 = v; });
  EXPECT_FALSE(v3);
  second->dispatch();  // the slot's job passes to the pod bookkeeping
  second->response_ended(200);
  executor_.run();
  ASSERT_TRUE(v3);
  EXPECT_EQ(v3->status, 200);
  EXPECT_EQ(port_.picked_ids, (std::vector<std::string>{"one", "two", "three"}));
}

// Dynamo's threshold counts the prefill tokens in flight, which free at the first token: the
// waiter is admitted then, not when the request in flight finishes (nor a tick later).
TEST_F(RequestFlowQueueTest, APrefillThresholdAdmitsTheWaiterAtTheFirstTokenInFlight) {
  RouterQueueConfig c;
  c.saturation = SaturationThresholds{};
  c.saturation.prefill_fraction = 1.0;
  c.saturation.max_batched_tokens = 1;  // any prompt in prefill saturates the pod
  gate_.configure(c);
  auto first = make(&gate_);
  first->start(kChatPath, kStreamedChat, headers("one"), [](const RequestFlow::Verdict&) {});
  first->dispatch();
  ASSERT_GT(pod("a").prefill_tokens_in_flight, 0);
  std::optional<RequestFlow::Verdict> v2;
  auto second = make(&gate_);
  second->start(kChatPath, kStreamedChat, headers("two"),
                [&](const RequestFlow::Verdict& v) { v2 = v; });
  EXPECT_EQ(gate_.pending(), 1u) << "the pod's prompt is still in prefill";
  first->response_bytes(sse("Hel"));
  EXPECT_EQ(pod("a").prefill_tokens_in_flight, 0);
  executor_.run();
  ASSERT_TRUE(v2) << "admitted at the first token";
  EXPECT_EQ(v2->status, 200);
  EXPECT_EQ(gate_.pending(), 0u);
  first->response_ended(200);
}

TEST_F(RequestFlowQueueTest, AnAdmissionRacingAClientThatLeftGivesItsSlotBackOnce) {
  auto busy = make(&gate_);
  busy->start(kChatPath, kStreamedChat, headers("busy"), [](const RequestFlow::Verdict&) {});
  busy->dispatch();
  std::optional<RequestFlow::Verdict> verdict;
  auto leaving = make(&gate_);
  leaving->start(kChatPath, kStreamedChat, headers("leaving"),
                 [&](const RequestFlow::Verdict& v) { verdict = v; });
  // The gate admits `leaving` (its wake-up is posted, not yet run) ...
  busy->response_ended(200);
  ASSERT_EQ(executor_.queue.size(), 1u);
  // ... and the client leaves before the wake-up reaches the flow.
  leaving->client_gone();
  ASSERT_TRUE(verdict);
  EXPECT_EQ(verdict->status, 499);
  leaving.reset();
  executor_.run();  // the late admission finds nobody: its slot goes back
  EXPECT_EQ(port_.picks, 1) << "the leaver is never scheduled";
  // Had the slot stayed in transit, the pod would look saturated and this one would queue.
  std::optional<RequestFlow::Verdict> next;
  auto after = make(&gate_);
  after->start(kChatPath, kStreamedChat, headers("after"),
               [&](const RequestFlow::Verdict& v) { next = v; });
  ASSERT_TRUE(next) << "admitted at once";
  EXPECT_EQ(next->status, 200);
  EXPECT_EQ(gate_.pending(), 0u);
}

}  // namespace
}  // namespace llmd::epp
