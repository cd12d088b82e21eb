#pragma once
// Named threads, as `top -H`, `ps -L`, perf and gdb show them (Linux keeps 15 bytes).
#include <pthread.h>

#include <string>
#include <thread>
#include <utility>

namespace llmd {

inline void name_this_thread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
}

// A thread that names itself `name`, then runs `fn`.
template <typename Fn>
std::thread named_thread(std::string name, Fn fn) {
  return std::thread([name = std::move(name), fn = std::move(fn)]() mutable {
    name_this_thread(name);
    fn();
  });
}

}  // namespace llmd
