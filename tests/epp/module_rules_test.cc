// The module rules of epp/ (each folder one library, README "Layout"): the core folders include
// no transport (Beast/Asio, nghttp2, protobuf, gRPC), directly or through any project header
// they include, and no two folders depend on each other (the folder graph has no cycle). Read
// from the source tree, so a violation fails here before it shows up as a link-order puzzle.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "tests/support/process.h"

namespace {

namespace fs = std::filesystem;

// The transport-free folders: what the simulator, the tests and both ingresses share.
const std::set<std::string> kCoreFolders = {"attributes", "config",    "datastore",  "features",
                                            "feedback",   "interface", "objectives", "plugins",
                                            "queue",      "request",   "routing",    "scheduler"};

bool is_transport_header(const std::string& include) {
  static const std::regex kTransport(
      R"(^(boost/beast|boost/asio|nghttp2/|google/protobuf/|grpc/|grpcpp/|grpc\+\+/).*|.*\.pb\.h$)");
  return std::regex_match(include, kTransport);
}

struct Include {
  std::string path;  // as written
  bool quoted = false;
};

std::vector<Include> includes_of(const fs::path& file) {
  static const std::regex kInclude(R"(^\s*#\s*include\s*([<"])([^">]+)[">])");
  std::vector<Include> out;
  std::ifstream in(file);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, kInclude)) {
      out.push_back({m[2].str(), m[1].str() == "\""});
    }
  }
  return out;
}

// "epp/<folder>/..." -> folder; files directly in epp/ and outside epp/ -> nullopt.
std::optional<std::string> epp_folder(const std::string& relative) {
  if (!relative.starts_with("epp/")) {
    return std::nullopt;
  }
  const auto slash = relative.find('/', 4);
  if (slash == std::string::npos) {
    return std::nullopt;
  }
  return relative.substr(4, slash - 4);
}

class ModuleChecker {
 public:
  explicit ModuleChecker(fs::path root) : root_(std::move(root)) {}

  std::vector<std::string> violations() {
    std::vector<std::string> out;
    std::map<std::string, std::map<std::string, std::string>> folder_edges;  // a -> b -> example
    for (const auto& entry : fs::recursive_directory_iterator(root_ / "epp")) {
      const auto ext = entry.path().extension();
      if (!entry.is_regular_file() || (ext != ".h" && ext != ".cc")) {
        continue;
      }
      const std::string rel = fs::relative(entry.path(), root_).generic_string();
      const auto folder = epp_folder(rel);
      if (!folder) {
        continue;
      }
      for (const Include& inc : includes_of(entry.path())) {
        if (const auto to = epp_folder(inc.path); inc.quoted && to && *to != *folder) {
          folder_edges[*folder].emplace(*to, rel + " includes " + inc.path);
        }
      }
      if (kCoreFolders.count(*folder)) {
        std::set<std::string> seen;
        if (auto chain = transport_chain(rel, seen)) {
          out.push_back("core folder " + *folder + " reaches a transport header: " + *chain);
        }
      }
    }
    for (auto& cycle : folder_cycles(folder_edges)) {
      out.push_back(std::move(cycle));
    }
    return out;
  }

 private:
  // "a.h -> b.h -> <boost/asio.hpp>" when `rel` reaches a transport header, else nullopt.
  std::optional<std::string> transport_chain(const std::string& rel, std::set<std::string>& seen) {
    if (!seen.insert(rel).second) {
      return std::nullopt;
    }
    for (const Include& inc : includes_of(root_ / rel)) {
      if (is_transport_header(inc.path)) {
        return rel + " -> <" + inc.path + ">";
      }
      if (inc.quoted && fs::exists(root_ / inc.path)) {
        if (auto rest = transport_chain(inc.path, seen)) {
          return rel + " -> " + *rest;
        }
      }
    }
    return std::nullopt;
  }

  // Every cycle of the folder graph, found by depth-first search, with one include per edge.
  static std::vector<std::string> folder_cycles(
      const std::map<std::string, std::map<std::string, std::string>>& edges) {
    std::vector<std::string> out;
    std::set<std::string> done;
    std::vector<std::string> stack;
    std::function<void(const std::string&)> visit = [&](const std::string& at) {
      stack.push_back(at);
      if (auto it = edges.find(at); it != edges.end()) {
        for (const auto& [to, example] : it->second) {
          const auto pos = std::find(stack.begin(), stack.end(), to);
          if (pos != stack.end()) {
            std::string text = "folders depend on each other:";
            for (auto p = pos; p != stack.end(); ++p) {
              const std::string& next = (p + 1 == stack.end()) ? to : *(p + 1);
              text += " [" + edges.at(*p).at(next) + "]";
            }
            out.push_back(text);
          } else if (!done.count(to)) {
            visit(to);
          }
        }
      }
      stack.pop_back();
      done.insert(at);
    };
    for (const auto& [from, _] : edges) {
      if (!done.count(from)) {
        visit(from);
      }
    }
    return out;
  }

  fs::path root_;
};

TEST(ModuleRules, CoreFoldersIncludeNoTransportAndNoFoldersDependOnEachOther) {
  const auto found = ModuleChecker(LLMD_SOURCE_DIR).violations();
  for (const auto& v : found) {
    ADD_FAILURE() << v;
  }
}

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

// The checker itself: a planted tree with one violation of each kind is caught.
TEST(ModuleRules, CatchesATransportHeaderReachedThroughACommonHeader) {
  llmd::testing::TempDir dir;
  write(fs::path(dir.path()) / "common/net/io.h", "#include <boost/asio/io_context.hpp>\n");
  write(fs::path(dir.path()) / "epp/request/flow.h", "#include \"common/net/io.h\"\n");
  write(fs::path(dir.path()) / "epp/proxy/server.cc",
        "#include <boost/beast.hpp>\n");  // allowed there
  const auto found = ModuleChecker(fs::path(dir.path())).violations();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].find("epp/request/flow.h -> common/net/io.h -> <boost/asio/io_context.hpp>"),
            std::string::npos)
      << found[0];
}

TEST(ModuleRules, CatchesGeneratedProtobufAndGrpcHeaders) {
  llmd::testing::TempDir dir;
  write(fs::path(dir.path()) / "epp/scheduler/a.cc",
        "#include \"epp/extproc/external_processor.pb.h\"\n");
  write(fs::path(dir.path()) / "epp/queue/b.cc", "#include <grpcpp/grpcpp.h>\n");
  EXPECT_EQ(ModuleChecker(fs::path(dir.path())).violations().size(), 2u);
}

TEST(ModuleRules, CatchesTwoFoldersIncludingEachOther) {
  llmd::testing::TempDir dir;
  write(fs::path(dir.path()) / "epp/queue/gate.h", "#include \"epp/request/flow.h\"\n");
  write(fs::path(dir.path()) / "epp/request/flow.h", "#include \"epp/queue/gate.h\"\n");
  write(fs::path(dir.path()) / "epp/routing/rule.h",
        "#include \"epp/queue/gate.h\"\n");  // one way: fine
  const auto found = ModuleChecker(fs::path(dir.path())).violations();
  ASSERT_EQ(found.size(), 1u);
  EXPECT_NE(found[0].find("epp/queue/gate.h includes epp/request/flow.h"), std::string::npos)
      << found[0];
  EXPECT_NE(found[0].find("epp/request/flow.h includes epp/queue/gate.h"), std::string::npos)
      << found[0];
}

}  // namespace
