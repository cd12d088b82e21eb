// Booleans as vLLM's pydantic request models read them (lax mode): pydantic-core's
// str_as_bool / int_as_bool / float-as-int rules.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/json/lax_bool.h"

namespace llmd::json {
namespace {

using Json = nlohmann::json;

TEST(LaxBool, AcceptsWhatPydanticAccepts) {
  for (const char* text :
       {"true", "1", "1.0", R"("1")", R"("t")", R"("T")", R"("y")", R"("Y")", R"("on")", R"("ON")",
        R"("yes")", R"("Yes")", R"("true")", R"("TRUE")", R"("tRuE")"}) {
    EXPECT_EQ(lax_bool(Json::parse(text)), true) << text;
  }
  for (const char* text :
       {"false", "0", "0.0", "-0.0", R"("0")", R"("f")", R"("F")", R"("n")", R"("N")", R"("no")",
        R"("NO")", R"("off")", R"("Off")", R"("false")", R"("False")"}) {
    EXPECT_EQ(lax_bool(Json::parse(text)), false) << text;
  }
}

TEST(LaxBool, RefusesTheRest) {
  for (const char* text :
       {"null", "2", "-1", "0.5", "1.5", "18446744073709551615", R"("")", R"("maybe")",
        R"(" true")", R"("true ")", R"("01")", R"("1.0")", R"("yess")", "[]", "[true]", "{}"}) {
    EXPECT_EQ(lax_bool(Json::parse(text)), std::nullopt) << text;
  }
}

}  // namespace
}  // namespace llmd::json
