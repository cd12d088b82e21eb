#include "tests/deploy/kustomize_lite.h"

#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace llmd::testing {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) {
    throw std::runtime_error("cannot read " + p.string());
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Json plain_scalar(const std::string& s) {
  static const std::regex kNull("~|null|Null|NULL");
  static const std::regex kTrue("y|Y|yes|Yes|YES|true|True|TRUE|on|On|ON");
  static const std::regex kFalse("n|N|no|No|NO|false|False|FALSE|off|Off|OFF");
  static const std::regex kInt("[-+]?[0-9]+");
  static const std::regex kFloat("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
  if (s.empty() || std::regex_match(s, kNull)) {
    return nullptr;
  }
  if (std::regex_match(s, kTrue)) {
    return true;
  }
  if (std::regex_match(s, kFalse)) {
    return false;
  }
  if (std::regex_match(s, kInt)) {
    try {
      return std::stoll(s);
    } catch (const std::out_of_range&) {
      return s;
    }
  }
  if (std::regex_match(s, kFloat)) {
    return std::stod(s);
  }
  return s;
}

// `rel` as a path inside `root`, or an error like kustomize's load restrictor.
fs::path inside(const fs::path& root, const std::string& rel, const std::string& what) {
  fs::path p = fs::weakly_canonical(root / rel);
  fs::path r = fs::weakly_canonical(root);
  auto [ri, pi] = std::mismatch(r.begin(), r.end(), p.begin(), p.end());
  if (ri != r.end()) {
    throw std::runtime_error(what + " '" + rel + "' is not within " + r.string() +
                             " (kustomize's default load restrictor refuses it)");
  }
  return p;
}

void require_keys(const Json& obj, const std::set<std::string>& allowed, const std::string& where) {
  if (!obj.is_object()) {
    throw std::runtime_error(where + ": expected a mapping");
  }
  for (const auto& [k, v] : obj.items()) {
    if (allowed.count(k) == 0) {
      throw std::runtime_error(where + ": '" + k + "' is not supported by the built-in renderer");
    }
  }
}

// KEY=VALUE per line; blank lines and lines starting with # are skipped (kustomize's envs).
void parse_env_file(const fs::path& p, Json& data) {
  std::istringstream in(read_text(p));
  std::string line;
  while (std::getline(in, line)) {
    auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') {
      continue;
    }
    auto eq = line.find('=');
    if (eq == std::string::npos) {
      throw std::runtime_error(p.string() + ": line without '=': " + line);
    }
    std::string value = line.substr(eq + 1);
    while (!value.empty() && value.back() == '\r') {
      value.pop_back();
    }
    data[line.substr(first, eq - first)] = value;
  }
}

Json* find_doc(std::vector<Json>& docs, const std::string& kind, const std::string& name) {
  for (auto& d : docs) {
    if (d.value("kind", "") == kind && d["metadata"].value("name", "") == name) {
      return &d;
    }
  }
  return nullptr;
}

// Container ports merge by containerPort, Service ports by port.
std::string port_merge_key(const Json& items) {
  for (const auto& it : items) {
    if (it.is_object()) {
      if (it.contains("containerPort")) return "containerPort";
      if (it.contains("port")) return "port";
    }
  }
  return {};
}

Json merge_list(const Json& base, const Json& patch, const std::string& key) {
  Json out = Json::array();
  std::vector<bool> used(base.size(), false);
  for (const auto& p : patch) {
    if (!p.is_object() || !p.contains(key)) {
      throw std::runtime_error("patch list item without merge key '" + key + "': " + p.dump());
    }
    // {key: ..., $patch: delete} removes the base item with that key (and adds nothing).
    const bool remove = p.value("$patch", "") == "delete";
    if (p.contains("$patch") && !remove) {
      throw std::runtime_error("patch directive $patch: " + p["$patch"].dump() +
                               " is not supported by the built-in renderer");
    }
    bool found = false;
    for (std::size_t i = 0; i < base.size(); ++i) {
      if (!used[i] && base[i].is_object() && base[i].contains(key) && base[i][key] == p[key]) {
        if (!remove) {
          out.push_back(strategic_merge(base[i], p));
        }
        used[i] = true;
        found = true;
        break;
      }
    }
    if (!found && !remove) {
      out.push_back(strategic_merge(Json::object(), p));
    }
  }
  for (std::size_t i = 0; i < base.size(); ++i) {
    if (!used[i]) {
      out.push_back(base[i]);
    }
  }
  return out;
}

}  // namespace

Json yaml_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return nullptr;
    case YAML::NodeType::Scalar: {
      const std::string& tag = node.Tag();
      if (tag == "?") {
        return plain_scalar(node.Scalar());
      }
      if (tag == "tag:yaml.org,2002:int") {
        return std::stoll(node.Scalar());
      }
      if (tag == "tag:yaml.org,2002:bool" || tag == "tag:yaml.org,2002:null" ||
          tag == "tag:yaml.org,2002:float") {
        return plain_scalar(node.Scalar());
      }
      return node.Scalar();  // "!" (quoted or block) and !!str
    }
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) {
        out.push_back(yaml_to_json(item));
      }
      return out;
    }
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& kv : node) {
        out[kv.first.Scalar()] = yaml_to_json(kv.second);
      }
      return out;
    }
  }
  return nullptr;
}

std::vector<Json> load_yaml_documents(const std::string& text) {
  std::vector<Json> out;
  for (const auto& doc : YAML::LoadAll(text)) {
    Json j = yaml_to_json(doc);
    if (!j.is_null()) {
      out.push_back(std::move(j));
    }
  }
  return out;
}

Json strategic_merge(const Json& base, const Json& patch) {
  if (!patch.is_object() || !base.is_object()) {
    return patch;
  }
  Json out = base;
  for (const auto& [k, v] : patch.items()) {
    if (!k.empty() && k[0] == '$') {
      throw std::runtime_error("patch directive '" + k +
                               "' is not supported by the built-in renderer");
    }
    if (v.is_null()) {
      out.erase(k);
    } else if (out.contains(k) && out[k].is_object() && v.is_object()) {
      out[k] = strategic_merge(out[k], v);
    } else if (out.contains(k) && out[k].is_array() && v.is_array()) {
      static const std::set<std::string> kByName = {
          "containers", "initContainers",  "ephemeralContainers", "volumes",
          "env",        "imagePullSecrets"};
      if (kByName.count(k) > 0) {
        out[k] = merge_list(out[k], v, "name");
      } else if (k == "volumeMounts") {
        out[k] = merge_list(out[k], v, "mountPath");
      } else if (k == "ports") {
        std::string key = port_merge_key(v);
        out[k] = key.empty() ? v : merge_list(out[k], v, key);
      } else {
        out[k] = v;
      }
    } else {
      // New key or a type change: take the patch, minus its null-valued (deleting) keys.
      out[k] = v.is_object() ? strategic_merge(Json::object(), v) : v;
    }
  }
  return out;
}

namespace {

// One kustomization (or, with `component`, a kind: Component) applied on top of `out`: its
// resources are added, then its components run on everything accumulated so far, then its
// generators, patches and images (kustomize's order). A Kustomization starts from an empty
// `out`; a Component works on its parent's.
void render_into(const fs::path& dir, LiteRender& out, bool component) {
  fs::path kfile = dir / "kustomization.yaml";
  if (!fs::exists(kfile)) {
    throw std::runtime_error("no kustomization.yaml in " + dir.string());
  }
  const std::string where = kfile.string();
  Json k = yaml_to_json(YAML::LoadFile(kfile.string()));
  require_keys(k,
               {"apiVersion", "kind", "resources", "components", "configMapGenerator",
                "generatorOptions", "patches", "images"},
               where);
  const std::string kind = k.value("kind", "Kustomization");
  if (kind != (component ? "Component" : "Kustomization")) {
    throw std::runtime_error(where + ": kind " + kind + " where a " +
                             (component ? "Component" : "Kustomization") + " is expected");
  }
  if (k.contains("generatorOptions")) {
    require_keys(k["generatorOptions"], {"disableNameSuffixHash"}, where + " generatorOptions");
  }
  for (const auto& r : k.value("resources", Json::array())) {
    std::string rel = r.get<std::string>();
    if (fs::path(rel).is_absolute()) {
      throw std::runtime_error(where + ": resource '" + rel + "' must be a relative path");
    }
    fs::path p = dir / rel;
    if (fs::is_directory(p)) {
      LiteRender base = render_lite(p);
      for (auto& d : base.docs) {
        out.docs.push_back(std::move(d));
      }
      out.generated_names.insert(base.generated_names.begin(), base.generated_names.end());
    } else {
      for (auto& d : load_yaml_documents(
               [&] { return read_text(inside(dir, rel, where + " resource")); }())) {
        out.docs.push_back(std::move(d));
      }
    }
  }
  for (const auto& c : k.value("components", Json::array())) {
    std::string rel = c.get<std::string>();
    if (fs::path(rel).is_absolute() || !fs::is_directory(dir / rel)) {
      throw std::runtime_error(where + ": component '" + rel +
                               "' must be a relative path to a directory");
    }
    render_into(dir / rel, out, true);
  }
  for (const auto& g : k.value("configMapGenerator", Json::array())) {
    require_keys(g, {"name", "behavior", "files", "envs", "literals", "options"},
                 where + " configMapGenerator");
    const std::string name = g.at("name").get<std::string>();
    if (g.contains("options")) {
      require_keys(g["options"], {"disableNameSuffixHash"}, where + " configMapGenerator " + name);
    }
    Json data = Json::object();
    for (const auto& f : g.value("files", Json::array())) {
      std::string spec = f.get<std::string>();
      auto eq = spec.find('=');
      std::string key =
          eq == std::string::npos ? fs::path(spec).filename().string() : spec.substr(0, eq);
      std::string rel = eq == std::string::npos ? spec : spec.substr(eq + 1);
      data[key] = read_text(inside(dir, rel, where + " configMapGenerator file"));
    }
    for (const auto& e : g.value("envs", Json::array())) {
      parse_env_file(inside(dir, e.get<std::string>(), where + " configMapGenerator envs"), data);
    }
    for (const auto& l : g.value("literals", Json::array())) {
      std::string s = l.get<std::string>();
      auto eq = s.find('=');
      if (eq == std::string::npos) {
        throw std::runtime_error(where + ": literal without '=': " + s);
      }
      data[s.substr(0, eq)] = s.substr(eq + 1);
    }
    const std::string behavior = g.value("behavior", "create");
    Json* existing = find_doc(out.docs, "ConfigMap", name);
    if (behavior == "create") {
      if (existing != nullptr) {
        throw std::runtime_error(where + ": ConfigMap " + name +
                                 " already exists (use behavior: merge)");
      }
      out.docs.push_back(Json{{"apiVersion", "v1"},
                              {"kind", "ConfigMap"},
                              {"metadata", {{"name", name}}},
                              {"data", data}});
      out.generated_names.insert(name);
    } else if (behavior == "merge" || behavior == "replace") {
      if (existing == nullptr) {
        throw std::runtime_error(where + ": no ConfigMap " + name + " to " + behavior);
      }
      if (behavior == "replace") {
        (*existing)["data"] = data;
      } else {
        for (const auto& [key, value] : data.items()) {
          (*existing)["data"][key] = value;
        }
      }
    } else {
      throw std::runtime_error(where + ": unknown behavior " + behavior);
    }
  }
  for (const auto& p : k.value("patches", Json::array())) {
    require_keys(p, {"path"}, where + " patches");
    const std::string rel = p.at("path").get<std::string>();
    for (const auto& patch : load_yaml_documents(read_text(inside(dir, rel, where + " patch")))) {
      const std::string kind = patch.value("kind", "");
      const std::string name =
          patch.contains("metadata") ? patch["metadata"].value("name", "") : "";
      Json* target = find_doc(out.docs, kind, name);
      if (target == nullptr) {
        throw std::runtime_error(where + ": patch " + rel + " targets " + kind + "/" + name +
                                 ", which is not among the resources");
      }
      *target = strategic_merge(*target, patch);
    }
  }
  // images: [{name, newName, newTag, digest}] rewrites matching container images.
  for (const auto& img : k.value("images", Json::array())) {
    require_keys(img, {"name", "newName", "newTag", "digest"}, where + " images");
    const std::string name = img.at("name").get<std::string>();
    for (auto& d : out.docs) {
      if (!d.contains("spec") || !d["spec"].contains("template")) continue;
      for (const char* list : {"containers", "initContainers"}) {
        auto& spec = d["spec"]["template"]["spec"];
        if (!spec.contains(list)) continue;
        for (auto& c : spec[list]) {
          std::string image = c.value("image", "");
          std::string ref = image.substr(0, image.find_first_of("@"));
          auto colon = ref.rfind(':');
          std::string repo = colon != std::string::npos && ref.find('/', colon) == std::string::npos
                                 ? ref.substr(0, colon)
                                 : ref;
          if (repo != name) continue;
          std::string tag = image.substr(repo.size());
          // (std::string(":").append(...): GCC 12 warns falsely about "x" + std::string&&.)
          if (img.contains("newTag"))
            tag = std::string(":").append(img["newTag"].get<std::string>());
          if (img.contains("digest"))
            tag = std::string("@").append(img["digest"].get<std::string>());
          c["image"] = img.value("newName", repo) + tag;
        }
      }
    }
  }
}

}  // namespace

LiteRender render_lite(const fs::path& dir) {
  LiteRender out;
  render_into(dir, out, false);
  return out;
}

}  // namespace llmd::testing
