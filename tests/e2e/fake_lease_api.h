#pragma once
// A fake Kubernetes API server that keeps coordination.k8s.io/v1 Leases in namespace "llm" the
// way the real one does: create (201; 409 AlreadyExists), get (404 when absent), update only at
// the resourceVersion read (409 Conflict when another write came in between), a new
// resourceVersion on every write. A client is known by its bearer token: partition(token)
// leaves that client's requests unanswered, as a network partition would, until heal(token).
// Runs on the project's streaming HTTP core (one I/O thread).
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/http/stream_server.h"
#include "tests/common/http_test_util.h"

namespace llmd::testing {

class FakeLeaseApi {
 public:
  using Json = nlohmann::json;
  static constexpr const char* kLeases = "/apis/coordination.k8s.io/v1/namespaces/llm/leases";

  FakeLeaseApi() {
    server_ = std::make_unique<http::testing::RunningStreamServer>(
        [this](std::size_t, http::Request&& req, http::ResponseStreamPtr stream) {
          handle(std::move(req), std::move(stream));
        });
  }
  // The held answers are dropped while the server still runs: a stream must not outlive its
  // server (its connection lives on one of the server's workers).
  ~FakeLeaseApi() {
    std::vector<http::ResponseStreamPtr> held;
    {
      std::lock_guard lock(mu_);
      held.swap(held_);
    }
  }
  uint16_t port() const { return server_->port(); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port()); }

  // Requests with "Authorization: Bearer <token>" get no answer from now on.
  void partition(const std::string& token) {
    std::lock_guard lock(mu_);
    partitioned_.insert("Bearer " + token);
  }
  void heal(const std::string& token) {
    std::lock_guard lock(mu_);
    partitioned_.erase("Bearer " + token);
  }
  // Another writer slips in before the next update from `token`: the Lease is written first with
  // `holder` for `seconds`, so that update carries a stale resourceVersion (409).
  void write_before_next_update(const std::string& token, const std::string& holder,
                                int seconds = 2) {
    std::lock_guard lock(mu_);
    intruders_["Bearer " + token] = {holder, seconds};
  }
  // The holder releases the Lease (no holder, as client-go's release writes it).
  void release(const std::string& name) {
    std::lock_guard lock(mu_);
    Json lease = leases_.at(name);
    lease["spec"].erase("holderIdentity");
    lease["spec"]["leaseDurationSeconds"] = 1;
    store(name, std::move(lease));
  }
  // The Lease's spec ("null" when absent).
  Json spec(const std::string& name) {
    std::lock_guard lock(mu_);
    auto it = leases_.find(name);
    return it == leases_.end() ? Json() : it->second["spec"];
  }
  // The holder after each accepted write, in order ("" = released).
  std::vector<std::string> holders() {
    std::lock_guard lock(mu_);
    return holders_;
  }
  int conflicts() {
    std::lock_guard lock(mu_);
    return conflicts_;
  }
  int unanswered() {
    std::lock_guard lock(mu_);
    return static_cast<int>(held_.size());
  }

 private:
  static Json status(int code, const std::string& reason, const std::string& message) {
    return Json{{"kind", "Status"}, {"apiVersion", "v1"}, {"status", "Failure"},
                {"code", code},     {"reason", reason},   {"message", message}};
  }

  void handle(http::Request&& req, http::ResponseStreamPtr stream) {
    std::lock_guard lock(mu_);
    if (partitioned_.count(std::string(req.header("authorization"))) > 0) {
      held_.push_back(std::move(stream));  // kept open, never answered
      return;
    }
    const std::string base = kLeases;
    Json body;
    if (!req.body.empty()) {
      try {
        body = Json::parse(req.body);
      } catch (const std::exception& e) {
        stream->respond(http::Response::json(400, status(400, "BadRequest", e.what())));
        return;
      }
    }
    if (req.method == "POST" && req.path == base) {
      const std::string name = body["metadata"].value("name", "");
      if (leases_.count(name) > 0) {
        ++conflicts_;
        stream->respond(http::Response::json(
            409, status(409, "AlreadyExists", "leases \"" + name + "\" already exists")));
        return;
      }
      stream->respond(http::Response::json(201, store(name, std::move(body))));
      return;
    }
    if (!req.path.starts_with(base + "/")) {
      stream->respond(http::Response::json(404, status(404, "NotFound", req.path)));
      return;
    }
    const std::string name = req.path.substr(base.size() + 1);
    auto it = leases_.find(name);
    if (it == leases_.end()) {
      stream->respond(
          http::Response::json(404, status(404, "NotFound", "leases \"" + name + "\" not found")));
      return;
    }
    if (req.method == "GET") {
      stream->respond(http::Response::json(200, it->second));
      return;
    }
    if (req.method == "PUT") {
      if (auto in = intruders_.find(std::string(req.header("authorization")));
          in != intruders_.end()) {
        Json other = it->second;
        other["spec"]["holderIdentity"] = in->second.first;
        other["spec"]["leaseDurationSeconds"] = in->second.second;
        intruders_.erase(in);
        store(name, std::move(other));
      }
      const std::string rv = body["metadata"].value("resourceVersion", "");
      if (rv != it->second["metadata"]["resourceVersion"].get<std::string>()) {
        ++conflicts_;
        stream->respond(
            http::Response::json(409, status(409, "Conflict",
                                             "Operation cannot be fulfilled on leases \"" + name +
                                                 "\": the object has been modified")));
        return;
      }
      stream->respond(http::Response::json(200, store(name, std::move(body))));
      return;
    }
    stream->respond(http::Response::json(405, status(405, "MethodNotAllowed", req.method)));
  }

  Json store(const std::string& name, Json object) {
    object["metadata"]["resourceVersion"] = std::to_string(++version_);
    object["metadata"]["namespace"] = "llm";
    holders_.push_back(object["spec"].value("holderIdentity", ""));
    leases_[name] = object;
    return object;
  }

  std::mutex mu_;
  std::map<std::string, Json> leases_;
  std::set<std::string> partitioned_;
  // token -> (holder, seconds) written before that client's next update
  std::map<std::string, std::pair<std::string, int>> intruders_;
  std::vector<http::ResponseStreamPtr> held_;
  std::vector<std::string> holders_;
  int version_ = 1000;
  int conflicts_ = 0;
  // Last: destroyed (stopped and joined) before the state its handler uses.
  std::unique_ptr<http::testing::RunningStreamServer> server_;
};

}  // namespace llmd::testing
