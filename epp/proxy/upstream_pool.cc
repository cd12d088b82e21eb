#include "epp/proxy/upstream_pool.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace llmd::epp {

UpstreamPool::UpstreamPool() : UpstreamPool(Options{}) {}

UpstreamPool::~UpstreamPool() {
  for (auto& [_, list] : idle_) {
    for (const auto& i : list) {
      ::close(i.connection.fd);
    }
  }
}

bool UpstreamPool::still_open(int fd) {
  char byte = 0;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

void UpstreamPool::expire_locked(Clock::time_point now, std::vector<int>& to_close) {
  for (auto it = idle_.begin(); it != idle_.end();) {
    auto& list = it->second;
    std::size_t keep_from = 0;
    while (keep_from < list.size() && now - list[keep_from].since >= options_.idle_timeout) {
      to_close.push_back(list[keep_from].connection.fd);
      ++keep_from;
    }
    list.erase(list.begin(), list.begin() + static_cast<std::ptrdiff_t>(keep_from));
    total_ -= keep_from;
    it = list.empty() ? idle_.erase(it) : std::next(it);
  }
  last_sweep_ = now;
}

UpstreamPool::Connection UpstreamPool::take(const std::string& address, Clock::time_point now) {
  while (true) {
    Idle candidate;
    {
      std::lock_guard lock(mu_);
      auto it = idle_.find(address);
      if (it == idle_.end() || it->second.empty()) {
        return {};
      }
      candidate = it->second.back();
      it->second.pop_back();
      --total_;
    }
    if (now - candidate.since < options_.idle_timeout && still_open(candidate.connection.fd)) {
      return candidate.connection;
    }
    ::close(candidate.connection.fd);
  }
}

void UpstreamPool::give_back(const std::string& address, Connection c, Clock::time_point now) {
  std::vector<int> to_close;
  {
    std::lock_guard lock(mu_);
    if (now - last_sweep_ >= std::chrono::seconds(1)) {
      expire_locked(now, to_close);  // pods that get no traffic keep no descriptors
    }
    auto& list = idle_[address];
    if (total_ < options_.max_idle && list.size() < options_.max_idle_per_pod) {
      list.push_back({c, now});
      ++total_;
      c.fd = -1;
    }
  }
  if (c.fd >= 0) {
    to_close.push_back(c.fd);
  }
  for (int fd : to_close) {
    ::close(fd);
  }
}

std::size_t UpstreamPool::idle() const {
  std::lock_guard lock(mu_);
  return total_;
}

}  // namespace llmd::epp
