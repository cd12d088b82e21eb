// InferenceObjective objects (GIE v1.5.0's v1alpha2 CRD, also llm-d.ai's) as discovery reads
// them: the fields honoured, the pool match upstream's reconciler applies, LIST and WATCH.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "epp/discovery/objective_tracker.h"

namespace llmd::epp::discovery {
namespace {

using Json = nlohmann::json;

// As the API server returns it (poolRef.group and kind defaulted by the CRD's schema).
Json objective(const std::string& name, Json priority, const std::string& pool = "p",
               const std::string& rv = "1") {
  Json spec = {
      {"poolRef",
       {{"group", "inference.networking.k8s.io"}, {"kind", "InferencePool"}, {"name", pool}}}};
  if (!priority.is_null()) {
    spec["priority"] = priority;
  }
  return Json{{"apiVersion", "inference.networking.x-k8s.io/v1alpha2"},
              {"kind", "InferenceObjective"},
              {"metadata", {{"name", name}, {"namespace", "llm"}, {"resourceVersion", rv}}},
              {"spec", spec},
              {"status", {{"conditions", Json::array()}}}};
}

TEST(InferenceObjectiveSpec, ReadsNamePriorityAndPoolRef) {
  std::string error;
  auto s = inference_objective_of(objective("interactive", 10), error);
  ASSERT_TRUE(s) << error;
  EXPECT_EQ(s->objective.name, "interactive");
  EXPECT_EQ(s->objective.priority, 10);
  EXPECT_EQ(s->pool_name, "p");
  EXPECT_EQ(s->pool_group, "inference.networking.k8s.io");
  EXPECT_FALSE(s->deleting);
  // Unset priority stays unset (the table decides what that means); a negative one is kept.
  EXPECT_EQ(inference_objective_of(objective("a", nullptr), error)->objective.priority,
            std::nullopt);
  EXPECT_EQ(inference_objective_of(objective("b", -3), error)->objective.priority, -3);
  // poolRef.group absent (an object the API server did not default): the CRD's default.
  Json bare = objective("c", 1);
  bare["spec"]["poolRef"].erase("group");
  EXPECT_EQ(inference_objective_of(bare, error)->pool_group, "inference.networking.k8s.io");
  Json deleting = objective("d", 1);
  deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  EXPECT_TRUE(inference_objective_of(deleting, error)->deleting);
}

TEST(InferenceObjectiveSpec, UnusableObjectsSayWhy) {
  std::string error;
  Json no_ref = objective("x", 1);
  no_ref["spec"].erase("poolRef");
  EXPECT_FALSE(inference_objective_of(no_ref, error));
  EXPECT_NE(error.find("spec.poolRef.name"), std::string::npos) << error;
  EXPECT_FALSE(inference_objective_of(objective("x", 2147483648LL), error));
  EXPECT_NE(error.find("spec.priority"), std::string::npos) << error;
  EXPECT_FALSE(inference_objective_of(objective("x", "high"), error));
  EXPECT_FALSE(inference_objective_of(Json{{"spec", {}}}, error));
  EXPECT_NE(error.find("metadata.name"), std::string::npos) << error;
}

TEST(ObjectiveTracker, KeepsOnlyThePoolsObjectivesFromListAndWatch) {
  ObjectiveTracker t("p", "inference.networking.k8s.io");
  std::vector<std::string> warnings;
  Json other_group = objective("legacy", 4);
  other_group["spec"]["poolRef"]["group"] = "inference.networking.x-k8s.io";
  Json broken = objective("broken", "high");
  Json list = {{"kind", "InferenceObjectiveList"},
               {"metadata", {{"resourceVersion", "10"}}},
               {"items", Json::array({objective("interactive", 10), objective("batch", -1),
                                      objective("elsewhere", 5, "q"), other_group, broken})}};
  EXPECT_TRUE(t.replace_all(list, warnings));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("broken"), std::string::npos);
  EXPECT_EQ(t.resource_version(), "10");
  EXPECT_EQ(t.objectives(), (std::vector<ClusterObjective>{{"batch", -1}, {"interactive", 10}}));
  EXPECT_FALSE(t.replace_all(list, warnings)) << "the same list changes nothing";

  using O = ObjectiveTracker::Outcome;
  EXPECT_EQ(t.apply({{"type", "MODIFIED"}, {"object", objective("interactive", 12, "p", "11")}},
                    warnings),
            O::kChanged);
  EXPECT_EQ(t.resource_version(), "11");
  EXPECT_EQ(t.apply({{"type", "MODIFIED"}, {"object", objective("interactive", 12, "p", "12")}},
                    warnings),
            O::kUnchanged);
  EXPECT_EQ(t.apply({{"type", "ADDED"}, {"object", objective("premium", 20, "p", "13")}}, warnings),
            O::kChanged);
  // Pointed at another pool: it leaves ours, as upstream's reconciler deletes it.
  EXPECT_EQ(
      t.apply({{"type", "MODIFIED"}, {"object", objective("batch", -1, "q", "14")}}, warnings),
      O::kChanged);
  EXPECT_EQ(
      t.apply({{"type", "DELETED"}, {"object", objective("premium", 20, "p", "15")}}, warnings),
      O::kChanged);
  EXPECT_EQ(
      t.apply({{"type", "DELETED"}, {"object", objective("elsewhere", 5, "q", "16")}}, warnings),
      O::kUnchanged);
  EXPECT_EQ(t.objectives(), (std::vector<ClusterObjective>{{"interactive", 12}}));
  EXPECT_EQ(t.apply({{"type", "BOOKMARK"}, {"object", {{"metadata", {{"resourceVersion", "20"}}}}}},
                    warnings),
            O::kUnchanged);
  EXPECT_EQ(t.resource_version(), "20");
  EXPECT_EQ(t.apply({{"type", "ERROR"}, {"object", {{"kind", "Status"}, {"code", 410}}}}, warnings),
            O::kRelist);
}

}  // namespace
}  // namespace llmd::epp::discovery
