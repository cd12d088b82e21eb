#include "common/json/validation.h"

#include <gtest/gtest.h>

#include "common/features/feature_json.h"
#include "common/features/schema.h"
#include "common/util/time.h"

namespace llmd {
namespace {

using json::Json;

TEST(Validation, IntegerRules) {
  json::Errors e;
  json::Loc loc;
  Json obj = {{"a", 200.0}, {"b", 0.5}, {"c", true}, {"d", -1}};
  EXPECT_EQ(json::read_int(obj, "a", loc, e, true), 200);
  EXPECT_TRUE(e.empty());
  json::read_int(obj, "b", loc, e, true);
  json::read_int(obj, "c", loc, e, true);
  json::read_int(obj, "d", loc, e, true, 0, {0.0, std::nullopt});
  json::read_int(obj, "missing", loc, e, true);
  ASSERT_EQ(e.size(), 4u);
  EXPECT_EQ(e.details()[0]["type"], "int_from_float");
  EXPECT_EQ(e.details()[1]["type"], "int_type");
  EXPECT_EQ(e.details()[2]["type"], "greater_than_equal");
  EXPECT_EQ(e.details()[2]["msg"], "Input should be greater than or equal to 0");
  EXPECT_EQ(e.details()[3]["type"], "missing");
  EXPECT_EQ(e.details()[3]["loc"], Json::array({"body", "missing"}));
}

TEST(Validation, NestedLocAndMalformedJson) {
  json::Errors e;
  json::Loc loc;
  {
    json::LocScope a(loc, "requests");
    json::LocScope b(loc, int64_t{1});
    json::read_float(Json{{"prefix_cache_score", 2.0}}, "prefix_cache_score", loc, e, true, 0,
                     {0.0, 1.0});
  }
  EXPECT_EQ(e.details()[0]["loc"], Json::array({"body", "requests", 1, "prefix_cache_score"}));
  EXPECT_EQ(e.details()[0]["msg"], "Input should be less than or equal to 1");
  json::Errors m;
  EXPECT_FALSE(json::parse_body("{\"a\":", m).has_value());
  EXPECT_EQ(m.details()[0]["type"], "json_invalid");
  EXPECT_EQ(m.body()["detail"].size(), 1u);
}

TEST(FeatureJson, OptionalFieldsDefaultAndPodTypeCategories) {
  Json row = {{"kv_cache_percentage", 0.5}, {"input_token_length", 10},
              {"num_request_waiting", 0},   {"num_request_running", 1},
              {"num_tokens_generated", 1},  {"prefix_cache_score", 0.0},
              {"pod_type", nullptr}};
  json::Errors e;
  json::Loc loc;
  features::FeatureInput f;
  ASSERT_TRUE(features::read_feature_input(row, loc, e, f));
  EXPECT_EQ(f.pod_type, features::PodType::kNone);
  EXPECT_EQ(f.prefill_tokens_in_flight, 0);
  row["pod_type"] = "mystery";
  ASSERT_TRUE(features::read_feature_input(row, loc, e, f));
  EXPECT_EQ(f.pod_type, features::PodType::kUnknown);
  EXPECT_TRUE(std::isnan(features::column_value(f, features::Column::kPodTypeCat)));
  row["pod_type"] = "decode";
  ASSERT_TRUE(features::read_feature_input(row, loc, e, f));
  EXPECT_EQ(features::column_value(f, features::Column::kPodTypeCat), 2.0f);
}

TEST(Schema, ColumnOrderAndDerivedFeatures) {
  auto ttft = features::columns(features::FeatureSet::kTtft);
  ASSERT_EQ(ttft.size(), 13u);
  EXPECT_EQ(features::column_name(ttft[0]), "is_queued");
  EXPECT_EQ(features::column_name(ttft[10]), "effective_input_tokens");
  EXPECT_EQ(features::column_name(ttft[12]), "pod_type_cat");
  auto tpot = features::columns(features::FeatureSet::kTpot);
  ASSERT_EQ(tpot.size(), 9u);
  EXPECT_EQ(features::column_name(tpot[7]), "num_tokens_generated");
  EXPECT_EQ(features::columns(features::FeatureSet::kTtftNoQueue).size(), 11u);
  EXPECT_EQ(features::columns(features::FeatureSet::kTpotNoQueue).size(), 7u);
  features::FeatureInput f;
  f.input_token_length = 1000;
  f.prefix_cache_score = 0.75;
  f.num_request_waiting = 2;
  float row[13];
  features::fill_row(f, features::FeatureSet::kTtft, row);
  EXPECT_EQ(row[0], 1.0f);
  EXPECT_EQ(row[10], 250.0f);
  EXPECT_EQ(row[11], 3.0f);
  EXPECT_EQ(features::prefill_score_bucket(1.0), 3);
}

TEST(Time, Rfc3339RoundTripAndOffsets) {
  auto t = util::parse_rfc3339("2026-08-11T10:20:30.123456Z");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(util::format_rfc3339(*t), "2026-08-11T10:20:30.123456Z");
  auto o = util::parse_rfc3339("2026-08-11T12:20:30.123456+02:00");
  ASSERT_TRUE(o.has_value());
  EXPECT_EQ(*o, *t);
  EXPECT_FALSE(util::parse_rfc3339("2026-13-11T10:20:30Z").has_value());
  EXPECT_FALSE(util::parse_rfc3339("yesterday").has_value());
}

}  // namespace
}  // namespace llmd

namespace llmd::json {
namespace {

TEST(JsonDepth, FindsTheFirstBracketPastTheLimitAndSkipsStrings) {
  EXPECT_EQ(find_excess_depth(R"({"a": [1, {"b": 2}]})", 3), std::string_view::npos);
  EXPECT_EQ(find_excess_depth(R"({"a": [1, {"b": 2}]})", 2), 10u);
  // Brackets inside strings, escaped quotes included, do not count.
  EXPECT_EQ(find_excess_depth(R"({"a": "[[[[\"[[[[", "b": "]]]"})", 1), std::string_view::npos);
  EXPECT_EQ(find_excess_depth(R"(["\\", [[1]]])", 2), 8u);
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(find_excess_depth(deep), static_cast<std::size_t>(kMaxJsonDepth));
  EXPECT_EQ(find_excess_depth(std::string(64, '[') + std::string(64, ']')), std::string_view::npos);
}

TEST(JsonDepth, ParseBodyRefusesDeepNestingWithAJsonInvalidDetail) {
  Errors errors;
  const std::string body = "{\"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  EXPECT_FALSE(parse_body(body, errors).has_value());
  ASSERT_FALSE(errors.empty());
  const auto detail = errors.body()["detail"][0];
  EXPECT_EQ(detail["type"], "json_invalid");
  EXPECT_NE(detail["msg"].get<std::string>().find("deeper than 64"), std::string::npos);
  EXPECT_LT(errors.body().dump().size(), 400u) << "the error never echoes the input";
}

}  // namespace
}  // namespace llmd::json

namespace llmd::json {
namespace {

TEST(ErrorBudget, ListsAtMostFiftyAndCountsTheRestAndNeverEchoesLargeInputs) {
  Errors errors;
  Loc loc;
  for (int i = 0; i < 100000; ++i) {
    LocScope item(loc, static_cast<int64_t>(i));
    errors.add("missing", loc, "Field required", Json::object());
  }
  EXPECT_EQ(errors.size(), 100000u);
  const Json body = errors.body();
  ASSERT_EQ(body["detail"].size(), Errors::kMaxListed + 1);
  EXPECT_EQ(body["detail"].back()["type"], "too_many_errors");
  EXPECT_EQ(body["detail"].back()["msg"], "99950 more errors not listed");
  EXPECT_LT(body.dump().size(), 10000u);

  Errors big;
  big.add("string_type", loc, "Input should be a valid number", Json(std::string(1 << 20, 'x')));
  Json many = Json::array();
  for (int i = 0; i < 5000; ++i) many.push_back(i);
  big.add_at("float_type", loc, "f", "Input should be a valid number", many);
  const std::string text = big.body().dump();
  EXPECT_LT(text.size(), 3000u);
  EXPECT_NE(text.find("(1048576 bytes)"), std::string::npos);
  EXPECT_NE(text.find("<array with 5000 elements>"), std::string::npos);
}

}  // namespace
}  // namespace llmd::json
