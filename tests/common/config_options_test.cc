// Options: alias env names (the reference images' UVICORN_WORKERS, HTTP_TIMEOUT) and bad values
// named by the variable they came from, even when a flag overrides it.
#include "common/config/options.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <regex>

namespace llmd::config {
namespace {

// Sets the variables for one test and unsets them after.
class ScopedEnv {
 public:
  ScopedEnv(std::initializer_list<std::pair<std::string, std::string>> vars) : vars_(vars) {
    for (const auto& [k, v] : vars_) {
      ::setenv(k.c_str(), v.c_str(), 1);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (const auto& [k, v] : vars_) {
      ::unsetenv(k.c_str());
    }
  }

 private:
  std::vector<std::pair<std::string, std::string>> vars_;
};

std::unique_ptr<Options> workers_option() {
  auto o = std::make_unique<Options>("t", "test");
  o->add("workers", "LLMD_T_WORKERS", "4", "threads", {"LLMD_T_UVICORN_WORKERS"});
  return o;
}

bool parse(Options& o, std::vector<std::string> args) {
  std::vector<char*> argv{const_cast<char*>("t")};
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  return o.parse(static_cast<int>(argv.size()), argv.data());
}

// The message of the std::invalid_argument `f` throws ("" when it does not).
template <class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigOptions, AnAliasEnvIsReadWhenThePrimaryIsUnset) {
  ScopedEnv env({{"LLMD_T_UVICORN_WORKERS", "28"}});
  auto o = workers_option();
  ASSERT_TRUE(parse(*o, {}));
  EXPECT_EQ(o->integer("workers", 1, 256), 28);
  EXPECT_EQ(o->env_names(), (std::set<std::string>{"LLMD_T_UVICORN_WORKERS", "LLMD_T_WORKERS"}));
  const std::string help = std::regex_replace(o->help(), std::regex(R"(\s+)"), " ");
  EXPECT_NE(help.find("(env LLMD_T_WORKERS) (or env LLMD_T_UVICORN_WORKERS)"), std::string::npos);
}

TEST(ConfigOptions, ThePrimaryEnvWinsAndTheFlagWinsOverBoth) {
  ScopedEnv env({{"LLMD_T_WORKERS", "2"}, {"LLMD_T_UVICORN_WORKERS", "28"}});
  auto o = workers_option();
  ASSERT_TRUE(parse(*o, {}));
  EXPECT_EQ(o->integer("workers", 1, 256), 2);
  auto f = workers_option();
  ASSERT_TRUE(parse(*f, {"--workers", "3"}));
  EXPECT_EQ(f->integer("workers", 1, 256), 3);
}

TEST(ConfigOptions, ABadValueNamesTheVariableItCameFrom) {
  ScopedEnv env({{"LLMD_T_UVICORN_WORKERS", "bogus"}});
  auto o = workers_option();
  ASSERT_TRUE(parse(*o, {}));
  EXPECT_EQ(message_of([&] { o->integer("workers", 1, 256); }),
            "--workers / LLMD_T_UVICORN_WORKERS: expected an integer, got 'bogus'");
}

TEST(ConfigOptions, ABadValueIsReportedEvenWhenAFlagOverridesIt) {
  ScopedEnv env({{"LLMD_T_WORKERS", "bogus"}});
  auto o = workers_option();
  ASSERT_TRUE(parse(*o, {"--workers", "3"}));
  EXPECT_EQ(message_of([&] { o->integer("workers", 1, 256); }),
            "--workers / LLMD_T_WORKERS: expected an integer, got 'bogus'");
  ScopedEnv flag_env({{"LLMD_T_FLAG", "maybe"}});
  Options b("t", "test");
  b.add("ensemble", "LLMD_T_FLAG", "true", "a switch");
  ASSERT_TRUE(parse(b, {"--ensemble", "false"}));
  EXPECT_NE(message_of([&] { b.boolean("ensemble"); }).find("LLMD_T_FLAG"), std::string::npos);
}

TEST(ConfigOptions, ParseBoolean) {
  EXPECT_EQ(parse_boolean("TRUE"), true);
  EXPECT_EQ(parse_boolean("off"), false);
  EXPECT_EQ(parse_boolean("2"), std::nullopt);
}

}  // namespace
}  // namespace llmd::config
