#pragma once
#include <optional>
#include <string>
#include <string_view>

namespace llmd::util {

// Writes `data` to `path` atomically: temp file in the same directory, fsync, rename. Readers
// see the old file or the new one, never a torn write. Throws std::runtime_error on failure.
void write_file_atomic(const std::string& path, std::string_view data);
// Whole file, or nullopt when it cannot be read.
std::optional<std::string> read_file(const std::string& path);
// Creates the directory (and parents) when missing.
void ensure_parent_dir(const std::string& path);

}  // namespace llmd::util
