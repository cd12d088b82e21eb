#pragma once
// Idle keep-alive connections to the pods, by address: the proxy lends one to a request and
// takes it back once the pod's response was read to its end on a connection the pod keeps
// open. A handshake per request would cost a round trip, and at a few hundred requests/s leave
// enough TIME_WAIT sockets to run out of ephemeral ports towards one pod.
//
// Connections are kept as native descriptors, so one can move between the requests' strands.
// Thread-safe: one mutex, held for a vector operation, never across I/O.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace llmd::epp {

class UpstreamPool {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::size_t max_idle_per_pod = 64;
    std::size_t max_idle = 512;  // over all pods: idle descriptors are outside the client budget
    // Below the usual servers' keep-alive timeouts (uvicorn, which serves vLLM's API: 5 s), so a
    // pod rarely closes a connection just as it is reused.
    std::chrono::milliseconds idle_timeout{4000};
  };
  struct Connection {
    int fd = -1;
    bool ipv6 = false;
  };

  UpstreamPool();
  explicit UpstreamPool(Options options) : options_(options) {}
  ~UpstreamPool();  // closes every idle connection
  UpstreamPool(const UpstreamPool&) = delete;
  UpstreamPool& operator=(const UpstreamPool&) = delete;

  // The most recently used idle connection to `address` that is still open (no end of stream
  // or stray byte waiting on it), owned by the caller from now on; fd -1 when there is none.
  Connection take(const std::string& address, Clock::time_point now);
  // Keeps `c` for reuse (ownership passes to the pool) unless a limit is reached: then it is
  // closed. Connections idle past the timeout are closed on the way.
  void give_back(const std::string& address, Connection c, Clock::time_point now);

  std::size_t idle() const;
  // Whether `fd` looks reusable: open, with nothing to read (a pod that closed it or wrote
  // something unasked makes it unusable).
  static bool still_open(int fd);

 private:
  struct Idle {
    Connection connection;
    Clock::time_point since;
  };
  void expire_locked(Clock::time_point now, std::vector<int>& to_close);

  const Options options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<Idle>> idle_;  // oldest first; guarded by mu_
  std::size_t total_ = 0;                                     // guarded by mu_
  Clock::time_point last_sweep_{};                            // guarded by mu_
};

}  // namespace llmd::epp
