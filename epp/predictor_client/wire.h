#pragma once
// The /predict/bulk/strict wire format (predictor-api.md section 4), written and read without
// building a JSON DOM: a batch can hold 10,000 rows and this runs on every dispatch.
// Pure functions; thread-safe.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/features/schema.h"
#include "epp/interface/prediction_source.h"

namespace llmd::epp::predictor_client {

inline constexpr std::string_view kBulkStrictPath = "/predict/bulk/strict";
inline constexpr std::string_view kReadyPath = "/readyz";

// `{"requests":[{row},...]}` with the field names of common/features/feature_json.h.
// Values the predictor would reject with a 422 for the whole batch are made valid instead, so
// one caller's odd row (e.g. a scraped KV usage of 1.0000001) cannot fail the other callers of
// the batch: non-finite -> 0, kv_cache_percentage and prefix_cache_score clamped to [0,1],
// negative counts -> 0.
std::string encode_bulk_request(std::span<const features::FeatureInput> rows);
// Appends one row object.
void append_row_json(std::string& out, const features::FeatureInput& row);

// Reads `predictions[i].ttft_ms/tpot_ms` from a 200 answer of /predict/bulk/strict; other
// fields are ignored. nullopt when the body is not that shape (malformed JSON, no
// `predictions` array, an element that is not an object with both numbers). The count is
// checked by the caller (Coalescer::deliver).
std::optional<std::vector<Prediction>> parse_bulk_response(std::string_view body);

}  // namespace llmd::epp::predictor_client
