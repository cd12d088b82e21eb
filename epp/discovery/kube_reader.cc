#include "epp/discovery/kube_reader.h"

#include <cctype>

namespace llmd::epp::discovery {
namespace {

using Json = nlohmann::json;

constexpr auto kIoTimeout = std::chrono::seconds(10);

}  // namespace

KubeReader::KubeReader(const KubeApiOptions& api, std::function<bool()> interrupted)
    : client_(api, interrupted), interrupted_(std::move(interrupted)) {}

int KubeReader::get(const std::string& target, std::chrono::seconds read_timeout,
                    const std::function<bool(std::string_view)>& on_body, std::string& error) {
  KubeTimeouts timeouts;
  timeouts.io = kIoTimeout;
  timeouts.body_read = read_timeout;
  return client_.request(KubeMethod::kGet, target, "", timeouts, on_body, error);
}

std::optional<Json> KubeReader::get_json(const std::string& target, int& status,
                                         std::string& error) {
  std::string body;
  status = get(
      target, kIoTimeout,
      [&](std::string_view b) {
        if (body.size() + b.size() > kMaxBody) {
          error = "answer larger than " + std::to_string(kMaxBody) + " bytes";
          return false;
        }
        body.append(b);
        return true;
      },
      error);
  if (status != 200 || !error.empty()) {
    return std::nullopt;
  }
  try {
    return Json::parse(body);
  } catch (const std::exception& e) {
    error = std::string("bad JSON: ") + e.what();
    return std::nullopt;
  }
}

KubeReader::WatchEnd KubeReader::watch(const std::string& target, std::chrono::seconds timeout,
                                       const std::function<bool(const Json& event)>& on_event,
                                       std::string& error) {
  const auto silence_bound = timeout + kWatchSilenceGrace;
  std::string pending;
  KubeTimeouts timeouts;
  timeouts.io = kIoTimeout;
  timeouts.body_read = silence_bound;
  WatchEnd end;
  bool timed_out = false;
  end.status = client_.request(
      KubeMethod::kGet, target + "&timeoutSeconds=" + std::to_string(timeout.count()), "", timeouts,
      [&](std::string_view bytes) {
        pending.append(bytes);
        for (auto nl = pending.find('\n'); nl != std::string::npos; nl = pending.find('\n')) {
          const std::string line = pending.substr(0, nl);
          pending.erase(0, nl + 1);
          if (trimmed(line).empty()) {
            continue;
          }
          Json event = Json::parse(line, nullptr, /*allow_exceptions=*/false);
          if (!event.is_object()) {
            error = "unreadable watch event";
            return false;
          }
          if (!on_event(event)) {
            return false;
          }
        }
        if (pending.size() > kMaxLine) {
          error = "watch event longer than " + std::to_string(kMaxLine) + " bytes";
          return false;
        }
        return !interrupted_();
      },
      error, &timed_out);
  // A timeout after the stream's header can only be the silence bound (the others end there).
  if (end.status == 200 && timed_out) {
    end.silent = true;
    error = "the watch sent nothing for " + std::to_string(silence_bound.count()) +
            " s (its timeoutSeconds " + std::to_string(timeout.count()) + " + " +
            std::to_string(kWatchSilenceGrace.count()) +
            " s), not even a bookmark, and was not closed";
  }
  return end;
}

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string string_at(const Json& j, const char* key) {
  if (!j.is_object()) {
    return {};
  }
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::string resource_version_of(const Json& object) {
  return object.is_object() ? string_at(object.value("metadata", Json::object()), "resourceVersion")
                            : std::string();
}

}  // namespace llmd::epp::discovery
