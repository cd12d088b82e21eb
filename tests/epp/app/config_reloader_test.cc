// Config reload by modification time: what is applied, what is refused and what is retried.
#include "epp/app/config_reloader.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include <gtest/gtest.h>

#include "tests/support/process.h"

namespace llmd::epp {
namespace {

namespace fs = std::filesystem;

class ConfigReloaderTest : public ::testing::Test {
 protected:
  // Writes the pool file with `pods` pods and moves its time forward, as an edit would (without
  // waiting for the file system's clock to tick).
  void write(int pods) {
    std::string text = "pool:\n  pods:\n";
    for (int i = 0; i < pods; ++i) {
      text += "  - {name: pod-" + std::to_string(i) +
              ", address: 127.0.0.1:" + std::to_string(9100 + i) + "}\n";
    }
    write_text(text + "plugins: []\nschedulingProfiles: []\n");
  }
  void write_text(const std::string& text) {
    std::ofstream(path_) << text;
    fs::last_write_time(path_, time_ += std::chrono::seconds(1));
  }

  ConfigReloader make() {
    return ConfigReloader(path_, PodSource::kConfig, load_epp_config(path_),
                          [this](const EppFileConfig& next) {
                            applied_.push_back(next.pods.size());
                            return refuse_;
                          });
  }

  llmd::testing::TempDir dir_;
  const std::string path_ = dir_.file("pool.yaml");
  fs::file_time_type time_ = fs::file_time_type::clock::now();
  std::vector<std::size_t> applied_;  // pod counts of the configs handed to apply
  std::string refuse_;                // what apply answers ("" = applied)
};

TEST_F(ConfigReloaderTest, AppliesAChangedFileOnce) {
  write(2);
  ConfigReloader reloader = make();
  EXPECT_FALSE(reloader.check()) << "nothing changed since start-up";
  write(3);
  EXPECT_TRUE(reloader.check());
  EXPECT_FALSE(reloader.check());
  EXPECT_EQ(applied_, std::vector<std::size_t>{3});
}

TEST_F(ConfigReloaderTest, AFileThatDoesNotParseIsRetriedUntilFixed) {
  write(2);
  ConfigReloader reloader = make();
  write_text("pool: {pods: [\n");
  EXPECT_FALSE(reloader.check());
  EXPECT_FALSE(reloader.check());
  EXPECT_TRUE(applied_.empty());
  write(4);
  EXPECT_TRUE(reloader.check());
  EXPECT_EQ(applied_, std::vector<std::size_t>{4});
}

TEST_F(ConfigReloaderTest, ARefusedPipelineIsNotRetriedUntilAFileChangesAgain) {
  write(2);
  ConfigReloader reloader = make();
  refuse_ = "unknown plugin type";
  write(3);
  EXPECT_FALSE(reloader.check());
  EXPECT_FALSE(reloader.check());
  EXPECT_EQ(applied_, std::vector<std::size_t>{3});
  refuse_.clear();
  write(5);
  EXPECT_TRUE(reloader.check());
  EXPECT_EQ(applied_, (std::vector<std::size_t>{3, 5}));
}

}  // namespace
}  // namespace llmd::epp
