// LeaderElection: the decisions of one candidate for a Lease, against an in-memory Lease store
// with the API server's compare-and-swap, on a simulated clock.
#include "epp/discovery/leader_elector.h"

#include <gtest/gtest.h>

#include <random>

namespace llmd::epp::discovery {
namespace {

using namespace std::chrono_literals;
using Clock = LeaderElection::Clock;
using Json = nlohmann::json;

LeaderElectionConfig config(const std::string& identity) {
  LeaderElectionConfig c;
  c.identity = identity;
  c.lease_namespace = "llm";
  c.lease_name = "llmd-epp-p";
  c.lease_duration = 15s;
  c.renew_deadline = 10s;
  c.retry_period = 2s;
  return c;
}

// The API server's side of a Lease: creates fail when it exists, updates when the
// resourceVersion is not the current one (409 Conflict), and every write gets a new version.
struct LeaseStore {
  std::optional<StoredLease> lease;
  int version = 100;

  std::optional<StoredLease> write(const LeaderElection::Write& w) {
    if (w.create ? lease.has_value() : (!lease || lease->resource_version != w.resource_version)) {
      return std::nullopt;
    }
    lease = StoredLease{w.record, std::to_string(++version)};
    return lease;
  }
};

// One attempt of `c` at `now`, as LeaderElector makes it (read, plan, write, record).
bool attempt(LeaderElection& c, LeaseStore& store, Clock::time_point now) {
  const auto wall = std::chrono::system_clock::time_point{} + now.time_since_epoch();
  auto write = c.plan(store.lease, now, wall);
  if (!write) {
    return false;
  }
  auto stored = store.write(*write);
  if (!stored) {
    return false;
  }
  c.written(*stored, now, now);
  return true;
}

TEST(LeaderElectionConfig, TheLeaderMustGiveUpBeforeTheLeaseExpiresAndRetryWithinItsDeadline) {
  EXPECT_EQ(config("a").validate(), "");
  auto c = config("a");
  c.renew_deadline = 15s;
  EXPECT_NE(c.validate().find("greater than renewDeadlineSeconds"), std::string::npos);
  c = config("a");
  c.retry_period = 9s;  // 1.2 x 9 s > 10 s
  EXPECT_NE(c.validate().find("1.2 x retryPeriodSeconds"), std::string::npos);
  c = config("");
  EXPECT_NE(c.validate().find("identity"), std::string::npos);
  EXPECT_THROW(LeaderElection{c}, std::invalid_argument);
}

TEST(LeaderElection, AnAbsentLeaseIsCreatedAndLedUntilTheRenewDeadline) {
  LeaderElection a(config("a"));
  LeaseStore store;
  const Clock::time_point t0 = Clock::time_point{} + 1000s;
  auto write = a.plan(std::nullopt, t0, std::chrono::system_clock::time_point{});
  ASSERT_TRUE(write);
  EXPECT_TRUE(write->create);
  EXPECT_EQ(write->record.holder, "a");
  EXPECT_EQ(write->record.lease_duration_seconds, 15);
  EXPECT_EQ(write->record.transitions, 0);
  EXPECT_FALSE(a.leading(t0)) << "not before the API server accepted the create";
  auto stored = store.write(*write);
  ASSERT_TRUE(stored);
  a.written(*stored, t0, t0 + 50ms);
  EXPECT_TRUE(a.leading(t0 + 9999ms));
  EXPECT_FALSE(a.leading(t0 + 10s)) << "the deadline counts from the start of the attempt";
}

TEST(LeaderElection, AHeldLeaseExpiresOnTheStandbysClockFromWhenItLastChanged) {
  LeaderElection a(config("a")), b(config("b"));
  LeaseStore store;
  Clock::time_point t = Clock::time_point{} + 1000s;
  ASSERT_TRUE(attempt(a, store, t));
  ASSERT_TRUE(store.lease);
  const auto acquired = store.lease->record.acquire_time;
  // b first sees the lease 5 s later: it waits 15 s from then, not from a's renewTime.
  EXPECT_FALSE(attempt(b, store, t + 5s));
  EXPECT_FALSE(attempt(b, store, t + 19s)) << "an unchanged lease keeps its first sighting";
  EXPECT_EQ(b.observed_holder(), "a");
  // a renews at t + 8 s: b's clock restarts from its next read.
  ASSERT_TRUE(attempt(a, store, t + 8s));
  EXPECT_EQ(store.lease->record.acquire_time, acquired) << "a renewal keeps the acquire time";
  EXPECT_EQ(store.lease->record.transitions, 0);
  EXPECT_FALSE(attempt(b, store, t + 21s));  // the renewal is seen now: valid until t + 36 s
  EXPECT_FALSE(attempt(b, store, t + 35s));
  ASSERT_TRUE(attempt(b, store, t + 36s));
  EXPECT_TRUE(b.leading(t + 36s));
  EXPECT_EQ(store.lease->record.holder, "b");
  EXPECT_EQ(store.lease->record.transitions, 1);
  EXPECT_NE(store.lease->record.acquire_time, acquired);
  // a reads the lease b holds: it knows at once that it no longer leads.
  EXPECT_FALSE(attempt(a, store, t + 37s));
  EXPECT_FALSE(a.leading(t + 37s));
}

TEST(LeaderElection, TwoCandidatesWritingTheSameVersionOnlyOneWins) {
  LeaderElection a(config("a")), b(config("b"));
  LeaseStore store;
  const Clock::time_point t = Clock::time_point{} + 1000s;
  const auto wall = std::chrono::system_clock::time_point{};
  // Both read "no lease" and both create: the second create is refused (409 AlreadyExists).
  auto wa = a.plan(std::nullopt, t, wall);
  auto wb = b.plan(std::nullopt, t, wall);
  ASSERT_TRUE(wa && wb);
  auto sa = store.write(*wa);
  ASSERT_TRUE(sa);
  a.written(*sa, t, t);
  EXPECT_FALSE(store.write(*wb));
  EXPECT_TRUE(a.leading(t));
  EXPECT_FALSE(b.leading(t));
  // Both read an expired (released) lease at the same version and both update it.
  auto released = a.release(wall);
  ASSERT_TRUE(released);
  ASSERT_TRUE(store.write(*released));
  auto ra = a.plan(store.lease, t + 1s, wall);
  auto rb = b.plan(store.lease, t + 1s, wall);
  ASSERT_TRUE(ra && rb) << "a released lease is free at once";
  auto sb = store.write(*rb);
  ASSERT_TRUE(sb);
  b.written(*sb, t + 1s, t + 1s);
  EXPECT_FALSE(store.write(*ra)) << "a's resourceVersion is stale: 409";
  EXPECT_TRUE(b.leading(t + 1s));
  EXPECT_FALSE(a.leading(t + 1s));
}

TEST(LeaderElection, ReleaseClearsTheHolderOnlyForTheHolder) {
  LeaderElection a(config("a")), b(config("b"));
  LeaseStore store;
  const Clock::time_point t = Clock::time_point{} + 1000s;
  ASSERT_TRUE(attempt(a, store, t));
  EXPECT_FALSE(attempt(b, store, t));
  EXPECT_FALSE(b.release({})) << "b never held it";
  auto r = a.release({});
  ASSERT_TRUE(r);
  EXPECT_FALSE(a.leading(t)) << "a stops leading before the write";
  EXPECT_EQ(r->record.holder, "");
  EXPECT_EQ(r->record.lease_duration_seconds, 1);
  EXPECT_EQ(r->record.transitions, 0);
  EXPECT_EQ(r->resource_version, store.lease->resource_version);
}

// The safety property, simulated at 10 ms steps over many partitions: the leader's requests
// fail for a while (it cannot renew), the standby keeps reading; at no instant do both lead,
// and the standby takes over after each partition longer than the lease.
TEST(LeaderElection, APartitionedLeaderStopsLeadingBeforeTheStandbyCanTakeTheLease) {
  auto c = [](const std::string& id) {
    auto k = config(id);
    k.lease_duration = 2s;
    k.renew_deadline = 1500ms;
    k.retry_period = 300ms;
    return k;
  };
  LeaderElection a(c("a")), b(c("b"));
  LeaseStore store;
  Clock::time_point t = Clock::time_point{} + 1000s;
  const auto end = t + 600s;
  Clock::time_point a_next = t, b_next = t + 150ms;
  int takeovers = 0;
  std::string last_leader;
  // Partitions of 0.5 s .. 4 s, alternating with connected stretches of 3 s.
  auto partitioned = [&](LeaderElection& who, Clock::time_point now) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now - (end - 600s));
    const int64_t cycle = ms.count() % 7000;
    const std::string leader = store.lease ? store.lease->record.holder : "";
    return leader == who.config().identity && cycle >= 3000 &&
           cycle < 3000 + 500 + (ms.count() / 7000 % 8) * 500;
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> jitter(0.0, 1.2);
  auto step = [&](LeaderElection& who, Clock::time_point& next) {
    if (t >= next) {
      if (!partitioned(who, t)) {
        attempt(who, store, t);
      }
      // Standbys wait a jittered retry period, as LeaderElector does (seeded here).
      const double factor = who.leading(t) ? 1.0 : 1.0 + jitter(rng);
      next = t + std::chrono::duration_cast<Clock::duration>(who.config().retry_period * factor);
    }
  };
  for (; t < end; t += 10ms) {
    step(a, a_next);
    step(b, b_next);
    ASSERT_FALSE(a.leading(t) && b.leading(t))
        << "two leaders at +" << std::chrono::duration<double>(t - (end - 600s)).count() << " s";
    const std::string leader = a.leading(t) ? "a" : b.leading(t) ? "b" : "";
    if (!leader.empty() && leader != last_leader) {
      takeovers += last_leader.empty() ? 0 : 1;
      last_leader = leader;
    }
  }
  EXPECT_GE(takeovers, 25) << "partitions longer than the lease hand leadership over";
}

// Two replicas on one host (no POD_NAME) must not share an identity: both would think they
// hold the Lease.
TEST(Lease, TheDefaultIdentityIsTheHostPlusARandomSuffix) {
  const std::string a = default_leader_identity("epp-host");
  const std::string b = default_leader_identity("epp-host");
  EXPECT_NE(a, b);
  for (const auto& id : {a, b}) {
    ASSERT_EQ(id.size(), std::string("epp-host_").size() + 16) << id;
    EXPECT_EQ(id.rfind("epp-host_", 0), 0u) << id;
    EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 9), std::string::npos) << id;
  }
}

TEST(Lease, JsonRoundTripAndMicroTime) {
  const auto t = std::chrono::system_clock::time_point{} + 1795664243s + 123456us;
  EXPECT_EQ(micro_time(t), "2026-11-26T03:37:23.123456Z");
  LeaseRecord r{"epp-0", 15, micro_time(t), micro_time(t + 2s), 3};
  Json j = lease_json("llm", "llmd-epp-p", r, "42");
  EXPECT_EQ(j["apiVersion"], "coordination.k8s.io/v1");
  EXPECT_EQ(j["kind"], "Lease");
  EXPECT_EQ(j["metadata"]["resourceVersion"], "42");
  EXPECT_EQ(j["spec"]["holderIdentity"], "epp-0");
  auto back = parse_lease(j);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->record, r);
  EXPECT_EQ(back->resource_version, "42");
  r.holder.clear();
  EXPECT_FALSE(lease_json("llm", "x", r, "").contains("resourceVersion"));
  EXPECT_FALSE(lease_json("llm", "x", r, "")["spec"].contains("holderIdentity"));
  EXPECT_FALSE(parse_lease(Json{{"spec", {}}})) << "no resourceVersion: not a stored Lease";
  EXPECT_FALSE(parse_lease(Json::array()));
}

}  // namespace
}  // namespace llmd::epp::discovery
