// LatestValue: several fields one writer stores together are read together, without a lock.
// The threaded test checks an invariant after a fixed amount of work, never timing.
#include "epp/datastore/latest_value.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

namespace llmd::epp {
namespace {

struct Triple {
  int64_t a = 0;
  int64_t b = 0;
  int64_t c = 0;
};

TEST(LatestValueTest, StartsWithTheInitialValueAndReturnsTheLatestStore) {
  LatestValue<Triple> value(Triple{7, 8, 9});
  EXPECT_EQ(value.load().c, 9);
  value.store({1, 2, 3});
  value.store({4, 5, 6});
  const Triple t = value.load();
  EXPECT_EQ(t.a, 4);
  EXPECT_EQ(t.b, 5);
  EXPECT_EQ(t.c, 6);
}

TEST(LatestValueTest, ReadersNeverSeeHalfOfAStoreNorGoBack) {
  LatestValue<Triple> value;
  std::atomic<bool> done{false};
  std::atomic<int64_t> torn{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 2; ++t) {
    readers.emplace_back([&] {
      int64_t last = 0;
      while (!done.load()) {
        const Triple p = value.load();
        if (p.b != -p.a || p.c != 3 * p.a || p.a < last) {
          ++torn;
        }
        last = p.a;
      }
    });
  }
  for (int64_t i = 1; i <= 200000; ++i) {
    value.store({i, -i, 3 * i});
  }
  done = true;
  for (auto& r : readers) {
    r.join();
  }
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(value.load().a, 200000);
}

}  // namespace
}  // namespace llmd::epp
