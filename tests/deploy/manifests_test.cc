// The Kubernetes manifests under deploy/ against the executables they run, so neither side can
// drift. Every kustomization under deploy/ is rendered (with `kustomize build` or
// `kubectl kustomize` when installed, else with the built-in subset in kustomize_lite.cc; set
// LLMD_DEPLOY_RENDERER=lite to force it) and each container running one of our images
// (llmd/<binary>) is checked against that binary's --help:
// - every args flag and every env name (env and envFrom ConfigMaps) is one the binary accepts;
// - the containerPorts are exactly the ports the binary will listen on (flag > env > default),
//   on 0.0.0.0; liveness probes GET /healthz and readiness probes GET /readyz on its health port;
// - model/sample paths lie on writable volumes, one predictor directory per predictor;
// - the EPP's PREDICTION_SERVER_URL lists exactly the pod's predictors, the trainer URL is the
//   trainer's port, trainer and predictors agree on model type/objective/quantile;
// - the EPP config ConfigMap loads with the EPP's own loader, its pipeline ships with it and the
//   pipeline files are byte-identical to epp/config (the files scripts/run-stack.sh uses);
// - Services and the scrape annotation point at real ports; example pools name real pods.
// Plus the container build files (runtime packages cover what the binary links) and the docs.
// DeployChecks.* break a rendered manifest on purpose to show the checks fail.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "epp/config/pool_config.h"
#include "tests/deploy/kustomize_lite.h"
#include "tests/support/process.h"

namespace llmd::testing {
namespace {

namespace fs = std::filesystem;
using Problems = std::vector<std::string>;

const fs::path kSource{LLMD_SOURCE_DIR};
const fs::path kDeploy = kSource / "deploy";
const std::map<std::string, std::string> kBinaryPath = {{"trainer", "trainer/trainer"},
                                                        {"predictor", "predictor/predictor"},
                                                        {"epp", "epp/epp"},
                                                        {"modelsim", "bench/modelsim/modelsim"}};

// ---------------------------------------------------------------------------------------------
// Small utilities

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return out + "'";
}

struct CommandResult {
  int status = -1;
  std::string out;
};

// Runs a shell command; stdout is returned, stderr is appended when the command fails.
CommandResult run_command(const std::string& cmd) {
  TempDir tmp;
  std::string err_path = tmp.file("stderr");
  CommandResult r;
  FILE* f = ::popen((cmd + " 2>" + quote(err_path)).c_str(), "r");
  if (f == nullptr) {
    return r;
  }
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) {
    r.out.append(buf, n);
  }
  int st = ::pclose(f);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  if (r.status != 0) {
    r.out += read_text(err_path);
  }
  return r;
}

bool on_path(const std::string& exe) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path == nullptr ? "" : path);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (!dir.empty() && ::access((fs::path(dir) / exe).c_str(), X_OK) == 0) {
      return true;
    }
  }
  return false;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, sep)) {
    out.push_back(item);
  }
  return out;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string out;
  for (const auto& s : v) {
    out += (out.empty() ? "" : sep) + s;
  }
  return out;
}

std::string scalar(const Json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_null()) return "";
  return j.dump();
}

std::optional<int> to_int(const std::string& s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoi(s);
}

std::string all_problems(const Problems& p) {
  return "\n  - " + join(p, "\n  - ");
}

// A member of a JSON object by reference (an empty array/object when absent): pointers and
// references into the manifests stay valid, unlike those into json::value()'s copies.
const Json& field(const Json& obj, const std::string& key, bool object = false) {
  static const Json kArray = Json::array();
  static const Json kObject = Json::object();
  if (obj.is_object()) {
    auto it = obj.find(key);
    if (it != obj.end()) return *it;
  }
  return object ? kObject : kArray;
}

// ---------------------------------------------------------------------------------------------
// What each binary accepts, from its --help

struct Option {
  std::string env;
  std::string default_value;
};

struct Help {
  std::map<std::string, Option> flags;          // without the leading --
  std::map<std::string, std::string> env_flag;  // env name -> flag
  // Flags of the "Upstream (GIE / llm-d) flags" section: another program's command line,
  // flag only (as upstream's are), counted apart.
  std::set<std::string> upstream;
  // Flags of the "Moved to the config file" section: given, the EPP exits 2.
  std::set<std::string> moved;
};

// cxxopts layout: an option line starts with "  -h, --name" or "      --name arg", its
// description wraps onto deeper-indented lines; "(env NAME)" and "(default: X)" end it.
Help parse_help(const std::string& text) {
  static const std::regex kStart(R"(^ {1,8}(?:-[A-Za-z0-9], )?--([a-z0-9][a-z0-9-]*)(.*)$)");
  static const std::regex kEnv(R"(\(env ([A-Z0-9_]+)\))");
  Help h;
  std::vector<std::pair<std::string, std::string>> blocks;
  bool upstream = false, moved = false;
  for (const auto& line : split(text, '\n')) {
    std::smatch m;
    if (line.find("Upstream (GIE / llm-d) flags") != std::string::npos) {
      upstream = true;
    } else if (line.find("Moved to the config file") != std::string::npos) {
      upstream = false;
      moved = true;
    } else if (std::regex_match(line, m, kStart)) {
      blocks.emplace_back(m[1], m[2]);
      if (upstream) {
        h.upstream.insert(m[1]);
      }
      if (moved) {
        h.moved.insert(m[1]);
      }
    } else if (!blocks.empty()) {
      blocks.back().second += " " + line;
    }
  }
  for (auto& [name, rest] : blocks) {
    std::string norm = std::regex_replace(rest, std::regex(R"(\s+)"), " ");
    Option o;
    std::smatch m;
    if (std::regex_search(norm, m, kEnv)) {
      o.env = m[1];
      h.env_flag[o.env] = name;
    }
    auto d = norm.rfind("(default: ");
    auto close = norm.rfind(')');
    if (d != std::string::npos && close != std::string::npos && close > d) {
      o.default_value = norm.substr(d + 10, close - d - 10);
      if (o.default_value == "\"\"") {
        o.default_value.clear();
      }
    }
    h.flags[name] = o;
  }
  return h;
}

const Help& help_of(const std::string& bin) {
  static std::map<std::string, Help> cache;
  auto it = cache.find(bin);
  if (it == cache.end()) {
    auto r = run_command(quote(binary(kBinaryPath.at(bin))) + " --help");
    if (r.status != 0) {
      ADD_FAILURE() << bin << " --help failed: " << r.out;
    }
    it = cache.emplace(bin, parse_help(r.out)).first;
  }
  return it->second;
}

// ---------------------------------------------------------------------------------------------
// Rendering

struct Render {
  std::string name;      // path relative to deploy/
  std::string renderer;  // kustomize | kubectl kustomize | built-in
  std::vector<Json> docs;
  std::set<std::string> generated;  // generator names (built-in renderer only)
  std::string error;
};

// `kustomize build` or `kubectl kustomize` when one is installed and renders a trivial
// kustomization (a broken or stub binary on PATH counts as absent), else "" (built-in).
std::string external_renderer() {
  static const std::string tool = [] {
    const char* force = std::getenv("LLMD_DEPLOY_RENDERER");
    if (force != nullptr && std::string(force) == "lite") {
      return std::string();
    }
    TempDir probe;
    std::ofstream(probe.file("kustomization.yaml"))
        << "configMapGenerator:\n- name: probe\n  literals: [a=b]\n";
    for (const auto& [exe, cmd] :
         {std::pair<std::string, std::string>{"kustomize", "kustomize build"},
          {"kubectl", "kubectl kustomize"}}) {
      if (!on_path(exe)) continue;
      auto r = run_command(cmd + " " + quote(probe.path()));
      if (r.status == 0 && r.out.find("name: probe-") != std::string::npos) {
        return cmd;
      }
      std::cout << "[ deploy ] " << cmd << " does not work here, ignored: " << r.out.substr(0, 200)
                << std::endl;
    }
    return std::string();
  }();
  return tool;
}

Render render_with(const fs::path& dir, const std::string& tool) {
  Render r;
  r.name = fs::relative(dir, kDeploy).string();
  try {
    if (tool.empty()) {
      LiteRender lite = render_lite(dir);
      r.renderer = "built-in";
      r.docs = std::move(lite.docs);
      r.generated = std::move(lite.generated_names);
    } else {
      r.renderer = tool;
      auto out = run_command(tool + " " + quote(dir.string()));
      if (out.status != 0) {
        r.error = tool + " failed: " + out.out;
        return r;
      }
      r.docs = load_yaml_documents(out.out);
    }
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

Render render(const fs::path& dir) {
  return render_with(dir, external_renderer());
}

std::vector<fs::path> kustomization_dirs() {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(kDeploy)) {
    if (e.is_regular_file() && e.path().filename() == "kustomization.yaml") {
      // A kind: Component (deploy/components) is rendered as part of the layouts that use it.
      Json k = load_yaml_documents(read_text(e.path())).at(0);
      if (k.value("kind", "Kustomization") == "Component") continue;
      out.push_back(e.path().parent_path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---------------------------------------------------------------------------------------------
// Views of a rendered set of documents

const Json* find_doc(const std::vector<Json>& docs, const std::string& kind,
                     const std::string& name) {
  for (const auto& d : docs) {
    if (d.value("kind", "") == kind && d.contains("metadata") &&
        d["metadata"].value("name", "") == name) {
      return &d;
    }
  }
  return nullptr;
}

bool is_workload(const Json& d) {
  static const std::set<std::string> kinds = {"Deployment", "StatefulSet", "DaemonSet",
                                              "ReplicaSet"};
  return kinds.count(d.value("kind", "")) > 0;
}

std::string doc_id(const Json& d) {
  return d.value("kind", "?") + "/" + d["metadata"].value("name", "?");
}

const Json& pod_spec(const Json& workload) {
  return workload["spec"]["template"]["spec"];
}

std::string bin_of(const Json& container) {
  // llmd/<binary>, optionally behind a registry and with a tag or digest.
  static const std::regex kImage(
      R"((?:^|/)llmd/([a-z0-9-]+)(:[A-Za-z0-9_.-]+)?(@sha256:[0-9a-f]+)?$)");
  std::smatch m;
  std::string image = container.value("image", "");
  return std::regex_search(image, m, kImage) ? std::string(m[1]) : std::string();
}

// Longest mountPath of `c` that contains `path`.
const Json* covering_mount(const Json& c, const std::string& path) {
  const Json* best = nullptr;
  std::size_t best_len = 0;
  for (const auto& m : field(c, "volumeMounts")) {
    std::string mp = m.value("mountPath", "");
    while (mp.size() > 1 && mp.back() == '/') mp.pop_back();
    if ((path == mp || path.rfind(mp + "/", 0) == 0) && mp.size() >= best_len) {
      best = &m;
      best_len = mp.size();
    }
  }
  return best;
}

const Json* find_volume(const Json& spec, const std::string& name) {
  for (const auto& v : field(spec, "volumes")) {
    if (v.value("name", "") == name) return &v;
  }
  return nullptr;
}

struct ContainerView {
  std::string name;
  std::string bin;
  const Json* c = nullptr;
  std::map<std::string, std::string> eff;  // flag -> effective value
  std::map<std::string, int> port_by_name;
  std::set<int> ports;
  std::map<std::string, std::string> secret_env;  // env name -> "<Secret>/<key>" it comes from
};

// Flag > env (env entries override envFrom, later envFrom sources override earlier) > default.
ContainerView view_container(const Json& c, const std::vector<Json>& docs, const std::string& where,
                             Problems& p) {
  ContainerView v;
  v.c = &c;
  v.name = c.value("name", "?");
  v.bin = bin_of(c);
  for (const auto& port : field(c, "ports")) {
    if (!port.contains("containerPort") || !port["containerPort"].is_number_integer()) {
      p.push_back(where + ": containerPort must be an integer: " + port.dump());
      continue;
    }
    int n = port["containerPort"].get<int>();
    if (!v.ports.insert(n).second) {
      p.push_back(where + ": containerPort " + std::to_string(n) + " listed twice");
    }
    if (port.contains("name")) v.port_by_name[scalar(port["name"])] = n;
  }
  if (v.bin.empty()) {
    return v;
  }
  if (kBinaryPath.count(v.bin) == 0) {
    p.push_back(where + ": image " + c.value("image", "") + " is not one of our executables (" +
                "trainer, predictor, epp, modelsim)");
    v.bin.clear();
    return v;
  }
  const Help& h = help_of(v.bin);
  for (const auto& [flag, o] : h.flags) {
    v.eff[flag] = o.default_value;
  }
  if (c.contains("command")) {
    p.push_back(where + ": sets `command`, which replaces the image's ENTRYPOINT; use args");
  }
  std::map<std::string, std::string> env_values;
  for (const auto& src : field(c, "envFrom")) {
    if (src.contains("configMapRef")) {
      std::string cm_name = src["configMapRef"].value("name", "");
      const Json* cm = find_doc(docs, "ConfigMap", cm_name);
      if (cm == nullptr) {
        p.push_back(where + ": envFrom ConfigMap " + cm_name + " is not in the manifests");
        continue;
      }
      for (const auto& [key, value] : field(*cm, "data", true).items()) {
        if (h.env_flag.count(key) == 0) {
          p.push_back(where + ": env " + key + " (from ConfigMap " + cm_name + ") is not an " +
                      "option of " + v.bin + " (see " + v.bin + " --help)");
        }
        env_values[key] = scalar(value);
      }
    } else {
      p.push_back(where + ": envFrom " + src.dump() + " cannot be checked (ConfigMaps only)");
    }
  }
  for (const auto& e : field(c, "env")) {
    std::string name = e.value("name", "");
    if (h.env_flag.count(name) == 0) {
      p.push_back(where + ": env " + name + " is not an option of " + v.bin + " (see " + v.bin +
                  " --help)");
    }
    if (e.contains("value")) {
      if (!e["value"].is_string()) {
        p.push_back(where + ": env " + name + " value " + e["value"].dump() +
                    " must be a string (quote it)");
      }
      env_values[name] = scalar(e["value"]);
    } else {
      env_values[name] = "<valueFrom>";
      const Json ref = e.value("valueFrom", Json::object()).value("secretKeyRef", Json());
      if (ref.is_object()) {
        v.secret_env[name] = ref.value("name", "") + "/" + ref.value("key", "");
      }
    }
  }
  for (const auto& [env, value] : env_values) {
    auto it = h.env_flag.find(env);
    if (it != h.env_flag.end() && !value.empty()) {  // an empty env value means "unset"
      v.eff[it->second] = value;
    }
  }
  std::vector<std::string> args;
  for (const auto& a : field(c, "args")) {
    if (!a.is_string()) {
      p.push_back(where + ": arg " + a.dump() + " must be a string (quote it)");
    }
    args.push_back(scalar(a));
  }
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) {
      p.push_back(where + ": unexpected argument '" + a + "' (flags only, --name=value)");
      continue;
    }
    auto eq = a.find('=');
    std::string flag = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    std::string value;
    if (eq != std::string::npos) {
      value = a.substr(eq + 1);
    } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      value = args[++i];
    } else {
      value = "true";
    }
    if (h.flags.count(flag) == 0 || flag == "help") {
      p.push_back(where + ": flag --" + flag + " is not an option of " + v.bin + " (see " + v.bin +
                  " --help)");
      continue;
    }
    v.eff[flag] = value;
  }
  for (const auto& flag : h.moved) {
    if (!v.eff.at(flag).empty()) {
      p.push_back(where + ": sets --" + flag + " (or its env), which " + v.bin +
                  " refuses: the setting moved to the config file (see " + v.bin + " --help)");
    }
  }
  return v;
}

int eff_int(const ContainerView& v, const std::string& flag, const std::string& where,
            Problems& p) {
  auto it = v.eff.find(flag);
  auto n = it == v.eff.end() ? std::nullopt : to_int(it->second);
  if (!n) {
    p.push_back(where + ": --" + flag + " is not a port number: '" +
                (it == v.eff.end() ? std::string("(missing)") : it->second) + "'");
    return -1;
  }
  return *n;
}

// The ports the binary will listen on, and the one serving its health endpoints.
std::set<int> listening_ports(const ContainerView& v, const std::string& where, Problems& p) {
  if (v.bin == "epp") {
    std::set<int> out = {eff_int(v, "port", where, p), eff_int(v, "health-port", where, p),
                         eff_int(v, "metrics-port", where, p)};
    if (v.eff.count("ext-proc-port") && eff_int(v, "ext-proc-port", where, p) > 0) {
      out.insert(eff_int(v, "ext-proc-port", where, p));  // gateway mode (0 = off)
    }
    return out;
  }
  if (v.bin == "modelsim") {
    int base = eff_int(v, "base-port", where, p);
    auto pods = to_int(v.eff.at("pods"));
    std::set<int> out;
    for (int i = 0; i < pods.value_or(0); ++i) out.insert(base + i);
    return out;
  }
  return {eff_int(v, "port", where, p)};
}

int health_port(const ContainerView& v, const std::string& where, Problems& p) {
  if (v.bin == "epp") return eff_int(v, "health-port", where, p);
  if (v.bin == "modelsim") return eff_int(v, "base-port", where, p);
  return eff_int(v, "port", where, p);
}

std::optional<int> resolve_port(const ContainerView& v, const Json& port) {
  if (port.is_number_integer()) return port.get<int>();
  auto it = v.port_by_name.find(scalar(port));
  if (it != v.port_by_name.end()) return it->second;
  return std::nullopt;
}

void check_probes(const ContainerView& v, const std::string& where, Problems& p) {
  const int hp = health_port(v, where, p);
  const bool ours = v.bin != "modelsim";  // modelsim mimics vLLM: /health only
  const std::map<std::string, std::string> want = {{"livenessProbe", ours ? "/healthz" : "/health"},
                                                   {"readinessProbe", ours ? "/readyz" : "/health"},
                                                   {"startupProbe", ours ? "/healthz" : "/health"}};
  for (const auto& [probe, path] : want) {
    if (!v.c->contains(probe)) {
      if (probe != "startupProbe") p.push_back(where + ": no " + probe);
      continue;
    }
    const Json& pr = (*v.c)[probe];
    if (!pr.contains("httpGet")) {
      p.push_back(where + ": " + probe + " must be an httpGet probe");
      continue;
    }
    std::string got = pr["httpGet"].value("path", "");
    if (got != path) {
      p.push_back(where + ": " + probe + " GETs " + got + ", expected " + path);
    }
    auto port = resolve_port(v, pr["httpGet"].value("port", Json()));
    if (!port || *port != hp || v.ports.count(*port) == 0) {
      p.push_back(where + ": " + probe + " port " + pr["httpGet"].value("port", Json()).dump() +
                  " is not the container's health port " + std::to_string(hp));
    }
  }
}

bool is_loopback(const std::string& host) {
  return host.rfind("127.", 0) == 0 || host == "localhost" || host == "::1";
}

// The address a listener binds: the EPP's health, metrics and ext_proc listeners have their own
// host flag (empty: --host); everything else binds --host.
std::string bind_host(const ContainerView& v, const std::string& listener = "") {
  if (!listener.empty()) {
    auto own = v.eff.find(listener + "-host");
    if (own != v.eff.end() && !own->second.empty()) return own->second;
  }
  auto it = v.eff.find("host");
  return it == v.eff.end() ? std::string() : it->second;
}

// The EPP listener serving `port`: "" (the proxy), "health", "metrics", "ext-proc"; nullopt
// when the EPP does not listen there.
std::optional<std::string> epp_listener(const ContainerView& v, int port) {
  for (const char* l : {"", "health", "metrics", "ext-proc"}) {
    const std::string flag = std::string(l).empty() ? "port" : std::string(l) + "-port";
    auto it = v.eff.find(flag);
    if (it != v.eff.end() && to_int(it->second) == port && port > 0) return std::string(l);
  }
  return std::nullopt;
}

// The admin token: from a Secret, never written into a manifest, and required on every sidecar
// that listens beyond loopback (anything in the cluster could otherwise POST /flush).
void check_admin_token(const ContainerView& v, const std::string& where, Problems& p) {
  if (v.bin != "epp" && v.bin != "trainer" && v.bin != "predictor") return;
  const std::string token = v.eff.count("admin-token") ? v.eff.at("admin-token") : "";
  if (!token.empty() && token != "<valueFrom>") {
    p.push_back(where + ": the admin token is written into the manifests; take LLMD_ADMIN_TOKEN " +
                "from a Secret (valueFrom.secretKeyRef)");
  }
  const std::string host = bind_host(v);
  if (v.bin != "epp" && !is_loopback(host) && v.secret_env.count("LLMD_ADMIN_TOKEN") == 0) {
    p.push_back(where + ": listens on " + host + " without an admin token: anything in the " +
                "cluster can call its admin endpoints (set LLMD_ADMIN_TOKEN from a Secret)");
  }
}

void check_container(const ContainerView& v, const Json& spec, const std::string& where,
                     Problems& p) {
  std::set<int> listen = listening_ports(v, where, p);
  if (listen != v.ports) {
    std::vector<std::string> a, b;
    for (int x : listen) a.push_back(std::to_string(x));
    for (int x : v.ports) b.push_back(std::to_string(x));
    p.push_back(where + ": containerPorts [" + join(b, ",") + "] but " + v.bin + " listens on [" +
                join(a, ",") + "] (flags, env and --help defaults)");
  }
  // The kubelet probes the pod IP: the health listener must bind beyond loopback.
  const std::string probed = bind_host(v, v.bin == "epp" ? "health" : "");
  if (v.eff.count("host") && is_loopback(probed)) {
    p.push_back(where + ": serves its probes on " + probed +
                " only; kubelet probes reach the pod IP (use 0.0.0.0)");
  }
  if (v.bin == "epp" && to_int(v.eff.at("ext-proc-port")).value_or(0) > 0 &&
      is_loopback(bind_host(v, "ext-proc"))) {
    p.push_back(where + ": serves ext_proc on " + bind_host(v, "ext-proc") +
                " only; the Gateway reaches the pod IP");
  }
  check_admin_token(v, where, p);
  check_probes(v, where, p);
  const Json& res = field(*v.c, "resources", true);
  for (const char* path : {"/requests/cpu", "/requests/memory", "/limits/memory"}) {
    if (!res.contains(Json::json_pointer(path))) {
      p.push_back(where + ": resources" + std::string(path) + " is not set");
    }
  }
  for (const auto& m : field(*v.c, "volumeMounts")) {
    if (find_volume(spec, m.value("name", "")) == nullptr) {
      p.push_back(where + ": volumeMount " + m.value("name", "") + " has no volume");
    }
  }
  // Files the binary writes must be on a writable volume (the root filesystem is read-only).
  std::vector<std::string> writes;
  if (v.bin == "trainer") {
    writes = {"ttft-model-path", "tpot-model-path", "ttft-gated-model-path",
              "tpot-gated-model-path", "samples-path"};
  } else if (v.bin == "predictor") {
    writes = {"local-ttft-model-path", "local-tpot-model-path", "local-ttft-gated-model-path",
              "local-tpot-gated-model-path"};
  }
  for (const auto& flag : writes) {
    const std::string& path = v.eff.at(flag);
    if (path.empty()) continue;  // samples-path: next to the TTFT model
    const Json* m = covering_mount(*v.c, path);
    if (m == nullptr || m->value("readOnly", false)) {
      p.push_back(where + ": --" + flag + " " + path + " is not on a writable volume mount");
    }
  }
}

struct PodCheck {
  std::vector<epp::PodConfig> pool;  // from the EPP config, when the pod has an EPP
  bool has_epp = false;
};

void check_epp_config(const ContainerView& epp, const Json& spec, const std::vector<Json>& docs,
                      const std::string& where, Problems& p, PodCheck& out) {
  const std::string config = epp.eff.at("config");
  const Json* m = covering_mount(*epp.c, config);
  const Json* vol = m == nullptr ? nullptr : find_volume(spec, m->value("name", ""));
  if (vol == nullptr || !vol->contains("configMap")) {
    p.push_back(where + ": --config " + config + " is not in a mounted ConfigMap");
    return;
  }
  if (m->contains("subPath")) {
    p.push_back(where + ": the EPP config ConfigMap is mounted with subPath, which never updates " +
                "(mount the whole ConfigMap so live reload works)");
  }
  std::string mp = m->value("mountPath", "");
  std::string key = fs::path(config).lexically_relative(mp).string();
  std::string cm_name = (*vol)["configMap"].value("name", "");
  const Json* cm = find_doc(docs, "ConfigMap", cm_name);
  if (cm == nullptr || !cm->contains("data") || !(*cm)["data"].contains(key)) {
    p.push_back(where + ": ConfigMap " + cm_name + " has no key " + key + " for --config " +
                config);
    return;
  }
  // The ConfigMap as the container sees it, loaded by the EPP's own config loader.
  TempDir dir;
  for (const auto& [k, value] : (*cm)["data"].items()) {
    std::ofstream(dir.file(k), std::ios::binary) << scalar(value);
  }
  // With Kubernetes discovery (gateway mode) the config lists no pods.
  const bool discovery = (epp.eff.count("pool-name") && !epp.eff.at("pool-name").empty()) ||
                         (epp.eff.count("pool-selector") && !epp.eff.at("pool-selector").empty());
  try {
    epp::EppFileConfig cfg = epp::load_epp_config(
        dir.file(key), discovery ? epp::PodSource::kKubernetes : epp::PodSource::kConfig);
    out.pool = cfg.pods;
    if (!cfg.pipeline_path.empty()) {
      fs::path pp = fs::path(cfg.pipeline_path).lexically_normal();
      if (pp.parent_path() != fs::path(dir.path()) ||
          !(*cm)["data"].contains(pp.filename().string())) {
        p.push_back(where + ": the pipeline of " + key + " is not a file of ConfigMap " + cm_name +
                    " (name it relative to the pool file, e.g. default-pipeline.yaml)");
      }
    }
  } catch (const std::exception& e) {
    p.push_back(where + ": the EPP refuses ConfigMap " + cm_name + "/" + key + ": " + e.what());
  }
  // Every other file of the ConfigMap is a pipeline, identical to the one the local stack uses.
  for (const auto& [k, value] : (*cm)["data"].items()) {
    Json parsed;
    try {
      parsed = load_yaml_documents(scalar(value)).at(0);
    } catch (const std::exception& e) {
      p.push_back(where + ": ConfigMap " + cm_name + "/" + k + " is not YAML: " + e.what());
      continue;
    }
    if (parsed.is_object() && (parsed.contains("pool") || k == key)) continue;  // the pool file
    fs::path original = kSource / "epp" / "config" / k;
    if (!fs::exists(original)) {
      p.push_back(where + ": ConfigMap " + cm_name + "/" + k +
                  " is a pipeline that is not in epp/config");
    } else if (read_text(original) != scalar(value)) {
      p.push_back(where + ": ConfigMap " + cm_name + "/" + k + " differs from epp/config/" + k +
                  " (copy it: cp epp/config/" + k + " deploy/base/config/)");
    }
  }
}

struct PodInfo {
  const Json* workload;
  std::vector<ContainerView> views;
};

bool selects(const Json& selector, const Json& labels);

std::optional<int> resolve_in_pod(const PodInfo& pod, const Json& port) {
  for (const auto& v : pod.views) {
    auto n = resolve_port(v, port);
    if (n && v.ports.count(*n)) return n;
  }
  return std::nullopt;
}

// The pods of these manifests a Service selects.
std::vector<const PodInfo*> selected_pods(const Json& service, const std::vector<PodInfo>& pods) {
  std::vector<const PodInfo*> out;
  for (const auto& pod : pods) {
    if (selects(field(service["spec"], "selector", true),
                field((*pod.workload)["spec"]["template"]["metadata"], "labels", true))) {
      out.push_back(&pod);
    }
  }
  return out;
}

// The trainer a trainer URL reaches from a pod: http://127.0.0.1:<port> is a trainer container of
// the pod itself (a sidecar); http://<Service>[.<namespace>...]:<port> the trainer container
// behind that Service of these manifests (components/shared-trainer). nullptr, with the reason
// in `why`, when the URL reaches no trainer.
const ContainerView* trainer_behind(const std::string& url, const std::vector<ContainerView>& own,
                                    const std::vector<PodInfo>& pods, const std::vector<Json>& docs,
                                    std::string& why) {
  static const std::regex kUrl(R"(^http://([A-Za-z0-9.-]+):([0-9]+)/?$)");
  std::smatch m;
  if (!std::regex_match(url, m, kUrl)) {
    why = "is not http://<host>:<port>";
    return nullptr;
  }
  const std::string host = m[1];
  const int port = std::stoi(m[2]);
  if (is_loopback(host)) {
    for (const auto& v : own) {
      if (v.bin == "trainer" && v.ports.count(port) && to_int(v.eff.at("port")) == port) return &v;
    }
    why = "is loopback, and no trainer container of this pod listens on " + m[2].str();
    return nullptr;
  }
  const std::string svc_name = host.substr(0, host.find('.'));
  const Json* svc = find_doc(docs, "Service", svc_name);
  if (svc == nullptr) {
    why = "names Service " + svc_name + ", which is not in the manifests";
    return nullptr;
  }
  Json target;
  for (const auto& sp : field((*svc)["spec"], "ports")) {
    if (sp.value("port", 0) == port)
      target = sp.contains("targetPort") ? sp["targetPort"] : sp["port"];
  }
  if (target.is_null()) {
    why = "names port " + m[2].str() + ", which Service " + svc_name + " does not have";
    return nullptr;
  }
  for (const PodInfo* pod : selected_pods(*svc, pods)) {
    for (const auto& v : pod->views) {
      auto n = resolve_port(v, target);
      if (v.bin == "trainer" && n && v.ports.count(*n) && to_int(v.eff.at("port")) == *n) return &v;
    }
  }
  why = "reaches Service " + svc_name + ", which sends port " + m[2].str() +
        " to no trainer container";
  return nullptr;
}

// The wiring inside a pod with an EPP: predictors, trainer, URLs, shared settings.
void check_epp_pod(const std::vector<ContainerView>& views, const Json& workload,
                   const std::vector<Json>& docs, const std::vector<PodInfo>& pods,
                   const std::string& where, Problems& p, PodCheck& out) {
  const ContainerView* epp = nullptr;
  const ContainerView* trainer = nullptr;
  std::vector<const ContainerView*> predictors;
  for (const auto& v : views) {
    if (v.bin == "epp") {
      if (epp != nullptr) p.push_back(where + ": more than one EPP container");
      epp = &v;
    } else if (v.bin == "trainer") {
      if (trainer != nullptr) p.push_back(where + ": more than one trainer container");
      trainer = &v;
    } else if (v.bin == "predictor") {
      predictors.push_back(&v);
    }
  }
  out.has_epp = true;
  const Json& spec = pod_spec(workload);
  check_epp_config(*epp, spec, docs, where + " container epp", p, out);
  if (predictors.empty()) {
    p.push_back(where + ": the EPP pod needs at least one predictor sidecar");
    return;
  }
  // Without a trainer sidecar, the trainer is the one the EPP's URL reaches (a shared one).
  std::string trainer_url;
  if (trainer != nullptr) {
    trainer_url = "http://127.0.0.1:" + trainer->eff.at("port");
  } else {
    std::string why;
    trainer_url = epp->eff.at("training-server-url");
    trainer = trainer_behind(trainer_url, views, pods, docs, why);
    if (trainer == nullptr) {
      p.push_back(where + ": the pod has no trainer sidecar and the EPP's TRAINING_SERVER_URL '" +
                  trainer_url + "' " + why);
      return;
    }
  }
  Problems ignore;
  std::sort(predictors.begin(), predictors.end(), [&](auto a, auto b) {
    return eff_int(*a, "port", "", ignore) < eff_int(*b, "port", "", ignore);
  });
  std::vector<std::string> urls;
  for (std::size_t i = 0; i < predictors.size(); ++i) {
    int port = eff_int(*predictors[i], "port", "", ignore);
    if (port != 8001 + static_cast<int>(i)) {
      p.push_back(where + ": predictor ports must be 8001, 8002, ...; " + predictors[i]->name +
                  " has " + std::to_string(port));
    }
    urls.push_back("http://127.0.0.1:" + std::to_string(port));
  }
  std::vector<std::string> listed = split(epp->eff.at("prediction-server-url"), ',');
  std::vector<std::string> sorted_listed = listed;
  std::sort(sorted_listed.begin(), sorted_listed.end());
  std::vector<std::string> sorted_urls = urls;
  std::sort(sorted_urls.begin(), sorted_urls.end());
  if (sorted_listed != sorted_urls) {
    p.push_back(where + ": the EPP's PREDICTION_SERVER_URL is '" + join(listed, ",") +
                "' but the pod's predictors are '" + join(urls, ",") + "'");
  }
  if (epp->eff.at("training-server-url") != trainer_url) {
    p.push_back(where + ": the EPP's TRAINING_SERVER_URL is '" +
                epp->eff.at("training-server-url") + "', the trainer is " + trainer_url);
  }
  std::set<std::pair<std::string, std::string>> model_dirs;
  for (const auto* pr : predictors) {
    std::string why;
    const std::string url = pr->eff.at("training-server-url");
    if (url != trainer_url && trainer_behind(url, views, pods, docs, why) != trainer) {
      p.push_back(where + ": " + pr->name + " syncs from '" + url + "', the EPP's trainer is " +
                  trainer_url);
    }
    for (const char* flag : {"model-type", "objective-type", "quantile-alpha"}) {
      if (pr->eff.at(flag) != trainer->eff.at(flag)) {
        p.push_back(where + ": " + pr->name + " --" + flag + " " + pr->eff.at(flag) +
                    " differs from the trainer's " + trainer->eff.at(flag));
      }
    }
    const Json* m = covering_mount(*pr->c, pr->eff.at("local-ttft-model-path"));
    if (m != nullptr) {
      auto key = std::make_pair(m->value("name", ""), m->value("subPath", ""));
      if (!model_dirs.insert(key).second) {
        p.push_back(where + ": " + pr->name + " shares its model directory (volume " + key.first +
                    ", subPath '" + key.second + "') with another predictor");
      }
    }
  }
  // Ports and port names are shared by all containers of a pod.
  std::map<int, std::string> port_owner;
  std::map<std::string, std::string> name_owner;
  for (const auto& v : views) {
    for (int port : v.ports) {
      if (port_owner.count(port)) {
        p.push_back(where + ": port " + std::to_string(port) + " used by " + port_owner[port] +
                    " and " + v.name);
      }
      port_owner[port] = v.name;
    }
    for (const auto& [n, port] : v.port_by_name) {
      if (name_owner.count(n)) p.push_back(where + ": port name " + n + " used twice");
      name_owner[n] = v.name;
    }
  }
  // The EPP sends its token with the samples it posts to the trainer.
  const auto token_secret = [](const ContainerView* c) {
    auto it = c->secret_env.find("LLMD_ADMIN_TOKEN");
    return it == c->secret_env.end() ? std::string("none") : it->second;
  };
  if (token_secret(epp) != token_secret(trainer)) {
    p.push_back(where + ": the EPP's admin token (" + token_secret(epp) +
                ") is not the trainer's (" + token_secret(trainer) +
                "): the trainer would refuse its samples (401)");
  }
  if (is_loopback(bind_host(*epp, "metrics"))) {
    p.push_back(where + ": the EPP's metrics port binds " + bind_host(*epp, "metrics") +
                " only; Prometheus scrapes the pod IP");
  }
  const Json ann = field(workload["spec"]["template"]["metadata"], "annotations", true);
  if (ann.value("prometheus.io/scrape", "") != "true" ||
      ann.value("prometheus.io/port", "") != epp->eff.at("metrics-port") ||
      ann.value("prometheus.io/path", "") != "/metrics") {
    p.push_back(where + ": the pod's prometheus.io/{scrape,port,path} annotations must name the " +
                "EPP's metrics port " + epp->eff.at("metrics-port") + " and /metrics");
  }
}

bool selects(const Json& selector, const Json& labels) {
  if (!selector.is_object() || selector.empty()) return false;
  for (const auto& [k, v] : selector.items()) {
    if (!labels.contains(k) || labels[k] != v) return false;
  }
  return true;
}

// Active-passive EPPs (--leader-elect): a standby to take over, a unique identity per pod,
// timings the EPP accepts, the Lease RBAC of the pod's service account, a PodDisruptionBudget,
// and a rollout that can finish although a standby is never ready.
void check_leader_election(const ContainerView& epp, const Json& workload,
                           const std::vector<Json>& docs, const std::string& where, Problems& p) {
  if (epp.eff.at("leader-elect") != "true") {
    return;
  }
  const int replicas = workload["spec"].value("replicas", 1);
  if (replicas < 2) {
    p.push_back(where + ": --leader-elect with " + std::to_string(replicas) +
                " replica: there is no standby to take over");
  }
  // The identity: POD_NAME from the pod's own name (the default, the host name, is that too).
  for (const auto& e : field(*epp.c, "env")) {
    if (e.value("name", "") != "POD_NAME") continue;
    const Json ref =
        e.contains("valueFrom") ? e["valueFrom"].value("fieldRef", Json::object()) : Json::object();
    if (ref.value("fieldPath", "") != "metadata.name") {
      p.push_back(where +
                  ": POD_NAME (the leader election identity) must come from the pod's "
                  "metadata.name, or every replica claims the Lease under the same name");
    }
  }
  if (epp.eff.at("leader-elect-identity") != "" &&
      epp.eff.at("leader-elect-identity") != "<valueFrom>") {
    p.push_back(where + ": --leader-elect-identity is the literal '" +
                epp.eff.at("leader-elect-identity") + "': every replica would hold the Lease");
  }
  // RBAC: the Lease lives in the EPP's own namespace unless a flag moves it.
  for (const char* flag : {"leader-elect-lease-namespace", "pool-namespace"}) {
    if (!epp.eff.at(flag).empty()) {
      p.push_back(where + ": --" + flag + " moves the Lease out of the pod's namespace, where " +
                  "these manifests' Role cannot reach");
    }
  }
  std::string lease_name = epp.eff.at("leader-elect-lease-name");
  if (lease_name.empty()) {
    lease_name =
        epp.eff.at("pool-name").empty() ? "llmd-epp" : "llmd-epp-" + epp.eff.at("pool-name");
  }
  const std::string sa = pod_spec(workload).value("serviceAccountName", "default");
  std::set<std::string> granted;
  for (const auto& binding : docs) {
    if (binding.value("kind", "") != "RoleBinding") continue;
    bool bound = false;
    for (const auto& s : field(binding, "subjects")) {
      bound = bound || (s.value("kind", "") == "ServiceAccount" && s.value("name", "") == sa);
    }
    const Json ref = field(binding, "roleRef", true);
    const Json* role = bound && ref.value("kind", "") == "Role"
                           ? find_doc(docs, "Role", ref.value("name", ""))
                           : nullptr;
    for (const auto& rule : role == nullptr ? Json::array() : field(*role, "rules")) {
      auto has = [&](const char* key, const std::string& value) {
        for (const auto& v : field(rule, key)) {
          if (v == value || v == "*") return true;
        }
        return false;
      };
      if (!has("apiGroups", "coordination.k8s.io") || !has("resources", "leases")) continue;
      const bool named = !field(rule, "resourceNames").empty();
      for (const char* verb : {"get", "create", "update"}) {
        // A create names no existing object: a rule limited by resourceNames never allows it.
        if (has("verbs", verb) &&
            (!named || (std::string(verb) != "create" && has("resourceNames", lease_name)))) {
          granted.insert(verb);
        }
      }
    }
  }
  for (const char* verb : {"get", "create", "update"}) {
    if (granted.count(verb) == 0) {
      p.push_back(where + ": service account " + sa + " may not " + verb + " Lease " + lease_name +
                  " (a Role bound to it must grant get, create and update on " +
                  "coordination.k8s.io leases)");
    }
  }
  // A PodDisruptionBudget over the EPP pods that a standby (never ready) cannot block.
  const Json labels = field(workload["spec"]["template"]["metadata"], "labels", true);
  bool budget = false;
  for (const auto& d : docs) {
    if (d.value("kind", "") != "PodDisruptionBudget") continue;
    if (!selects(field(d["spec"], "selector", true).value("matchLabels", Json::object()), labels)) {
      continue;
    }
    budget = true;
    const Json min = d["spec"].value("minAvailable", Json());
    if (min.is_number_integer() && min.get<int>() > 1) {
      p.push_back(where + ": " + doc_id(d) + " wants " + min.dump() + " available EPP pods, but " +
                  "only the leader is ever ready: no eviction would ever be allowed");
    }
  }
  if (!budget) {
    p.push_back(where + ": no PodDisruptionBudget selects the EPP pods");
  }
  // The new pods of a rolling update are standbys until the old leader is gone.
  const Json strategy = field(workload["spec"], "strategy", true);
  const Json rolling = strategy.value("rollingUpdate", Json::object());
  const Json unavailable = rolling.value("maxUnavailable", Json("25%"));
  const bool recreate = strategy.value("type", "RollingUpdate") == "Recreate";
  const bool all = unavailable == "100%" ||
                   (unavailable.is_number_integer() && unavailable.get<int>() >= replicas);
  if (workload.value("kind", "") == "Deployment" && !recreate && !all) {
    p.push_back(where + ": a rolling update with maxUnavailable " + scalar(unavailable) +
                " never finishes under --leader-elect (new pods are standbys, not ready, while " +
                "the old leader runs); set maxUnavailable to 100%");
  }
}

// A trainer in a pod of its own is shared by every EPP pod (components/shared-trainer): one
// replica (two behind a Service would split the samples and publish two model lineages that the
// predictors flip between), Recreate (a rolling update runs two, and the new pod cannot mount
// the old one's ReadWriteOnce volume), and its models on a PersistentVolumeClaim (a restart
// without its model files starts a new lineage at the cold-start defaults, which every EPP's
// predictors would take).
void check_shared_trainer(const PodInfo& pod, const ContainerView& trainer,
                          const std::string& where, Problems& p) {
  const Json& w = *pod.workload;
  if (w.value("kind", "") != "Deployment") {
    p.push_back(where + ": a shared trainer runs as a Deployment");
    return;
  }
  const int replicas = w["spec"].value("replicas", 1);
  if (replicas != 1) {
    p.push_back(where + ": a shared trainer needs exactly 1 replica, has " +
                std::to_string(replicas) + " (each would learn part of the samples and publish " +
                "its own model lineage)");
  }
  if (field(w["spec"], "strategy", true).value("type", "RollingUpdate") != "Recreate") {
    p.push_back(where + ": a shared trainer needs strategy Recreate (a rolling update runs two " +
                "trainers at once and the new one cannot mount the ReadWriteOnce volume)");
  }
  const std::string path = trainer.eff.at("ttft-model-path");
  const Json* m = covering_mount(*trainer.c, path);
  const Json* vol = m == nullptr ? nullptr : find_volume(pod_spec(w), m->value("name", ""));
  if (vol == nullptr || !vol->contains("persistentVolumeClaim")) {
    p.push_back(where + ": a shared trainer keeps its models (" + path + ") on a " +
                "PersistentVolumeClaim; without them a restart starts a new lineage at the " +
                "cold-start defaults for every EPP");
  }
}

Problems check_render(const Render& r) {
  Problems p;
  if (!r.error.empty()) {
    return {r.name + ": " + r.error};
  }
  std::vector<PodInfo> pods;
  std::vector<PodCheck> pod_checks;
  int epp_pods = 0;
  for (const auto& d : r.docs) {
    if (!d.contains("kind") || !d.contains("metadata") || !d["metadata"].contains("name")) {
      p.push_back(r.name +
                  ": a document without kind or metadata.name: " + d.dump().substr(0, 200));
    }
  }
  for (const auto& d : r.docs) {
    if (!is_workload(d)) continue;
    const std::string w = r.name + " " + doc_id(d);
    const Json& spec = pod_spec(d);
    const Json labels = field(d["spec"]["template"]["metadata"], "labels", true);
    if (!selects(field(d["spec"], "selector", true).value("matchLabels", Json::object()), labels)) {
      p.push_back(w + ": spec.selector.matchLabels does not match the pod template's labels");
    }
    for (const auto& vol : field(spec, "volumes")) {
      if (vol.size() != 2) {  // its name and exactly one source
        p.push_back(w + ": volume " + vol.value("name", "?") +
                    " must have exactly one source: " + vol.dump());
      }
    }
    PodInfo pod{&d, {}};
    for (const auto& c : field(spec, "containers")) {
      const std::string where = w + " container " + c.value("name", "?");
      pod.views.push_back(view_container(c, r.docs, where, p));
      if (!pod.views.back().bin.empty()) {
        check_container(pod.views.back(), spec, where, p);
      }
    }
    pods.push_back(std::move(pod));
  }
  // The wiring once every pod is known: an EPP's trainer may be another workload's.
  for (const auto& pod : pods) {
    const Json& d = *pod.workload;
    const std::string w = r.name + " " + doc_id(d);
    PodCheck pc;
    const auto has = [&](const char* bin) {
      return std::any_of(pod.views.begin(), pod.views.end(), [&](auto& v) { return v.bin == bin; });
    };
    if (has("epp")) {
      ++epp_pods;
      check_epp_pod(pod.views, d, r.docs, pods, w, p, pc);
      for (const auto& v : pod.views) {
        if (v.bin == "epp") check_leader_election(v, d, r.docs, w, p);
      }
    } else if (has("trainer")) {
      for (const auto& v : pod.views) {
        if (v.bin == "trainer") check_shared_trainer(pod, v, w, p);
      }
    }
    pod_checks.push_back(std::move(pc));
  }
  if (epp_pods == 0) {
    p.push_back(r.name + ": renders no pod with an EPP container");
  }
  // Services: select a pod and target ports it has; the EPP's Service carries proxy + metrics.
  for (const auto& d : r.docs) {
    if (d.value("kind", "") != "Service") continue;
    const std::string w = r.name + " " + doc_id(d);
    const std::vector<const PodInfo*> selected = selected_pods(d, pods);
    if (selected.empty()) {
      p.push_back(w + ": selects no pod of these manifests");
      continue;
    }
    if (selected.size() > 1) {
      std::vector<std::string> names;
      for (const PodInfo* s : selected) names.push_back(doc_id(*s->workload));
      p.push_back(w + ": selects the pods of " + join(names, " and ") +
                  ": its traffic would be split between them (give each workload its own " +
                  "app.kubernetes.io/name)");
    }
    const PodInfo* target = selected.back();
    std::set<int> targets;
    for (const auto& port : field(d["spec"], "ports")) {
      Json tp = port.contains("targetPort") ? port["targetPort"] : port.value("port", Json());
      auto n = resolve_in_pod(*target, tp);
      if (!n) {
        p.push_back(w + ": targetPort " + tp.dump() + " is no containerPort of " +
                    doc_id(*target->workload));
      } else {
        targets.insert(*n);
      }
    }
    // The sidecars' and the trainer's listeners bind --host: a Service cannot reach loopback.
    for (const auto& v : target->views) {
      if (v.bin.empty() || v.bin == "epp") continue;
      for (int n : targets) {
        if (v.ports.count(n) && is_loopback(bind_host(v))) {
          p.push_back(w + ": targets port " + std::to_string(n) + ", which container " + v.name +
                      " binds on " + bind_host(v) + " only");
        }
      }
    }
    for (const auto& v : target->views) {
      if (v.bin != "epp") continue;
      // The gateway's ext_proc Service carries that port alone; every other EPP Service
      // carries the proxy and metrics ports.
      if (v.eff.count("ext-proc-port") && targets.size() == 1 &&
          targets.count(to_int(v.eff.at("ext-proc-port")).value_or(-1))) {
        continue;
      }
      // A Service cannot reach what the EPP binds on loopback; the proxy is exposed only
      // where it is open (the gateway overlay keeps it in the pod).
      for (int n : targets) {
        auto listener = epp_listener(v, n);
        if (listener && is_loopback(bind_host(v, *listener))) {
          p.push_back(w + ": targets port " + std::to_string(n) + ", which the EPP binds on " +
                      bind_host(v, *listener) + " only");
        }
      }
      for (const char* flag : {"port", "metrics-port"}) {
        auto n = to_int(v.eff.at(flag));
        if (std::string(flag) == "port" && is_loopback(bind_host(v))) continue;
        if (n && targets.count(*n) == 0) {
          p.push_back(w + ": does not expose the EPP's --" + flag + " " + v.eff.at(flag));
        }
      }
    }
  }
  // Pool addresses against what the same manifests run (examples must be self-contained).
  const bool example = r.name.rfind("examples/", 0) == 0;
  for (const auto& pc : pod_checks) {
    for (const auto& pod : pc.pool) {
      const std::string w = r.name + " pool pod " + pod.name + " (" + pod.address + ")";
      auto colon = pod.address.rfind(':');
      std::string host = pod.address.substr(0, colon);
      auto port = to_int(pod.address.substr(colon + 1));
      std::vector<std::string> labels = split(host, '.');
      bool found = false;
      if (labels.size() >= 2) {
        std::smatch m;
        static const std::regex kOrdinal(R"(^(.+)-([0-9]+)$)");
        if (std::regex_match(labels[0], m, kOrdinal)) {
          const Json* sts = find_doc(r.docs, "StatefulSet", m[1]);
          if (sts != nullptr) {
            found = true;
            int ordinal = std::stoi(m[2]);
            if (ordinal >= (*sts)["spec"].value("replicas", 1)) {
              p.push_back(w + ": StatefulSet " + std::string(m[1]) + " has no pod " + labels[0]);
            }
            std::string svc_name = (*sts)["spec"].value("serviceName", "");
            const Json* svc = find_doc(r.docs, "Service", svc_name);
            if (labels[1] != svc_name || svc == nullptr ||
                (*svc)["spec"].value("clusterIP", "") != "None") {
              p.push_back(w + ": " + labels[1] +
                          " must be the StatefulSet's headless serviceName " + svc_name);
            }
            for (const auto& pi : pods) {
              if (pi.workload == sts && (!port || !resolve_in_pod(pi, *port))) {
                p.push_back(w + ": port is no containerPort of StatefulSet " + std::string(m[1]));
              }
            }
          }
        }
      } else if (const Json* svc = find_doc(r.docs, "Service", host)) {
        found = true;
        bool has = false;
        for (const auto& sp : field((*svc)["spec"], "ports")) {
          has = has || (port && sp.value("port", 0) == *port);
        }
        if (!has)
          p.push_back(w + ": Service " + host + " has no port " + pod.address.substr(colon + 1));
      }
      if (!found && example) {
        p.push_back(w + ": the example does not run anything named " + host);
      }
    }
  }
  return p;
}

Render& cached(const std::string& rel) {
  static std::map<std::string, Render> renders;
  auto it = renders.find(rel);
  if (it == renders.end()) {
    it = renders.emplace(rel, render(kDeploy / rel)).first;
  }
  return it->second;
}

Json* deployment(Render& r, const std::string& name) {
  for (auto& d : r.docs) {
    if (d.value("kind", "") == "Deployment" && d["metadata"].value("name", "") == name) return &d;
  }
  return nullptr;
}

Json* container(Render& r, const std::string& name) {
  Json* d = deployment(r, "epp");
  if (d == nullptr) return nullptr;
  for (auto& c : (*d)["spec"]["template"]["spec"]["containers"]) {
    if (c.value("name", "") == name) return &c;
  }
  return nullptr;
}

std::vector<std::pair<std::string, int>> predictor_ports(Render& r) {
  std::vector<std::pair<std::string, int>> out;
  for (const auto& c : (*deployment(r, "epp"))["spec"]["template"]["spec"]["containers"]) {
    if (bin_of(c) == "predictor") {
      out.emplace_back(c.value("name", ""), c["ports"][0].value("containerPort", 0));
    }
  }
  std::sort(out.begin(), out.end(), [](auto& a, auto& b) { return a.second < b.second; });
  return out;
}

std::string env_value(const Json& c, const std::string& name) {
  for (const auto& e : field(c, "env")) {
    if (e.value("name", "") == name) return e.value("value", "");
  }
  return "";
}

// ---------------------------------------------------------------------------------------------
// Tests

TEST(DeployHelp, ParsesEveryOptionOfEachBinary) {
  // Guards the parser: if it found nothing, every name check below would be vacuous.
  const std::map<std::string, std::tuple<std::string, std::string, std::string>> expect = {
      {"trainer", {"port", "TRAINING_PORT", "8000"}},
      {"predictor", {"port", "PREDICT_PORT", "8001"}},
      {"epp", {"health-port", "EPP_HEALTH_PORT", "9003"}},
      {"modelsim", {"base-port", "MODELSIM_BASE_PORT", "9100"}}};
  for (const auto& [bin, e] : expect) {
    const Help& h = help_of(bin);
    EXPECT_GE(h.flags.size(), 10u) << bin;
    for (const auto& [name, o] : h.flags) {
      if (name != "help" && name != "version" && !h.upstream.count(name)) {
        EXPECT_FALSE(o.env.empty())
            << bin << " --" << name << ": every option but --help and the upstream ones has an env";
      }
    }
    auto [flag, env, def] = e;
    ASSERT_TRUE(h.flags.count(flag)) << bin << " --" << flag;
    EXPECT_EQ(h.flags.at(flag).env, env) << bin;
    EXPECT_EQ(h.flags.at(flag).default_value, def) << bin;
  }
  // Wrapped lines: the env name and the default of long options land on the next lines.
  const Help& t = help_of("trainer");
  EXPECT_EQ(t.env_flag.at("LATENCY_MAX_TRAINING_DATA_SIZE_PER_BUCKET"),
            "max-training-data-size-per-bucket");
  EXPECT_EQ(t.flags.at("ttft-gated-model-path").default_value,
            "/tmp/latency_models/ttft_gated.bin");
  EXPECT_EQ(t.flags.at("samples-path").default_value, "");
  EXPECT_EQ(help_of("epp").flags.at("prediction-server-url").env, "PREDICTION_SERVER_URL");
}

TEST(DeployYaml, EveryYamlFileUnderDeployParses) {
  int files = 0;
  for (const auto& e : fs::recursive_directory_iterator(kDeploy)) {
    if (!e.is_regular_file() || e.path().extension() != ".yaml") continue;
    ++files;
    SCOPED_TRACE(e.path().string());
    std::vector<Json> docs;
    ASSERT_NO_THROW(docs = load_yaml_documents(read_text(e.path())));
    EXPECT_FALSE(docs.empty());
    for (const auto& d : docs) {
      ASSERT_TRUE(d.is_object());
      if (d.contains("apiVersion") && d.value("kind", "") != "Kustomization" &&
          d.value("kind", "") != "Component") {
        EXPECT_TRUE(d.contains("metadata") && d["metadata"].contains("name"))
            << d.dump().substr(0, 200);
      }
    }
  }
  EXPECT_GE(files, 15);
}

TEST(DeployKustomize, EveryKustomizationRendersAndMatchesTheExecutables) {
  auto dirs = kustomization_dirs();
  std::set<std::string> names;
  for (const auto& dir : dirs) {
    Render& r = cached(fs::relative(dir, kDeploy).string());
    names.insert(r.name);
    std::cout << "[ deploy ] " << r.name << ": " << r.docs.size() << " objects (" << r.renderer
              << ")" << std::endl;
    Problems p = check_render(r);
    EXPECT_TRUE(p.empty()) << r.name << all_problems(p);
  }
  for (const char* want : {"base", "overlays/predictors-4", "overlays/persistent-models",
                           "overlays/heuristic", "overlays/gateway", "overlays/ha",
                           "overlays/shared-trainer", "examples/vllm", "examples/modelsim"}) {
    EXPECT_TRUE(names.count(want)) << want;
  }
}

// When a real kustomize is installed, the built-in renderer must agree with it (so the checks
// mean the same on machines without one). Generated names lose kustomize's hash suffix, and
// merge-keyed lists are compared as sets.
Json canonical(const Json& j, const std::set<std::string>& generated) {
  if (j.is_string()) {
    static const std::regex kHashed(R"(^(.*)-[a-z0-9]{10}$)");
    std::smatch m;
    std::string s = j.get<std::string>();
    if (std::regex_match(s, m, kHashed) && generated.count(m[1])) return std::string(m[1]);
    return j;
  }
  if (j.is_object()) {
    Json out = Json::object();
    for (const auto& [k, v] : j.items()) out[k] = canonical(v, generated);
    return out;
  }
  if (j.is_array()) {
    Json out = Json::array();
    for (const auto& v : j) out.push_back(canonical(v, generated));
    bool keyed = !out.empty();
    for (const auto& v : out) {
      keyed = keyed && v.is_object() &&
              (v.contains("name") || v.contains("mountPath") || v.contains("containerPort"));
    }
    if (keyed) {
      std::vector<Json> items(out.begin(), out.end());
      std::sort(items.begin(), items.end(),
                [](const Json& a, const Json& b) { return a.dump() < b.dump(); });
      out = Json(items);
    }
    return out;
  }
  return j;
}

TEST(DeployKustomize, BuiltInRendererAgreesWithKustomize) {
  std::string tool = external_renderer();
  if (tool.empty()) {
    GTEST_SKIP() << "no kustomize or kubectl on PATH: the built-in renderer is used alone";
  }
  for (const auto& dir : kustomization_dirs()) {
    Render lite = render_with(dir, "");
    Render real = render_with(dir, tool);
    ASSERT_TRUE(lite.error.empty()) << lite.name << ": " << lite.error;
    ASSERT_TRUE(real.error.empty()) << real.name << ": " << real.error;
    auto docs = [&](const Render& r) {
      std::map<std::string, Json> out;
      for (const auto& d : r.docs) {
        Json c = canonical(d, lite.generated);
        out[doc_id(c)] = c;
      }
      return out;
    };
    auto a = docs(lite);
    auto b = docs(real);
    ASSERT_EQ(a.size(), b.size()) << lite.name;
    for (const auto& [id, doc] : a) {
      ASSERT_TRUE(b.count(id)) << lite.name << ": " << id << " missing from " << tool;
      EXPECT_TRUE(doc == b[id]) << lite.name << " " << id << ": built-in vs " << tool
                                << " (JSON patch from one to the other):\n"
                                << Json::diff(doc, b[id]).dump(1);
    }
  }
}

TEST(DeployKustomize, BaseRunsTwoPredictorsAndTheOverlayFour) {
  Render& base = cached("base");
  Render& four = cached("overlays/predictors-4");
  ASSERT_TRUE(base.error.empty() && four.error.empty()) << base.error << four.error;
  using P = std::vector<std::pair<std::string, int>>;
  EXPECT_EQ(predictor_ports(base), (P{{"predictor-1", 8001}, {"predictor-2", 8002}}));
  EXPECT_EQ(predictor_ports(four), (P{{"predictor-1", 8001},
                                      {"predictor-2", 8002},
                                      {"predictor-3", 8003},
                                      {"predictor-4", 8004}}));
  EXPECT_EQ(
      env_value(*container(four, "epp"), "PREDICTION_SERVER_URL"),
      "http://127.0.0.1:8001,http://127.0.0.1:8002,http://127.0.0.1:8003,http://127.0.0.1:8004");
  EXPECT_EQ(env_value(*container(base, "epp"), "PREDICTION_SERVER_URL"),
            "http://127.0.0.1:8001,http://127.0.0.1:8002");
  // Nothing else of the base changes: same trainer, same EPP args.
  EXPECT_EQ(*container(base, "trainer"), *container(four, "trainer"));
  EXPECT_EQ((*container(base, "epp"))["args"], (*container(four, "epp"))["args"]);
}

TEST(DeployKustomize, PersistentOverlayPutsTrainerDataOnAClaim) {
  Render& r = cached("overlays/persistent-models");
  ASSERT_TRUE(r.error.empty()) << r.error;
  const Json& d = *deployment(r, "epp");
  const Json* vol = find_volume(pod_spec(d), "trainer-models");
  ASSERT_NE(vol, nullptr);
  EXPECT_FALSE(vol->contains("emptyDir")) << vol->dump();
  ASSERT_TRUE(vol->contains("persistentVolumeClaim")) << vol->dump();
  std::string claim = (*vol)["persistentVolumeClaim"].value("claimName", "");
  EXPECT_NE(find_doc(r.docs, "PersistentVolumeClaim", claim), nullptr) << claim;
  EXPECT_EQ(d["spec"]["strategy"].value("type", ""), "Recreate");
  // The trainer's models and samples are on that volume.
  const Json& t = *container(r, "trainer");
  Problems p;
  ContainerView v = view_container(t, r.docs, "trainer", p);
  EXPECT_TRUE(p.empty()) << all_problems(p);
  for (const char* flag :
       {"ttft-model-path", "tpot-model-path", "ttft-gated-model-path", "tpot-gated-model-path"}) {
    const Json* m = covering_mount(t, v.eff.at(flag));
    ASSERT_NE(m, nullptr) << flag;
    EXPECT_EQ(m->value("name", ""), "trainer-models") << flag;
  }
  EXPECT_EQ(v.eff.at("samples-path"), "") << "samples default to the TTFT model's directory";
}

std::string pool_file(Render& r) {
  const Json* cm = find_doc(r.docs, "ConfigMap", "epp-config");
  return cm == nullptr ? "" : (*cm)["data"].value("pool.yaml", "");
}

TEST(DeployKustomize, HeuristicOverlaySwitchesOnlyThePipeline) {
  Render& base = cached("base");
  Render& heur = cached("overlays/heuristic");
  ASSERT_TRUE(base.error.empty() && heur.error.empty());
  Json b = load_yaml_documents(pool_file(base)).at(0);
  Json h = load_yaml_documents(pool_file(heur)).at(0);
  EXPECT_EQ(b.value("pipeline", ""), "default-pipeline.yaml");
  EXPECT_EQ(h.value("pipeline", ""), "load-prefix.yaml");
  h["pipeline"] = b["pipeline"];
  EXPECT_EQ(b, h) << "overlays/heuristic/pool.yaml must list the same pool as deploy/base";
}

TEST(DeployConfig, ManifestsShipTheFilesTheLocalStackUses) {
  // scripts/run-stack.sh points the EPP at epp/config/<file>; the base ConfigMap ships the
  // same files, byte for byte, with every pipeline of epp/config.
  std::string script = read_text(kSource / "scripts" / "run-stack.sh");
  std::set<std::string> used;
  std::regex ref(R"(epp/config/([A-Za-z0-9_.-]+\.yaml))");
  for (auto it = std::sregex_iterator(script.begin(), script.end(), ref);
       it != std::sregex_iterator(); ++it) {
    used.insert((*it)[1]);
  }
  EXPECT_FALSE(used.empty()) << "run-stack.sh names no epp/config file";
  std::set<std::string> pipelines;
  for (const auto& e : fs::directory_iterator(kSource / "epp" / "config")) {
    if (e.path().extension() != ".yaml") continue;  // the folder also holds the loader's sources
    Json d = load_yaml_documents(read_text(e.path())).at(0);
    if (!d.contains("pool")) pipelines.insert(e.path().filename().string());
  }
  EXPECT_EQ(pipelines, (std::set<std::string>{"default-pipeline.yaml", "upstream-pipeline.yaml",
                                              "load-prefix.yaml", "round-robin.yaml"}));
  used.insert(pipelines.begin(), pipelines.end());
  Render& base = cached("base");
  const Json* cm = find_doc(base.docs, "ConfigMap", "epp-config");
  ASSERT_NE(cm, nullptr);
  for (const auto& f : used) {
    if (f == "local-pool.yaml") continue;  // loopback pods: the manifests have their own pool
    EXPECT_EQ(read_text(kDeploy / "base" / "config" / f), read_text(kSource / "epp" / "config" / f))
        << "deploy/base/config/" << f << " differs from epp/config/" << f << " (cp epp/config/" << f
        << " deploy/base/config/)";
    ASSERT_TRUE((*cm)["data"].contains(f)) << f << " is not in the epp-config ConfigMap";
    EXPECT_EQ((*cm)["data"][f].get<std::string>(), read_text(kSource / "epp" / "config" / f)) << f;
  }
}

TEST(DeployConfig, PodMonitorScrapesEveryContainerPort) {
  Render& four = cached("overlays/predictors-4");
  ASSERT_TRUE(four.error.empty());
  const Json& d = *deployment(four, "epp");
  std::set<std::string> names;
  for (const auto& c : pod_spec(d)["containers"]) {
    for (const auto& port : c["ports"]) names.insert(port.value("name", ""));
  }
  names.erase("http");
  names.erase("health");
  Json pm = load_yaml_documents(read_text(kDeploy / "monitoring" / "podmonitor.yaml")).at(0);
  EXPECT_TRUE(
      selects(pm["spec"]["selector"]["matchLabels"], d["spec"]["template"]["metadata"]["labels"]));
  std::set<std::string> scraped;
  for (const auto& ep : pm["spec"]["podMetricsEndpoints"]) {
    scraped.insert(ep.value("port", ""));
    EXPECT_EQ(ep.value("path", ""), "/metrics");
    // The EPP's own `pod` label (the vLLM pod) must not become `exported_pod`.
    EXPECT_TRUE(ep.value("honorLabels", false)) << ep.value("port", "") << ": honorLabels";
  }
  EXPECT_EQ(scraped, names);
}

// The HA overlay is the gateway layout with leader election: the same objects, plus the Lease
// RBAC and a PodDisruptionBudget; the EPP Deployment differs only in replicas, rollout,
// spreading and the epp container's leader-election environment.
TEST(DeployConfig, HaOverlayIsTheGatewayLayoutWithTwoElectedEpps) {
  Render& gateway = cached("overlays/gateway");
  Render& ha = cached("overlays/ha");
  ASSERT_TRUE(gateway.error.empty() && ha.error.empty()) << gateway.error << ha.error;
  // Generated ConfigMaps are compared without kustomize's name hash: the shared trainer changes
  // predictor-config, hence its hash.
  const std::set<std::string> generated = render_lite(kDeploy / "overlays" / "ha").generated_names;
  std::map<std::string, Json> by_id;
  for (const auto& d : ha.docs) {
    Json c = canonical(d, generated);
    by_id[doc_id(c)] = c;
  }
  for (const auto& raw : gateway.docs) {
    const Json d = canonical(raw, generated);
    const std::string id = doc_id(d);
    ASSERT_TRUE(by_id.count(id)) << "overlays/ha lacks " << id;
    if (id == "Deployment/epp") continue;
    Json want = d;
    if (id == "ConfigMap/predictor-config") {
      want["data"]["TRAINING_SERVER_URL"] = "http://trainer:8000";  // the shared trainer
    }
    EXPECT_EQ(by_id[id], want) << id;
    by_id.erase(id);
  }
  Json ha_epp = by_id.at("Deployment/epp");
  by_id.erase("Deployment/epp");
  std::set<std::string> added;
  for (const auto& [id, d] : by_id) added.insert(id);
  // Plus the shared trainer (components/shared-trainer, checked by SharedTrainer* below).
  EXPECT_EQ(added,
            (std::set<std::string>{"PodDisruptionBudget/epp", "Role/epp-leader-election",
                                   "RoleBinding/epp-leader-election", "Deployment/trainer",
                                   "Service/trainer", "PersistentVolumeClaim/trainer-models"}));
  EXPECT_EQ(ha_epp["spec"]["replicas"], 2);
  Json env = Json::array();
  for (auto& c : ha_epp["spec"]["template"]["spec"]["containers"]) {
    if (c["name"] == "epp") {
      std::swap(env, c["env"]);
      c.erase("env");
    }
  }
  std::set<std::string> names;
  for (const auto& e : env) names.insert(e.value("name", ""));
  for (const char* want : {"EPP_LEADER_ELECT", "POD_NAME", "PREDICTION_SERVER_URL"}) {
    EXPECT_TRUE(names.count(want)) << want;
  }
  for (const auto& e : env) {
    if (e.value("name", "") == "TRAINING_SERVER_URL") {
      EXPECT_EQ(e.value("value", ""), "http://trainer:8000")
          << "overlays/ha uses the shared trainer";
    }
  }
  Json gateway_epp = canonical(*find_doc(gateway.docs, "Deployment", "epp"), generated);
  for (auto& c : gateway_epp["spec"]["template"]["spec"]["containers"]) {
    if (c["name"] == "epp") c.erase("env");
  }
  // The shared trainer replaces the sidecar and its volume.
  for (const char* list : {"containers", "volumes"}) {
    Json& items = gateway_epp["spec"]["template"]["spec"][list];
    items.erase(std::remove_if(items.begin(), items.end(),
                               [](const Json& i) {
                                 return i["name"] == "trainer" || i["name"] == "trainer-models";
                               }),
                items.end());
  }
  for (Json* d : {&ha_epp, &gateway_epp}) {
    (*d)["spec"].erase("replicas");
    (*d)["spec"].erase("strategy");
    (*d)["spec"]["template"]["spec"].erase("topologySpreadConstraints");
  }
  EXPECT_EQ(ha_epp, gateway_epp)
      << "overlays/ha changes more of the EPP pod than leader election and the shared trainer need";
}

// The leader-election checks must be able to fail too: break the rendered HA overlay.
TEST(DeployChecks, DetectLeaderElectionDrift) {
  const Render& good = cached("overlays/ha");
  ASSERT_TRUE(good.error.empty()) << good.error;
  ASSERT_TRUE(check_render(good).empty()) << all_problems(check_render(good));
  auto set_env = [](Render& r, const std::string& name, const std::string& value) {
    for (auto& e : (*container(r, "epp"))["env"]) {
      if (e["name"] == name) e = {{"name", name}, {"value", value}};
    }
  };
  auto doc = [](Render& r, const std::string& kind, const std::string& name) -> Json& {
    for (auto& d : r.docs) {
      if (d.value("kind", "") == kind && d["metadata"].value("name", "") == name) return d;
    }
    throw std::runtime_error("no " + kind + "/" + name);
  };
  struct Case {
    std::string what;
    std::function<void(Render&)> breakit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"one replica", [](Render& r) { (*deployment(r, "epp"))["spec"]["replicas"] = 1; },
       "there is no standby to take over"},
      {"one identity for all", [&](Render& r) { set_env(r, "POD_NAME", "epp"); },
       "must come from the pod's metadata.name"},
      {"lease timing set by its old env",
       [&](Render& r) {
         (*container(r, "epp"))["env"].push_back(
             {{"name", "EPP_LEADER_ELECT_RENEW_DEADLINE_S"}, {"value", "15"}});
       },
       "refuses: the setting moved to the config file"},
      {"Lease RBAC without update",
       [&](Render& r) {
         doc(r, "Role", "epp-leader-election")["rules"][1]["verbs"] = Json::array({"get"});
       },
       "may not update Lease llmd-epp-vllm"},
      {"Lease RBAC for another Lease",
       [&](Render& r) {
         doc(r, "Role", "epp-leader-election")["rules"][1]["resourceNames"] =
             Json::array({"llmd-epp"});
       },
       "may not get Lease llmd-epp-vllm"},
      {"create limited by name",
       [&](Render& r) {
         doc(r, "Role", "epp-leader-election")["rules"][0]["resourceNames"] =
             Json::array({"llmd-epp-vllm"});
       },
       "may not create Lease"},
      {"Lease RBAC bound to another account",
       [&](Render& r) {
         doc(r, "RoleBinding", "epp-leader-election")["subjects"][0]["name"] = "default";
       },
       "service account epp may not get Lease"},
      {"Lease in another namespace",
       [&](Render& r) {
         (*container(r, "epp"))["env"].push_back(
             {{"name", "EPP_LEADER_ELECT_LEASE_NAMESPACE"}, {"value", "kube-system"}});
       },
       "moves the Lease out of the pod's namespace"},
      {"no disruption budget",
       [&](Render& r) {
         doc(r, "PodDisruptionBudget", "epp")["spec"]["selector"]["matchLabels"] = {{"app", "x"}};
       },
       "no PodDisruptionBudget selects the EPP pods"},
      {"a budget no eviction meets",
       [&](Render& r) { doc(r, "PodDisruptionBudget", "epp")["spec"]["minAvailable"] = 2; },
       "only the leader is ever ready"},
      {"rollout that cannot finish",
       [](Render& r) { (*deployment(r, "epp"))["spec"].erase("strategy"); },
       "never finishes under --leader-elect"},
  };
  for (const auto& c : cases) {
    Render broken = good;
    c.breakit(broken);
    Problems p = check_render(broken);
    bool hit = std::any_of(p.begin(), p.end(),
                           [&](auto& s) { return s.find(c.expect) != std::string::npos; });
    EXPECT_TRUE(hit) << c.what << ": expected a problem containing '" << c.expect
                     << "', got:" << (p.empty() ? std::string(" none") : all_problems(p));
  }
}

// overlays/shared-trainer and overlays/ha: one trainer for every EPP pod
// (components/shared-trainer). No trainer sidecar in the EPP pod; the EPP's feedback and every
// predictor's model sync go to Service trainer, which sends port 8000 (and nothing else) to a
// one-replica, Recreate Deployment whose samples and models are on a PVC; only the EPP pod
// changes otherwise. check_render() checks the same rules in every layout
// (DetectSharedTrainerDrift).
void expect_shared_trainer(Render& r) {
  SCOPED_TRACE(r.name);
  ASSERT_TRUE(r.error.empty()) << r.error;
  const Json* epp = deployment(r, "epp");
  const Json* trainer = deployment(r, "trainer");
  ASSERT_NE(epp, nullptr);
  ASSERT_NE(trainer, nullptr);
  Problems p;
  int predictors = 0;
  for (const auto& c : pod_spec(*epp)["containers"]) {
    EXPECT_NE(bin_of(c), "trainer") << "the EPP pod still runs a trainer sidecar: " << c["name"];
    ContainerView v = view_container(c, r.docs, c.value("name", ""), p);
    if (v.bin == "epp" || v.bin == "predictor") {
      EXPECT_EQ(v.eff.at("training-server-url"), "http://trainer:8000") << v.name;
      predictors += v.bin == "predictor";
    }
  }
  EXPECT_GE(predictors, 2);
  EXPECT_EQ(find_volume(pod_spec(*epp), "trainer-models"), nullptr)
      << "the EPP pod keeps the sidecar's volume";
  // The trainer: one replica, Recreate, samples and models on the claim, the base's settings.
  EXPECT_EQ((*trainer)["spec"].value("replicas", 0), 1);
  EXPECT_EQ((*trainer)["spec"]["strategy"].value("type", ""), "Recreate");
  const auto& containers = pod_spec(*trainer)["containers"];
  ASSERT_EQ(containers.size(), 1u);
  ContainerView t = view_container(containers[0], r.docs, "trainer", p);
  EXPECT_EQ(t.bin, "trainer");
  for (const char* flag :
       {"ttft-model-path", "tpot-model-path", "ttft-gated-model-path", "tpot-gated-model-path"}) {
    const Json* m = covering_mount(containers[0], t.eff.at(flag));
    ASSERT_NE(m, nullptr) << flag;
    const Json* vol = find_volume(pod_spec(*trainer), m->value("name", ""));
    ASSERT_NE(vol, nullptr) << flag;
    ASSERT_TRUE(vol->contains("persistentVolumeClaim")) << flag << ": " << vol->dump();
    EXPECT_NE(find_doc(r.docs, "PersistentVolumeClaim",
                       (*vol)["persistentVolumeClaim"].value("claimName", "")),
              nullptr);
  }
  EXPECT_EQ(t.eff.at("samples-path"), "") << "samples default to the TTFT model's directory";
  EXPECT_EQ(t.eff.at("host"), "0.0.0.0") << "the Service reaches the pod IP";
  // The Service: ClusterIP, port 8000 only, to the trainer's port; the EPP's Services do not
  // select the trainer (nor the other way round).
  const Json* svc = find_doc(r.docs, "Service", "trainer");
  ASSERT_NE(svc, nullptr);
  EXPECT_EQ((*svc)["spec"].value("type", "ClusterIP"), "ClusterIP");
  ASSERT_EQ((*svc)["spec"]["ports"].size(), 1u) << (*svc)["spec"]["ports"].dump();
  EXPECT_EQ((*svc)["spec"]["ports"][0].value("port", 0), 8000);
  const Json labels = (*trainer)["spec"]["template"]["metadata"]["labels"];
  const Json epp_labels = (*epp)["spec"]["template"]["metadata"]["labels"];
  for (const auto& d : r.docs) {
    if (d.value("kind", "") != "Service" && d.value("kind", "") != "PodDisruptionBudget") continue;
    const Json sel = d.value("kind", "") == "Service"
                         ? field(d["spec"], "selector", true)
                         : field(field(d["spec"], "selector", true), "matchLabels", true);
    const bool is_trainer_svc = doc_id(d) == "Service/trainer";
    EXPECT_EQ(selects(sel, labels), is_trainer_svc) << doc_id(d);
    if (is_trainer_svc) {
      EXPECT_FALSE(selects(sel, epp_labels));
    }
  }
  // Both pods take the admin token from the one Secret (checked in every layout below).
  EXPECT_TRUE(t.secret_env.count("LLMD_ADMIN_TOKEN"));
  // The Prometheus Operator scrapes the trainer's pod too.
  bool scraped = false;
  for (const auto& pm :
       load_yaml_documents(read_text(kDeploy / "monitoring" / "podmonitor.yaml"))) {
    if (!selects(pm["spec"]["selector"]["matchLabels"], labels)) continue;
    for (const auto& ep : pm["spec"]["podMetricsEndpoints"]) {
      scraped =
          scraped || (ep.value("port", "") == "trainer" && ep.value("path", "") == "/metrics");
    }
  }
  EXPECT_TRUE(scraped) << "no PodMonitor in deploy/monitoring scrapes the shared trainer";
  EXPECT_TRUE(p.empty()) << all_problems(p);
  Problems all = check_render(r);
  EXPECT_TRUE(all.empty()) << all_problems(all);
}

TEST(DeployConfig, SharedTrainerOverlayFeedsOneTrainerFromEveryEppPod) {
  Render& base = cached("base");
  Render& shared = cached("overlays/shared-trainer");
  expect_shared_trainer(shared);
  // The trainer container is the base's sidecar, moved: same image, args, env and probes.
  Json sidecar = *container(base, "trainer");
  Json moved;
  for (const auto& d : shared.docs) {
    if (doc_id(d) == "Deployment/trainer") moved = pod_spec(d)["containers"][0];
  }
  EXPECT_EQ(canonical(moved, shared.generated), canonical(sidecar, base.generated));
  // Nothing else of the EPP pod changes: same EPP args, same predictors.
  EXPECT_EQ((*container(base, "epp"))["args"], (*container(shared, "epp"))["args"]);
  EXPECT_EQ(predictor_ports(base), predictor_ports(shared));
}

TEST(DeployConfig, HaOverlayUsesTheSharedTrainer) {
  expect_shared_trainer(cached("overlays/ha"));
}

// The shared-trainer checks must be able to fail: break the rendered overlay.
TEST(DeployChecks, DetectSharedTrainerDrift) {
  const Render& good = cached("overlays/shared-trainer");
  ASSERT_TRUE(good.error.empty()) << good.error;
  ASSERT_TRUE(check_render(good).empty()) << all_problems(check_render(good));
  auto doc = [](Render& r, const std::string& kind, const std::string& name) -> Json& {
    for (auto& d : r.docs) {
      if (d.value("kind", "") == kind && d["metadata"].value("name", "") == name) return d;
    }
    throw std::runtime_error("no " + kind + "/" + name);
  };
  auto trainer = [&](Render& r) -> Json& {
    return doc(r, "Deployment", "trainer")["spec"]["template"]["spec"]["containers"][0];
  };
  auto set_env = [](Json& c, const std::string& name, const std::string& value) {
    for (auto& e : c["env"]) {
      if (e["name"] == name) e = {{"name", name}, {"value", value}};
    }
  };
  auto predictor_cm = [](Render& r) -> Json& {
    for (auto& d : r.docs) {
      if (d.value("kind", "") == "ConfigMap" &&
          d["metadata"].value("name", "").rfind("predictor-config", 0) == 0) {
        return d;
      }
    }
    throw std::runtime_error("no predictor-config");
  };
  struct Case {
    std::string what;
    std::function<void(Render&)> breakit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"EPP still on the sidecar's loopback URL",
       [&](Render& r) {
         set_env(*container(r, "epp"), "TRAINING_SERVER_URL", "http://127.0.0.1:8000");
       },
       "is loopback, and no trainer container of this pod listens on 8000"},
      {"EPP aimed at a Service that does not exist",
       [&](Render& r) {
         set_env(*container(r, "epp"), "TRAINING_SERVER_URL", "http://trainers:8000");
       },
       "names Service trainers, which is not in the manifests"},
      {"EPP aimed at a port the Service lacks",
       [&](Render& r) {
         set_env(*container(r, "epp"), "TRAINING_SERVER_URL", "http://trainer:8001");
       },
       "names port 8001, which Service trainer does not have"},
      {"predictors syncing from loopback",
       [&](Render& r) { predictor_cm(r)["data"]["TRAINING_SERVER_URL"] = "http://127.0.0.1:8000"; },
       "predictor-1 syncs from 'http://127.0.0.1:8000', the EPP's trainer is http://trainer:8000"},
      {"Service to the wrong port",
       [&](Render& r) { doc(r, "Service", "trainer")["spec"]["ports"][0]["targetPort"] = 8001; },
       "targetPort 8001 is no containerPort of Deployment/trainer"},
      {"two trainers", [&](Render& r) { doc(r, "Deployment", "trainer")["spec"]["replicas"] = 2; },
       "a shared trainer needs exactly 1 replica, has 2"},
      {"rolling update",
       [&](Render& r) { doc(r, "Deployment", "trainer")["spec"].erase("strategy"); },
       "a shared trainer needs strategy Recreate"},
      {"models on an emptyDir",
       [&](Render& r) {
         for (auto& v : doc(r, "Deployment", "trainer")["spec"]["template"]["spec"]["volumes"]) {
           if (v["name"] == "trainer-models")
             v = {{"name", "trainer-models"}, {"emptyDir", Json::object()}};
         }
       },
       "keeps its models (/var/lib/llmd/trainer/ttft.ubj) on a PersistentVolumeClaim"},
      {"trainer labelled like the EPP",
       [&](Render& r) {
         Json& d = doc(r, "Deployment", "trainer");
         d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] = "llmd-epp";
         d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] = "llmd-epp";
       },
       "Service/epp: selects the pods of"},
      {"trainer on loopback behind its Service",
       [&](Render& r) {
         trainer(r)["env"].push_back({{"name", "TRAINING_HOST"}, {"value", "127.0.0.1"}});
       },
       "targets port 8000, which container trainer binds on 127.0.0.1 only"},
      {"EPP with another token than the shared trainer",
       [&](Render& r) {
         for (auto& e : trainer(r)["env"]) {
           if (e["name"] == "LLMD_ADMIN_TOKEN") e["valueFrom"]["secretKeyRef"]["name"] = "other";
         }
       },
       "the EPP's admin token (llmd-admin-token/token) is not the trainer's (other/token)"},
  };
  for (const auto& c : cases) {
    Render broken = good;
    c.breakit(broken);
    Problems p = check_render(broken);
    bool hit = std::any_of(p.begin(), p.end(),
                           [&](auto& s) { return s.find(c.expect) != std::string::npos; });
    EXPECT_TRUE(hit) << c.what << ": expected a problem containing '" << c.expect
                     << "', got:" << (p.empty() ? std::string(" none") : all_problems(p));
  }
}

// Every layout wires the admin token the same way: one Secret the operator creates, read by the
// EPP (which sends it to the trainer) and by every sidecar (which requires it), and binds each
// EPP listener only where the pod needs it.
TEST(DeployConfig, AdminTokenFromOneSecretAndListenersBoundWherePodsNeedThem) {
  for (const auto& dir : kustomization_dirs()) {
    const std::string rel = fs::relative(dir, kDeploy).string();
    Render& r = cached(rel);
    ASSERT_TRUE(r.error.empty()) << rel << ": " << r.error;
    EXPECT_EQ(find_doc(r.docs, "Secret", "llmd-admin-token"), nullptr)
        << rel << ": a token in the repository is known to everyone; the operator creates it";
    ASSERT_NE(deployment(r, "epp"), nullptr) << rel;
    int wired = 0;
    std::set<std::string> bins;
    for (const auto& d : r.docs) {  // the EPP pod, and a shared trainer's pod
      if (!is_workload(d)) continue;
      for (const auto& c : pod_spec(d)["containers"]) {
        const std::string bin = bin_of(c);
        if (bin != "epp" && bin != "trainer" && bin != "predictor") continue;
        Json ref;
        for (const auto& e : field(c, "env")) {
          if (e.value("name", "") == "LLMD_ADMIN_TOKEN") ref = e["valueFrom"]["secretKeyRef"];
        }
        EXPECT_EQ(ref, (Json{{"name", "llmd-admin-token"}, {"key", "token"}}))
            << rel << " " << doc_id(d) << " container " << c.value("name", "");
        ++wired;
        bins.insert(bin);
      }
    }
    EXPECT_GE(wired, 4) << rel << ": the EPP, the trainer and at least two predictors";
    EXPECT_EQ(bins.size(), 3u) << rel << ": the EPP, a trainer and predictors";
    std::map<std::string, std::string> args;
    for (const auto& a : (*container(r, "epp"))["args"]) {
      const std::string text = a.get<std::string>();
      args[text.substr(0, text.find('='))] = text.substr(text.find('=') + 1);
    }
    const bool gateway = args.count("--ext-proc-port") > 0 && args["--ext-proc-port"] != "0";
    EXPECT_EQ(args["--host"], gateway ? "127.0.0.1" : "0.0.0.0")
        << rel << ": the proxy is open only where clients call it directly";
    EXPECT_EQ(args["--health-host"], "0.0.0.0") << rel;
    EXPECT_EQ(args["--metrics-host"], "0.0.0.0") << rel;
    if (gateway) {
      EXPECT_EQ(args["--ext-proc-host"], "0.0.0.0") << rel;
    } else {
      EXPECT_EQ(args["--ext-proc-port"], "0")
          << rel << ": the image's default (upstream's 9002) is turned off where no gateway calls";
    }
  }
  const std::string readme = read_text(kDeploy / "README.md");
  EXPECT_NE(readme.find("kubectl -n llm create secret generic llmd-admin-token"), std::string::npos)
      << "deploy/README.md says how to create the token Secret";
}

// The checks must be able to fail: break a rendered base in typical ways, one at a time.
TEST(DeployChecks, DetectDrift) {
  const Render& good = cached("base");
  ASSERT_TRUE(good.error.empty()) << good.error;
  ASSERT_TRUE(check_render(good).empty());
  struct Case {
    std::string what;
    std::function<void(Render&)> breakit;
    std::string expect;  // a fragment of the problem reported
  };
  auto cm_key = [](Render& r, const std::string& prefix) -> Json& {
    for (auto& d : r.docs) {
      if (d.value("kind", "") == "ConfigMap" &&
          d["metadata"].value("name", "").rfind(prefix, 0) == 0) {
        return d;
      }
    }
    throw std::runtime_error("no ConfigMap " + prefix);
  };
  const std::vector<Case> cases = {
      {"misspelt flag",
       [](Render& r) { (*container(r, "predictor-1"))["args"][0] = "--prot=8001"; },
       "flag --prot is not an option of predictor"},
      {"unknown env name",
       [](Render& r) {
         (*container(r, "epp"))["env"].push_back(
             {{"name", "PREDICTION_SERVER_URLS"}, {"value", "x"}});
       },
       "env PREDICTION_SERVER_URLS is not an option of epp"},
      {"unknown env in a sidecar ConfigMap",
       [&](Render& r) { cm_key(r, "trainer-config")["data"]["LATENCY_RETRAIN_INTERVAL"] = "5"; },
       "env LATENCY_RETRAIN_INTERVAL (from ConfigMap"},
      {"containerPort off",
       [](Render& r) { (*container(r, "trainer"))["ports"][0]["containerPort"] = 8010; },
       "but trainer listens on [8000]"},
      {"port flag without containerPort",
       [](Render& r) { (*container(r, "epp"))["args"].push_back("--metrics-port=9091"); },
       "but epp listens on"},
      {"liveness on /readyz",
       [](Render& r) {
         (*container(r, "predictor-2"))["livenessProbe"]["httpGet"]["path"] = "/readyz";
       },
       "livenessProbe GETs /readyz, expected /healthz"},
      {"probe on the wrong port",
       [](Render& r) { (*container(r, "epp"))["readinessProbe"]["httpGet"]["port"] = 8080; },
       "readinessProbe port 8080 is not the container's health port 9003"},
      {"predictor missing from the EPP's list",
       [](Render& r) {
         for (auto& e : (*container(r, "epp"))["env"]) {
           if (e["name"] == "PREDICTION_SERVER_URL") e["value"] = "http://127.0.0.1:8001";
         }
       },
       "PREDICTION_SERVER_URL is 'http://127.0.0.1:8001' but the pod's predictors are"},
      {"pipeline copy drifted",
       [&](Render& r) {
         auto& data = cm_key(r, "epp-config")["data"];
         data["load-prefix.yaml"] = data["load-prefix.yaml"].get<std::string>() + "# edited\n";
       },
       "differs from epp/config/load-prefix.yaml"},
      {"pool names a missing pipeline",
       [&](Render& r) {
         auto& data = cm_key(r, "epp-config")["data"];
         data.erase("default-pipeline.yaml");
       },
       "is not a file of ConfigMap"},
      {"two predictors share a model dir",
       [](Render& r) {
         (*container(r, "predictor-2"))["volumeMounts"][0]["subPath"] = "predictor-1";
       },
       "shares its model directory"},
      {"objective mismatch",
       [](Render& r) {
         (*container(r, "predictor-1"))["env"] =
             Json::array({{{"name", "LATENCY_OBJECTIVE_TYPE"}, {"value", "mean"}}});
       },
       "--objective-type mean differs from the trainer's quantile"},
      {"model path off the volume",
       [](Render& r) {
         (*container(r, "trainer"))["args"].push_back("--ttft-model-path=/opt/ttft.ubj");
       },
       "--ttft-model-path /opt/ttft.ubj is not on a writable volume mount"},
      {"unquoted env value",
       [](Render& r) {
         (*container(r, "epp"))["env"].push_back({{"name", "EPP_IO_THREADS"}, {"value", 4}});
       },
       "must be a string"},
      {"Service targets a missing port",
       [](Render& r) {
         for (auto& d : r.docs) {
           if (d["kind"] == "Service") d["spec"]["ports"][1]["targetPort"] = "metricz";
         }
       },
       "targetPort \"metricz\" is no containerPort"},
      {"volume with two sources",
       [](Render& r) {
         for (auto& v : (*deployment(r, "epp"))["spec"]["template"]["spec"]["volumes"]) {
           if (v["name"] == "trainer-models") v["persistentVolumeClaim"] = {{"claimName", "x"}};
         }
       },
       "must have exactly one source"},
      {"registry-prefixed image is still checked",
       [](Render& r) {
         (*container(r, "trainer"))["image"] = "registry.example.com/team/llmd/trainer:v1";
         (*container(r, "trainer"))["args"][0] = "--prot=8000";
       },
       "flag --prot is not an option of trainer"},
      {"sidecar on the pod IP without the admin token",
       [](Render& r) {
         Json& env = (*container(r, "predictor-2"))["env"];
         env.erase(std::remove_if(env.begin(), env.end(),
                                  [](const Json& e) { return e["name"] == "LLMD_ADMIN_TOKEN"; }),
                   env.end());
       },
       "container predictor-2: listens on 0.0.0.0 without an admin token"},
      {"admin token written into the manifest",
       [](Render& r) {
         for (auto& e : (*container(r, "trainer"))["env"]) {
           if (e["name"] == "LLMD_ADMIN_TOKEN")
             e = {{"name", "LLMD_ADMIN_TOKEN"}, {"value", "s3cret"}};
         }
       },
       "container trainer: the admin token is written into the manifests"},
      {"EPP with another token than the trainer",
       [](Render& r) {
         for (auto& e : (*container(r, "epp"))["env"]) {
           if (e["name"] == "LLMD_ADMIN_TOKEN") e["valueFrom"]["secretKeyRef"]["name"] = "other";
         }
       },
       "the EPP's admin token (other/token) is not the trainer's (llmd-admin-token/token)"},
      {"health port on loopback",
       [](Render& r) {
         for (auto& a : (*container(r, "epp"))["args"]) {
           if (a == "--health-host=0.0.0.0") a = "--health-host=127.0.0.1";
         }
       },
       "container epp: serves its probes on 127.0.0.1 only"},
      {"Service in front of a loopback proxy",
       [](Render& r) {
         for (auto& a : (*container(r, "epp"))["args"]) {
           if (a == "--host=0.0.0.0") a = "--host=127.0.0.1";
         }
       },
       "targets port 8080, which the EPP binds on 127.0.0.1 only"},
      {"metrics on loopback",
       [](Render& r) {
         for (auto& a : (*container(r, "epp"))["args"]) {
           if (a == "--metrics-host=0.0.0.0") a = "--metrics-host=127.0.0.1";
         }
       },
       "the EPP's metrics port binds 127.0.0.1 only"},
      {"scrape annotation on the wrong port",
       [](Render& r) {
         (*deployment(r,
                      "epp"))["spec"]["template"]["metadata"]["annotations"]["prometheus.io/port"] =
             "9003";
       },
       "annotations must name the EPP's metrics port 9090"},
  };
  for (const auto& c : cases) {
    Render broken = good;
    c.breakit(broken);
    Problems p = check_render(broken);
    bool hit = std::any_of(p.begin(), p.end(),
                           [&](auto& s) { return s.find(c.expect) != std::string::npos; });
    EXPECT_TRUE(hit) << c.what << ": expected a problem containing '" << c.expect
                     << "', got:" << (p.empty() ? std::string(" none") : all_problems(p));
  }
}

// ---------------------------------------------------------------------------------------------
// Container build files

struct Dockerfile {
  std::vector<std::string> froms;
  std::vector<std::vector<std::string>> stages;  // instructions per stage, continuations joined
};

Dockerfile parse_dockerfile(const std::string& text) {
  Dockerfile d;
  std::string current;
  for (std::string line : split(text, '\n')) {
    auto first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    bool cont = !line.empty() && line.back() == '\\';
    if (cont) line.pop_back();
    current += line + " ";
    if (cont) continue;
    std::string instr = std::regex_replace(current, std::regex(R"(\s+)"), " ");
    instr = instr.substr(instr.find_first_not_of(' '));
    instr.erase(instr.find_last_not_of(' ') + 1);
    current.clear();
    if (instr.rfind("FROM ", 0) == 0) {
      d.froms.push_back(instr.substr(5));
      d.stages.emplace_back();
    } else if (!d.stages.empty()) {
      d.stages.back().push_back(instr);
    }
  }
  return d;
}

std::set<std::string> apt_packages(const std::vector<std::string>& stage) {
  std::set<std::string> out;
  for (const auto& instr : stage) {
    auto at = instr.find("apt-get install");
    if (at == std::string::npos) continue;
    std::stringstream ss(instr.substr(at + 15));
    std::string tok;
    while (ss >> tok && tok != "&&" && tok != ";") {
      if (tok[0] != '-') out.insert(tok);
    }
  }
  return out;
}

// Debian package owning a shared library, or "" when dpkg does not know it.
std::string owning_package(const std::string& path) {
  static std::map<std::string, std::string> cache;
  if (auto it = cache.find(path); it != cache.end()) return it->second;
  for (std::string candidate :
       {path, path.rfind("/usr", 0) == 0 ? path.substr(4) : "/usr" + path}) {
    auto r = run_command("dpkg -S " + quote(candidate));
    if (r.status == 0) {
      return cache[path] = r.out.substr(0, r.out.find(':'));
    }
  }
  return "";
}

std::set<std::string> depends_of(const std::string& pkg) {
  std::set<std::string> out;
  auto r = run_command("dpkg-query -W -f='${Depends},${Pre-Depends}' " + quote(pkg));
  for (auto alt : split(std::regex_replace(r.out, std::regex(R"(\([^)]*\)|:any)"), ""), ',')) {
    for (auto name : split(alt, '|')) {
      name = std::regex_replace(name, std::regex(R"(\s+)"), "");
      if (!name.empty()) out.insert(name);
    }
  }
  return out;
}

TEST(DeployDocker, EveryImageHasAMinimalCorrectBuildFile) {
  const bool dpkg = on_path("dpkg") && on_path("dpkg-query") && on_path("ldd");
  for (const auto& [bin, path] : kBinaryPath) {
    SCOPED_TRACE(bin);
    fs::path file = kDeploy / "docker" / (bin + ".Dockerfile");
    ASSERT_TRUE(fs::exists(file)) << file;
    EXPECT_TRUE(fs::exists(file.string() + ".dockerignore"));
    std::string text = read_text(file);
    Dockerfile d = parse_dockerfile(text);
    ASSERT_EQ(d.froms.size(), 2u);
    EXPECT_EQ(d.froms[0], "debian:12 AS build");
    EXPECT_EQ(d.froms[1], "debian:12-slim");
    const std::string all_build = join(d.stages[0], "\n");
    EXPECT_NE(all_build.find("COPY scripts/install-deps.sh"), std::string::npos)
        << "the builder installs the project's own build dependencies";
    EXPECT_NE(all_build.find("--target " + bin), std::string::npos);
    const auto& rt = d.stages[1];
    auto has = [&](const std::string& s) { return std::find(rt.begin(), rt.end(), s) != rt.end(); };
    EXPECT_TRUE(has("COPY --from=build /build/" + path + " /usr/local/bin/" + bin))
        << join(rt, "\n");
    EXPECT_TRUE(has("ENTRYPOINT [\"/usr/local/bin/" + bin + "\"]")) << join(rt, "\n");
    EXPECT_TRUE(has("USER 65532:65532")) << "runs as non-root";
    if (bin == "trainer" || bin == "predictor") {
      // The charts start predictors with `command: ["uvicorn"]` and uvicorn's arguments.
      EXPECT_NE(all_build.find("--target " + bin + " uvicorn"), std::string::npos);
      EXPECT_TRUE(has("COPY --from=build /build/uvicorn/uvicorn /usr/local/bin/uvicorn"));
    }
    // EXPOSE = the ports the binary listens on by default.
    std::set<int> exposed, want;
    for (const auto& i : rt) {
      if (i.rfind("EXPOSE ", 0) == 0) {
        for (const auto& t : split(i.substr(7), ' ')) {
          if (auto n = to_int(t)) exposed.insert(*n);
        }
      }
    }
    // The image's ENV sets deployment defaults (the EPP's are upstream's: ext_proc on 9002).
    std::map<std::string, std::string> image_env;
    for (const auto& i : rt) {
      if (i.rfind("ENV ", 0) == 0) {
        for (const auto& t : split(i.substr(4), ' ')) {
          if (auto eq = t.find('='); eq != std::string::npos) {
            image_env[t.substr(0, eq)] = t.substr(eq + 1);
          }
        }
      }
    }
    const Help& h = help_of(bin);
    for (const char* f : {"port", "health-port", "metrics-port", "base-port", "ext-proc-port"}) {
      if (!h.flags.count(f)) continue;
      const Option& o = h.flags.at(f);
      const auto set = image_env.find(o.env);
      const auto port = to_int(set != image_env.end() ? set->second : o.default_value);
      if (port && *port > 0) want.insert(*port);
    }
    EXPECT_EQ(exposed, want);
    // Runtime packages: exactly what the binary links (ldd), each listed or pulled in by one
    // that is; the C/C++ runtime is in debian:12-slim already.
    std::set<std::string> pkgs = apt_packages(rt);
    EXPECT_FALSE(pkgs.empty());
    for (const auto& p : pkgs) {
      EXPECT_EQ(p.find("-dev"), std::string::npos) << p << ": runtime packages only";
    }
    if (!dpkg) {
      std::cout << "[ deploy ] dpkg/ldd not available: runtime packages not checked" << std::endl;
      continue;
    }
    std::set<std::string> provided = {"libc6", "libgcc-s1", "libstdc++6"};
    for (const auto& p : pkgs) {
      auto r = run_command("dpkg-query -W -f='${Status}' " + quote(p));
      EXPECT_NE(r.out.find("install ok installed"), std::string::npos)
          << p << " is not a package this machine builds with (wrong name or soname?)";
      provided.insert(p);
      auto deps = depends_of(p);
      provided.insert(deps.begin(), deps.end());
    }
    auto ldd = run_command("ldd " + quote(binary(path)));
    ASSERT_EQ(ldd.status, 0) << ldd.out;
    std::set<std::string> needed;
    static const std::regex kLib(R"(^\s*(\S+) => (/\S+) )");
    for (const auto& line : split(ldd.out, '\n')) {
      std::smatch m;
      if (!std::regex_search(line, m, kLib)) continue;
      std::string owner = owning_package(m[2]);
      EXPECT_FALSE(owner.empty()) << m[1] << " (" << m[2] << ") belongs to no Debian package";
      needed.insert(owner);
      EXPECT_TRUE(provided.count(owner)) << bin << " links " << m[1] << " from package " << owner
                                         << ", which the runtime stage does not install";
    }
    // And nothing listed that the binary does not link.
    for (const auto& p : pkgs) {
      EXPECT_TRUE(needed.count(p)) << p << " is installed but " << bin << " does not link it";
    }
  }
}

TEST(DeployDocs, ReadmeCoversPortsProbesAndLayouts) {
  std::string readme = read_text(kDeploy / "README.md");
  ASSERT_FALSE(readme.empty());
  for (const char* s : {"8080", "9003", "9090", "8000", "8001", "8002", "8003", "8004", "/healthz",
                        "/readyz", "/metrics", "x-slo-ttft-ms", "x-prediction-based-scheduling",
                        "/predict/bulk/strict", "PREDICTION_SERVER_URL"}) {
    EXPECT_NE(readme.find(s), std::string::npos) << "deploy/README.md does not mention " << s;
  }
  for (const auto& dir : kustomization_dirs()) {
    std::string rel = "deploy/" + fs::relative(dir, kDeploy).string();
    EXPECT_NE(readme.find(rel), std::string::npos) << "deploy/README.md does not mention " << rel;
  }
}

}  // namespace
}  // namespace llmd::testing
