#include "epp/predictor_client/wire.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "tests/epp/predictor_client/fake_transport.h"

namespace llmd::epp::predictor_client {
namespace {

using testing::bulk_answer;
using testing::make_rows;
using testing::read_bulk_rows;

TEST(Wire, RequestBodyIsReadBackByTheContractsRowReader) {
  std::vector<features::FeatureInput> rows(3);
  rows[0] = {0.125, 512, 3, 7, 1, 0.75, features::PodType::kPrefill, 1024, 64, 5, 9};
  rows[1] = {1.0, 0, 0, 0, 0, 0.0, features::PodType::kNone, 0, 0, 0, 0};
  rows[2] = {0.3333333333333333, 7, 0, 1, 1, 0.1, features::PodType::kDecode, 0, 0, 0, 0};
  const std::string body = encode_bulk_request(rows);
  auto back = read_bulk_rows(body);
  ASSERT_TRUE(back.has_value()) << body;
  ASSERT_EQ(back->size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& a = rows[i];
    const auto& b = (*back)[i];
    EXPECT_EQ(a.kv_cache_percentage, b.kv_cache_percentage);  // shortest round-trip text
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
  // The same field names as the shared JSON writer.
  auto expected = features::feature_input_to_json(rows[0]);
  auto written = nlohmann::json::parse(body)["requests"][0];
  for (auto it = expected.begin(); it != expected.end(); ++it) {
    EXPECT_TRUE(written.contains(it.key())) << it.key();
  }
  EXPECT_EQ(written.size(), expected.size());
}

TEST(Wire, OutOfRangeValuesAreMadeValidSoTheBatchIsNotRejected) {
  std::vector<features::FeatureInput> rows(1);
  rows[0].kv_cache_percentage = 1.0000001;
  rows[0].prefix_cache_score = std::numeric_limits<double>::quiet_NaN();
  rows[0].num_request_waiting = -2;
  rows[0].input_token_length = -1;
  auto back = read_bulk_rows(encode_bulk_request(rows));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ((*back)[0].kv_cache_percentage, 1.0);
  EXPECT_EQ((*back)[0].prefix_cache_score, 0.0);
  EXPECT_EQ((*back)[0].num_request_waiting, 0);
  EXPECT_EQ((*back)[0].input_token_length, 0);
}

TEST(Wire, UnknownPodTypeStaysAnUnknownCategory) {
  std::vector<features::FeatureInput> rows(1);
  rows[0].pod_type = features::PodType::kUnknown;
  auto back = read_bulk_rows(encode_bulk_request(rows));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ((*back)[0].pod_type, features::PodType::kUnknown);
}

TEST(Wire, ParsesTheStrictBulkAnswer) {
  auto rows = make_rows(4, 100);
  auto predictions = parse_bulk_response(bulk_answer(rows));
  ASSERT_TRUE(predictions.has_value());
  ASSERT_EQ(predictions->size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ((*predictions)[i].ttft_ms, 100.0 + static_cast<double>(i));
    EXPECT_EQ((*predictions)[i].tpot_ms, testing::fake_tpot(rows[i]));
  }
  // Integers, field order, extra nested fields and keys after the array are all fine.
  auto p = parse_bulk_response(
      R"({"total_requests":2,"predictions":[{"tpot_ms":2,"x":{"ttft_ms":"no"},"ttft_ms":1},)"
      R"({"ttft_ms":3.5,"tpot_ms":4e0,"b":[1,2]}],"errors":[]})");
  ASSERT_TRUE(p.has_value());
  ASSERT_EQ(p->size(), 2u);
  EXPECT_EQ((*p)[0].ttft_ms, 1);
  EXPECT_EQ((*p)[0].tpot_ms, 2);
  EXPECT_EQ((*p)[1].ttft_ms, 3.5);
  EXPECT_EQ((*p)[1].tpot_ms, 4);
  EXPECT_LT((*p)[0].ttft_expected_ms, 0)
      << "a reference predictor's answer has no central estimate";
  EXPECT_LT((*p)[0].tpot_expected_ms, 0);
  // Our predictor's central estimates are kept; they are optional, the bounds are not.
  auto ours = parse_bulk_response(
      R"({"predictions":[{"ttft_ms":9,"tpot_ms":3,"ttft_expected_ms":7.5,"tpot_expected_ms":2.5}]})");
  ASSERT_TRUE(ours.has_value());
  EXPECT_EQ((*ours)[0].ttft_expected_ms, 7.5);
  EXPECT_EQ((*ours)[0].tpot_expected_ms, 2.5);
  EXPECT_FALSE(parse_bulk_response(R"({"predictions":[{"ttft_expected_ms":7.5,"tpot_ms":3}]})"))
      << "a row without its bound is refused";
  auto empty = parse_bulk_response(R"({"predictions":[]})");
  ASSERT_TRUE(empty.has_value());
  EXPECT_TRUE(empty->empty());
}

TEST(Wire, RejectsBodiesThatAreNotTheStrictShape) {
  for (const char* bad : {
           "",
           "not json",
           "[]",
           "{}",
           R"({"detail":"Models not ready"})",
           R"({"predictions":{"ttft_ms":1,"tpot_ms":2}})",
           R"({"predictions":[null]})",
           R"({"predictions":[1]})",
           R"({"predictions":[[1,2]]})",
           R"({"predictions":[{"ttft_ms":1}]})",
           R"({"predictions":[{"ttft_ms":null,"tpot_ms":1}]})",
           R"({"predictions":[{"ttft_ms":"1","tpot_ms":1}]})",
           R"({"predictions":[{"ttft_ms":1,"tpot_ms":2}])",
       }) {
    EXPECT_FALSE(parse_bulk_response(bad).has_value()) << bad;
  }
}

// The reader must agree with a full JSON parser on what is a valid strict answer.
std::optional<std::vector<Prediction>> reference_parse(const std::string& body) {
  auto doc = nlohmann::json::parse(body, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("predictions") ||
      !doc["predictions"].is_array()) {
    return std::nullopt;
  }
  std::vector<Prediction> out;
  for (const auto& p : doc["predictions"]) {
    if (!p.is_object() || !p.contains("ttft_ms") || !p.contains("tpot_ms") ||
        !p["ttft_ms"].is_number() || !p["tpot_ms"].is_number()) {
      return std::nullopt;
    }
    out.push_back({p["ttft_ms"].get<double>(), p["tpot_ms"].get<double>()});
  }
  return out;
}

nlohmann::json random_value(std::mt19937& rng, int depth) {
  switch (rng() % (depth > 3 ? 5 : 7)) {
    case 0:
      return nullptr;
    case 1:
      return rng() % 2 == 0;
    case 2:
      return static_cast<int>(rng() % 2000) - 1000;
    case 3:
      return std::ldexp(static_cast<double>(rng() % 100000), static_cast<int>(rng() % 40) - 20);
    case 4: {
      std::string text = "s\"\\\n";  // quote, backslash and newline: escaped by dump()
      text.push_back(static_cast<char>('0' + rng() % 10));
      return text;
    }
    case 5: {
      auto a = nlohmann::json::array();
      for (unsigned i = rng() % 4; i > 0; --i) {
        a.push_back(random_value(rng, depth + 1));
      }
      return a;
    }
    default: {
      auto o = nlohmann::json::object();
      for (unsigned i = rng() % 4; i > 0; --i) {
        o[std::string(1, static_cast<char>('a' + rng() % 5))] = random_value(rng, depth + 1);
      }
      return o;
    }
  }
}

nlohmann::json random_answer(std::mt19937& rng) {
  auto predictions = nlohmann::json::array();
  for (unsigned i = rng() % 6; i > 0; --i) {
    const unsigned shape = rng() % 20;
    if (shape == 0) {
      predictions.push_back(nullptr);
      continue;
    }
    nlohmann::json p = nlohmann::json::object();
    if (shape != 1) {
      p["ttft_ms"] = shape == 2 ? random_value(rng, 0) : nlohmann::json(rng() % 5000 / 7.0);
    }
    if (shape != 3) {
      p["tpot_ms"] = shape == 4 ? random_value(rng, 0) : nlohmann::json(rng() % 300);
    }
    for (unsigned k = rng() % 3; k > 0; --k) {
      p[k == 1 ? "extra1" : "extra2"] = random_value(rng, 1);
    }
    predictions.push_back(p);
  }
  nlohmann::json doc = nlohmann::json::object();
  if (rng() % 10 != 0) {
    doc["predictions"] = rng() % 15 == 0 ? random_value(rng, 0) : predictions;
  }
  for (unsigned k = rng() % 3; k > 0; --k) {
    doc[k == 1 ? "meta1" : "meta2"] = random_value(rng, 1);
  }
  return doc;
}

TEST(Wire, ReaderAgreesWithAFullJsonParserOnRandomBodies) {
  std::mt19937 rng(12345);
  const std::string alphabet = "{}[],:\"0123456789.-+eE tnulrfasp_";
  int valid = 0;
  for (int i = 0; i < 5000; ++i) {
    std::string body = random_answer(rng).dump(rng() % 2 == 0 ? -1 : 1);
    const unsigned mutation = rng() % 4;
    if (mutation == 1 && !body.empty()) {
      body[rng() % body.size()] = alphabet[rng() % alphabet.size()];
    } else if (mutation == 2 && !body.empty()) {
      body.resize(rng() % body.size());
    }
    const auto expected = reference_parse(body);
    const auto got = parse_bulk_response(body);
    ASSERT_EQ(got.has_value(), expected.has_value()) << body;
    if (expected) {
      ++valid;
      ASSERT_EQ(got->size(), expected->size()) << body;
      for (std::size_t j = 0; j < got->size(); ++j) {
        ASSERT_EQ((*got)[j].ttft_ms, (*expected)[j].ttft_ms) << body;
        ASSERT_EQ((*got)[j].tpot_ms, (*expected)[j].tpot_ms) << body;
      }
    }
  }
  EXPECT_GT(valid, 1000);  // the generator exercises both outcomes
}

// The reader steps over a prediction's trailing ignored members when they repeat the previous
// prediction's byte for byte; a tail that differs, or a kept key after ignored ones, is read.
TEST(Wire, RepeatedMetadataTailsAreReadLikeAnyOther) {
  const std::string meta =
      R"(,"predicted_at":"2025-01-01T00:00:00Z","quantile":0.9,"x":{"y":[1,"}"]}})";
  const std::string body =
      R"({"predictions":[{"ttft_ms":1,"tpot_ms":2)" + meta + R"(,{"ttft_ms":3,"tpot_ms":4)" + meta +
      R"(,{"ttft_ms":5,"quantile":0.9,"tpot_ms":6)" + meta + R"(,{"ttft_ms":7)" +
      meta.substr(0, meta.size() - 1) + R"(,"tpot_ms":8})" +
      R"(,{"ttft_ms":9,"tpot_ms":10,"predicted_at":"2025-01-01T00:00:01Z"}]})";
  auto p = parse_bulk_response(body);
  ASSERT_TRUE(p.has_value()) << body;
  ASSERT_EQ(p->size(), 5u);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ((*p)[i].ttft_ms, 2.0 * static_cast<double>(i) + 1) << i;
    EXPECT_EQ((*p)[i].tpot_ms, 2.0 * static_cast<double>(i) + 2) << i;
  }
  // A repeated tail never stands in for the members a prediction lacks.
  EXPECT_FALSE(parse_bulk_response(R"({"predictions":[{"ttft_ms":1,"tpot_ms":2)" + meta + ",{" +
                                   meta.substr(1) + "]}")
                   .has_value());
}

// Short decimals are converted without from_chars (an exact division); the value must be the
// one from_chars gives, at the fast path's limits and past them.
TEST(Wire, NumbersMatchFromChars) {
  std::mt19937_64 rng(99);
  std::vector<std::string> numbers = {"0",
                                      "-0",
                                      "0.0",
                                      "-0.000",
                                      "123456789012345",
                                      "1234567890123456",
                                      "0.1",
                                      "0.0000000000000000000001",
                                      "0.00000000000000000000001",
                                      "999999999999999.9",
                                      "12.3456789012345",
                                      "1e3",
                                      "2.5E-3",
                                      "17.000000000000001"};
  for (int i = 0; i < 20000; ++i) {
    std::string n = rng() % 2 ? "-" : "";
    n += std::to_string(rng() % 1000000000000ull).substr(0, 1 + rng() % 12);
    if (n.size() > (n[0] == '-' ? 2u : 1u) && n[n[0] == '-' ? 1 : 0] == '0') {
      continue;  // a leading zero is not JSON
    }
    n += ".";
    for (unsigned k = 1 + rng() % 18; k > 0; --k) {
      n += static_cast<char>('0' + rng() % 10);
    }
    numbers.push_back(n);
  }
  for (const auto& n : numbers) {
    auto p = parse_bulk_response(R"({"predictions":[{"ttft_ms":)" + n + R"(,"tpot_ms":1}]})");
    ASSERT_TRUE(p.has_value()) << n;
    double expected = 0;
    std::from_chars(n.data(), n.data() + n.size(), expected);
    EXPECT_EQ(std::signbit((*p)[0].ttft_ms), std::signbit(expected)) << n;
    EXPECT_EQ((*p)[0].ttft_ms, expected) << n;
  }
}

TEST(Wire, DeepNestingIsRejectedWithoutRecursingForever) {
  std::string deep =
      R"({"x":)" + std::string(100000, '[') + std::string(100000, ']') + R"(,"predictions":[]})";
  EXPECT_FALSE(parse_bulk_response(deep).has_value());
}

}  // namespace
}  // namespace llmd::epp::predictor_client
