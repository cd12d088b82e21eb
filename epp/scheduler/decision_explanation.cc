#include "epp/scheduler/decision_explanation.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace llmd::epp {
namespace {

// Header values carry visible ASCII and spaces only (RFC 9110 field-value; no CR/LF can split
// the response); pod and filter names come from config and discovery, reasons from plugins.
std::string header_safe(std::string_view s, std::size_t max_len) {
  std::string out;
  out.reserve(std::min(s.size(), max_len));
  for (char c : s) {
    if (out.size() == max_len) {
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    out.push_back(u >= 0x20 && u < 0x7f && c != '"' ? c : '?');
  }
  return out;
}

// Reasons and fallbacks are sentences: long enough to say what happened, short enough for a
// header.
constexpr std::size_t kMaxSentence = 160;
constexpr std::size_t kMaxName = 64;
// The scorer's and the picker's tie-break sentences together.
constexpr std::size_t kMaxTieBreaks = 2 * kMaxSentence;

}  // namespace

std::vector<const CandidateDecision*> DecisionExplanation::shown(std::size_t max_candidates) const {
  std::vector<const CandidateDecision*> out;
  auto find = [this](const std::string& name) -> const CandidateDecision* {
    if (name.empty()) {
      return nullptr;
    }
    for (const auto& c : candidates) {
      if (c.name == name) {
        return &c;
      }
    }
    return nullptr;
  };
  const CandidateDecision* pick = find(picked);
  const CandidateDecision* second = find(retry);
  if (pick != nullptr) {
    out.push_back(pick);
  }
  if (second != nullptr && out.size() < max_candidates) {
    out.push_back(second);
  }
  std::vector<const CandidateDecision*> rest;
  for (const auto& c : candidates) {
    if (&c != pick && &c != second) {
      rest.push_back(&c);
    }
  }
  // Scored pods by score, then the removed ones in pool order (stable).
  std::stable_sort(rest.begin(), rest.end(), [](const auto* a, const auto* b) {
    if (a->score.has_value() != b->score.has_value()) {
      return a->score.has_value();
    }
    return a->score && *a->score > *b->score;
  });
  for (const auto* c : rest) {
    if (out.size() >= max_candidates) {
      break;
    }
    out.push_back(c);
  }
  return out;
}

nlohmann::ordered_json decision_to_json(const DecisionExplanation& e, std::size_t max_candidates) {
  // In the order a reader wants it (the request, the outcome, then the details).
  using json = nlohmann::ordered_json;
  json out = {{"request_id", e.request_id}, {"model", e.model}};
  if (!e.objective.empty()) {
    out["objective"] = e.objective;
  }
  if (e.slo_ttft_ms) {
    out["slo_ttft_ms"] = *e.slo_ttft_ms;
  }
  if (e.slo_tpot_ms) {
    out["slo_tpot_ms"] = *e.slo_tpot_ms;
  }
  out["priority"] = e.priority;
  out["strict_priority"] = e.strict_priority;
  out["profile"] = e.profile;
  out["outcome"] = e.outcome;
  out["pick"] = e.picked;
  out["retry"] = e.retry;
  out["reason"] = e.reason;
  out["fallback"] = e.fallback;
  out["predictions"] = e.predictions_used;
  if (!e.tie_breaks.empty()) {
    out["tie_breaks"] = e.tie_breaks;
  }
  out["picker"] = e.picker;
  json scorers = json::array();
  for (const auto& s : e.scorers) {
    scorers.push_back({{"name", s.name}, {"type", s.type}, {"weight", s.weight}});
  }
  out["scorers"] = std::move(scorers);
  json filters = json::array();
  for (const auto& f : e.filters) {
    json removed = json::array();
    for (std::size_t i = 0; i < f.removed.size() && i < max_candidates; ++i) {
      removed.push_back(f.removed[i]);
    }
    json step = {{"name", f.name}, {"type", f.type}, {"in", f.in}, {"removed", removed}};
    if (f.removed.size() > max_candidates) {
      step["removed_more"] = f.removed.size() - max_candidates;
    }
    filters.push_back(std::move(step));
  }
  out["filters"] = std::move(filters);
  json candidates = json::array();
  const auto shown = e.shown(max_candidates);
  // Rounded: a log line is read by people and grep, not replayed.
  auto round_to = [](double v, double unit) { return std::round(v / unit) * unit; };
  for (const auto* c : shown) {
    json j = {{"name", c->name}};
    if (c->predicted_ttft_ms) {
      j["ttft_ms"] = round_to(*c->predicted_ttft_ms, 0.01);
    }
    if (c->predicted_tpot_ms) {
      j["tpot_ms"] = round_to(*c->predicted_tpot_ms, 0.01);
    }
    if (c->ttft_headroom_ms) {
      j["ttft_headroom_ms"] = round_to(*c->ttft_headroom_ms, 0.01);
    }
    if (c->tpot_headroom_ms) {
      j["tpot_headroom_ms"] = round_to(*c->tpot_headroom_ms, 0.01);
    }
    if (c->prefix_score) {
      j["prefix"] = round_to(*c->prefix_score, 0.001);
    }
    j["kv"] = round_to(c->kv_cache_usage, 0.001);
    j["waiting"] = c->waiting;
    j["dispatched"] = c->dispatched;
    if (c->score) {
      j["score"] = round_to(*c->score, 0.0001);
      json parts = json::array();
      for (double s : c->scorer_scores) {
        parts.push_back(round_to(s, 0.0001));
      }
      j["scores"] = std::move(parts);
    } else if (!c->removed_by.empty()) {
      j["removed_by"] = c->removed_by;
    }
    candidates.push_back(std::move(j));
  }
  out["candidates"] = std::move(candidates);
  if (e.candidates.size() > shown.size()) {
    out["candidates_more"] = e.candidates.size() - shown.size();
  }
  return out;
}

std::string decision_header_value(const DecisionExplanation& e, std::size_t max_candidates,
                                  std::size_t max_bytes) {
  std::string out;
  if (!e.picked.empty()) {
    out += "pick=" + header_safe(e.picked, kMaxName);
  } else {
    out += "outcome=" + e.outcome;
  }
  if (!e.retry.empty()) {
    out += " retry=" + header_safe(e.retry, kMaxName);
  }
  out += " profile=" + header_safe(e.profile, kMaxName);
  out += e.predictions_used ? " predictions=yes" : " predictions=no";
  if (e.slo_ttft_ms || e.slo_tpot_ms) {
    std::string slo;
    if (e.slo_ttft_ms) {
      slo = fmt::format("ttft:{:g}", *e.slo_ttft_ms);
    }
    if (e.slo_tpot_ms) {
      slo += fmt::format("{}tpot:{:g}", slo.empty() ? "" : ",", *e.slo_tpot_ms);
    }
    out += " slo=" + slo;
  }
  if (e.priority != 0) {
    out += fmt::format(" priority={}", e.priority);
  }
  if (e.strict_priority != 0) {
    out += fmt::format(" tier={}", e.strict_priority);
  }
  if (!e.fallback.empty()) {
    out += " fallback=\"" + header_safe(e.fallback, kMaxSentence) + "\"";
  }
  if (!e.tie_breaks.empty()) {
    std::string joined;
    for (const auto& t : e.tie_breaks) {
      joined += (joined.empty() ? "" : "; ") + t;
    }
    out += " tiebreak=\"" + header_safe(joined, kMaxTieBreaks) + "\"";
  }
  if (!e.reason.empty()) {
    out += " reason=\"" + header_safe(e.reason, kMaxSentence) + "\"";
  }
  if (!e.filters.empty()) {
    out += " filters=";
    for (std::size_t i = 0; i < e.filters.size(); ++i) {
      const auto& f = e.filters[i];
      out += fmt::format("{}{}:{}>{}", i == 0 ? "" : ",", header_safe(f.name, kMaxName), f.in,
                         f.in - f.removed.size());
    }
  }
  // What follows is cut to the budget; the head above stays whole (names and sentences are
  // bounded, and a pipeline has a handful of filters).
  const auto shown = e.shown(max_candidates);
  std::string list;
  std::size_t listed = 0;
  constexpr std::size_t kRoomForCount = 8;  // ";+NNNNNN"
  for (const auto* c : shown) {
    std::string item = header_safe(c->name, kMaxName);
    std::string fields;
    auto add = [&fields](const std::string& f) { fields += (fields.empty() ? "" : ",") + f; };
    if (c->predicted_ttft_ms) {
      add(fmt::format("ttft={:.1f}", *c->predicted_ttft_ms));
    }
    if (c->predicted_tpot_ms) {
      add(fmt::format("tpot={:.1f}", *c->predicted_tpot_ms));
    }
    if (c->ttft_headroom_ms) {
      add(fmt::format("ttft_headroom={:.1f}", *c->ttft_headroom_ms));
    }
    if (c->tpot_headroom_ms) {
      add(fmt::format("tpot_headroom={:.1f}", *c->tpot_headroom_ms));
    }
    if (c->prefix_score) {
      add(fmt::format("prefix={:.2f}", *c->prefix_score));
    }
    if (c->score) {
      add(fmt::format("score={:.3f}", *c->score));
    } else if (!c->removed_by.empty()) {
      add("removed=" + header_safe(c->removed_by, kMaxName));
    }
    if (!fields.empty()) {
      item += ":" + fields;
    }
    const std::size_t head = out.size() + std::string_view(" candidates=").size();
    if (head + list.size() + 1 + item.size() + kRoomForCount > max_bytes) {
      break;
    }
    list += (list.empty() ? "" : ";") + item;
    ++listed;
  }
  if (listed > 0 || !e.candidates.empty()) {
    out += " candidates=" + list;
    if (e.candidates.size() > listed) {
      out += fmt::format("{}+{}", list.empty() ? "" : ";", e.candidates.size() - listed);
    }
  }
  if (out.size() > max_bytes) {
    out.resize(max_bytes);  // only a budget smaller than the head itself gets here
  }
  return out;
}

}  // namespace llmd::epp
