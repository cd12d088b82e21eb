// The columnar wire format from the EPP's side: the request body reads back, through the
// contract's own validating reader, as exactly the rows the strict body carries (same hygiene);
// the answer reader takes what a full JSON parser takes and nothing else.
#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "epp/predictor_client/wire.h"
#include "tests/epp/predictor_client/fake_transport.h"

namespace llmd::epp::predictor_client {
namespace {

using features::FeatureInput;
using testing::read_bulk_rows;
using testing::read_columnar_rows;

void expect_same_rows(const std::vector<FeatureInput>& a, const std::vector<FeatureInput>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    // Bitwise for the floats: the columns must carry what the rows carry, -0 included.
    EXPECT_EQ(std::signbit(a[i].kv_cache_percentage), std::signbit(b[i].kv_cache_percentage)) << i;
    EXPECT_EQ(a[i].kv_cache_percentage, b[i].kv_cache_percentage) << i;
    EXPECT_EQ(a[i].input_token_length, b[i].input_token_length) << i;
    EXPECT_EQ(a[i].num_request_waiting, b[i].num_request_waiting) << i;
    EXPECT_EQ(a[i].num_request_running, b[i].num_request_running) << i;
    EXPECT_EQ(a[i].num_tokens_generated, b[i].num_tokens_generated) << i;
    EXPECT_EQ(std::signbit(a[i].prefix_cache_score), std::signbit(b[i].prefix_cache_score)) << i;
    EXPECT_EQ(a[i].prefix_cache_score, b[i].prefix_cache_score) << i;
    EXPECT_EQ(a[i].pod_type, b[i].pod_type) << i;
    EXPECT_EQ(a[i].prefill_tokens_in_flight, b[i].prefill_tokens_in_flight) << i;
    EXPECT_EQ(a[i].decode_tokens_in_flight, b[i].decode_tokens_in_flight) << i;
    EXPECT_EQ(a[i].encoder_matched_size, b[i].encoder_matched_size) << i;
    EXPECT_EQ(a[i].encoder_input_size, b[i].encoder_input_size) << i;
  }
}

// Rows as the producer makes them (one request's prompt, per-pod state), with odd values mixed
// in: non-finite, out of range, negative, -0.
std::vector<FeatureInput> random_rows(std::mt19937_64& rng, std::size_t n) {
  const double odd[] = {std::numeric_limits<double>::quiet_NaN(),
                        std::numeric_limits<double>::infinity(),
                        -0.0,
                        1.0000001,
                        -0.5,
                        1.0};
  const int64_t prompt = static_cast<int64_t>(rng() % 5000);
  std::vector<FeatureInput> rows(n);
  for (auto& r : rows) {
    r.kv_cache_percentage = static_cast<double>(rng() % 1000) / 997.0;
    r.input_token_length = rng() % 4 == 0 ? static_cast<int64_t>(rng() % 5000) : prompt;
    r.num_request_waiting = static_cast<int64_t>(rng() % 5) - 1;
    r.num_request_running = static_cast<int64_t>(rng() % 40);
    r.num_tokens_generated = 1;
    r.prefix_cache_score = rng() % 3 == 0 ? 0.0 : static_cast<double>(rng() % 64) / 64.0;
    r.pod_type = static_cast<features::PodType>(rng() % 4 - 1);
    r.prefill_tokens_in_flight = static_cast<int64_t>(rng() % 9000);
    r.decode_tokens_in_flight = rng() % 2 == 0 ? 0 : static_cast<int64_t>(rng() % 9000);
    if (rng() % 5 == 0) {
      (rng() % 2 == 0 ? r.kv_cache_percentage : r.prefix_cache_score) = odd[rng() % 6];
    }
  }
  return rows;
}

TEST(WireColumnar, RequestCarriesExactlyTheStrictBodysRows) {
  std::mt19937_64 rng(5);
  for (int round = 0; round < 300; ++round) {
    const auto rows = random_rows(rng, 1 + rng() % (round % 10 == 0 ? 400 : 12));
    const std::string body = encode_columnar_request(rows);
    auto columns = read_columnar_rows(body);
    ASSERT_TRUE(columns.has_value()) << body;
    auto strict = read_bulk_rows(encode_bulk_request(rows));
    ASSERT_TRUE(strict.has_value());
    expect_same_rows(*columns, *strict);
  }
}

TEST(WireColumnar, AFieldTheRowsShareIsWrittenOnceAndTheFirstIsAlwaysAList) {
  std::vector<FeatureInput> rows(3);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    rows[i].kv_cache_percentage = 0.5;
    rows[i].input_token_length = 512;
    rows[i].num_request_running = static_cast<int64_t>(i);
    rows[i].prefix_cache_score = i == 1 ? -0.0 : 0.0;  // written "-0" and "0": not one value
  }
  const auto body = nlohmann::json::parse(encode_columnar_request(rows));
  EXPECT_EQ(body["kv_cache_percentage"], nlohmann::json({0.5, 0.5, 0.5}));
  EXPECT_EQ(body["input_token_length"], 512);
  EXPECT_EQ(body["num_request_running"], nlohmann::json({0, 1, 2}));
  EXPECT_TRUE(body["prefix_cache_score"].is_array());
  EXPECT_EQ(body["pod_type"], "");
  EXPECT_EQ(body["encoder_input_size"], 0);
  EXPECT_EQ(body.size(), features::kFeatureFields.size());
  const auto one = nlohmann::json::parse(encode_columnar_request(std::vector<FeatureInput>(1)));
  EXPECT_EQ(one["kv_cache_percentage"], nlohmann::json({0.0}));
}

TEST(WireColumnar, ReadsTheColumnarAnswer) {
  auto p = parse_columnar_response(
      R"({"ttft_ms":[1,3.5],"model_type":"xgboost","tpot_ms":[2,4e0],)"
      R"("ttft_expected_ms":[0.5,3.25],"tpot_expected_ms":[1.5,2.125],"x":{"ttft_ms":"no"}})",
      2);
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[1].ttft_ms, 3.5);
  EXPECT_EQ((*p)[1].tpot_ms, 4);
  EXPECT_EQ((*p)[0].ttft_expected_ms, 0.5);
  EXPECT_EQ((*p)[1].tpot_expected_ms, 2.125);
  // The central estimates are optional (< 0: none); the bounds are not.
  auto bounds = parse_columnar_response(R"({"tpot_ms":[2],"ttft_ms":[1]})");
  ASSERT_TRUE(bounds.has_value());
  EXPECT_LT((*bounds)[0].ttft_expected_ms, 0);
  EXPECT_LT((*bounds)[0].tpot_expected_ms, 0);
  auto empty = parse_columnar_response(R"({"ttft_ms":[],"tpot_ms":[]})");
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->empty());
  // A repeated key replaces the earlier one, as in any JSON reader.
  auto again = parse_columnar_response(R"({"ttft_ms":[1,2,3],"tpot_ms":[5],"ttft_ms":[9]})");
  ASSERT_TRUE(again.has_value());
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ((*again)[0].ttft_ms, 9);
}

TEST(WireColumnar, RejectsAnswersThatAreNotTheColumnarShape) {
  for (const char* bad : {
           "",
           "[]",
           "{}",
           R"({"detail":"Not Found"})",
           R"({"predictions":[{"ttft_ms":1,"tpot_ms":2}]})",
           R"({"ttft_ms":[1]})",
           R"({"ttft_ms":[1],"tpot_ms":[1,2]})",
           R"({"ttft_ms":[1],"tpot_ms":[1],"ttft_expected_ms":[]})",
           R"({"ttft_ms":1,"tpot_ms":[1]})",
           R"({"ttft_ms":[null],"tpot_ms":[1]})",
           R"({"ttft_ms":["1"],"tpot_ms":[1]})",
           R"({"ttft_ms":[1,],"tpot_ms":[1]})",
           R"({"ttft_ms":[1],"tpot_ms":[1],"tpot_expected_ms":null})",
           R"({"ttft_ms":[1],"tpot_ms":[1]} x)",
           R"({"ttft_ms":[1],"tpot_ms":[1])",
       }) {
    EXPECT_FALSE(parse_columnar_response(bad).has_value()) << bad;
  }
  const std::string deep = R"({"x":)" + std::string(100000, '[') + std::string(100000, ']') +
                           R"(,"ttft_ms":[],"tpot_ms":[]})";
  EXPECT_FALSE(parse_columnar_response(deep).has_value());
}

// What a full JSON parser makes of a columnar answer, by the reader's rules.
std::optional<std::vector<Prediction>> reference_parse(const std::string& body) {
  auto doc = nlohmann::json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return std::nullopt;
  }
  const char* keys[] = {"ttft_ms", "tpot_ms", "ttft_expected_ms", "tpot_expected_ms"};
  std::vector<Prediction> out;
  for (int k = 0; k < 4; ++k) {
    if (!doc.contains(keys[k])) {
      if (k < 2) {
        return std::nullopt;
      }
      continue;
    }
    const auto& column = doc[keys[k]];
    if (!column.is_array() || (k > 0 && column.size() != out.size())) {
      return std::nullopt;
    }
    out.resize(column.size());
    for (std::size_t i = 0; i < column.size(); ++i) {
      if (!column[i].is_number()) {
        return std::nullopt;
      }
      double& v = k == 0   ? out[i].ttft_ms
                  : k == 1 ? out[i].tpot_ms
                  : k == 2 ? out[i].ttft_expected_ms
                           : out[i].tpot_expected_ms;
      v = column[i].get<double>();
    }
  }
  return out;
}

TEST(WireColumnar, ReaderAgreesWithAFullJsonParserOnRandomAnswers) {
  std::mt19937 rng(777);
  const std::string alphabet = "{}[],:\"0123456789.-+eE tnulrfasp_";
  const nlohmann::json odd[] = {nullptr, "7", nlohmann::json::array(), true, 1e-7, -3};
  int valid = 0;
  for (int i = 0; i < 5000; ++i) {
    const std::size_t n = rng() % 5;
    nlohmann::json doc = nlohmann::json::object();
    for (const char* key : {"ttft_ms", "tpot_ms", "ttft_expected_ms", "tpot_expected_ms"}) {
      if (rng() % 12 == 0) {
        continue;
      }
      auto column = nlohmann::json::array();
      for (std::size_t r = 0; r < n + (rng() % 15 == 0 ? 1 : 0); ++r) {
        column.push_back(rng() % 40 == 0 ? odd[rng() % 6]
                                         : nlohmann::json(std::ldexp(rng() % 100000, -7)));
      }
      doc[key] = column;
    }
    doc["model_type"] = "xgboost";
    doc["quantile"] = 0.9;
    doc["meta"] = nlohmann::json{{"a", {1, "b\"\\", nullptr}}};
    std::string body = doc.dump(rng() % 2 == 0 ? -1 : 1);
    const unsigned mutation = rng() % 4;
    if (mutation == 1) {
      body[rng() % body.size()] = alphabet[rng() % alphabet.size()];
    } else if (mutation == 2) {
      body.resize(rng() % body.size());
    }
    const auto expected = reference_parse(body);
    const auto got = parse_columnar_response(body, n);
    ASSERT_EQ(got.has_value(), expected.has_value()) << body;
    if (expected) {
      ++valid;
      ASSERT_EQ(got->size(), expected->size()) << body;
      for (std::size_t j = 0; j < got->size(); ++j) {
        ASSERT_EQ((*got)[j].ttft_ms, (*expected)[j].ttft_ms) << body;
        ASSERT_EQ((*got)[j].tpot_ms, (*expected)[j].tpot_ms) << body;
        ASSERT_EQ((*got)[j].ttft_expected_ms, (*expected)[j].ttft_expected_ms) << body;
        ASSERT_EQ((*got)[j].tpot_expected_ms, (*expected)[j].tpot_expected_ms) << body;
      }
    }
  }
  EXPECT_GT(valid, 1000);
  EXPECT_LT(valid, 4500);
}

}  // namespace
}  // namespace llmd::epp::predictor_client
