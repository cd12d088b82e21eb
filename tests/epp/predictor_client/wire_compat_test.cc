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

}  // namespace
}  // namespace llmd::epp::predictor_client
