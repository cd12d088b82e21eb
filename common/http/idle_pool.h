#pragma once
// IdlePool: kept-alive connections waiting for their next request, by origin ("host:port").
// The client core (client_core.cc) lends one to an exchange and takes it back once its
// response was read to the end on a connection the server keeps open. A handshake per request
// would cost a round trip, and at a few hundred requests/s leave enough TIME_WAIT sockets to
// run out of ephemeral ports towards one server.
//
// Generic in the connection type (movable; destroying it closes it) so that its rules are
// tested without sockets; time is passed in. Thread-safe: one mutex, held for a vector or map
// operation, never across I/O; connections are closed outside it.
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <limits>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace llmd::http {

// Whether an idle connection's socket may be reused: open, with nothing to read (a server that
// closed it or wrote something unasked makes it unusable). One non-blocking recv.
inline bool still_open(int fd) {
  char byte = 0;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

template <typename Conn>
class IdlePool {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::size_t max_idle_per_origin = 64;
    std::size_t max_idle = std::numeric_limits<std::size_t>::max();  // over all origins
    // A connection idle this long is closed instead of lent (0 = kept until lent or stop()).
    std::chrono::milliseconds idle_timeout{0};
  };

  explicit IdlePool(Options options) : options_(options) {}

  // Moves into `out` the most recently kept connection to `origin` that is not expired and
  // passes `fit` (e.g. a liveness probe, called outside the lock); false when there is none.
  // Unfit ones are closed on the way.
  template <typename Fit>
  bool take(const std::string& origin, Clock::time_point now, Fit&& fit, Conn& out) {
    while (true) {
      Idle candidate;
      {
        std::lock_guard lock(mu_);
        auto it = idle_.find(origin);
        if (it == idle_.end() || it->second.empty()) {
          return false;
        }
        candidate = std::move(it->second.back());
        it->second.pop_back();
        --total_;
      }
      if (expired(candidate, now) || !fit(candidate.conn)) {
        continue;  // closed as `candidate` goes, outside the lock
      }
      out = std::move(candidate.conn);
      return true;
    }
  }

  // Keeps `conn` for reuse unless a limit is reached or the pool stopped (then it is closed).
  // Connections idle past the timeout are closed on the way, about once a second, so origins
  // that get no traffic keep no descriptors.
  void give_back(const std::string& origin, Conn conn, Clock::time_point now) {
    std::vector<Idle> closing;  // closed outside the lock
    std::lock_guard lock(mu_);
    if (options_.idle_timeout.count() > 0 && now - last_sweep_ >= std::chrono::seconds(1)) {
      sweep_locked(now, closing);
    }
    if (stopped_ || total_ >= options_.max_idle) {
      return;
    }
    auto& list = idle_[origin];
    if (list.size() < options_.max_idle_per_origin) {
      list.push_back({std::move(conn), now});
      ++total_;
    }
  }

  // Closes every idle connection; with `for_good`, later ones are closed as they come back.
  void clear(bool for_good = false) {
    std::unordered_map<std::string, std::vector<Idle>> closing;
    std::lock_guard lock(mu_);
    stopped_ = stopped_ || for_good;
    closing.swap(idle_);
    total_ = 0;
  }

  std::size_t idle() const {
    std::lock_guard lock(mu_);
    return total_;
  }

 private:
  struct Idle {
    Conn conn;
    Clock::time_point since;
  };

  bool expired(const Idle& i, Clock::time_point now) const {
    return options_.idle_timeout.count() > 0 && now - i.since >= options_.idle_timeout;
  }

  void sweep_locked(Clock::time_point now, std::vector<Idle>& closing) {
    for (auto it = idle_.begin(); it != idle_.end();) {
      auto& list = it->second;  // oldest first
      std::size_t keep_from = 0;
      while (keep_from < list.size() && expired(list[keep_from], now)) {
        closing.push_back(std::move(list[keep_from]));
        ++keep_from;
      }
      list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(keep_from));
      total_ -= keep_from;
      it = list.empty() ? idle_.erase(it) : std::next(it);
    }
    last_sweep_ = now;
  }

  const Options options_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, std::vector<Idle>> idle_;  // guarded by mu_
  std::size_t total_ = 0;                                    // guarded by mu_
  Clock::time_point last_sweep_{};                           // guarded by mu_
  bool stopped_ = false;                                     // guarded by mu_
};

}  // namespace llmd::http
