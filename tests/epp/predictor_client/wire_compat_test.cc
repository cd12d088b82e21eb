// Our request bodies must take the predictor's fast path (predictor/fast_rows.h), not only pass
// its slow validating parser: a body the fast path refuses costs a second parse per batch.
#include <gtest/gtest.h>

#include "epp/predictor_client/wire.h"
#include "predictor/fast_rows.h"
#include "tests/epp/predictor_client/fake_transport.h"

namespace llmd::epp::predictor_client {
namespace {

TEST(WireCompat, BulkBodyTakesThePredictorsFastPath) {
  auto rows = testing::make_rows(500, 0);
  rows[1].pod_type = features::PodType::kPrefill;
  rows[2].pod_type = features::PodType::kDecode;
  rows[3].pod_type = features::PodType::kUnknown;
  rows[4].prefix_cache_score = 0.1234567890123;
  rows[5].prefill_tokens_in_flight = 123456;
  rows[6].kv_cache_percentage = 1.0;
  std::vector<features::FeatureInput> parsed;
  ASSERT_TRUE(predictor::parse_bulk_fast(encode_bulk_request(rows), 1, 10000, parsed));
  ASSERT_EQ(parsed.size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(parsed[i].input_token_length, rows[i].input_token_length);
    EXPECT_EQ(parsed[i].num_request_running, rows[i].num_request_running);
    EXPECT_EQ(parsed[i].kv_cache_percentage, rows[i].kv_cache_percentage);
    EXPECT_EQ(parsed[i].prefix_cache_score, rows[i].prefix_cache_score);
    EXPECT_EQ(parsed[i].pod_type, rows[i].pod_type);
    EXPECT_EQ(parsed[i].prefill_tokens_in_flight, rows[i].prefill_tokens_in_flight);
  }
}

TEST(WireCompat, ColumnarBodyTakesThePredictorsFastPath) {
  auto rows = testing::make_rows(500, 0);
  rows[3].pod_type = features::PodType::kUnknown;
  rows[4].prefix_cache_score = 0.1234567890123;
  rows[6].kv_cache_percentage = 1.0;
  rows[7].kv_cache_percentage = 1.5;  // clamped, as on the strict path
  std::vector<features::FeatureInput> columns;
  ASSERT_TRUE(predictor::parse_columns_fast(encode_columnar_request(rows), 10000, columns));
  std::vector<features::FeatureInput> strict;
  ASSERT_TRUE(predictor::parse_bulk_fast(encode_bulk_request(rows), 1, 10000, strict));
  ASSERT_EQ(columns.size(), rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(columns[i].input_token_length, strict[i].input_token_length);
    EXPECT_EQ(columns[i].num_request_running, strict[i].num_request_running);
    EXPECT_EQ(columns[i].kv_cache_percentage, strict[i].kv_cache_percentage);
    EXPECT_EQ(columns[i].prefix_cache_score, strict[i].prefix_cache_score);
    EXPECT_EQ(columns[i].pod_type, strict[i].pod_type);
    EXPECT_EQ(columns[i].num_tokens_generated, strict[i].num_tokens_generated);
  }
}

}  // namespace
}  // namespace llmd::epp::predictor_client
