#include "epp/predictor_client/wire.h"

#include <algorithm>
#include <array>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <utility>

#include "epp/predictor_client/json_scanner.h"

namespace llmd::epp::predictor_client {

namespace {

using features::FeatureField;
using features::FieldKind;

void append_double(std::string& out, double v) {
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

void append_int(std::string& out, int64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), std::max<int64_t>(v, 0));
  out.append(buf, r.ptr);
}

double unit(double v) {
  return std::isfinite(v) ? std::clamp(v, 0.0, 1.0) : 0.0;
}

// The encoders walk kFeatureFields at compile time (field I is a constant expression), so
// each field's write is as direct as a hand-written one: a run-time switch over the table
// cost the strict encoder ~15 %.
constexpr std::size_t kFields = features::kFeatureFields.size();

// Field I of `row` as the predictor will accept it (the row hygiene of wire.h).
template <std::size_t I>
void append_value(std::string& out, const features::FeatureInput& row) {
  constexpr const FeatureField& f = features::kFeatureFields[I];
  if constexpr (f.kind == FieldKind::kUnit) {
    append_double(out, unit(row.*f.unit));
  } else if constexpr (f.kind == FieldKind::kCount) {
    append_int(out, row.*f.count);
  } else {
    // "" for none; kUnknown is written "unknown", which the predictor maps to the same unknown
    // category.
    out.push_back('"');
    out.append(features::pod_type_name(row.pod_type));
    out.push_back('"');
  }
}

// Whether field I is written the same for rows `a` and `b` (bitwise for floats: -0 and 0 are
// written differently, and a column must carry exactly what the rows would).
template <std::size_t I>
bool same_value(const features::FeatureInput& a, const features::FeatureInput& b) {
  constexpr const FeatureField& f = features::kFeatureFields[I];
  if constexpr (f.kind == FieldKind::kUnit) {
    return std::bit_cast<uint64_t>(unit(a.*f.unit)) == std::bit_cast<uint64_t>(unit(b.*f.unit));
  } else if constexpr (f.kind == FieldKind::kCount) {
    return std::max<int64_t>(a.*f.count, 0) == std::max<int64_t>(b.*f.count, 0);
  } else {
    return features::pod_type_name(a.pod_type) == features::pod_type_name(b.pod_type);
  }
}

// `{"name":` for the first field, `,"name":` for the others: text made at compile time from
// the table, so each is appended like a literal.
template <std::size_t I>
struct MemberKey {
  static constexpr std::string_view name = features::kFeatureFields[I].name;
  static constexpr auto text = [] {
    std::array<char, name.size() + 4> out{};
    out[0] = I == 0 ? '{' : ',';
    out[1] = '"';
    for (std::size_t k = 0; k < name.size(); ++k) {
      out[2 + k] = name[k];
    }
    out[name.size() + 2] = '"';
    out[name.size() + 3] = ':';
    return out;
  }();
  static void append(std::string& s) { s.append(text.data(), text.size()); }
};

template <std::size_t... I>
void accept_fields(features::FeatureInput& row, std::index_sequence<I...>) {
  auto one = [&row](const FeatureField& f) {
    if (f.kind == FieldKind::kUnit) {
      row.*f.unit = unit(row.*f.unit);
    } else if (f.kind == FieldKind::kCount) {
      row.*f.count = std::max<int64_t>(row.*f.count, 0);
    }
  };
  (one(features::kFeatureFields[I]), ...);
}

// Member I of a columnar body: a list of the rows' values, or their one value when they share
// it. The first field is always a list: it states the row count.
template <std::size_t I>
void append_column(std::string& out, std::span<const features::FeatureInput> rows) {
  MemberKey<I>::append(out);
  const bool single = I > 0 && !rows.empty() &&
                      std::all_of(rows.begin() + 1, rows.end(),
                                  [&](const auto& r) { return same_value<I>(rows.front(), r); });
  if (single) {
    append_value<I>(out, rows.front());
    return;
  }
  out.push_back('[');
  for (std::size_t r = 0; r < rows.size(); ++r) {
    if (r > 0) {
      out.push_back(',');
    }
    append_value<I>(out, rows[r]);
  }
  out.push_back(']');
}

// Reads {"predictions":[{"ttft_ms":x,"tpot_ms":y,...},...],...}, keeping only the numbers of
// each prediction. ttft_expected_ms / tpot_expected_ms (our predictor's central estimates)
// are kept when present; a reference predictor sends none.
class BulkResponseReader {
 public:
  explicit BulkResponseReader(std::string_view body) : s_(body) {}

  std::optional<std::vector<Prediction>> read() {
    s_.ws();
    bool saw_predictions = false;
    const bool ok = s_.members([&](std::string_view key) {
      if (key != "predictions") {
        return s_.skip_value(1);
      }
      saw_predictions = true;
      predictions_.clear();
      return prediction_array();
    });
    if (!ok) {
      return std::nullopt;
    }
    s_.ws();
    if (!s_.at_end() || !saw_predictions) {
      return std::nullopt;
    }
    return std::move(predictions_);
  }

 private:
  bool prediction_array() {
    if (!s_.consume('[')) {
      return false;
    }
    s_.ws();
    if (s_.consume(']')) {
      return true;
    }
    while (true) {
      s_.ws();
      if (!prediction()) {
        return false;
      }
      s_.ws();
      if (s_.consume(']')) {
        return true;
      }
      if (!s_.consume(',')) {
        return false;
      }
    }
  }

  bool prediction() {
    if (!s_.consume('{')) {
      return false;  // null (a failed row on the non-strict route), number, array...
    }
    Prediction out;
    int have = 0;
    // Where the object's trailing run of ignored members starts (null once a kept key follows).
    const char* ignored_from = nullptr;
    s_.ws();
    if (!s_.consume('}')) {
      while (true) {
        std::string_view key;
        s_.ws();
        // Our predictor repeats the same metadata members (predicted_at, model_type, ...) at
        // the end of every prediction: when the bytes from here equal the previous
        // prediction's ignored tail, they parse the same way (the same members, all ignored,
        // then '}'), so they are stepped over instead of read again.
        if (!ignored_tail_.empty() && s_.remaining() >= ignored_tail_.size() &&
            std::memcmp(s_.pos(), ignored_tail_.data(), ignored_tail_.size()) == 0) {
          s_.skip(ignored_tail_.size());
          break;
        }
        const char* key_at = s_.pos();
        if (!s_.string(&key) || !s_.colon()) {
          return false;
        }
        double* target = key == "ttft_ms"            ? &out.ttft_ms
                         : key == "tpot_ms"          ? &out.tpot_ms
                         : key == "ttft_expected_ms" ? &out.ttft_expected_ms
                         : key == "tpot_expected_ms" ? &out.tpot_expected_ms
                                                     : nullptr;
        if (target != nullptr) {
          if (!s_.number(target)) {
            return false;
          }
          have |= target == &out.ttft_ms ? 1 : target == &out.tpot_ms ? 2 : 0;
          ignored_from = nullptr;
        } else {
          if (!s_.skip_value(3)) {
            return false;
          }
          if (ignored_from == nullptr) {
            ignored_from = key_at;
          }
        }
        s_.ws();
        if (s_.consume('}')) {
          ignored_tail_ = ignored_from == nullptr
                              ? std::string_view()
                              : std::string_view(ignored_from,
                                                 static_cast<std::size_t>(s_.pos() - ignored_from));
          break;
        }
        if (!s_.consume(',')) {
          return false;
        }
      }
    }
    if (have != 3) {
      return false;
    }
    predictions_.push_back(out);
    return true;
  }

  JsonScanner s_;
  std::vector<Prediction> predictions_;
  // The previous prediction's trailing ignored members up to its '}' (a view into the body).
  std::string_view ignored_tail_;
};

// Reads {"ttft_ms":[...],"tpot_ms":[...],"ttft_expected_ms":[...],"tpot_expected_ms":[...],
// ...}: the numbers go straight into one vector of Prediction, whatever the key order; other
// members are validated and skipped. A repeated key wins over the earlier one, as in any JSON
// reader.
class ColumnarResponseReader {
 public:
  ColumnarResponseReader(std::string_view body, std::size_t expected_rows) : s_(body) {
    out_.reserve(expected_rows);
  }

  std::optional<std::vector<Prediction>> read() {
    s_.ws();
    const bool ok = s_.members([&](std::string_view key) {
      const int column = key == "ttft_ms"            ? 0
                         : key == "tpot_ms"          ? 1
                         : key == "ttft_expected_ms" ? 2
                         : key == "tpot_expected_ms" ? 3
                                                     : -1;
      return column >= 0 ? read_column(static_cast<std::size_t>(column)) : s_.skip_value(1);
    });
    if (!ok) {
      return std::nullopt;
    }
    s_.ws();
    // The bounds are required, the central estimates optional; every column given has one
    // number per row.
    const std::size_t rows = counts_[0];
    if (!s_.at_end() || rows == kAbsent || counts_[1] != rows ||
        (counts_[2] != kAbsent && counts_[2] != rows) ||
        (counts_[3] != kAbsent && counts_[3] != rows)) {
      return std::nullopt;
    }
    out_.resize(rows);  // a longer column that a repeated key replaced leaves rows behind
    return std::move(out_);
  }

 private:
  static constexpr std::size_t kAbsent = SIZE_MAX;

  bool read_column(std::size_t column) {
    if (!s_.consume('[')) {
      return false;
    }
    std::size_t n = 0;
    s_.ws();
    if (!s_.consume(']')) {
      while (true) {
        s_.ws();
        if (n == out_.size()) {
          out_.emplace_back();
        }
        Prediction& p = out_[n++];
        double* target = column == 0   ? &p.ttft_ms
                         : column == 1 ? &p.tpot_ms
                         : column == 2 ? &p.ttft_expected_ms
                                       : &p.tpot_expected_ms;
        if (!s_.number(target)) {
          return false;
        }
        s_.ws();
        if (s_.consume(']')) {
          break;
        }
        if (!s_.consume(',')) {
          return false;
        }
      }
    }
    counts_[column] = n;
    return true;
  }

  JsonScanner s_;
  std::vector<Prediction> out_;
  std::size_t counts_[4] = {kAbsent, kAbsent, kAbsent, kAbsent};
};

}  // namespace

void append_row_json(std::string& out, const features::FeatureInput& row) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((MemberKey<I>::append(out), append_value<I>(out, row)), ...);
  }
  (std::make_index_sequence<kFields>{});
  out.push_back('}');
}

features::FeatureInput accepted_row(features::FeatureInput row) {
  accept_fields(row, std::make_index_sequence<kFields>{});
  return row;
}

std::string encode_bulk_request(std::span<const features::FeatureInput> rows) {
  std::string out;
  out.reserve(16 + rows.size() * 330);
  out.append("{\"requests\":[");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i > 0) {
      out.push_back(',');
    }
    append_row_json(out, rows[i]);
  }
  out.append("]}");
  return out;
}

std::string encode_columnar_request(std::span<const features::FeatureInput> rows) {
  std::string out;
  out.reserve(64 + rows.size() * 96);
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    (append_column<I>(out, rows), ...);
  }
  (std::make_index_sequence<kFields>{});
  out.push_back('}');
  return out;
}

std::optional<std::vector<Prediction>> parse_bulk_response(std::string_view body) {
  return BulkResponseReader(body).read();
}

std::optional<std::vector<Prediction>> parse_columnar_response(std::string_view body,
                                                               std::size_t expected_rows) {
  return ColumnarResponseReader(body, expected_rows).read();
}

}  // namespace llmd::epp::predictor_client
