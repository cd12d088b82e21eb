// PoolSpec: what discovery reads from an InferencePool of either API version, and how an edit
// is described in the log.
#include "epp/discovery/pool_spec.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace llmd::epp::discovery {
namespace {

using Json = nlohmann::json;

TEST(PoolSpec, V1SelectorAndEveryTargetPort) {
  std::string error;
  auto spec =
      pool_spec_of(Json{{"spec",
                         {{"selector", {{"matchLabels", {{"app", "vllm"}, {"tier", "decode"}}}}},
                          {"targetPorts", Json::array({{{"number", 8000}}, {{"number", 8001}}})}}}},
                   9999, error);
  ASSERT_TRUE(spec) << error;
  EXPECT_EQ(selector_text(spec->selector), "app=vllm,tier=decode");
  EXPECT_EQ(spec->ports, (std::vector<uint16_t>{8000, 8001}));
  EXPECT_EQ(describe(*spec), "selects app=vllm,tier=decode on ports 8000, 8001");
}

TEST(PoolSpec, V1Alpha2SelectorAndTargetPortNumber) {
  std::string error;
  auto spec = pool_spec_of(
      Json{{"spec", {{"selector", {{"app", "vllm"}}}, {"targetPortNumber", 8200}}}}, 9999, error);
  ASSERT_TRUE(spec) << error;
  EXPECT_EQ(describe(*spec), "selects app=vllm on port 8200");
}

TEST(PoolSpec, NoPortsMeansTheDefaultAndBadPortsAreSkipped) {
  std::string error;
  auto spec =
      pool_spec_of(Json{{"spec", {{"selector", {{"matchLabels", {{"app", "x"}}}}}}}}, 8000, error);
  ASSERT_TRUE(spec) << error;
  EXPECT_EQ(spec->ports, (std::vector<uint16_t>{8000}));
  spec = pool_spec_of(
      Json{{"spec",
            {{"selector", {{"matchLabels", {{"app", "x"}}}}},
             {"targetPorts",
              Json::array({{{"number", 70000}}, {{"number", "80"}}, {{"number", 81}}})}}}},
      8000, error);
  ASSERT_TRUE(spec) << error;
  EXPECT_EQ(spec->ports, (std::vector<uint16_t>{81}));
}

TEST(PoolSpec, APoolWithoutSelectorIsRefused) {
  std::string error;
  EXPECT_FALSE(
      pool_spec_of(Json{{"spec", {{"targetPorts", Json::array({{{"number", 1}}})}}}}, 8000, error));
  EXPECT_EQ(error, "InferencePool has no selector");
  EXPECT_FALSE(pool_spec_of(Json::array(), 8000, error));
  EXPECT_FALSE(pool_spec_of(Json{{"spec", "x"}}, 8000, error));
}

TEST(PoolSpec, AChangeIsDescribedByWhatDiffers) {
  const PoolSpec a{{{"app", "vllm"}}, {8000}};
  const PoolSpec b{{{"app", "vllm-next"}}, {8000}};
  const PoolSpec c{{{"app", "vllm-next"}}, {8000, 8001}};
  EXPECT_EQ(describe_change(a, b), "selector app=vllm -> app=vllm-next");
  EXPECT_EQ(describe_change(b, c), "ports 8000 -> 8000, 8001");
  EXPECT_EQ(describe_change(a, c), "selector app=vllm -> app=vllm-next; ports 8000 -> 8000, 8001");
  EXPECT_EQ(describe_change(a, a), "");
  EXPECT_NE(a, b);
  EXPECT_EQ(b, (PoolSpec{{{"app", "vllm-next"}}, {8000}}));
}

}  // namespace
}  // namespace llmd::epp::discovery
