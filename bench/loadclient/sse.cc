#include "bench/loadclient/sse.h"

namespace llmd::loadclient {

void SseParser::feed(std::string_view bytes) {
  std::size_t start = 0;
  while (start < bytes.size()) {
    const auto nl = bytes.find('\n', start);
    if (nl == std::string_view::npos) {
      line_.append(bytes.substr(start));
      return;
    }
    std::string_view piece = bytes.substr(start, nl - start);
    start = nl + 1;
    if (!line_.empty()) {
      line_.append(piece);
      std::string line = std::move(line_);
      line_.clear();
      on_line(line);
    } else {
      on_line(piece);
    }
  }
}

void SseParser::finish() {
  if (!line_.empty()) {
    std::string line = std::move(line_);
    line_.clear();
    on_line(line);
  }
  on_line({});
}

void SseParser::on_line(std::string_view line) {
  if (!line.empty() && line.back() == '\r') {
    line.remove_suffix(1);
  }
  if (line.empty()) {
    if (has_data_) {
      std::string data = std::move(data_);
      data_.clear();
      has_data_ = false;
      on_event_(data);
    }
    return;
  }
  if (line.front() == ':') {
    return;  // comment / keep-alive
  }
  const auto colon = line.find(':');
  const std::string_view field = line.substr(0, colon);
  if (field != "data") {
    return;
  }
  std::string_view value =
      colon == std::string_view::npos ? std::string_view{} : line.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') {
    value.remove_prefix(1);
  }
  if (has_data_) {
    data_ += '\n';
  }
  data_.append(value);
  has_data_ = true;
}

}  // namespace llmd::loadclient
