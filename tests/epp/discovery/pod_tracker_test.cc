// PodTracker: which Kubernetes pod objects become endpoints, and what list/watch events do.
#include "epp/discovery/pod_tracker.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "epp/discovery/pod_discovery.h"

namespace llmd::epp::discovery {
namespace {

using Json = nlohmann::json;

Json pod(const std::string& name, const std::string& ip, bool ready,
         const std::string& phase = "Running") {
  return Json{
      {"metadata",
       {{"name", name},
        {"resourceVersion", "7"},
        {"labels", {{"app", "vllm"}, {"pool", "k8s-pool"}, {"role", "decode"}}}}},
      {"status",
       {{"phase", phase},
        {"podIP", ip},
        {"conditions", Json::array({{{"type", "Ready"}, {"status", ready ? "True" : "False"}}})}}}};
}

TEST(PodTracker, OnlyRunningReadyPodsWithAnIpAreEndpoints) {
  PodTracker t(8000);
  auto p = t.endpoint_of(pod("a", "10.0.0.1", true));
  ASSERT_TRUE(p);
  EXPECT_EQ(p->address, "10.0.0.1:8000");
  EXPECT_EQ(p->labels.at("role"), "decode");
  EXPECT_EQ(p->labels.count("pool"), 0u) << "the EPP's pool names are its own";
  EXPECT_FALSE(t.endpoint_of(pod("b", "10.0.0.2", false)));
  EXPECT_FALSE(t.endpoint_of(pod("c", "", true)));
  EXPECT_FALSE(t.endpoint_of(pod("d", "10.0.0.4", true, "Pending")));
  Json deleting = pod("e", "10.0.0.5", true);
  deleting["metadata"]["deletionTimestamp"] = "2026-11-24T00:00:00Z";
  EXPECT_FALSE(t.endpoint_of(deleting));
  EXPECT_EQ(t.endpoint_of(pod("f", "fd00::1", true))->address, "[fd00::1]:8000");
  EXPECT_FALSE(t.endpoint_of(Json::array()));
}

TEST(PodTracker, ListThenWatchEvents) {
  PodTracker t(9000);
  Json list = {{"metadata", {{"resourceVersion", "100"}}},
               {"items", Json::array({pod("a", "10.0.0.1", true), pod("b", "10.0.0.2", false)})}};
  EXPECT_TRUE(t.replace_all(list));
  EXPECT_FALSE(t.replace_all(list)) << "the same list changes nothing";
  EXPECT_EQ(t.resource_version(), "100");
  ASSERT_EQ(t.endpoints().size(), 1u);
  EXPECT_EQ(t.apply({{"type", "MODIFIED"}, {"object", pod("b", "10.0.0.2", true)}}),
            PodTracker::Outcome::kChanged);
  EXPECT_EQ(t.endpoints().size(), 2u);
  EXPECT_EQ(t.apply({{"type", "MODIFIED"}, {"object", pod("b", "10.0.0.2", true)}}),
            PodTracker::Outcome::kUnchanged);
  EXPECT_EQ(t.apply({{"type", "DELETED"}, {"object", pod("a", "10.0.0.1", true)}}),
            PodTracker::Outcome::kChanged);
  EXPECT_EQ(t.apply({{"type", "DELETED"}, {"object", pod("zz", "10.0.0.9", true)}}),
            PodTracker::Outcome::kUnchanged);
  Json bookmark = {{"type", "BOOKMARK"}, {"object", {{"metadata", {{"resourceVersion", "150"}}}}}};
  EXPECT_EQ(t.apply(bookmark), PodTracker::Outcome::kUnchanged);
  EXPECT_EQ(t.resource_version(), "150");
  Json gone = {{"type", "ERROR"}, {"object", {{"kind", "Status"}, {"code", 410}}}};
  EXPECT_EQ(t.apply(gone), PodTracker::Outcome::kRelist);
  EXPECT_EQ(t.apply(Json("garbage")), PodTracker::Outcome::kRelist);
  EXPECT_EQ(t.endpoints().size(), 1u);
  EXPECT_EQ(t.endpoints()[0].name, "b");
}

TEST(PodTracker, EveryTargetPortOfAPodIsAnEndpointOfItsOwn) {
  PodTracker t(8000);
  t.set_target_ports({8000, 8001});
  t.replace_all(
      Json{{"metadata", {{"resourceVersion", "1"}}},
           {"items", Json::array({pod("a", "10.0.0.1", true), pod("b", "fd00::2", true)})}});
  const auto e = t.endpoints();
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e[0].name, "a-rank-0");
  EXPECT_EQ(e[0].address, "10.0.0.1:8000");
  EXPECT_EQ(e[1].name, "a-rank-1");
  EXPECT_EQ(e[1].address, "10.0.0.1:8001");
  EXPECT_EQ(e[1].labels.at("role"), "decode");
  EXPECT_EQ(e[3].address, "[fd00::2]:8001");
  t.set_target_ports({});  // no ports named: the last ones stay
  EXPECT_EQ(t.endpoints().size(), 4u);
  t.set_target_ports({9000});
  t.replace_all(Json{{"metadata", {{"resourceVersion", "2"}}},
                     {"items", Json::array({pod("a", "10.0.0.1", true)})}});
  ASSERT_EQ(t.endpoints().size(), 1u);
  EXPECT_EQ(t.endpoints()[0].name, "a") << "one port: the pod's own name";
  EXPECT_EQ(t.endpoints()[0].address, "10.0.0.1:9000");
}

TEST(PodDiscoveryOptions, SelectorsParseOrNameTheBadPart) {
  auto s = parse_selector("app=vllm, tier = decode");
  EXPECT_EQ(s.at("app"), "vllm");
  EXPECT_EQ(s.at("tier"), "decode");
  EXPECT_TRUE(parse_selector("").empty());
  EXPECT_THROW(parse_selector("app"), std::invalid_argument);
  EXPECT_THROW(parse_selector("=x"), std::invalid_argument);
}

}  // namespace
}  // namespace llmd::epp::discovery
