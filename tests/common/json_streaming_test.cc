// parse_body_streaming_list against parse_body on the same text: the document without the list
// is the same, the items handed over are the list's items in order, and a body parse_body
// refuses gets the same error, so callers keep every 422 `detail` as it was.
#include "common/json/streaming.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace llmd::json {
namespace {

struct Streamed {
  std::optional<Json> root;
  StreamedList list;
  std::vector<Json> items;
  int resets = 0;
  Errors errors;
};

Streamed stream(const std::string& body, std::size_t keep = static_cast<std::size_t>(-1)) {
  Streamed s;
  ListCallbacks cb;
  cb.keep_items = keep;
  cb.on_reset = [&] {
    s.items.clear();
    ++s.resets;
  };
  cb.on_item = [&](std::size_t i, const Json& item) {
    EXPECT_EQ(i, s.items.size());
    s.items.push_back(item);
  };
  s.root = parse_body_streaming_list(body, "entries", cb, s.list, s.errors);
  return s;
}

// The whole-document reading of the same body, split the way the streaming one reports it.
void expect_same_as_document(const std::string& body) {
  SCOPED_TRACE(body);
  Errors doc_errors;
  auto doc = parse_body(body, doc_errors);
  Streamed s = stream(body);
  ASSERT_EQ(doc.has_value(), s.root.has_value());
  if (!doc) {
    EXPECT_EQ(doc_errors.body(), s.errors.body());
    return;
  }
  EXPECT_TRUE(s.errors.empty());
  Json expected_root = *doc;
  std::vector<Json> expected_items;
  const bool list = doc->is_object() && doc->contains("entries") && (*doc)["entries"].is_array();
  if (list) {
    for (const auto& item : (*doc)["entries"]) {
      expected_items.push_back(item);
    }
    expected_root.erase("entries");
  }
  EXPECT_EQ(list, s.list.present);
  EXPECT_EQ(expected_items.size(), s.list.items);
  EXPECT_EQ(expected_root, *s.root);
  ASSERT_EQ(expected_items.size(), s.items.size());
  for (std::size_t i = 0; i < expected_items.size(); ++i) {
    EXPECT_EQ(expected_items[i], s.items[i]) << "item " << i;
  }
}

TEST(JsonStreaming, SameDocumentItemsAndErrorsAsTheWholeDocumentParse) {
  const std::vector<std::string> bodies = {
      R"({"entries": [{"a": 1, "b": [1, 2, {"c": null}]}, {"a": -2.5e3}], "batch_id": "x:1"})",
      R"({"batch_id": "x:1", "entries": []})",
      R"({"entries": [1, "two", null, true, [3, [4]], {}], "z": {"entries": [9]}})",
      R"({"nested": {"entries": [1, 2]}, "list": [[1], {"k": "v"}]})",  // not the top-level one
      R"({})",
      R"({"entries": 5})",
      R"({"entries": {"a": 1}})",
      R"([{"entries": [1]}, 2])",  // not an object: kept whole
      R"("text")",
      R"(12345678901234567890)",
      R"({"entries": [1, 2], "entries": [3]})",   // repeated field: the last wins
      R"({"entries": [1, 2], "entries": null})",  // a later non-list value replaces the list
      R"({"entries": 7, "entries": [1]})",
      R"({"entries": [{"u": "\u00e9\ud83d\ude00"}], "s": "a\"b\\c"})",
      R"({"entries": [ {"a": 1} )",      // truncated
      R"({"entries": [1,]})",            // syntax error
      R"({"entries": [1]} trailing)",    // content after the value
      R"({"entries": [{"a": 1e999}]})",  // not a finite double
      "{\"entries\": [\"\xff\"]}",       // invalid UTF-8
      "",
  };
  for (const auto& body : bodies) {
    expect_same_as_document(body);
  }
}

TEST(JsonStreaming, TooDeepIsRefusedBeforeParsingLikeParseBody) {
  std::string deep = "{\"entries\": [";
  for (int i = 0; i < kMaxJsonDepth + 5; ++i) {
    deep += "[";
  }
  expect_same_as_document(deep);
}

TEST(JsonStreaming, ItemsPastKeepAreCountedNotHandedOver) {
  Streamed s = stream(R"({"entries": [{"a": 1}, {"a": 2}, {"a": 3}, 4, 5]})", 2);
  ASSERT_TRUE(s.root.has_value());
  EXPECT_TRUE(s.list.present);
  EXPECT_EQ(s.list.items, 5u);
  ASSERT_EQ(s.items.size(), 2u);
  EXPECT_EQ(s.items[1], Json({{"a", 2}}));
}

TEST(JsonStreaming, ResetOnRepeatedFieldAndSyntaxErrorDropsCallbackErrors) {
  Streamed s = stream(R"({"entries": [1, 2], "entries": [3]})");
  EXPECT_EQ(s.resets, 2);
  ASSERT_EQ(s.items.size(), 1u);
  EXPECT_EQ(s.items[0], Json(3));

  // Errors a consumer records per item are dropped when the body turns out to be malformed.
  Errors errors;
  Loc loc;
  ListCallbacks cb;
  cb.on_item = [&](std::size_t, const Json& item) {
    errors.add("item_error", loc, "bad item", item);
  };
  StreamedList list;
  EXPECT_FALSE(parse_body_streaming_list(R"({"entries": [1, 2, )", "entries", cb, list, errors));
  ASSERT_EQ(errors.details().size(), 1u);
  EXPECT_EQ(errors.details()[0]["type"], "json_invalid");
}

}  // namespace
}  // namespace llmd::json
