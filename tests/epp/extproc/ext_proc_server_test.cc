// ExtProcServer in process, with this test as the gateway: where a stream's scheduling
// continues when the predictions come back on the predictor client's own thread, with the
// server's own pool and on the EPP's I/O workers.
#include "epp/extproc/ext_proc_server.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "common/http/io_workers.h"
#include "tests/epp/extproc/buffered_exchange.h"
#include "tests/epp/extproc/pick_of_pod_a.h"

namespace llmd::epp::extproc {
namespace {

// Answers every pick from a thread of its own, as the predictor client's single I/O thread
// does, through the `resume` the stream gave; records which thread ran the continuation.
class PredictorThreadPort final : public SchedulingPort {
 public:
  ~PredictorThreadPort() override {
    for (auto& t : threads_) {
      t.join();
    }
  }
  SchedulingGenerationPtr generation() override { return generation_; }
  Route route(const SchedulingRequest&, const SchedulingGeneration&) override { return {}; }
  void pick_async(const SchedulingRequest&, const Route&, const SchedulingGeneration&, Rng&,
                  Resume resume, std::function<void(PickResult)> done) override {
    std::lock_guard lock(mu_);
    pick_worker = http::IoWorkers::current_context();
    threads_.emplace_back([this, resume, done] {
      {
        std::lock_guard lock(mu_);
        predictor_thread = std::this_thread::get_id();
      }
      resume([this, done] {
        {
          std::lock_guard lock(mu_);
          continuation_thread = std::this_thread::get_id();
          continuation_worker = http::IoWorkers::current_context();
        }
        done(testing::pick_of_pod_a());
      });
    });
  }
  void estimate_service_ms_async(const SchedulingRequest&, int64_t, Resume,
                                 std::function<void(double)> done) override {
    done(0);
  }

  std::mutex mu_;
  std::thread::id predictor_thread;     // guarded by mu_
  std::thread::id continuation_thread;  // guarded by mu_
  // The worker's loop the pick started on and the one it continued on (null: not a worker).
  const void* pick_worker = nullptr;          // guarded by mu_
  const void* continuation_worker = nullptr;  // guarded by mu_

 private:
  std::vector<std::thread> threads_;  // guarded by mu_
  SchedulingGenerationPtr generation_ = std::make_shared<const SchedulingGeneration>();
};

// One buffered completion through `server`, as a gateway sends it; the stream ends cleanly.
void pick_one(ExtProcServer& server) {
  testing::BufferedExchange x(grpc::CreateChannel("127.0.0.1:" + std::to_string(server.port()),
                                                  grpc::InsecureChannelCredentials()));
  ASSERT_TRUE(x.headers()) << "BUFFERED: the headers are answered at once";
  EXPECT_EQ(x.body(), "10.0.0.1:8000");
  EXPECT_TRUE(x.finish().ok());
}

ExtProcServerOptions local_options() {
  ExtProcServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  return options;
}

TEST(ExtProcServer, PredictionsFromThePredictorThreadContinueOnTheStreamsStrand) {
  PredictorThreadPort port;
  ExtProcServer server(local_options(), ExtProcServices{&port, nullptr, nullptr, nullptr});
  server.start();
  pick_one(server);
  server.shutdown(std::chrono::milliseconds(0));

  std::lock_guard lock(port.mu_);
  EXPECT_NE(port.predictor_thread, std::thread::id());
  EXPECT_NE(port.continuation_thread, std::thread::id());
  EXPECT_NE(port.continuation_thread, port.predictor_thread)
      << "the scheduling after the predictions ran on the predictor client's thread";
}

// On the EPP's workers the message that starts scheduling is handed to the stream's worker, so
// the pick (and its prediction call) starts there, and the predictions' answer, coming back on
// another thread, continues the stream on that same worker.
TEST(ExtProcServer, OnTheEppWorkersAStreamSchedulesAndContinuesOnItsWorker) {
  http::IoWorkers workers(2, "test-worker");  // outlives the server, as in the EPP
  workers.start();
  PredictorThreadPort port;
  ExtProcServerOptions options = local_options();
  options.workers = &workers;
  {
    ExtProcServer server(options, ExtProcServices{&port, nullptr, nullptr, nullptr});
    server.start();
    pick_one(server);
    pick_one(server);
    server.shutdown(std::chrono::milliseconds(0));
  }
  std::lock_guard lock(port.mu_);
  EXPECT_NE(port.pick_worker, nullptr) << "the pick started on gRPC's thread, not a worker";
  EXPECT_EQ(port.continuation_worker, port.pick_worker)
      << "the predictions' answer continued the stream on another thread";
}

}  // namespace
}  // namespace llmd::epp::extproc
