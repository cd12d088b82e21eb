// Active-passive EPPs (--leader-elect) end to end: two real EPP processes elect a leader
// through a fake API server that keeps Leases with resourceVersion conflicts (fake_lease_api.h),
// in front of one modelsim pod. Short timings (lease 2 s, renew deadline 1.5 s, retry 0.3 s);
// every wait is a generous polling bound.
//
// "Never two leaders" is watched from the outside for the whole test: a thread asks both
// /readyz in quick rounds and counts the rounds in which both answer 200. A round takes a few
// milliseconds, far less than the 0.5 s by which a partitioned leader stops before a standby
// may take over, so a legitimate handover cannot show up as two leaders.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <thread>

#include "tests/e2e/grpc_health_client.h"
#include "tests/e2e/fake_lease_api.h"
#include "tests/e2e/stack_fixture.h"

namespace llmd::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Short Lease durations, so that a take-over happens within seconds.
constexpr const char* kFastLease =
    "leaderElection: {leaseDurationSeconds: 2, renewDeadlineSeconds: 1.5, "
    "retryPeriodSeconds: 0.3}\n";

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// One EPP replica with leader election on, named `name` in the Lease, authenticating to the API
// server with its own token (so the fake server can partition it alone).
struct ElectedEpp {
  // `named`: the replica's identity is `replica`; else the EPP's default (as without POD_NAME).
  ElectedEpp(std::string replica, FakeLeaseApi& api, const std::string& config, bool named = true)
      : name(std::move(replica)) {
    std::ofstream(dir.file("token")) << token() << "\n";
    std::vector<std::string> args = {"--config",
                                     config,
                                     "--host",
                                     "127.0.0.1",
                                     "--port",
                                     std::to_string(port),
                                     "--health-port",
                                     std::to_string(health_port),
                                     "--metrics-port",
                                     std::to_string(metrics_port),
                                     "--kube-api-url",
                                     api.url(),
                                     "--kube-token-file",
                                     dir.file("token"),
                                     "--leader-elect",
                                     "true",
                                     "--leader-elect-lease-namespace",
                                     "llm",
                                     "--drain-timeout",
                                     "1"};
    if (named) {
      args.insert(args.end(), {"--leader-elect-identity", name});
    }
    process = std::make_unique<Process>(binary("epp/epp"), args);
  }
  std::string token() const { return "token-" + name; }
  int ready_status() const {
    http::HttpClient h("127.0.0.1", health_port, std::chrono::seconds(2));
    return h.get("/readyz").status;
  }
  http::ClientResponse readyz() const {
    http::HttpClient h("127.0.0.1", health_port, std::chrono::seconds(2));
    return h.get("/readyz");
  }
  http::ClientResponse complete(const std::string& seed) const {
    http::HttpClient c("127.0.0.1", port, std::chrono::seconds(30));
    Json body = {{"model", "meta-llama/Llama-3.1-8B-Instruct"},
                 {"prompt", words(8, seed)},
                 {"max_tokens", 2}};
    return c.post("/v1/completions", body.dump());
  }
  double metric(const std::string& prefix) const {
    http::HttpClient c("127.0.0.1", metrics_port, std::chrono::seconds(5));
    return metric_sum(c.get("/metrics").body, prefix);
  }

  std::string name;
  TempDir dir;
  uint16_t port = free_port(), health_port = free_port(), metrics_port = free_port();
  std::unique_ptr<Process> process;
};

// Both replicas' /readyz in rounds until stopped: rounds with two 200s, and when each replica
// was first seen ready / not ready after mark().
class ReadinessWatch {
 public:
  ReadinessWatch(const ElectedEpp& a, const ElectedEpp& b) : a_(a), b_(b) {
    thread_ = std::thread([this] {
      while (!stop_) {
        const bool ra = a_.ready_status() == 200;
        const bool rb = b_.ready_status() == 200;
        std::lock_guard lock(mu_);
        ++rounds_;
        both_ += ra && rb ? 1 : 0;
        record(ra, a_ready_, a_unready_);
        record(rb, b_ready_, b_unready_);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  ~ReadinessWatch() { stop(); }
  void stop() {
    stop_ = true;
    if (thread_.joinable()) {
      thread_.join();
    }
  }
  // Forgets the first sightings: the next ones are from now on.
  void mark() {
    std::lock_guard lock(mu_);
    a_ready_ = a_unready_ = b_ready_ = b_unready_ = std::nullopt;
  }
  int both_ready() {
    std::lock_guard lock(mu_);
    return both_;
  }
  int rounds() {
    std::lock_guard lock(mu_);
    return rounds_;
  }
  // First time after mark() that `who` answered 200 (ready) or anything else.
  std::optional<Clock::time_point> first(const ElectedEpp& who, bool ready) {
    std::lock_guard lock(mu_);
    if (&who == &a_) {
      return ready ? a_ready_ : a_unready_;
    }
    return ready ? b_ready_ : b_unready_;
  }

 private:
  static void record(bool ready, std::optional<Clock::time_point>& on,
                     std::optional<Clock::time_point>& off) {
    auto& slot = ready ? on : off;
    if (!slot) {
      slot = Clock::now();
    }
  }

  const ElectedEpp& a_;
  const ElectedEpp& b_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  int rounds_ = 0, both_ = 0;
  std::optional<Clock::time_point> a_ready_, a_unready_, b_ready_, b_unready_;
  std::thread thread_;
};

// Polls until `done()` or `bound` passes; true when done.
template <typename F>
bool eventually(F done, std::chrono::milliseconds bound = std::chrono::seconds(20)) {
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < bound) {
    if (done()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return done();
}

// One modelsim pod, the fake API server and two elected EPPs; waits for a leader.
class LeaderElectionE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    pod_port = free_port_block(1);
    ASSERT_NE(pod_port, 0);
    pod = std::make_unique<Process>(
        binary("bench/modelsim/modelsim"),
        std::vector<std::string>{"--pods", "1", "--base-port", std::to_string(pod_port), "--host",
                                 "127.0.0.1"});
    ASSERT_TRUE(pod->wait_http_ok(pod_port, "/health")) << pod->log();
    std::ofstream(dir.file("epp.yaml"))
        << "pool:\n  pods:\n  - {name: pod-0, address: 127.0.0.1:" << pod_port
        << "}\nscrapeIntervalMs: 50\nstalenessMs: 1000\n"
        << kFastLease << "pipeline: " << LLMD_SOURCE_DIR << "/epp/config/load-prefix.yaml\n";
    a = std::make_unique<ElectedEpp>("epp-a", api, dir.file("epp.yaml"));
    b = std::make_unique<ElectedEpp>("epp-b", api, dir.file("epp.yaml"));
    watch = std::make_unique<ReadinessWatch>(*a, *b);
    ASSERT_TRUE(eventually([&] { return a->ready_status() == 200 || b->ready_status() == 200; }))
        << a->process->log() << b->process->log();
    leader = a->ready_status() == 200 ? a.get() : b.get();
    standby = leader == a.get() ? b.get() : a.get();
  }
  void TearDown() override {
    if (watch) {
      watch->stop();
      EXPECT_GT(watch->rounds(), 2) << "the watcher ran";
      EXPECT_EQ(watch->both_ready(), 0) << "rounds in which both replicas were ready";
    }
  }
  std::string logs() const { return a->process->log() + b->process->log(); }

  TempDir dir;
  uint16_t pod_port = 0;
  std::unique_ptr<Process> pod;
  FakeLeaseApi api;
  std::unique_ptr<ElectedEpp> a, b;
  std::unique_ptr<ReadinessWatch> watch;
  ElectedEpp* leader = nullptr;
  ElectedEpp* standby = nullptr;
};

// Two replicas on one host with no identity given (no POD_NAME): each defaults to the host name
// plus a random suffix, so one leads and the other stands by (with the host name alone both
// would hold the Lease and serve).
TEST(LeaderElectionDefaults, TwoUnnamedReplicasOnOneHostElectOneLeader) {
  ASSERT_EQ(std::getenv("POD_NAME"), nullptr) << "the test needs POD_NAME unset";
  TempDir dir;
  const uint16_t pod_port = free_port_block(1);
  ASSERT_NE(pod_port, 0);
  Process pod(binary("bench/modelsim/modelsim"),
              {"--pods", "1", "--base-port", std::to_string(pod_port), "--host", "127.0.0.1"});
  ASSERT_TRUE(pod.wait_http_ok(pod_port, "/health")) << pod.log();
  std::ofstream(dir.file("epp.yaml"))
      << "pool:\n  pods:\n  - {name: pod-0, address: 127.0.0.1:" << pod_port
      << "}\nscrapeIntervalMs: 50\nstalenessMs: 1000\n"
      << kFastLease << "pipeline: " << LLMD_SOURCE_DIR << "/epp/config/load-prefix.yaml\n";
  FakeLeaseApi api;
  ElectedEpp a("epp-a", api, dir.file("epp.yaml"), /*named=*/false);
  ElectedEpp b("epp-b", api, dir.file("epp.yaml"), /*named=*/false);
  ASSERT_TRUE(eventually([&] { return a.ready_status() == 200 || b.ready_status() == 200; }))
      << a.process->log() << b.process->log();
  const std::string holder = api.spec("llmd-epp")["holderIdentity"].get<std::string>();
  char host[256] = {};
  ASSERT_EQ(gethostname(host, sizeof(host) - 1), 0);
  EXPECT_EQ(holder.rfind(std::string(host) + "_", 0), 0u) << holder;
  // The other one has read the Lease and refuses, naming the leader; it is not ready.
  ElectedEpp& standby = a.ready_status() == 200 ? b : a;
  EXPECT_TRUE(eventually([&] {
    return standby.complete("x").body.find("the leader is " + holder) != std::string::npos;
  })) << standby.process->log();
  EXPECT_EQ(standby.ready_status(), 503);
  EXPECT_EQ(standby.metric("llmd_epp_leader"), 0);
}

TEST_F(LeaderElectionE2E, OneLeaderServesAndTheStandbyTakesOverWarmWhenTheLeaderIsKilled) {
  EXPECT_EQ(api.spec("llmd-epp")["holderIdentity"], leader->name);
  // The leader serves; the standby refuses with the OpenAI error shape and says who leads.
  auto served = leader->complete("first");
  ASSERT_EQ(served.status, 200) << served.body << logs();
  EXPECT_EQ(served.header("x-gateway-destination-endpoint"),
            "127.0.0.1:" + std::to_string(pod_port));
  // (The standby names the leader once it has read the Lease the leader wrote.)
  http::ClientResponse refused;
  EXPECT_TRUE(eventually([&] {
    refused = standby->complete("refused");
    return refused.body.find("the leader is") != std::string::npos;
  })) << refused.body;
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.header("retry-after"), "1");
  const Json error = Json::parse(refused.body, nullptr, false);
  ASSERT_TRUE(error.is_object() && error.contains("error")) << refused.body;
  EXPECT_NE(error["error"]["message"].get<std::string>().find("the leader is " + leader->name),
            std::string::npos)
      << refused.body;
  auto probe = standby->readyz();
  EXPECT_EQ(probe.status, 503);
  EXPECT_NE(probe.body.find("Not the leader"), std::string::npos) << probe.body;
  EXPECT_EQ(leader->metric("llmd_epp_leader"), 1);
  EXPECT_EQ(standby->metric("llmd_epp_leader"), 0);
  // The standby is warm: it scrapes the pod as the leader does.
  EXPECT_TRUE(eventually([&] {
    return standby->metric("llmd_epp_pool{stat=\"ready_pods\"}") == 1;
  })) << standby->process->log();

  // The leader dies without a word: the standby takes the Lease once it expires, and its very
  // first request is served.
  watch->mark();
  const auto killed = Clock::now();
  leader->process->kill_now();
  ASSERT_TRUE(eventually([&] { return standby->ready_status() == 200; })) << logs();
  const double failover = since(killed);
  auto first = standby->complete("after failover");
  EXPECT_EQ(first.status, 200) << first.body << standby->process->log();
  EXPECT_EQ(standby->metric("llmd_epp_leader"), 1);
  EXPECT_EQ(api.spec("llmd-epp")["holderIdentity"], standby->name);
  EXPECT_EQ(api.spec("llmd-epp")["leaseTransitions"], 1);
  EXPECT_NE(standby->process->log().find(standby->name + " is now the leader"), std::string::npos)
      << standby->process->log();
  // A generous bound (the design's is the lease duration plus two jittered retry periods).
  EXPECT_LT(failover, 10.0);
  RecordProperty("failover_after_kill_seconds", std::to_string(failover));
  std::printf("failover after SIGKILL of the leader: %.2f s\n", failover);
}

TEST_F(LeaderElectionE2E, ALeaderCutOffFromTheApiServerStopsServingBeforeTheStandbyTakesOver) {
  watch->mark();
  const auto cut = Clock::now();
  api.partition(leader->token());
  ASSERT_TRUE(eventually([&] { return standby->ready_status() == 200; })) << logs();
  // The watcher's next round sees it too.
  ASSERT_TRUE(eventually([&] { return watch->first(*standby, true).has_value(); }));
  const auto leader_off = watch->first(*leader, false);
  const auto standby_on = watch->first(*standby, true);
  ASSERT_TRUE(leader_off && standby_on);
  EXPECT_LT(*leader_off, *standby_on) << "the old leader stopped before the new one started";
  EXPECT_GT(api.unanswered(), 0) << "the fake server held the leader's requests";
  // The cut-off leader refuses traffic and says so in its log.
  EXPECT_EQ(leader->complete("cut off").status, 503);
  EXPECT_EQ(standby->complete("new leader").status, 200);
  EXPECT_TRUE(eventually([&] {
    return leader->process->log().find("stopped leading") != std::string::npos;
  })) << leader->process->log();
  const double stopped = std::chrono::duration<double>(*leader_off - cut).count();
  const double took_over = std::chrono::duration<double>(*standby_on - cut).count();
  RecordProperty("leader_stopped_after_seconds", std::to_string(stopped));
  RecordProperty("standby_serving_after_seconds", std::to_string(took_over));
  std::printf("partition: old leader unready after %.2f s, new leader ready after %.2f s\n",
              stopped, took_over);

  // The partition heals: the old leader sees the new holder and stays a standby.
  api.heal(leader->token());
  EXPECT_TRUE(eventually([&] {
    return leader->process->log().find("the leader is " + standby->name) != std::string::npos;
  })) << leader->process->log();
  EXPECT_EQ(leader->ready_status(), 503);
  EXPECT_EQ(standby->ready_status(), 200);
  EXPECT_EQ(api.spec("llmd-epp")["holderIdentity"], standby->name);
}

TEST_F(LeaderElectionE2E, ALeaderThatLosesAWriteRaceStandsDown) {
  // Another writer updates the Lease between the leader's read and its renewal: the renewal
  // is refused (409) and the leader, reading the new holder, stops serving at once.
  api.write_before_next_update(leader->token(), "intruder");
  ASSERT_TRUE(eventually([&] { return leader->ready_status() == 503; })) << logs();
  EXPECT_GE(api.conflicts(), 1);
  const auto holders = api.holders();
  EXPECT_NE(std::find(holders.begin(), holders.end(), "intruder"), holders.end());
  // The intruder never renews: after its 2 s one of the replicas leads again.
  ASSERT_TRUE(eventually([&] { return a->ready_status() == 200 || b->ready_status() == 200; }))
      << logs();
  EXPECT_NE(api.spec("llmd-epp")["holderIdentity"], "intruder");
}

TEST_F(LeaderElectionE2E, ALeaderStoppedBySigtermHandsTheLeaseOver) {
  watch->mark();
  ASSERT_EQ(leader->process->terminate(), 0) << leader->process->log();
  EXPECT_NE(leader->process->log().find("released Lease llm/llmd-epp"), std::string::npos)
      << leader->process->log();
  ASSERT_TRUE(eventually([&] { return standby->ready_status() == 200; })) << logs();
  EXPECT_TRUE(eventually([&] { return watch->first(*standby, true).has_value(); }));
  // The Lease went to nobody, then to the standby (not through an expiry).
  const auto holders = api.holders();
  const auto released = std::find(holders.begin(), holders.end(), "");
  ASSERT_NE(released, holders.end());
  ASSERT_NE(released + 1, holders.end());
  EXPECT_EQ(*(released + 1), standby->name);
  EXPECT_EQ(standby->complete("after handover").status, 200);
}

}  // namespace
}  // namespace llmd::testing

namespace llmd::testing {
namespace {

using Serving = grpc::health::v1::HealthCheckResponse;

// The probes of the GIE chart with replicas > 1 (tests/fixtures/upstream/gie-v1.5.0/
// inferencepool-latency-ha.yaml): gRPC on the health port, liveness on every replica (a
// standby must not be restarted), readiness only on the leader; a name upstream does not serve
// with leader election is SERVICE_UNKNOWN, as upstream answers it.
TEST_F(LeaderElectionE2E, TheHaChartsGrpcProbesPassLivenessEverywhereReadinessOnTheLeader) {
  ASSERT_TRUE(eventually([&] {
    return grpc_health(leader->health_port, "readiness") == Serving::SERVING;
  })) << logs();
  EXPECT_EQ(grpc_health(leader->health_port, "liveness"), Serving::SERVING);
  EXPECT_EQ(grpc_health(leader->health_port, ""), Serving::SERVING);
  EXPECT_EQ(grpc_health(leader->health_port, "envoy.service.ext_proc.v3.ExternalProcessor"),
            Serving::SERVING);
  EXPECT_EQ(grpc_health(standby->health_port, "liveness"), Serving::SERVING);
  EXPECT_EQ(grpc_health(standby->health_port, "readiness"), Serving::NOT_SERVING);
  EXPECT_EQ(grpc_health(standby->health_port, ""), Serving::NOT_SERVING);
  EXPECT_EQ(grpc_health(leader->health_port, "inference-extension"), Serving::SERVICE_UNKNOWN);
}

}  // namespace
}  // namespace llmd::testing
