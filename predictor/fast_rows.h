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
// When the body is valid JSON whose one "requests" list has more than max_rows items, returns
// false and sets *too_many_rows (if given) to the count: the caller answers the 422 from it
// instead of building the document of a body that is refused anyway.
// Bodies over a few MiB do not leave their parse buffers behind on the calling thread.
bool parse_bulk_fast(std::string_view body, std::size_t min_rows, std::size_t max_rows,
                     std::vector<features::FeatureInput>& rows,
                     std::size_t* too_many_rows = nullptr);
// The columnar body (features::read_feature_columns, /predict/bulk/columnar) with 1..max_rows
// rows. `rows` is cleared first. When the lists agree on a count above max_rows, returns false
// and sets *too_long (if given) to the list that sets the count and that count, for the 422.
struct ColumnsTooLong {
  std::string_view field;
  std::size_t rows = 0;
};
bool parse_columns_fast(std::string_view body, std::size_t max_rows,
                        std::vector<features::FeatureInput>& rows,
                        ColumnsTooLong* too_long = nullptr);
// A single row object.
bool parse_row_fast(std::string_view body, features::FeatureInput& row);

}  // namespace llmd::predictor
