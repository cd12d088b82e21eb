#pragma once
// Fast path for prediction bodies: simdjson On-Demand straight into FeatureInput, no DOM and no
// per-row allocation. It accepts only bodies that are valid under the contract; anything else
// (malformed JSON, a bad field, a wrong count) returns false and the caller re-parses with the
// slow validating path, which produces the exact 422 detail. Valid input never pays for that.
#include <cstddef>
#include <string_view>
#include <vector>

#include "common/features/schema.h"

namespace llmd::predictor {

// `{"requests": [row, ...]}` with min_rows..max_rows rows. `rows` is cleared first.
bool parse_bulk_fast(std::string_view body, std::size_t min_rows, std::size_t max_rows,
                     std::vector<features::FeatureInput>& rows);
// A single row object.
bool parse_row_fast(std::string_view body, features::FeatureInput& row);

}  // namespace llmd::predictor
