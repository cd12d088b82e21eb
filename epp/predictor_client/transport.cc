#include "epp/predictor_client/transport.h"

#include <stdexcept>

#include "common/http/client.h"

namespace llmd::epp::predictor_client {

// One HttpClient per replica, created on first use. Owned by one thread (see transport.h).
class HttpTransport::HttpChannel final : public Channel {
 public:
  explicit HttpChannel(const std::vector<Target>& targets)
      : targets_(targets), clients_(targets.size()) {}

  // Channel
  TransportResponse exchange(std::size_t replica, std::string_view method, std::string_view path,
                             const std::string& body, std::chrono::milliseconds timeout) override {
    if (replica >= targets_.size()) {
      return TransportResponse::failure("unknown replica");
    }
    const Target& target = targets_[replica];
    auto& client = clients_[replica];
    if (!client) {
      client = std::make_unique<http::HttpClient>(target.host, target.port, timeout);
    } else {
      client->set_timeout(timeout);
    }
    std::string full_path = target.base_path;
    full_path.append(path);
    const auto started = std::chrono::steady_clock::now();
    http::ClientResponse r = client->request(std::string(method), full_path, body);
    if (r.status != 0) {
      return TransportResponse::ok(r.status, std::move(r.body));
    }
    // HttpClient reports a timer expiry as Beast's "closed due to a timeout" error.
    const bool timed_out = r.error.find("timeout") != std::string::npos ||
                           std::chrono::steady_clock::now() - started >= timeout;
    return timed_out ? TransportResponse::timeout(std::move(r.error))
                     : TransportResponse::failure(std::move(r.error));
  }

 private:
  const std::vector<Target>& targets_;
  std::vector<std::unique_ptr<http::HttpClient>> clients_;
};

HttpTransport::HttpTransport(const std::vector<std::string>& replica_urls) {
  for (const auto& url : replica_urls) {
    auto parsed = http::parse_url(url);
    if (!parsed) {
      throw std::invalid_argument("invalid predictor URL '" + url + "'");
    }
    targets_.push_back(Target{parsed->host, parsed->port, parsed->base_path});
  }
}

HttpTransport::~HttpTransport() = default;

ChannelPtr HttpTransport::open_channel() { return std::make_unique<HttpChannel>(targets_); }

}  // namespace llmd::epp::predictor_client
