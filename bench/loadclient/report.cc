#include "bench/loadclient/report.h"

#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace llmd::loadclient {

namespace {

using Json = nlohmann::json;

Json to_json(const Percentiles& p, double scale) {
  return Json{{"count", p.count},     {"mean", p.mean * scale}, {"p50", p.p50 * scale},
              {"p90", p.p90 * scale}, {"p95", p.p95 * scale},   {"p99", p.p99 * scale},
              {"max", p.max * scale}};
}

std::string error_kind(const RequestRecord& r) {
  if (r.status != 0 && r.status != 200) {
    return "http_" + std::to_string(r.status);
  }
  if (r.error.rfind("aborted", 0) == 0) {
    return "aborted";
  }
  if (r.error.rfind("timeout", 0) == 0) {
    return "timeout";
  }
  if (r.status == 0) {
    return "transport";
  }
  return "protocol";
}

Json summarize_group(const std::vector<const RequestRecord*>& rs, double scale) {
  std::vector<double> ttft, tpot, ntpot, e2e;
  int64_t ok = 0, out_tokens = 0, prompt_tokens = 0, cached_tokens = 0;
  int64_t slo_total = 0, slo_met = 0;
  double first_send = -1, last_end = -1;
  std::map<std::string, int64_t> errors;
  for (const auto* r : rs) {
    if (r->sent_ms >= 0 && (first_send < 0 || r->sent_ms < first_send)) {
      first_send = r->sent_ms;
    }
    last_end = std::max(last_end, r->end_ms);
    const bool has_slo = r->slo_ttft_ms.has_value() || r->slo_tpot_ms.has_value();
    slo_total += has_slo ? 1 : 0;
    if (!r->ok) {
      ++errors[error_kind(*r)];
      continue;
    }
    ++ok;
    ttft.push_back(r->ttft_ms());
    e2e.push_back(r->e2e_ms());
    if (auto t = r->tpot_ms()) {
      tpot.push_back(*t);
    }
    if (auto n = r->ntpot_ms()) {
      ntpot.push_back(*n);
    }
    out_tokens += r->output_tokens();
    if (r->prompt_tokens > 0) {
      prompt_tokens += r->prompt_tokens;
      cached_tokens += std::max<int64_t>(0, r->cached_tokens);
    }
    if (has_slo) {
      const bool ttft_ok = !r->slo_ttft_ms || r->ttft_ms() * scale <= *r->slo_ttft_ms;
      const auto t = r->tpot_ms();
      const bool tpot_ok = !r->slo_tpot_ms || !t || *t * scale <= *r->slo_tpot_ms;
      slo_met += ttft_ok && tpot_ok ? 1 : 0;
    }
  }
  const double span_s =
      first_send >= 0 && last_end > first_send ? (last_end - first_send) * scale / 1000.0 : 0.0;
  Json j;
  j["requests"] = static_cast<int64_t>(rs.size());
  j["success"] = ok;
  j["success_rate"] = rs.empty() ? 0.0 : static_cast<double>(ok) / static_cast<double>(rs.size());
  j["ttft_ms"] = to_json(percentiles(ttft), scale);
  j["tpot_ms"] = to_json(percentiles(tpot), scale);
  j["ntpot_ms"] = to_json(percentiles(ntpot), scale);
  j["e2e_ms"] = to_json(percentiles(e2e), scale);
  j["output_tokens"] = out_tokens;
  j["output_tokens_per_s"] = span_s > 0 ? static_cast<double>(out_tokens) / span_s : 0.0;
  j["requests_per_s"] = span_s > 0 ? static_cast<double>(ok) / span_s : 0.0;
  j["prompt_tokens"] = prompt_tokens;
  j["cached_tokens"] = cached_tokens;
  j["prefix_cache_hit_ratio"] =
      prompt_tokens > 0 ? static_cast<double>(cached_tokens) / static_cast<double>(prompt_tokens)
                        : 0.0;
  if (slo_total > 0) {
    j["slo_requests"] = slo_total;
    j["slo_attainment"] = static_cast<double>(slo_met) / static_cast<double>(slo_total);
  }
  j["errors"] = errors;
  return j;
}

}  // namespace

std::optional<double> RequestRecord::tpot_ms() const {
  const int64_t n = output_tokens();
  if (!ok || n < 2 || first_token_ms < 0) {
    return std::nullopt;
  }
  return (e2e_ms() - ttft_ms()) / static_cast<double>(n - 1);
}

std::optional<double> RequestRecord::ntpot_ms() const {
  const int64_t n = output_tokens();
  if (!ok || n < 1) {
    return std::nullopt;
  }
  return e2e_ms() / static_cast<double>(n);
}

Json to_json(const RequestRecord& r) {
  Json j{{"index", r.index},
         {"stage", r.stage},
         {"session", r.session},
         {"turn", r.turn},
         {"scheduled_ms", r.scheduled_ms},
         {"sent_ms", r.sent_ms},
         {"first_token_ms", r.first_token_ms},
         {"end_ms", r.end_ms},
         {"status", r.status},
         {"ok", r.ok},
         {"prompt_words", r.prompt_words},
         {"max_tokens", r.max_tokens},
         {"prompt_tokens", r.prompt_tokens},
         {"completion_tokens", r.completion_tokens},
         {"cached_tokens", r.cached_tokens},
         {"content_chunks", r.content_chunks},
         {"endpoint", r.endpoint}};
  if (r.ok) {
    j["ttft_ms"] = r.ttft_ms();
    j["e2e_ms"] = r.e2e_ms();
    if (auto t = r.tpot_ms()) {
      j["tpot_ms"] = *t;
    }
    if (auto n = r.ntpot_ms()) {
      j["ntpot_ms"] = *n;
    }
  }
  if (!r.error.empty()) {
    j["error"] = r.error;
  }
  if (r.slo_ttft_ms) {
    j["slo_ttft_ms"] = *r.slo_ttft_ms;
  }
  if (r.slo_tpot_ms) {
    j["slo_tpot_ms"] = *r.slo_tpot_ms;
  }
  return j;
}

Percentiles percentiles(std::vector<double> v) {
  Percentiles p;
  p.count = static_cast<int64_t>(v.size());
  if (v.empty()) {
    return p;
  }
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    const double pos = q * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<std::size_t>(pos);
    const auto hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
  };
  p.mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  p.p50 = at(0.50);
  p.p90 = at(0.90);
  p.p95 = at(0.95);
  p.p99 = at(0.99);
  p.max = v.back();
  return p;
}

Json summarize(const std::vector<RequestRecord>& records,
               const std::vector<workload::Stage>& stages, const SummaryInfo& info) {
  const double scale = info.time_scale > 0 ? info.time_scale : 1.0;
  Json out;
  out["info"] = {{"target", info.target},
                 {"workload", info.workload},
                 {"seed", info.seed},
                 {"time_scale", scale},
                 {"wall_s", info.wall_ms / 1000.0},
                 {"not_sent", info.not_sent},
                 {"stopped_by_wall_cap", info.stopped_by_wall_cap},
                 {"stages", workload::format_stages(stages)}};
  std::vector<const RequestRecord*> all;
  std::vector<std::vector<const RequestRecord*>> by_stage(stages.size());
  for (const auto& r : records) {
    all.push_back(&r);
    if (r.stage >= 0 && static_cast<std::size_t>(r.stage) < by_stage.size()) {
      by_stage[static_cast<std::size_t>(r.stage)].push_back(&r);
    }
  }
  out["overall"] = summarize_group(all, scale);
  Json st = Json::array();
  for (std::size_t i = 0; i < stages.size(); ++i) {
    Json s = summarize_group(by_stage[i], scale);
    s["stage"] = static_cast<int64_t>(i);
    s["rate"] = stages[i].rate;
    s["duration_s"] = stages[i].duration_s;
    st.push_back(std::move(s));
  }
  out["stages"] = std::move(st);
  return out;
}

std::string comparison_table(const std::vector<std::pair<std::string, Json>>& runs) {
  struct Row {
    std::string label;
    std::function<std::string(const Json& overall)> value;
  };
  // "-" when a summary lacks the field (an older summary.json, or no SLOs sent).
  auto number = [](const char* group, const char* field, int decimals, const char* unit = "",
                   double factor = 1) {
    return [=](const Json& o) -> std::string {
      const Json* v =
          group[0] == '\0'
              ? (o.contains(field) ? &o[field] : nullptr)
              : (o.contains(group) && o[group].contains(field) ? &o[group][field] : nullptr);
      return v != nullptr && v->is_number()
                 ? fmt::format("{:.{}f}{}", v->get<double>() * factor, decimals, unit)
                 : "-";
    };
  };
  // The first run is the reference of the relative row (the README's main job puts the default
  // pipeline first).
  const Json first = !runs.empty() && runs[0].second.contains("overall") ? runs[0].second["overall"]
                                                                         : Json::object();
  auto ttft_p95 = [](const Json& o) -> std::optional<double> {
    if (o.contains("ttft_ms") && o["ttft_ms"].contains("p95") && o["ttft_ms"]["p95"].is_number()) {
      return o["ttft_ms"]["p95"].get<double>();
    }
    return std::nullopt;
  };
  auto vs_first = [&](const Json& o) -> std::string {
    const auto value = ttft_p95(o), reference = ttft_p95(first);
    if (runs.size() < 2 || !value || !reference || *reference <= 0) {
      return "-";
    }
    return fmt::format("{:+.1f} %", 100.0 * (*value / *reference - 1.0));
  };
  const std::vector<Row> rows = {
      {"requests answered",
       [](const Json& o) -> std::string {
         return o.contains("success") && o.contains("requests")
                    ? fmt::format("{} / {}", o["success"].get<int64_t>(),
                                  o["requests"].get<int64_t>())
                    : "-";
       }},
      {"TTFT p50 (ms)", number("ttft_ms", "p50", 1)},
      {"TTFT p95 (ms)", number("ttft_ms", "p95", 1)},
      {"TTFT p95 vs 1st run", vs_first},
      {"TTFT p99 (ms)", number("ttft_ms", "p99", 1)},
      {"TPOT p50 (ms)", number("tpot_ms", "p50", 2)},
      {"TPOT p99 (ms)", number("tpot_ms", "p99", 2)},
      {"E2E p50 (ms)", number("e2e_ms", "p50", 1)},
      {"output tokens/s", number("", "output_tokens_per_s", 0)},
      {"prefix cache hits", number("", "prefix_cache_hit_ratio", 1, " %", 100)},
      {"SLO attainment", number("", "slo_attainment", 1, " %", 100)},
  };
  std::size_t label_width = 0;
  for (const auto& r : rows) {
    label_width = std::max(label_width, r.label.size());
  }
  std::vector<std::vector<std::string>> cells(rows.size());
  std::vector<std::size_t> widths;
  for (const auto& [name, summary] : runs) {
    const Json overall = summary.contains("overall") ? summary["overall"] : Json::object();
    std::size_t w = name.size();
    for (std::size_t i = 0; i < rows.size(); ++i) {
      cells[i].push_back(rows[i].value(overall));
      w = std::max(w, cells[i].back().size());
    }
    widths.push_back(w);
  }
  std::string out = fmt::format("{:<{}}", "", label_width);
  for (std::size_t c = 0; c < runs.size(); ++c) {
    out += fmt::format("  {:>{}}", runs[c].first, widths[c]);
  }
  out += "\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    bool any = false;
    for (const auto& v : cells[i]) {
      any = any || v != "-";
    }
    if (!any) {
      continue;  // e.g. SLO attainment of runs without SLOs
    }
    out += fmt::format("{:<{}}", rows[i].label, label_width);
    for (std::size_t c = 0; c < runs.size(); ++c) {
      out += fmt::format("  {:>{}}", cells[i][c], widths[c]);
    }
    out += "\n";
  }
  return out;
}

}  // namespace llmd::loadclient
