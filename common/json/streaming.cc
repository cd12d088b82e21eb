#include "common/json/streaming.h"

#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace llmd::json {
namespace {

// nlohmann SAX consumer that builds documents itself: the top-level value as a DOM (as the
// library's own DOM parser would), except the list, whose items are built one at a time.
// Single-threaded, lives for one parse.
class ListStreamingBuilder {
 public:
  ListStreamingBuilder(std::string_view list_field, const ListCallbacks& callbacks,
                       StreamedList& list, Errors& errors)
      : list_field_(list_field), callbacks_(callbacks), list_(list), errors_(errors) {}

  Json take_root() { return std::move(root_); }

  // nlohmann::json_sax<Json>
  bool null() { return value(Json(nullptr)); }
  bool boolean(bool v) { return value(Json(v)); }
  bool number_integer(Json::number_integer_t v) { return value(Json(v)); }
  bool number_unsigned(Json::number_unsigned_t v) { return value(Json(v)); }
  bool number_float(Json::number_float_t v, const Json::string_t& /*text*/) {
    return value(Json(v));
  }
  bool string(Json::string_t& v) { return value(Json(std::move(v))); }
  bool binary(Json::binary_t& v) { return value(Json::binary(std::move(v))); }  // not in text
  bool start_object(std::size_t /*elements*/) {
    stack_.push_back(place(Json::object()));
    return true;
  }
  bool key(Json::string_t& k) {
    key_ = std::move(k);
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t /*elements*/) {
    if (at_root_object() && key_ == list_field_) {
      root_.erase(key_);  // an earlier non-list value of the field: the last one wins
      list_.present = true;
      list_.items = 0;
      if (callbacks_.on_reset) {
        callbacks_.on_reset();
      }
      stack_.push_back(nullptr);  // the list itself is not built
      return true;
    }
    stack_.push_back(place(Json::array()));
    return true;
  }
  bool end_array() { return close(); }
  template <class Exception>
  bool parse_error(std::size_t /*position*/, const std::string& /*token*/, const Exception& e) {
    errors_ = Errors();  // only the syntax error, as parse_body reports it
    if constexpr (std::is_base_of_v<nlohmann::json::parse_error, Exception>) {
      add_decode_error(e, errors_);
    } else {
      add_number_error(e, errors_);  // 1e999 and the like
    }
    return false;
  }

 private:
  bool at_root_object() const {
    return stack_.size() == 1 && stack_.back() == &root_ && root_.is_object();
  }

  // Puts `v` where the parser is (root, list item, array element or object member) and
  // returns its address, valid until its container changes (i.e. while it is open).
  Json* place(Json&& v) {
    if (stack_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    Json* top = stack_.back();
    if (top == nullptr) {
      item_ = std::move(v);
      return &item_;
    }
    if (top->is_array()) {
      top->push_back(std::move(v));
      return &top->back();
    }
    if (top == &root_ && key_ == list_field_ && list_.present) {
      // A later non-list value of the field replaces the streamed list.
      list_.present = false;
      list_.items = 0;
      if (callbacks_.on_reset) {
        callbacks_.on_reset();
      }
    }
    Json& slot = (*top)[key_];
    slot = std::move(v);
    return &slot;
  }

  bool value(Json&& v) {
    place(std::move(v));
    if (!stack_.empty() && stack_.back() == nullptr) {
      deliver();  // a scalar list item
    }
    return true;
  }

  bool close() {
    const Json* closed = stack_.back();
    stack_.pop_back();
    if (closed != nullptr && !stack_.empty() && stack_.back() == nullptr) {
      deliver();  // a container list item is complete
    }
    return true;
  }

  void deliver() {
    const std::size_t index = list_.items++;
    if (index < callbacks_.keep_items && callbacks_.on_item) {
      callbacks_.on_item(index, item_);
    }
    item_ = Json();
  }

  std::string_view list_field_;
  const ListCallbacks& callbacks_;
  StreamedList& list_;
  Errors& errors_;
  Json root_;
  Json item_;
  // Open containers, innermost last; nullptr = the streamed list.
  std::vector<Json*> stack_;
  std::string key_;
};

}  // namespace

std::optional<Json> parse_body_streaming_list(std::string_view body, std::string_view list_field,
                                              const ListCallbacks& callbacks, StreamedList& list,
                                              Errors& errors) {
  list = StreamedList{};
  if (const std::size_t at = find_excess_depth(body); at != std::string_view::npos) {
    add_depth_error(at, errors);
    return std::nullopt;
  }
  ListStreamingBuilder builder(list_field, callbacks, list, errors);
  if (!Json::sax_parse(body.begin(), body.end(), &builder)) {
    return std::nullopt;
  }
  return builder.take_root();
}

}  // namespace llmd::json
