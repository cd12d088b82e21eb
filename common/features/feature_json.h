#pragma once
// JSON <-> FeatureInput for prediction rows and training entries (contract section 2).
#include <cstddef>
#include <vector>

#include "common/features/schema.h"
#include "common/json/validation.h"

namespace llmd::features {

// Reads the feature fields of `obj` (already checked to be an object). Errors go to `errors`
// with locations under `loc`. Returns true when the row is valid.
bool read_feature_input(const json::Json& obj, json::Loc& loc, json::Errors& errors,
                        FeatureInput& out);

// Rows as columns (the predictor's /predict/bulk/columnar, ours): an object with a member per
// field of kFeatureFields, each a list with one item per row or one value that holds for every
// row (a body of single values only is one row). An item is checked as the same field of a row
// object is, its error located at ["body", field, row]; lists of unequal lengths, 0 rows or
// more than `max_rows` are errors at the list's location. True when valid; then `out` holds
// the rows.
bool read_feature_columns(const json::Json& obj, json::Loc& loc, json::Errors& errors,
                          std::size_t max_rows, std::vector<FeatureInput>& out);

struct TrainingEntry {
  FeatureInput features;
  double actual_ttft_ms = 0;      // 0 = not observed
  double actual_tpot_ms = 0;      // 0 = not observed
  double predicted_ttft_ms = -1;  // < 0 = not sent
  double predicted_tpot_ms = -1;
  // Ours, optional: the predictor's central estimate that went with predicted_* (the bound).
  // Live error is measured on it, live coverage on the bound; < 0 = not sent.
  double expected_ttft_ms = -1;
  double expected_tpot_ms = -1;
};
bool read_training_entry(const json::Json& obj, json::Loc& loc, json::Errors& errors,
                         TrainingEntry& out);

json::Json feature_input_to_json(const FeatureInput& in);

}  // namespace llmd::features
