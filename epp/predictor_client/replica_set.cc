#include "epp/predictor_client/replica_set.h"

#include <algorithm>
#include <climits>

#include "common/http/client.h"

namespace llmd::epp::predictor_client {

namespace {

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) {
    return {};
  }
  const auto last = s.find_last_not_of(" \t\r\n");
  return s.substr(first, last - first + 1);
}

}  // namespace

std::optional<std::vector<std::string>> parse_replica_list(std::string_view list,
                                                           std::string* error) {
  std::vector<std::string> out;
  while (true) {
    const auto comma = list.find(',');
    const auto item = trim(list.substr(0, comma));
    if (!item.empty()) {
      std::string url(item);
      if (!http::parse_url(url)) {
        if (error != nullptr) {
          *error = "invalid predictor URL '" + url + "' (expected http://host[:port][/base])";
        }
        return std::nullopt;
      }
      out.push_back(std::move(url));
    }
    if (comma == std::string_view::npos) {
      break;
    }
    list.remove_prefix(comma + 1);
  }
  return out;
}

ReplicaSet::ReplicaSet(std::size_t count) : replicas_(count) {
  ties_.reserve(count);
}

std::optional<std::size_t> ReplicaSet::choose(Rng& rng, std::optional<std::size_t> exclude) {
  int best = INT_MAX;
  ties_.clear();
  bool any_room = false;
  for (std::size_t i = 0; i < replicas_.size(); ++i) {
    const State& r = replicas_[i];
    any_room = any_room || (r.healthy && !(exclude && *exclude == i) &&
                            r.outstanding < static_cast<int>(r.window));
  }
  for (std::size_t i = 0; i < replicas_.size(); ++i) {
    const State& r = replicas_[i];
    if (!r.healthy || (exclude && *exclude == i) ||
        (any_room && r.outstanding >= static_cast<int>(r.window))) {
      continue;
    }
    if (r.outstanding < best) {
      best = r.outstanding;
      ties_.clear();
    }
    if (r.outstanding == best) {
      ties_.push_back(i);
    }
  }
  if (ties_.empty()) {
    return std::nullopt;
  }
  if (ties_.size() == 1) {
    return ties_.front();
  }
  auto pick = static_cast<std::size_t>(rng.uniform() * static_cast<double>(ties_.size()));
  return ties_[std::min(pick, ties_.size() - 1)];
}

void ReplicaSet::begin(std::size_t replica) {
  ++replicas_[replica].outstanding;
}

void ReplicaSet::end(std::size_t replica) {
  State& r = replicas_[replica];
  if (r.outstanding > 0) {
    --r.outstanding;
  }
}

void ReplicaSet::on_answer(std::size_t replica) {
  State& r = replicas_[replica];
  r.window = std::min(kMaxWindow, r.window + 1.0 / r.window);
  r.timeouts_in_a_row = 0;
}

bool ReplicaSet::on_timeout(std::size_t replica) {
  State& r = replicas_[replica];
  r.window = std::max(1.0, r.window / 2);
  return ++r.timeouts_in_a_row >= kTimeoutsToUnhealthy;
}

std::size_t ReplicaSet::capacity() const {
  std::size_t total = 0;
  for (const State& r : replicas_) {
    total += r.healthy ? static_cast<std::size_t>(r.window) : 0;
  }
  return total;
}

bool ReplicaSet::mark_unhealthy(std::size_t replica) {
  const bool changed = replicas_[replica].healthy;
  replicas_[replica].healthy = false;
  return changed;
}

bool ReplicaSet::mark_healthy(std::size_t replica) {
  State& r = replicas_[replica];
  const bool changed = !r.healthy;
  r.healthy = true;
  if (changed) {
    r.window = kInitialWindow;
    r.timeouts_in_a_row = 0;
  }
  return changed;
}

std::size_t ReplicaSet::healthy_count() const {
  return static_cast<std::size_t>(
      std::count_if(replicas_.begin(), replicas_.end(), [](const State& r) { return r.healthy; }));
}

std::vector<std::size_t> ReplicaSet::unhealthy() const {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < replicas_.size(); ++i) {
    if (!replicas_[i].healthy) {
      out.push_back(i);
    }
  }
  return out;
}

}  // namespace llmd::epp::predictor_client
