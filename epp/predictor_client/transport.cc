#include "epp/predictor_client/transport.h"

#include <future>
#include <stdexcept>

#include "common/http/async_client.h"

namespace llmd::epp::predictor_client {

TransportResponse Transport::exchange(std::size_t replica, std::string_view method,
                                      std::string_view path, const std::string& body,
                                      std::chrono::milliseconds timeout) {
  std::promise<TransportResponse> answer;
  auto got = answer.get_future();
  exchange_async(replica, method, path, body, timeout,
                 [&answer](TransportResponse r) { answer.set_value(std::move(r)); });
  return got.get();
}

namespace {

std::vector<http::Url> parse_targets(const std::vector<std::string>& replica_urls) {
  std::vector<http::Url> targets;
  for (const auto& url : replica_urls) {
    auto parsed = http::parse_url(url);
    if (!parsed) {
      throw std::invalid_argument("invalid predictor URL '" + url + "'");
    }
    targets.push_back(std::move(*parsed));
  }
  return targets;
}

}  // namespace

namespace {
http::AsyncHttpClient::Options client_options() {
  http::AsyncHttpClient::Options o;
  // Called from the EPP's proxy workers, a batch goes out and its answer comes back on the
  // caller's thread (io_workers.h); the owner keeps those workers running until the client
  // is gone.
  o.on_caller_worker = true;
  o.thread_name = "epp-predict-io";
  return o;
}
}  // namespace

HttpTransport::HttpTransport(const std::vector<std::string>& replica_urls)
    : client_(
          std::make_unique<http::AsyncHttpClient>(parse_targets(replica_urls), client_options())) {}

HttpTransport::~HttpTransport() = default;

void HttpTransport::exchange_async(std::size_t replica, std::string_view method,
                                   std::string_view path, const std::string& body,
                                   std::chrono::milliseconds timeout, ResponseCallback done) {
  client_->request(replica, method, path, body, timeout,
                   [done = std::move(done)](http::AsyncResponse r) {
                     if (r.status != 0) {
                       done(TransportResponse::ok(r.status, std::move(r.body)));
                     } else if (r.timed_out) {
                       done(TransportResponse::timeout(std::move(r.error)));
                     } else {
                       done(TransportResponse::failure(std::move(r.error)));
                     }
                   });
}

std::uint64_t HttpTransport::connections_opened(std::size_t replica) const {
  return client_->connections_opened(replica);
}

}  // namespace llmd::epp::predictor_client
