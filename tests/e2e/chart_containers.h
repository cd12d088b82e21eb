#pragma once
#include <memory>
// The sidecar containers of a chart as tests/e2e/charts/*.txt record them (that file's header
// gives the format), and their start on this machine: ports remapped to free ones, each
// emptyDir mount to a directory of the test, and nothing else changed.
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/process.h"

namespace llmd::testing {

struct ChartContainer {
  std::string name;
  std::string image;                 // ours: "trainer" or "predictor"
  std::vector<std::string> command;  // empty: the image's ENTRYPOINT
  int port = 0;
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> mounts;
  std::vector<std::string> probes;  // paths, GET on `port`
};

inline std::vector<ChartContainer> read_chart_containers(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    throw std::runtime_error("cannot read " + path);
  }
  std::vector<ChartContainer> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key.empty() || key[0] == '#') {
      continue;
    }
    if (key == "container") {
      out.emplace_back();
      words >> out.back().name;
      continue;
    }
    if (out.empty()) {
      throw std::runtime_error(path + ": '" + line + "' before any container");
    }
    ChartContainer& c = out.back();
    std::string rest;
    std::getline(words >> std::ws, rest);
    if (key == "image") {
      c.image = rest;
    } else if (key == "command") {
      std::istringstream args(rest);
      for (std::string a; args >> a;) {
        c.command.push_back(a);
      }
    } else if (key == "port") {
      c.port = std::stoi(rest);
    } else if (key == "env" && rest.find('=') != std::string::npos) {
      c.env.emplace_back(rest.substr(0, rest.find('=')), rest.substr(rest.find('=') + 1));
    } else if (key == "mount") {
      c.mounts.push_back(rest);
    } else if (key == "probe") {
      c.probes.push_back(rest);
    } else {
      throw std::runtime_error(path + ": unknown line '" + line + "'");
    }
  }
  return out;
}

// `text` with each chart port (a whole number) replaced by its free port and each mount path
// prefix by the test's directory for it.
inline std::string remap(std::string text, const std::map<int, int>& ports,
                         const std::map<std::string, std::string>& mounts) {
  for (const auto& [from, to] : ports) {
    text = std::regex_replace(text, std::regex("\\b" + std::to_string(from) + "\\b"),
                              std::to_string(to));
  }
  for (const auto& [from, to] : mounts) {
    if (text.rfind(from + "/", 0) == 0) {
      text = to + text.substr(from.size());
    }
  }
  return text;
}

// The container as the kubelet starts it: only its env (via env -i) plus a PATH holding our
// executables as the image does, ports and mounts remapped; `override` replaces one variable's
// value. `loopback`: the pod's address is 127.0.0.1 (0.0.0.0 in the chart's env and args
// becomes it, and the trainer, which the chart gives no address, is told it).
inline std::unique_ptr<Process> start_chart_container(
    const ChartContainer& c, const std::map<int, int>& ports,
    const std::map<std::string, std::string>& mounts,
    const std::pair<std::string, std::string>& override = {}, bool loopback = false) {
  auto address = [loopback](std::string v) {
    return loopback && v == "0.0.0.0" ? std::string("127.0.0.1") : v;
  };
  std::vector<std::string> args = {"-i"};
  for (auto [name, value] : c.env) {
    value = name == override.first ? override.second : address(remap(value, ports, mounts));
    args.push_back(name + "=" + value);
  }
  if (loopback && c.image == "trainer") {
    args.push_back("TRAINING_HOST=127.0.0.1");
  }
  if (c.image == "trainer" && c.command.empty()) {
    // The reference image binds 8000 whatever the chart's port; ours reads TRAINING_PORT
    // (default 8000), which stands for the remap here.
    args.push_back("TRAINING_PORT=" + std::to_string(ports.at(c.port)));
  }
  args.push_back("PATH=" + binary("uvicorn") + ":" + binary("predictor") + ":" + binary("trainer") +
                 ":/usr/bin:/bin");
  if (c.command.empty()) {
    args.push_back(binary(c.image + "/" + c.image));  // the image's ENTRYPOINT, no args
  }
  for (const auto& a : c.command) {
    args.push_back(address(remap(a, ports, mounts)));
  }
  return std::make_unique<Process>("/usr/bin/env", args);
}

}  // namespace llmd::testing
