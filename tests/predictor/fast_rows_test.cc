#include "predictor/fast_rows.h"

#include <gtest/gtest.h>

#include <random>

#include "common/features/feature_json.h"
#include "common/json/validation.h"
#include "common/testing/synthetic_law.h"

namespace llmd::predictor {
namespace {

using Json = nlohmann::json;

void expect_same(const features::FeatureInput& a, const features::FeatureInput& b) {
  EXPECT_EQ(a.kv_cache_percentage, b.kv_cache_percentage);
  EXPECT_EQ(a.input_token_length, b.input_token_length);
  EXPECT_EQ(a.num_request_waiting, b.num_request_waiting);
  EXPECT_EQ(a.num_request_running, b.num_request_running);
  EXPECT_EQ(a.num_tokens_generated, b.num_tokens_generated);
  EXPECT_EQ(a.prefix_cache_score, b.prefix_cache_score);
  EXPECT_EQ(a.pod_type, b.pod_type);
  EXPECT_EQ(a.prefill_tokens_in_flight, b.prefill_tokens_in_flight);
  EXPECT_EQ(a.decode_tokens_in_flight, b.decode_tokens_in_flight);
  EXPECT_EQ(a.encoder_matched_size, b.encoder_matched_size);
  EXPECT_EQ(a.encoder_input_size, b.encoder_input_size);
}

TEST(FastRows, AgreesWithTheValidatingParserOnValidRows) {
  testing::SyntheticLaw law;
  std::mt19937_64 rng(3);
  Json requests = Json::array();
  std::vector<features::FeatureInput> expected;
  for (int i = 0; i < 200; ++i) {
    auto f = law.draw_features(rng);
    f.pod_type = static_cast<features::PodType>(i % 4 - 1);
    Json row = features::feature_input_to_json(f);
    if (f.pod_type == features::PodType::kUnknown) {
      row["pod_type"] = "something-else";
    }
    if (i % 5 == 0) {
      row["input_token_length"] = static_cast<double>(f.input_token_length);  // 200.0 is an int
      row["unknown_field"] = Json{{"nested", {1, 2, 3}}};
    }
    if (i % 7 == 0) {
      row["pod_type"] = nullptr;
      f.pod_type = features::PodType::kNone;
    }
    requests.push_back(row);
    expected.push_back(f);
  }
  std::vector<features::FeatureInput> rows;
  ASSERT_TRUE(parse_bulk_fast(Json{{"requests", requests}, {"extra", 1}}.dump(), 1, 10000, rows));
  ASSERT_EQ(rows.size(), expected.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    expect_same(rows[i], expected[i]);
  }
  features::FeatureInput one;
  ASSERT_TRUE(parse_row_fast(requests[3].dump(), one));
  expect_same(one, expected[3]);
}

TEST(FastRows, DefersEverythingDoubtfulToTheSlowPath) {
  Json good = {{"kv_cache_percentage", 0.5}, {"input_token_length", 10},
               {"num_request_waiting", 0},   {"num_request_running", 1},
               {"num_tokens_generated", 1},  {"prefix_cache_score", 0.0}};
  std::vector<features::FeatureInput> rows;
  auto bulk = [&](const Json& row) {
    return parse_bulk_fast(Json{{"requests", {good, row}}}.dump(), 1, 10000, rows);
  };
  ASSERT_TRUE(bulk(good));
  for (auto [field, value] :
       std::vector<std::pair<std::string, Json>>{{"kv_cache_percentage", 1.01},
                                                 {"kv_cache_percentage", "0.5"},
                                                 {"input_token_length", 0.5},
                                                 {"input_token_length", -1},
                                                 {"num_request_waiting", true},
                                                 {"prefix_cache_score", nullptr},
                                                 {"pod_type", 3},
                                                 {"encoder_input_size", -2},
                                                 {"num_request_running", 1e30}}) {
    Json bad = good;
    bad[field] = value;
    EXPECT_FALSE(bulk(bad)) << field << "=" << value.dump();
  }
  Json missing = good;
  missing.erase("num_tokens_generated");
  EXPECT_FALSE(bulk(missing));
  EXPECT_FALSE(parse_bulk_fast(R"({"requests": []})", 1, 10000, rows));
  EXPECT_FALSE(parse_bulk_fast(Json{{"requests", {good, good, good}}}.dump(), 1, 2, rows));
  EXPECT_FALSE(parse_bulk_fast(R"({"requests": [1]})", 1, 10000, rows));
  EXPECT_FALSE(parse_bulk_fast(R"({"requests": [)", 1, 10000, rows));
  EXPECT_FALSE(parse_bulk_fast(R"({"requests": [], "requests": [{}]})", 1, 10000, rows));
  EXPECT_FALSE(parse_bulk_fast("[]", 1, 10000, rows));
  EXPECT_FALSE(parse_bulk_fast(R"({"requests": [{"kv_cache_percentage": NaN}]})", 1, 10000, rows));
  features::FeatureInput one;
  EXPECT_FALSE(parse_row_fast("{\"kv_cache_percentage\": 0.5}", one));
  EXPECT_FALSE(parse_row_fast("", one));
}

// A body refused for its row count is answered from the fast parser's count, with the detail
// the validating parser gives (no document is built for it).
TEST(FastRows, CountsTheRowsOfABodyOverTheCap) {
  const Json row = features::feature_input_to_json(features::FeatureInput{});
  const std::string body = Json{{"requests", {row, row, row}}}.dump();
  std::vector<features::FeatureInput> rows;
  std::size_t too_many = 0;
  EXPECT_FALSE(parse_bulk_fast(body, 1, 2, rows, &too_many));
  EXPECT_EQ(too_many, 3u);
  json::Errors fast;
  json::add_too_long(json::Loc(), "requests", 2, too_many, fast);
  json::Errors slow;
  json::Loc loc;
  EXPECT_EQ(json::read_list(Json::parse(body), "requests", loc, slow, 1, 2), nullptr);
  EXPECT_EQ(fast.body(), slow.body());
  // Anything else is left to the validating parser: no count.
  for (const std::string& other :
       {std::string(R"({"requests": [1, 2, 3)"),
        std::string(R"({"requests": [], "requests": [1, 2, 3]})"),
        std::string(R"({"requests": []})"), Json{{"requests", {row}}}.dump()}) {
    too_many = 0;
    parse_bulk_fast(other, 1, 2, rows, &too_many);
    EXPECT_EQ(too_many, 0u) << other;
  }
}

// A body over a few MiB frees the thread's parse buffers afterwards; parsing goes on normally.
TEST(FastRows, LargeBodiesThenSmallOnesParse) {
  Json row = features::feature_input_to_json(features::FeatureInput{});
  Json padded = row;
  padded["padding"] = std::string(1000, 'x');  // unknown fields are ignored
  Json requests = Json::array();
  for (int i = 0; i < 6000; ++i) {
    requests.push_back(padded);
  }
  const std::string large = Json{{"requests", requests}}.dump();
  ASSERT_GT(large.size(), 5u * 1024 * 1024);
  std::vector<features::FeatureInput> rows;
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(parse_bulk_fast(large, 1, 10000, rows));
    EXPECT_EQ(rows.size(), 6000u);
    ASSERT_TRUE(parse_bulk_fast(Json{{"requests", {row, row}}}.dump(), 1, 10000, rows));
    EXPECT_EQ(rows.size(), 2u);
    features::FeatureInput one;
    EXPECT_TRUE(parse_row_fast(padded.dump(), one));
  }
}

}  // namespace
}  // namespace llmd::predictor
