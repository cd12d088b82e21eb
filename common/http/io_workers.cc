#include "common/http/io_workers.h"

#include <algorithm>
#include <optional>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <spdlog/spdlog.h>

#include "common/util/thread_name.h"

namespace llmd::http {

namespace asio = boost::asio;

namespace {
// Which worker this thread is: set once when a worker thread starts.
thread_local const IoWorkers* tl_workers = nullptr;
thread_local std::size_t tl_index = IoWorkers::npos;
thread_local asio::io_context* tl_context = nullptr;
}  // namespace

struct IoWorkers::Loop {
  // Concurrency hint 1: one thread runs it, so Asio skips the locking a shared loop needs.
  asio::io_context ioc{1};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
};

IoWorkers::IoWorkers(int count, std::string name) : name_(std::move(name)) {
  for (int i = 0; i < std::max(1, count); ++i) {
    loops_.push_back(std::make_unique<Loop>());
  }
}

IoWorkers::~IoWorkers() {
  stop();
}

asio::io_context& IoWorkers::at(std::size_t worker) const {
  return loops_.at(worker)->ioc;
}

void IoWorkers::start() {
  if (!threads_.empty()) {
    return;
  }
  for (std::size_t i = 0; i < loops_.size(); ++i) {
    Loop& loop = *loops_[i];
    loop.ioc.restart();
    loop.work.emplace(loop.ioc.get_executor());
    const std::string thread_name = name_ + "-" + std::to_string(i);
    threads_.push_back(named_thread(thread_name, [this, i, &loop, thread_name] {
      tl_workers = this;
      tl_index = i;
      tl_context = &loop.ioc;
      while (true) {
        try {
          loop.ioc.run();
          return;
        } catch (const std::exception& e) {
          // A handler's exception must not end the process; the loop goes on.
          spdlog::error("{}: handler threw: {}", thread_name, e.what());
        }
      }
    }));
  }
}

void IoWorkers::stop() {
  for (auto& loop : loops_) {
    loop->work.reset();
    loop->ioc.stop();
  }
  for (auto& t : threads_) {
    if (t.joinable()) {
      t.join();
    }
  }
  threads_.clear();
}

std::size_t IoWorkers::current() const {
  return tl_workers == this ? tl_index : npos;
}

asio::io_context* IoWorkers::current_context() {
  return tl_context;
}

}  // namespace llmd::http
