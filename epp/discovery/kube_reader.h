#pragma once
// Reading the API server for the discovery loops (pods, InferencePool, InferenceObjectives):
// GET a JSON document or follow a watch stream (one JSON event per line) through a
// KubeApiClient, each on a fresh connection, on the calling thread, every read bounded (a LIST
// answer, a watch event). Plus the small helpers every loop needs (URL encoding, the string
// fields of an object).
//
// Threading: owned by one thread (the loop that uses it); `interrupted` is checked every 100 ms
// while it waits: when it turns true the connection is cancelled and the read fails with
// "interrupted".
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/discovery/kube_api_client.h"

namespace llmd::epp::discovery {

class KubeReader {
 public:
  static constexpr std::size_t kMaxBody = 64 * 1024 * 1024;  // one LIST answer
  static constexpr std::size_t kMaxLine = 4 * 1024 * 1024;   // one watch event

  KubeReader(const KubeApiOptions& api, std::function<bool()> interrupted);

  // GET `target`; `on_body(bytes)` gets the body as it arrives and returns false to stop
  // reading. Returns the status (0 on failure, `error` says why).
  int get(const std::string& target, std::chrono::seconds read_timeout,
          const std::function<bool(std::string_view)>& on_body, std::string& error);
  // GET `target` as one JSON document (at most kMaxBody bytes); nullopt unless 200 and JSON.
  std::optional<nlohmann::json> get_json(const std::string& target, int& status,
                                         std::string& error);
  // A watch that sends nothing at all (no event, no BOOKMARK, no chunk) for its timeoutSeconds
  // plus this is abandoned as silent. The bound is on silence, the time since the last byte,
  // not on the watch's age: a watch streaming events is never cut, and one that sends nothing
  // is already past the time the API server closes it at (timeoutSeconds counts from its
  // start), so it can only be a connection that died without a close (an API server or a
  // load balancer gone, a NAT entry dropped). 5 s covers the server's own lateness in closing.
  static constexpr std::chrono::seconds kWatchSilenceGrace{5};

  struct WatchEnd {
    int status = 0;       // the HTTP status (0: no answer)
    bool silent = false;  // abandoned: nothing came for timeoutSeconds + kWatchSilenceGrace
  };
  // GET a watch stream: `target` (with its query, watch=1 and the rest) gets
  // &timeoutSeconds=`timeout`. `on_event` gets each event (a JSON object per line) and returns
  // false to stop. A line that is not a JSON object or longer than kMaxLine ends the watch with
  // `error` set, as does silence (`silent` too).
  WatchEnd watch(const std::string& target, std::chrono::seconds timeout,
                 const std::function<bool(const nlohmann::json& event)>& on_event,
                 std::string& error);

 private:
  KubeApiClient client_;
  std::function<bool()> interrupted_;
};

// Percent-encoding of a URL query value (unreserved characters stay).
std::string url_encode(const std::string& s);
// The string `key` of a JSON object ("" when absent, not a string, or `j` is no object).
std::string string_at(const nlohmann::json& j, const char* key);
// metadata.resourceVersion of an object ("" when absent).
std::string resource_version_of(const nlohmann::json& object);

}  // namespace llmd::epp::discovery
