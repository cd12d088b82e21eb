// The columnar body of /predict/bulk/columnar: the validating reader
// (features::read_feature_columns, which writes the 422 detail) reads the same rows as the row
// format does, and the fast path (parse_columns_fast) never accepts what the validating reader
// refuses nor reads anything else.
#include <gtest/gtest.h>

#include <random>

#include "common/features/feature_json.h"
#include "common/json/validation.h"
#include "common/testing/synthetic_law.h"
#include "predictor/fast_rows.h"

namespace llmd::predictor {
namespace {

using Json = nlohmann::json;
using features::FeatureInput;

bool same(const FeatureInput& a, const FeatureInput& b) {
  return a.kv_cache_percentage == b.kv_cache_percentage &&
         a.input_token_length == b.input_token_length &&
         a.num_request_waiting == b.num_request_waiting &&
         a.num_request_running == b.num_request_running &&
         a.num_tokens_generated == b.num_tokens_generated &&
         a.prefix_cache_score == b.prefix_cache_score && a.pod_type == b.pod_type &&
         a.prefill_tokens_in_flight == b.prefill_tokens_in_flight &&
         a.decode_tokens_in_flight == b.decode_tokens_in_flight &&
         a.encoder_matched_size == b.encoder_matched_size &&
         a.encoder_input_size == b.encoder_input_size;
}

// The validating reader: rows, or the 422 body.
struct Slow {
  std::optional<std::vector<FeatureInput>> rows;
  Json errors;
};
Slow read_slow(const std::string& body, std::size_t max_rows = 10000) {
  json::Errors errors;
  auto parsed = json::parse_body(body, errors);
  json::Loc loc;
  std::vector<FeatureInput> rows;
  if (parsed && json::expect_object(*parsed, loc, errors) &&
      features::read_feature_columns(*parsed, loc, errors, max_rows, rows)) {
    return {rows, {}};
  }
  return {std::nullopt, errors.body()};
}

// Rows as columns, each field a list (or, with `singles`, a single value where all rows agree).
Json to_columns(const std::vector<FeatureInput>& rows, bool singles) {
  Json out = Json::object();
  for (const auto& row : rows) {
    const Json fields = features::feature_input_to_json(row);
    for (auto& [key, value] : fields.items()) {
      out[key].push_back(value);
    }
  }
  if (singles) {
    for (auto& [key, column] : out.items()) {
      if (key != "kv_cache_percentage" &&
          std::all_of(column.begin(), column.end(),
                      [&](const Json& v) { return v == column[0]; })) {
        column = Json(column[0]);
      }
    }
  }
  return out;
}

std::vector<FeatureInput> random_rows(std::mt19937_64& rng, std::size_t n) {
  testing::SyntheticLaw law;
  std::vector<FeatureInput> rows;
  for (std::size_t i = 0; i < n; ++i) {
    auto f = law.draw_features(rng);
    f.pod_type = static_cast<features::PodType>(rng() % 4 - 1);
    f.encoder_matched_size = static_cast<int64_t>(rng() % 3);
    rows.push_back(f);
  }
  return rows;
}

TEST(ColumnarRows, ReadTheSameRowsAsTheRowFormat) {
  std::mt19937_64 rng(7);
  for (std::size_t n : {1, 2, 17, 300}) {
    auto rows = random_rows(rng, n);
    rows[0].pod_type = features::PodType::kNone;
    for (bool singles : {false, true}) {
      const std::string body = to_columns(rows, singles).dump();
      const Slow slow = read_slow(body);
      ASSERT_TRUE(slow.rows.has_value()) << slow.errors.dump();
      std::vector<FeatureInput> fast;
      ASSERT_TRUE(parse_columns_fast(body, 10000, fast)) << body.substr(0, 300);
      ASSERT_EQ(slow.rows->size(), n);
      ASSERT_EQ(fast.size(), n);
      for (std::size_t i = 0; i < n; ++i) {
        EXPECT_TRUE(same((*slow.rows)[i], rows[i])) << i;
        EXPECT_TRUE(same(fast[i], rows[i])) << i;
      }
    }
  }
}

TEST(ColumnarRows, SingleValuesHoldForEveryRowAndOptionalFieldsDefault) {
  const std::string body = R"({"kv_cache_percentage":[0.5,0.25,1],"input_token_length":800,
      "num_request_waiting":[0,2,1.0],"num_request_running":3,"num_tokens_generated":1,
      "prefix_cache_score":0,"pod_type":["decode",null,"other"],"decode_tokens_in_flight":null,
      "encoder_input_size":[null,4,5],"unknown":{"x":[1]}})";
  const Slow slow = read_slow(body);
  ASSERT_TRUE(slow.rows.has_value()) << slow.errors.dump();
  ASSERT_EQ(slow.rows->size(), 3u);
  const auto& r = *slow.rows;
  EXPECT_EQ(r[2].kv_cache_percentage, 1.0);
  EXPECT_EQ(r[2].input_token_length, 800);
  EXPECT_EQ(r[1].num_request_waiting, 2);
  EXPECT_EQ(r[2].num_request_running, 3);
  EXPECT_EQ(r[0].pod_type, features::PodType::kDecode);
  EXPECT_EQ(r[1].pod_type, features::PodType::kNone);
  EXPECT_EQ(r[2].pod_type, features::PodType::kUnknown);
  EXPECT_EQ(r[1].decode_tokens_in_flight, 0);
  EXPECT_EQ(r[0].encoder_input_size, 0);
  EXPECT_EQ(r[2].encoder_input_size, 5);
  // Single values only: one row, like the row format's object.
  const Json one = features::feature_input_to_json(r[1]);
  const Slow single = read_slow(one.dump());
  ASSERT_TRUE(single.rows.has_value());
  ASSERT_EQ(single.rows->size(), 1u);
  EXPECT_TRUE(same((*single.rows)[0], r[1]));
  std::vector<FeatureInput> fast;
  ASSERT_TRUE(parse_columns_fast(one.dump(), 10000, fast));
  ASSERT_EQ(fast.size(), 1u);
  EXPECT_TRUE(same(fast[0], r[1]));
}

Json detail_of(const std::string& body, std::size_t max_rows = 10000) {
  const Slow slow = read_slow(body, max_rows);
  EXPECT_FALSE(slow.rows.has_value()) << body;
  std::vector<FeatureInput> fast;
  EXPECT_FALSE(parse_columns_fast(body, max_rows, fast)) << body;
  return slow.errors.is_null() ? Json() : slow.errors["detail"][0];
}

TEST(ColumnarRows, InvalidBodiesAreLocatedByFieldAndRow) {
  const Json good = {{"kv_cache_percentage", {0.5, 0.25}}, {"input_token_length", {10, 20}},
                     {"num_request_waiting", 0},           {"num_request_running", {1, 2}},
                     {"num_tokens_generated", 1},          {"prefix_cache_score", {0.0, 0.5}}};
  ASSERT_TRUE(read_slow(good.dump()).rows.has_value());
  struct Case {
    std::string field;
    Json value;
    Json loc;
    std::string type;
  };
  const std::vector<Case> cases = {
      {"kv_cache_percentage", {0.5, 1.5}, {"body", "kv_cache_percentage", 1}, "less_than_equal"},
      {"input_token_length", {10, -1}, {"body", "input_token_length", 1}, "greater_than_equal"},
      {"input_token_length", {0.5, 1}, {"body", "input_token_length", 0}, "int_from_float"},
      {"num_request_waiting", "x", {"body", "num_request_waiting"}, "int_type"},
      {"num_request_running", {1, {1}}, {"body", "num_request_running", 1}, "int_type"},
      {"prefix_cache_score", {nullptr, 0.1}, {"body", "prefix_cache_score", 0}, "float_type"},
      {"pod_type", {"decode", 7}, {"body", "pod_type", 1}, "string_type"},
      {"prefill_tokens_in_flight", -3, {"body", "prefill_tokens_in_flight"}, "greater_than_equal"},
      {"num_request_running", {1, 2, 3}, {"body", "num_request_running"}, "too_long"},
      {"input_token_length", {1}, {"body", "input_token_length"}, "too_short"},
      // The first list sets the count (0 here): the others are too long for it.
      {"kv_cache_percentage", Json::array(), {"body", "input_token_length"}, "too_long"},
  };
  for (const auto& c : cases) {
    Json bad = good;
    bad[c.field] = c.value;
    const Json d = detail_of(bad.dump());
    EXPECT_EQ(d["loc"], c.loc) << bad.dump() << " -> " << d.dump();
    EXPECT_EQ(d["type"], c.type) << bad.dump() << " -> " << d.dump();
  }
  Json missing = good;
  missing.erase("num_tokens_generated");
  EXPECT_EQ(detail_of(missing.dump())["loc"], Json({"body", "num_tokens_generated"}));
  Json empty = good;
  for (auto& [key, value] : empty.items()) {
    value = Json::array();
  }
  const Json zero = detail_of(empty.dump());
  EXPECT_EQ(zero["loc"], Json({"body", "kv_cache_percentage"}));
  EXPECT_EQ(zero["type"], "too_short");
  EXPECT_EQ(detail_of("[1]")["loc"], Json({"body"}));
  EXPECT_EQ(detail_of(R"({"kv_cache_percentage":[0.5)")["type"], "json_invalid");
}

// A body refused for its row count is answered from the fast parser's count, with the detail
// the validating reader gives (no document is built for it).
TEST(ColumnarRows, CountsTheRowsOfABodyOverTheCap) {
  std::mt19937_64 rng(1);
  const std::string body = to_columns(random_rows(rng, 3), true).dump();
  std::vector<FeatureInput> rows;
  ColumnsTooLong too_long;
  EXPECT_FALSE(parse_columns_fast(body, 2, rows, &too_long));
  EXPECT_EQ(too_long.rows, 3u);
  EXPECT_EQ(too_long.field, "kv_cache_percentage");
  json::Errors fast;
  json::add_too_long(json::Loc(), too_long.field, 2, too_long.rows, fast);
  EXPECT_EQ(fast.body(), read_slow(body, 2).errors);
}

// Mutated bodies: whatever the fast path accepts, the validating reader accepts with the same
// rows; whatever that one refuses, the fast path refuses.
TEST(ColumnarRows, FastPathNeverDisagreesWithTheValidatingReader) {
  std::mt19937_64 rng(20261124);
  const std::vector<Json> odd = {nullptr,       true,           -1,         0.5,
                                 1.5,           1e300,          "x",        "decode",
                                 Json::array(), Json::object(), Json{1, 2}, 7};
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    Json body = to_columns(random_rows(rng, 1 + rng() % 5), rng() % 2 == 0);
    const int edits = static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      auto it = body.begin();
      std::advance(it, static_cast<long>(rng() % body.size()));
      switch (rng() % 4) {
        case 0:
          body.erase(it);
          break;
        case 1:
          *it = odd[rng() % odd.size()];
          break;
        case 2:
          if (it->is_array() && !it->empty()) {
            (*it)[rng() % it->size()] = odd[rng() % odd.size()];
          }
          break;
        default:
          if (it->is_array()) {
            it->push_back(odd[rng() % odd.size()]);
          }
      }
    }
    std::string text = body.dump();
    if (rng() % 8 == 0) {
      text.resize(rng() % text.size());
    }
    const Slow slow = read_slow(text);
    std::vector<FeatureInput> fast;
    if (parse_columns_fast(text, 10000, fast)) {
      ++accepted;
      ASSERT_TRUE(slow.rows.has_value()) << text;
      ASSERT_EQ(fast.size(), slow.rows->size()) << text;
      for (std::size_t r = 0; r < fast.size(); ++r) {
        ASSERT_TRUE(same(fast[r], (*slow.rows)[r])) << text;
      }
    } else if (!slow.rows) {
      ASSERT_TRUE(slow.errors["detail"].is_array() && !slow.errors["detail"].empty()) << text;
    }
  }
  EXPECT_GT(accepted, 300);  // both outcomes are exercised
  EXPECT_LT(accepted, 2700);
}

}  // namespace
}  // namespace llmd::predictor
