// The accept loop both servers share (common/http/listener.h): worker placement, the
// connection cap, the descriptor budget and close(), against blocking loopback clients.
#include "common/http/listener.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/http/descriptor_budget.h"
#include "common/http/io_workers.h"
#include "tests/common/http_test_util.h"

namespace llmd::http {
namespace {

using testing::connect_loopback;

// What the listener accepted: the slots, kept until the test lets them go.
class Accepted {
 public:
  Listener::OnAccept callback() {
    return [this](boost::asio::ip::tcp::socket, ConnectionSlot slot) {
      std::lock_guard lock(mu_);
      slots_.push_back(std::move(slot));
      cv_.notify_all();
    };
  }
  // Waits until `n` have been accepted (false after 10 s: a hang guard).
  bool wait_for(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return slots_.size() >= n; });
  }
  std::size_t count() {
    std::lock_guard lock(mu_);
    return slots_.size();
  }
  std::vector<std::size_t> workers() {
    std::lock_guard lock(mu_);
    std::vector<std::size_t> w;
    for (const auto& s : slots_) {
      w.push_back(s.worker());
    }
    return w;
  }
  void release(std::size_t i) {
    std::lock_guard lock(mu_);
    slots_.at(i) = ConnectionSlot();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ConnectionSlot> slots_;
};

class ListenerTest : public ::testing::Test {
 protected:
  void start(std::size_t max_connections, std::size_t descriptors = 1) {
    counts_ = std::make_shared<ConnectionCounts>(workers_.size(), max_connections);
    ListenerOptions o;
    o.descriptors_per_connection = descriptors;
    o.log_name = "listener-test";
    listener_ = std::make_unique<Listener>(o, workers_, counts_);
    workers_.start();
    listener_->start(accepted_.callback());
  }
  void TearDown() override {
    listener_.reset();
    for (int fd : fds_) {
      ::close(fd);
    }
    workers_.stop();
  }
  int connect() {
    const int fd = connect_loopback(listener_->port());
    fds_.push_back(fd);
    return fd;
  }

  IoWorkers workers_{3, "listener-test"};
  std::shared_ptr<ConnectionCounts> counts_;
  std::unique_ptr<Listener> listener_;
  Accepted accepted_;
  std::vector<int> fds_;
};

TEST_F(ListenerTest, ConnectionsGoToTheWorkerWithTheFewest) {
  start(0);
  for (std::size_t i = 0; i < 6; ++i) {
    ASSERT_GE(connect(), 0);
    ASSERT_TRUE(accepted_.wait_for(i + 1));
  }
  EXPECT_EQ(accepted_.workers(), (std::vector<std::size_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(counts_->open_on(0) + counts_->open_on(1) + counts_->open_on(2), 6u);
  accepted_.release(4);
  EXPECT_EQ(counts_->open_on(1), 1u);
  EXPECT_EQ(counts_->least_loaded(), 1u);
}

TEST_F(ListenerTest, AtTheCapTheNextConnectionWaitsUntilOneCloses) {
  start(1);
  ASSERT_GE(connect(), 0);
  ASSERT_TRUE(accepted_.wait_for(1));
  ASSERT_GE(connect(), 0);  // completed by the kernel: it waits in the backlog
  // Not accepted while the first is open (a negative check can only pass falsely, not fail).
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(accepted_.count(), 1u);
  accepted_.release(0);
  EXPECT_TRUE(accepted_.wait_for(2));
  EXPECT_EQ(counts_->open_on(0) + counts_->open_on(1) + counts_->open_on(2), 1u);
}

TEST_F(ListenerTest, AConnectionHoldsItsDescriptorsUntilItsSlotGoes) {
  auto& budget = DescriptorBudget::process();
  const std::size_t before = budget.held();
  start(0, 3);
  ASSERT_GE(connect(), 0);
  ASSERT_TRUE(accepted_.wait_for(1));
  // The next accept has taken its 3 already: 6 while it waits.
  EXPECT_GE(budget.held(), before + 3);
  accepted_.release(0);
  listener_->close();  // the waiting accept's share is back when it returns
  EXPECT_EQ(budget.held(), before);
}

TEST_F(ListenerTest, AfterCloseNothingIsAcceptedAndThePortRefuses) {
  start(0);
  const uint16_t port = listener_->port();
  listener_->close();
  listener_->close();  // idempotent
  EXPECT_EQ(connect_loopback(port), -1);
  EXPECT_EQ(accepted_.count(), 0u);
  EXPECT_EQ(counts_->held(), 0u);
}

TEST(ListenerBind, APortInUseThrowsWithTheSystemsReason) {
  IoWorkers workers(1, "listener-bind");
  auto counts = std::make_shared<ConnectionCounts>(1, 0);
  Listener first(ListenerOptions{}, workers, counts);
  ListenerOptions o;
  o.port = first.port();
  try {
    Listener second(o, workers, counts);
    // SO_REUSEADDR does not let two listeners share a port on Linux.
    ADD_FAILURE() << "a second listener bound port " << o.port;
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("use"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace llmd::http
