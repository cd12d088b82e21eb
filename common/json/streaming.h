#pragma once
// Parsing of a request body whose bulk is one list of a top-level object
// ({"entries": [ ... ], "batch_id": ...}) without holding that list as a document: a JSON
// document costs ~7x its text, so 16 concurrent 15-MB bulks used to need ~400 MiB of trees.
// The items of the list are built one at a time (each a small document), handed to a callback
// and dropped; every other field is kept in the returned document as parse_body would.
#include <cstddef>
#include <functional>
#include <optional>
#include <string_view>

#include "common/json/validation.h"

namespace llmd::json {

struct StreamedList {
  // The list field of the top-level object is an array (then it is absent from the returned
  // document; any other value of that field stays in the document as usual).
  bool present = false;
  std::size_t items = 0;  // items seen, all of them, whatever `keep_items`
};

struct ListCallbacks {
  // Called when the list opens, and when a later value of the same field replaces it (the last
  // one wins, as in parse_body): the consumer drops what it took from the list so far.
  std::function<void()> on_reset;
  // One complete item, index from 0. Not called for indices >= `keep_items` (only counted).
  std::function<void(std::size_t index, const Json& item)> on_item;
  std::size_t keep_items = static_cast<std::size_t>(-1);
};

// Like parse_body (same depth check, same `json_invalid` / `finite_number` errors), but the
// array value of the top-level object's field `list_field` is streamed through `callbacks`.
// On a syntax error `errors` holds only that error (anything the callbacks added is dropped)
// and the result is nullopt; the callbacks may have seen items before it.
std::optional<Json> parse_body_streaming_list(std::string_view body, std::string_view list_field,
                                              const ListCallbacks& callbacks, StreamedList& list,
                                              Errors& errors);

}  // namespace llmd::json
