// ColumnarPaths with explicit times: the fall back to strict, the retry once per interval, the
// reset on re-admission.
#include "epp/predictor_client/columnar_paths.h"

#include <gtest/gtest.h>

namespace llmd::epp::predictor_client {
namespace {

using namespace std::chrono_literals;
using Clock = ColumnarPaths::Clock;

const Clock::time_point kT0 = Clock::time_point(1h);

TEST(ColumnarPaths, ReplicasStartColumnarAndA404MakesThatOneStrict) {
  ColumnarPaths paths(2, 120s);
  EXPECT_TRUE(paths.use_columnar(0, kT0));
  EXPECT_TRUE(paths.use_columnar(1, kT0));
  EXPECT_TRUE(paths.not_served(0, kT0));
  EXPECT_FALSE(paths.not_served(0, kT0)) << "a second 404 of the same round changes nothing";
  EXPECT_FALSE(paths.columnar(0));
  EXPECT_TRUE(paths.columnar(1));
  EXPECT_FALSE(paths.use_columnar(0, kT0 + 1s));
  EXPECT_TRUE(paths.use_columnar(1, kT0 + 1s));
}

TEST(ColumnarPaths, AStrictReplicaGetsOneColumnarBatchPerRetryInterval) {
  ColumnarPaths paths(1, 120s);
  paths.not_served(0, kT0);
  EXPECT_FALSE(paths.use_columnar(0, kT0 + 119s));
  EXPECT_TRUE(paths.use_columnar(0, kT0 + 120s)) << "the retry";
  EXPECT_FALSE(paths.use_columnar(0, kT0 + 120s)) << "one batch, not every batch from then on";
  EXPECT_FALSE(paths.use_columnar(0, kT0 + 200s));
  // The retry found the reference predictor again: strict, the next retry an interval later.
  EXPECT_FALSE(paths.not_served(0, kT0 + 120s));
  EXPECT_FALSE(paths.columnar(0));
  EXPECT_FALSE(paths.use_columnar(0, kT0 + 239s));
  EXPECT_TRUE(paths.use_columnar(0, kT0 + 240s));
  // This one found our predictor: columnar for every batch.
  EXPECT_TRUE(paths.served(0));
  EXPECT_TRUE(paths.columnar(0));
  EXPECT_TRUE(paths.use_columnar(0, kT0 + 240s));
  EXPECT_TRUE(paths.use_columnar(0, kT0 + 241s));
  EXPECT_FALSE(paths.served(0)) << "served while columnar changes nothing";
}

TEST(ColumnarPaths, ReAdmissionResetsToColumnar) {
  ColumnarPaths paths(1, 120s);
  paths.not_served(0, kT0);
  EXPECT_TRUE(paths.reset(0));
  EXPECT_TRUE(paths.columnar(0));
  EXPECT_TRUE(paths.use_columnar(0, kT0 + 1s));
  EXPECT_FALSE(paths.reset(0));
  // Still the reference predictor: strict again at its first batch.
  EXPECT_TRUE(paths.not_served(0, kT0 + 1s));
  EXPECT_FALSE(paths.use_columnar(0, kT0 + 2s));
}

}  // namespace
}  // namespace llmd::epp::predictor_client
