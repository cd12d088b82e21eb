#pragma once
// Incremental Server-Sent Events parser (the subset OpenAI-compatible servers use): events are
// separated by a blank line, `data:` lines of one event are joined with '\n', comment lines
// (':') and other fields are ignored, LF and CRLF line ends are accepted. Feed bytes as they
// arrive, in any split. Not thread-safe; one per response.
#include <functional>
#include <string>
#include <string_view>

namespace llmd::loadclient {

class SseParser {
 public:
  using OnEvent = std::function<void(std::string_view data)>;
  explicit SseParser(OnEvent on_event) : on_event_(std::move(on_event)) {}

  void feed(std::string_view bytes);
  // Dispatches a final event that was not followed by a blank line (end of stream).
  void finish();
  // Bytes buffered in an unterminated line (bounded by the caller's body limit).
  std::size_t pending() const { return line_.size(); }

 private:
  void on_line(std::string_view line);

  OnEvent on_event_;
  std::string line_;
  std::string data_;
  bool has_data_ = false;
};

}  // namespace llmd::loadclient
