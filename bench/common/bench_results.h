#pragma once
// Result files of the benchmarks that keep one row per label (e.g. "before" and "after" runs of
// one change in one table): <name>.json holds {"runs": [...]}.
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace llmd::bench {

// Adds `row` to the runs in `json_path` (a run with the same "label" is replaced; an unreadable
// file starts over), writes the file and returns every run.
inline nlohmann::json save_labelled_run(const std::string& json_path, const nlohmann::json& row) {
  using Json = nlohmann::json;
  std::filesystem::create_directories(std::filesystem::path(json_path).parent_path());
  Json rows = Json::array();
  if (std::ifstream in(json_path); in) {
    try {
      // Named: a range-for over a member of a temporary would dangle (C++20).
      const Json old = Json::parse(in);
      for (const auto& r : old.at("runs")) {
        if (r.value("label", "") != row.value("label", "")) {
          rows.push_back(r);
        }
      }
    } catch (const std::exception&) {
      rows = Json::array();
    }
  }
  rows.push_back(row);
  std::ofstream(json_path) << Json{{"runs", rows}}.dump(2) << "\n";
  return rows;
}

// The command line as given ("build/bench/x --a b"), so that a result file names what made it.
inline std::string command_line(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.find_first_of(" \t'\"") != std::string::npos) {
      a = "'" + a + "'";
    }
    out += (i == 0 ? "" : " ") + a;
  }
  return out;
}

}  // namespace llmd::bench
