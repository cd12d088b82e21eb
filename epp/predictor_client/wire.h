#pragma once
// The predictor's bulk wire formats (predictor-api.md section 4), written and read without
// building a JSON DOM: a batch can hold 10,000 rows and this runs on every dispatch.
// - columnar (ours, additive; what the client sends first): one list per field, a single value
//   for a field that is the same in every row; the answer is four lists and the model
//   metadata once. About a seventh of the strict exchange's bytes (README, "Wire").
// - strict (the reference's /predict/bulk/strict): one object per row and per prediction; the
//   client falls back to it for a replica that does not serve the columnar path.
// Field names come from features::kFeatureFields. Pure functions; thread-safe.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/features/schema.h"
#include "epp/interface/prediction_source.h"

namespace llmd::epp::predictor_client {

inline constexpr std::string_view kBulkStrictPath = "/predict/bulk/strict";
inline constexpr std::string_view kBulkColumnarPath = "/predict/bulk/columnar";
inline constexpr std::string_view kReadyPath = "/readyz";

// `row` as a predictor accepts it: non-finite -> 0, kv_cache_percentage and prefix_cache_score
// clamped to [0,1], negative counts -> 0 (what the encoders below write). In-process
// predictions apply the same rule, so they see the numbers a predictor would.
features::FeatureInput accepted_row(features::FeatureInput row);

// `{"requests":[{row},...]}`, one object per row with every field of kFeatureFields.
// Values the predictor would reject with a 422 for the whole batch are made valid instead, so
// one caller's odd row (e.g. a scraped KV usage of 1.0000001) cannot fail the other callers of
// the batch: non-finite -> 0, kv_cache_percentage and prefix_cache_score clamped to [0,1],
// negative counts -> 0.
std::string encode_bulk_request(std::span<const features::FeatureInput> rows);
// Appends one row object.
void append_row_json(std::string& out, const features::FeatureInput& row);
// `{"kv_cache_percentage":[...],"input_token_length":[...] or 512,...}` with the same row
// hygiene. The first field is always a list (it states the row count); any other field whose
// value is the same in every row is written once.
std::string encode_columnar_request(std::span<const features::FeatureInput> rows);

// Reads `predictions[i].ttft_ms/tpot_ms` from a 200 answer of /predict/bulk/strict; other
// fields are ignored. nullopt when the body is not that shape (malformed JSON, no
// `predictions` array, an element that is not an object with both numbers). The count is
// checked by the caller (Coalescer::deliver).
std::optional<std::vector<Prediction>> parse_bulk_response(std::string_view body);
// Reads the `ttft_ms`, `tpot_ms` (required) and `ttft_expected_ms`, `tpot_expected_ms` lists
// of a 200 answer of /predict/bulk/columnar; other members are ignored. nullopt when the body
// is not that shape (malformed JSON, a missing or non-list column, a non-number item, columns
// of different lengths). `expected_rows` only sizes the result up front.
std::optional<std::vector<Prediction>> parse_columnar_response(std::string_view body,
                                                               std::size_t expected_rows = 0);

}  // namespace llmd::epp::predictor_client
