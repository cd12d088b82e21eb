// The rule by which a predictor takes a file the trainer publishes (ModelSync::should_take).
#include "predictor/model_sync.h"

#include <gtest/gtest.h>

namespace llmd::predictor {
namespace {

ModelIdentity id(int64_t version, std::string modified, std::string generation) {
  return ModelIdentity{version, std::move(modified), std::move(generation)};
}

TEST(ModelSyncRule, TakesTheFirstFileItSees) {
  EXPECT_TRUE(should_take(nullptr, id(1, "t1", "g1")));
  EXPECT_TRUE(should_take(nullptr, id(7, "t1", "")));
}

// A trainer that started without its model state publishes a new generation from version 1:
// the predictor holding version 28 of the old one takes it.
TEST(ModelSyncRule, ANewGenerationIsTakenWhateverItsVersion) {
  const ModelIdentity held = id(28, "t28", "old");
  EXPECT_TRUE(should_take(&held, id(1, "t1", "new")));
  EXPECT_TRUE(should_take(&held, id(28, "t28", "new"))) << "same version and time, other lineage";
  EXPECT_TRUE(should_take(&held, id(40, "t40", "new")));
}

TEST(ModelSyncRule, WithinAGenerationTheVersionDecides) {
  const ModelIdentity held = id(5, "t5", "g");
  EXPECT_FALSE(should_take(&held, id(5, "t5", "g")));
  // The same publish re-stamped (a restarted trainer reloads its ensemble files with a new
  // time): not downloaded again.
  EXPECT_FALSE(should_take(&held, id(5, "later", "g")));
  EXPECT_TRUE(should_take(&held, id(6, "t6", "g")));
  EXPECT_TRUE(should_take(&held, id(4, "t4", "g"))) << "the trainer's file is the truth";
}

// The reference trainer publishes no generation: any change of version or file time.
TEST(ModelSyncRule, WithoutGenerationsAnyChangeOfVersionOrTimeIsTaken) {
  const ModelIdentity held = id(5, "t5", "");
  EXPECT_FALSE(should_take(&held, id(5, "t5", "")));
  EXPECT_TRUE(should_take(&held, id(5, "t5b", "")));
  EXPECT_TRUE(should_take(&held, id(1, "t1", "")));
  EXPECT_TRUE(should_take(&held, id(9, "t9", "")));
}

// A local copy loaded at start has no known lineage (nor file time): the trainer's file
// replaces it once, then the generation rule applies.
TEST(ModelSyncRule, ALocalCopyOfUnknownLineageIsReplacedOnce) {
  const ModelIdentity local = id(5, "", "");
  EXPECT_TRUE(should_take(&local, id(5, "t5", "g")));
  const ModelIdentity synced = id(5, "t5", "g");
  EXPECT_FALSE(should_take(&synced, id(5, "t5", "g")));
}

}  // namespace
}  // namespace llmd::predictor
