#include "common/http/router.h"

#include <string_view>
#include <utility>

namespace llmd::http {

namespace {

// "/a/b" -> {"a","b"}; "/" -> {""}. Empty segments are kept so "/a/" does not match "/a".
std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> out;
  if (!path.empty() && path.front() == '/') {
    path.remove_prefix(1);
  }
  while (true) {
    const auto slash = path.find('/');
    out.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) {
      break;
    }
    path.remove_prefix(slash + 1);
  }
  return out;
}

bool is_param(const std::string& segment) {
  return segment.size() >= 2 && segment.front() == '{' && segment.back() == '}';
}

template <typename Route>
bool matches(const Route& route, const std::vector<std::string_view>& parts) {
  if (route.segments.size() != parts.size()) {
    return false;
  }
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto& seg = route.segments[i];
    if (is_param(seg) ? parts[i].empty() : seg != parts[i]) {
      return false;
    }
  }
  return true;
}

// True when `a` is more specific than `b`: more literals, then the leftmost literal wins.
template <typename Route>
bool more_specific(const Route& a, const Route& b) {
  if (a.literal_count != b.literal_count) {
    return a.literal_count > b.literal_count;
  }
  for (std::size_t i = 0; i < a.segments.size(); ++i) {
    const bool pa = is_param(a.segments[i]);
    const bool pb = is_param(b.segments[i]);
    if (pa != pb) {
      return !pa;
    }
  }
  return false;
}

}  // namespace

void Router::add(std::string method, std::string pattern, Handler handler) {
  Route route;
  route.method = std::move(method);
  for (auto part : split_path(pattern)) {
    route.segments.emplace_back(part);
    if (!is_param(route.segments.back())) {
      ++route.literal_count;
    }
  }
  route.handler = std::move(handler);
  routes_.push_back(std::move(route));
}

Response Router::route(Request& request) const {
  std::string_view path = request.path;
  if (path.empty()) {
    path = std::string_view(request.target).substr(0, request.target.find('?'));
  }
  const auto parts = split_path(path);

  const Route* best = nullptr;
  std::string allow;
  for (const auto& route : routes_) {
    if (!matches(route, parts)) {
      continue;
    }
    if (route.method != request.method) {
      if (allow.find(route.method) == std::string::npos) {
        allow += allow.empty() ? route.method : ", " + route.method;
      }
      continue;
    }
    if (best == nullptr || more_specific(route, *best)) {
      best = &route;
    }
  }

  if (best == nullptr) {
    if (allow.empty()) {
      return Response::detail(404, "Not Found");
    }
    auto response = Response::detail(405, "Method Not Allowed");
    response.headers.push_back({"allow", allow});
    return response;
  }

  request.path_params.clear();
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const auto& seg = best->segments[i];
    if (is_param(seg)) {
      auto decoded = percent_decode(parts[i]);
      request.path_params.emplace_back(seg.substr(1, seg.size() - 2),
                                       decoded ? std::move(*decoded) : std::string(parts[i]));
    }
  }
  return best->handler(request);
}

}  // namespace llmd::http
