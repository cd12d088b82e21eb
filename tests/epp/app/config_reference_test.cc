// Keeps docs/configuration-reference.md in step with the code. The page is rendered here from
// - the EPP's flag table, as `epp --help` prints it (parse_epp_options), section by section;
// - the plugin registry (register_builtin_plugins): for every registered type, the parameters
//   its factory reads (the strict parameter reader names them when it refuses an unknown key),
//   each described by the row of the same name in the plugin's README parameter table.
// - the config file's start-up settings (epp/config/startup_settings.h: kStartupKeys).
// The test fails when the committed page differs from the rendered one, when a factory reads a
// parameter its README does not describe, or when a README describes one its factory does not
// read. A second test fails when one setting has two homes (a flag and a config key or plugin
// parameter of the same name), and when the EPP has more than 35 flags of its own. Regenerate
// the page with
//   LLMD_REGENERATE_DOCS=1 build/tests/epp/epp_config_reference_test
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "epp/app/epp_options.h"
#include "epp/config/startup_settings.h"
#include "epp/datastore/prefix_index.h"
#include "epp/plugins/register.h"
#include "epp/scheduler/handle.h"
#include "epp/scheduler/config_loader.h"
#include "epp/scheduler/registry.h"

namespace llmd::epp {
namespace {

namespace fs = std::filesystem;

const fs::path kSource = LLMD_SOURCE_DIR;
const fs::path kPage = kSource / "docs/configuration-reference.md";
constexpr const char* kRegenerate =
    "LLMD_REGENERATE_DOCS=1 build/tests/epp/epp_config_reference_test";

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(' ');
  if (b == std::string::npos) {
    return "";
  }
  return s.substr(b, s.find_last_not_of(' ') - b + 1);
}

std::string cell(std::string s) {  // a Markdown table cell
  std::string out;
  for (char c : s) {
    if (c == '|') {
      out += "\\|";
    } else {
      out += c;
    }
  }
  return out;
}

// ---- Flags: `epp --help`, parsed back into rows -------------------------------------------

struct FlagRow {
  std::string names;  // "--config" or "-v, --v"
  std::string env, default_value, help;
};
struct FlagSection {
  std::string title;
  std::vector<FlagRow> rows;
};

std::string epp_help() {
  std::stringstream out;
  std::streambuf* old = std::cout.rdbuf(out.rdbuf());
  std::vector<std::string> args{"epp", "--help"};
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  const auto parsed = parse_epp_options(static_cast<int>(argv.size()), argv.data());
  std::cout.rdbuf(old);
  EXPECT_FALSE(parsed.has_value()) << "--help must end the parse";
  return out.str();
}

// cxxopts' layout: a section starts with " <title> options:", an option line with two spaces
// and "-x, --name" or six spaces and "--name", then the description, wrapped onto lines
// indented to the description column.
std::vector<FlagSection> parse_help(const std::string& help) {
  std::vector<FlagSection> sections;
  std::istringstream in(help);
  std::string line;
  bool in_options = false;
  FlagRow* row = nullptr;
  const std::regex section_re(R"(^ (\S.*) options:$)");
  const std::regex option_re(
      R"(^(  -\S, |      )(--\S+)((?: arg| \[=arg\(=[^)]*\)\])?)(?:\s{2,}(.*))?$)");
  std::smatch m;
  while (std::getline(in, line)) {
    if (line.rfind("Usage:", 0) == 0) {
      in_options = true;
      sections.push_back({"", {}});
      continue;
    }
    if (!in_options || line.empty() || line.rfind("  epp [", 0) == 0) {
      row = nullptr;
      continue;
    }
    if (std::regex_match(line, m, section_re)) {
      sections.push_back({m[1].str(), {}});
      row = nullptr;
    } else if (std::regex_match(line, m, option_re)) {
      std::string names = m[2].str();
      if (m[1].str().size() > 2 && m[1].str()[2] == '-') {
        names = m[1].str().substr(2, 2) + ", " + names;
      }
      sections.back().rows.push_back({names, "", "", trim(m[4].str())});
      row = &sections.back().rows.back();
    } else if (row != nullptr) {
      row->help += (row->help.empty() ? "" : " ") + trim(line);
    } else {
      ADD_FAILURE() << "unexpected line in epp --help: '" << line << "'";
    }
  }
  // "<help> (env A) (or env B) (default: x)" -> help, env, default.
  const std::regex default_re(R"(^(.*) \(default: (.*)\)$)");
  const std::regex env_re(R"(^(.*?) \(env ([A-Z0-9_]+)\)((?: \(or env [A-Z0-9_]+\))*)$)");
  for (auto& s : sections) {
    for (auto& r : s.rows) {
      if (std::regex_match(r.help, m, default_re)) {
        r.default_value = m[2].str() == "\"\"" ? "" : m[2].str();  // cxxopts shows "" for none
        r.help = m[1].str();
      }
      if (std::regex_match(r.help, m, env_re)) {
        r.env = m[2].str();
        std::string more = m[3].str();
        r.help = m[1].str();
        const std::regex or_env(R"(\(or env ([A-Z0-9_]+)\))");
        for (auto it = std::sregex_iterator(more.begin(), more.end(), or_env);
             it != std::sregex_iterator(); ++it) {
          r.env += ", " + (*it)[1].str();
        }
      }
    }
  }
  return sections;
}

// ---- Plugins: the registry, each factory's parameters, each README's rows ---------------

struct ReadmeRow {
  std::string name;                 // the parameter
  std::set<std::string> all_names;  // with its aliases
  std::string line;                 // the row as the README has it
};
struct Readme {
  fs::path path;     // relative to the source tree
  std::string kind;  // "scorer", "filter", ... from the Type line
  bool has_table = false;
  std::vector<ReadmeRow> rows;
};

// Every plugin README, by the types its Type line names.
std::map<std::string, Readme> plugin_readmes() {
  std::map<std::string, Readme> out;
  const std::regex type_re(R"(^\*\*Type:\*\* `([a-z0-9-]+)` \(([^;)]*))");
  const std::regex also_re(R"(registered as (?:[^`]*)`([a-z0-9-]+)`)");
  const std::regex name_re(R"(`([A-Za-z0-9_]+)`)");
  for (const auto& e : fs::recursive_directory_iterator(kSource / "epp/plugins")) {
    if (e.path().filename() != "README.md") {
      continue;
    }
    Readme r;
    r.path = fs::relative(e.path(), kSource);
    std::vector<std::string> types;
    std::istringstream in(read_file(e.path()));
    std::string line, section;
    std::smatch m;
    while (std::getline(in, line)) {
      if (types.empty() && std::regex_search(line, m, type_re)) {
        types.push_back(m[1].str());
        r.kind = m[2].str();
        std::string rest = line;
        std::string next;
        if (std::getline(in, next)) {
          rest += " " + next;  // "also registered as" may wrap
        }
        if (std::regex_search(rest, m, also_re)) {
          types.push_back(m[1].str());
        }
        line = next;
      }
      if (line.rfind("## ", 0) == 0) {
        section = line.substr(3);
        continue;
      }
      if (section != "Parameters" || line.rfind("| ", 0) != 0) {
        continue;
      }
      r.has_table = true;
      if (line.rfind("| name ", 0) == 0 || line.rfind("|---", 0) == 0) {
        continue;
      }
      const std::string first = line.substr(2, line.find(" |", 2) - 2);
      ReadmeRow row;
      row.line = line;
      for (auto it = std::sregex_iterator(first.begin(), first.end(), name_re);
           it != std::sregex_iterator(); ++it) {
        if (row.name.empty()) {
          row.name = (*it)[1].str();
        }
        row.all_names.insert((*it)[1].str());
      }
      r.rows.push_back(row);
    }
    for (const auto& t : types) {
      out[t] = r;
    }
  }
  return out;
}

// The parameters a factory reads: the strict reader refuses an unknown key and lists the
// known ones. nullopt (and `error` set) when the factory answers otherwise.
std::optional<std::set<std::string>> factory_parameters(const PluginFactory& f,
                                                        std::string& error) {
  PrefixIndex index;
  Handle handle{index, nullptr, [](std::string_view) { return std::nullopt; }, nullptr};
  const nlohmann::json probe = {{"llmdReferenceProbe", 0}};
  const PluginOrError r = f("probe", probe, handle);
  static const std::regex known_re(R"(unknown parameter 'llmdReferenceProbe' \(known: (.*)\)$)");
  std::smatch m;
  if (r.plugin != nullptr || !std::regex_search(r.error, m, known_re)) {
    error = r.plugin != nullptr ? "accepted an unknown parameter" : r.error;
    return std::nullopt;
  }
  std::set<std::string> out;
  const std::string known = m[1].str();
  if (known == "none") {
    return out;
  }
  std::istringstream in(known);
  for (std::string k; std::getline(in, k, ',');) {
    out.insert(trim(k));
  }
  return out;
}

// ---- One setting, one home ---------------------------------------------------------------

// A setting's name as words: "--leader-elect-renew-deadline" and "renewDeadlineSeconds" ->
// {leader, elect, renew, deadline} and {renew, deadline}; units are not part of the name.
std::vector<std::string> words_of(const std::string& name) {
  static const std::set<std::string> kUnits = {"ms",      "us",      "s",    "sec",
                                               "seconds", "percent", "bytes"};
  std::vector<std::string> out;
  std::string w;
  auto flush = [&] {
    if (!w.empty() && kUnits.count(w) == 0) {
      out.push_back(w);
    }
    w.clear();
  };
  for (char c : name) {
    if (c == '-' || c == '_' || c == '.') {
      flush();
    } else if (std::isupper(static_cast<unsigned char>(c))) {
      flush();
      w += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else {
      w += c;
    }
  }
  flush();
  return out;
}

struct Knob {
  std::string where;               // "flag --x", "config key a.b", "parameter p of plugin t"
  std::vector<std::string> words;  // the name's words; for a config key, its last part's
};

bool ends_with(const std::vector<std::string>& a, const std::vector<std::string>& tail) {
  return tail.size() <= a.size() && std::equal(tail.rbegin(), tail.rend(), a.rbegin());
}

// Pairs of a flag and a config key or plugin parameter that name the same setting: the same
// words, or the flag's words ending with a name of two words or more (a prefix such as
// "leader-elect-" or "outlier-" only says which component it is for).
std::vector<std::string> knobs_defined_twice(const std::vector<Knob>& flags,
                                             const std::vector<Knob>& others) {
  std::vector<std::string> out;
  for (const Knob& f : flags) {
    for (const Knob& k : others) {
      if (f.words == k.words || (k.words.size() >= 2 && ends_with(f.words, k.words))) {
        out.push_back(f.where + " and " + k.where);
      }
    }
  }
  return out;
}

// The EPP's own flags as --help lists them (not upstream's, not the moved ones).
std::vector<Knob> own_flags() {
  std::vector<Knob> out;
  for (const auto& s : parse_help(epp_help())) {
    if (!s.title.empty()) {
      continue;
    }
    for (const auto& r : s.rows) {
      const std::string name = r.names.substr(r.names.rfind("--") + 2);
      if (name != "help" && name != "version") {
        out.push_back({"flag --" + name, words_of(name)});
      }
    }
  }
  return out;
}

// Every config-file key and plugin parameter.
std::vector<Knob> file_settings() {
  std::vector<Knob> out;
  for (const StartupKey& k : startup_keys()) {
    const std::string path(k.path);
    out.push_back({"config key " + path, words_of(path.substr(path.rfind('.') + 1))});
  }
  for (const char* key : {"sampleRate", "maxLinesPerSecond", "maxCandidates"}) {
    out.push_back({std::string("config key decisionLog.") + key, words_of(key)});
  }
  for (std::string_view key : kEppFileKeys) {
    out.push_back({"config key " + std::string(key), words_of(std::string(key))});
  }
  PluginRegistry registry;
  register_builtin_plugins(registry);
  for (const auto& type : registry.types()) {
    std::string error;
    if (auto params = factory_parameters(*registry.find(type), error)) {
      for (const auto& p : *params) {
        out.push_back({"parameter " + p + " of plugin " + type, words_of(p)});
      }
    }
  }
  return out;
}

std::string render(std::vector<std::string>& problems) {
  std::ostringstream o;
  o << "# Configuration reference\n\n"
    << "<!-- Generated by tests/epp/app/config_reference_test.cc: do not edit. Change a flag's "
       "help in the EPP's flag table or a plugin's README parameter table, then run\n     "
    << kRegenerate << " -->\n\n"
    << "Every setting of the EPP in one place: its command-line flags (with their environment "
       "variables and defaults, as `epp --help` prints them) and every plugin type the config "
       "file may name, with the parameters its factory reads, and the tuning the config file "
       "holds for the EPP's start. The config file's other keys "
       "(`pool`, `pipeline`, `routerQueue`, `objectives`, `loadBalancing`, `decisionLog`) are "
       "described in the [user guide](user-guide.md) and shown together in "
       "`epp/config/policies-example.yaml`; upstream's names for each are mapped in "
       "[coming-from-upstream.md](coming-from-upstream.md). The trainer and the predictor list "
       "their flags with `--help`; their environment names are the reference sidecars' "
       "([spec/predictor-api.md](spec/predictor-api.md)).\n\n"
    << "- [Flags](#flags)\n- [Config file: settings read at "
       "start](#config-file-settings-read-at-start)\n"
       "- [Plugins](#plugins)\n\n";

  o << "## Flags\n\n"
    << "Precedence: flag > environment variable > default. A bad value exits 2 with a "
       "message naming the flag and its variable.\n";
  for (const auto& s : parse_help(epp_help())) {
    if (s.rows.empty()) {
      continue;
    }
    o << "\n### " << (s.title.empty() ? "The EPP's own flags" : s.title) << "\n\n"
      << "| flag | env | default | meaning |\n|---|---|---|---|\n";
    for (const auto& r : s.rows) {
      o << "| `" << r.names << "` | " << (r.env.empty() ? "" : "`" + cell(r.env) + "`") << " | "
        << (r.default_value.empty() ? "" : "`" + cell(r.default_value) + "`") << " | "
        << cell(r.help) << " |\n";
    }
  }

  o << "\n## Config file: settings read at start\n\n"
    << "Tuning that is not deployment, in the config file once (`epp/config/startup_settings.h`). "
       "A key left out keeps its default; a bad value or an unknown key exits 2 naming the key "
       "and its line. The components these configure are built with them, so a reload that "
       "changes one is refused (the log names the key): restart the EPP to change it.\n\n"
    << "| key | default | meaning |\n|---|---|---|\n";
  for (const StartupKey& k : startup_keys()) {
    o << "| `" << k.path << "` | `" << k.default_value << "` | " << cell(std::string(k.meaning))
      << " |\n";
  }

  PluginRegistry registry;
  register_builtin_plugins(registry);
  const auto readmes = plugin_readmes();
  o << "\n## Plugins\n\n"
    << "Every type `register_builtin_plugins` registers, with its README (behaviour, "
       "fallbacks, attributes, an example). A parameter left out keeps its default; an "
       "unknown one is refused at load time with a message naming it.\n\n"
    << "| type | kind | README |\n|---|---|---|\n";
  for (const auto& type : registry.types()) {
    auto it = readmes.find(type);
    if (it == readmes.end()) {
      problems.push_back("plugin type " + type + " has no README whose **Type:** line names it");
      continue;
    }
    o << "| [`" << type << "`](#" << type << ") | " << it->second.kind << " | ["
      << it->second.path.string() << "](../" << it->second.path.string() << ") |\n";
  }
  for (const auto& type : registry.types()) {
    auto it = readmes.find(type);
    if (it == readmes.end()) {
      continue;
    }
    const Readme& readme = it->second;
    o << "\n### " << type << "\n\n";
    std::string error;
    const auto params = factory_parameters(*registry.find(type), error);
    if (!params) {
      problems.push_back("plugin type " + type + ": its factory does not name its parameters (" +
                         error + ")");
      continue;
    }
    std::set<std::string> documented;
    for (const auto& row : readme.rows) {
      documented.insert(row.all_names.begin(), row.all_names.end());
      if (params->count(row.name) == 0) {
        problems.push_back(readme.path.string() + " describes parameter '" + row.name +
                           "', which the factory of " + type + " does not read");
      }
    }
    for (const auto& p : *params) {
      if (documented.count(p) == 0) {
        problems.push_back("the factory of " + type + " reads parameter '" + p + "', which " +
                           readme.path.string() + " does not describe (## Parameters table)");
      }
    }
    if (readme.rows.empty()) {
      o << "No parameters.\n";
      continue;
    }
    o << "| name | type | default | meaning |\n|---|---|---|---|\n";
    for (const auto& row : readme.rows) {
      o << row.line << "\n";
    }
  }
  return o.str();
}

TEST(ConfigurationReference, MatchesTheFlagTableAndThePluginRegistry) {
  std::vector<std::string> problems;
  const std::string page = render(problems);
  for (const auto& p : problems) {
    ADD_FAILURE() << p;
  }
  if (const char* regen = std::getenv("LLMD_REGENERATE_DOCS"); regen && std::string(regen) == "1") {
    std::ofstream(kPage) << page;
    std::cout << "wrote " << kPage << "\n";
    return;
  }
  const std::string committed = read_file(kPage);
  if (committed != page) {
    std::istringstream a(committed), b(page);
    std::string la, lb;
    int n = 0;
    while (true) {
      const bool ga = static_cast<bool>(std::getline(a, la));
      const bool gb = static_cast<bool>(std::getline(b, lb));
      ++n;
      if (!ga && !gb) {
        break;
      }
      if (!ga || !gb || la != lb) {
        ADD_FAILURE() << "docs/configuration-reference.md is stale (first difference at line " << n
                      << ")\n  committed: " << (ga ? la : "<end of file>")
                      << "\n  rendered:  " << (gb ? lb : "<end of file>")
                      << "\nRegenerate it from the repository root with\n  " << kRegenerate;
        break;
      }
    }
  }
}

TEST(ConfigurationReference, EverySettingHasOneHomeAndTheEppFewFlags) {
  const std::vector<Knob> flags = own_flags();
  for (const auto& twice : knobs_defined_twice(flags, file_settings())) {
    ADD_FAILURE() << "one setting in two places: " << twice;
  }
  EXPECT_LE(flags.size() + 2, 35u) << "the EPP's own flags, --help and --version included: "
                                      "tuning belongs in the config file";
}

// The check itself finds what the EPP used to have: the prediction deadline as a flag and a
// producer parameter, the decision log's rate as a flag and a config key, the Lease's renew
// deadline under a component prefix; and it leaves different settings apart.
TEST(ConfigurationReference, FindsASettingDefinedTwice) {
  const std::vector<Knob> flags = {
      {"flag --prediction-deadline-ms", words_of("prediction-deadline-ms")},
      {"flag --decision-log-sample-rate", words_of("decision-log-sample-rate")},
      {"flag --leader-elect-renew-deadline", words_of("leader-elect-renew-deadline")},
      {"flag --idle-timeout-ms", words_of("idle-timeout-ms")}};
  const std::vector<Knob> others = {
      {"parameter predictionDeadlineMs", words_of("predictionDeadlineMs")},
      {"config key decisionLog.sampleRate", words_of("sampleRate")},
      {"config key leaderElection.renewDeadlineSeconds", words_of("renewDeadlineSeconds")},
      {"config key proxy.headerTimeoutMs", words_of("headerTimeoutMs")},
      {"config key routerQueue", words_of("routerQueue")}};
  EXPECT_EQ(knobs_defined_twice(flags, others),
            (std::vector<std::string>{
                "flag --prediction-deadline-ms and parameter predictionDeadlineMs",
                "flag --decision-log-sample-rate and config key decisionLog.sampleRate",
                "flag --leader-elect-renew-deadline and config key "
                "leaderElection.renewDeadlineSeconds"}));
  EXPECT_EQ(words_of("--leader-elect-renew-deadline"),
            (std::vector<std::string>{"leader", "elect", "renew", "deadline"}));
  EXPECT_EQ(words_of("renewDeadlineSeconds"), (std::vector<std::string>{"renew", "deadline"}));
}

// The rendering itself: a section header, an option with a shorthand, wrapped help, several
// environment names and a default are read back into one row each.
TEST(ConfigurationReference, ReadsTheHelpLayout) {
  const std::string help =
      "epp\nUsage:\n  epp [OPTION...]\n\n"
      "  -h, --help                    Print this help and exit\n"
      "      --pool-namespace arg      Kubernetes discovery: namespace (env\n"
      "                                EPP_POOL_NAMESPACE) (or env NAMESPACE)\n"
      "                                (default: \"\")\n\n"
      " Upstream flags options:\n"
      "  -v, --v arg                   verbosity (default: 2)\n";
  const auto s = parse_help(help);
  ASSERT_EQ(s.size(), 2u);
  ASSERT_EQ(s[0].rows.size(), 2u);
  EXPECT_EQ(s[0].rows[0].names, "-h, --help");
  EXPECT_EQ(s[0].rows[1].names, "--pool-namespace");
  EXPECT_EQ(s[0].rows[1].env, "EPP_POOL_NAMESPACE, NAMESPACE");
  EXPECT_EQ(s[0].rows[1].default_value, "");
  EXPECT_EQ(s[0].rows[1].help, "Kubernetes discovery: namespace");
  EXPECT_EQ(s[1].title, "Upstream flags");
  ASSERT_EQ(s[1].rows.size(), 1u);
  EXPECT_EQ(s[1].rows[0].names, "-v, --v");
  EXPECT_EQ(s[1].rows[0].default_value, "2");
}

}  // namespace
}  // namespace llmd::epp
