// What active-active EPP replicas exchange (issue 32): in-flight snapshots in the pod table and
// learned prefix blocks in the index.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "epp/datastore/pod_registry.h"
#include "epp/datastore/prefix_index.h"

namespace llmd::epp {
namespace {

using std::chrono::milliseconds;
const auto kT0 = std::chrono::steady_clock::time_point(std::chrono::hours(1));

void scrape_pool(PodRegistry& r, std::chrono::steady_clock::time_point at) {
  r.set_pods({{"a", "10.0.0.1:8000", {}}, {"b", "10.0.0.2:8000", {}}});
  for (const char* pod : {"a", "b"}) {
    PodMetrics m;
    m.scraped_at = at;
    r.update_metrics(pod, m);
  }
}

const Endpoint& find(const std::vector<Endpoint>& eps, const std::string& name) {
  for (const auto& e : eps) {
    if (e.name() == name) return e;
  }
  throw std::runtime_error("no pod " + name);
}

TEST(PeerInFlight, APeersSnapshotAddsToOwnCountsUntilItExpires) {
  PodRegistry r{std::chrono::hours(1)};
  scrape_pool(r, kT0);
  r.set_peer_expiry(milliseconds(150));
  r.live("a")->on_dispatch(100);
  r.set_peer_in_flight("replica-1", {{"a", 2, 300, 0}, {"b", 1, 0, 64}}, kT0);
  auto eps = r.candidates(kT0 + milliseconds(100));
  EXPECT_EQ(find(eps, "a").dispatched, 3);
  EXPECT_EQ(find(eps, "a").prefill_tokens_in_flight, 400);
  EXPECT_EQ(find(eps, "b").dispatched, 1);
  EXPECT_EQ(find(eps, "b").decode_tokens_in_flight, 64);
  // The own counts are what a peer is told: never the peers' (no echo between replicas).
  for (const auto& l : r.own_in_flight()) {
    EXPECT_EQ(l.dispatched, l.pod == "a" ? 1 : 0) << l.pod;
  }
  // A newer snapshot replaces the older one; a silent peer stops counting after the expiry.
  r.set_peer_in_flight("replica-1", {{"a", 1, 0, 0}}, kT0 + milliseconds(100));
  EXPECT_EQ(find(r.candidates(kT0 + milliseconds(200)), "a").dispatched, 2);
  EXPECT_EQ(find(r.candidates(kT0 + milliseconds(200)), "b").dispatched, 0);
  EXPECT_EQ(find(r.candidates(kT0 + milliseconds(251)), "a").dispatched, 1);
}

TEST(PeerPrefixBlocks, InsertsAreObservedAndPeerInsertsAreNotEchoed) {
  PrefixIndex mine, peer;
  std::vector<std::pair<std::string, std::vector<uint64_t>>> learned;
  mine.set_insert_observer([&](const std::string& pod, std::span<const uint64_t> h, std::size_t) {
    learned.emplace_back(pod, std::vector<uint64_t>(h.begin(), h.end()));
  });
  peer.set_insert_observer([&](const std::string&, std::span<const uint64_t>, std::size_t) {
    ADD_FAILURE() << "a peer's blocks must not be reported again";
  });
  const std::vector<uint64_t> blocks{11, 12, 13};
  mine.insert("a", blocks);
  ASSERT_EQ(learned.size(), 1u);
  EXPECT_EQ(learned[0].first, "a");
  EXPECT_EQ(learned[0].second, blocks);
  EXPECT_EQ(peer.match("a", blocks), 0u);
  peer.insert_from_peer(learned[0].first, learned[0].second);
  EXPECT_EQ(peer.match("a", blocks), 3u);
  mine.insert_from_peer("b", blocks);
  EXPECT_EQ(learned.size(), 1u);
}

}  // namespace
}  // namespace llmd::epp
