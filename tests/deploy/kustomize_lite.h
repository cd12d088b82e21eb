#pragma once
// Just enough of kustomize to render deploy/ when neither `kustomize` nor `kubectl kustomize`
// is installed: resources (files and base directories), components (kind: Component
// directories, applied to what their parent accumulated), configMapGenerator (files, envs,
// literals; behavior create|merge|replace), strategic-merge `patches` by path and `images`.
// Generated ConfigMaps keep their plain names (no hash suffix). Anything else in a kustomization is
// an error, so a manifest change this renderer cannot follow fails loudly instead of being checked
// half-way. Like kustomize's default load restrictor, files must lie inside the kustomization's
// directory. When a real kustomize is present, the tests compare the two.
#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

namespace llmd::testing {

using Json = nlohmann::json;

// YAML -> JSON with YAML 1.1 plain-scalar typing (as Kubernetes' YAML reader does): quoted and
// block scalars are strings; plain ones become null, bool, integer, float or string.
Json yaml_to_json(const YAML::Node& node);
// Every document of a (multi-document) YAML text; empty documents are dropped.
std::vector<Json> load_yaml_documents(const std::string& text);

struct LiteRender {
  std::vector<Json> docs;
  std::set<std::string> generated_names;  // ConfigMaps made by configMapGenerator
};

// Throws std::runtime_error naming the kustomization and the problem.
LiteRender render_lite(const std::filesystem::path& kustomization_dir);

// Strategic merge patch (the subset deploy/ uses): maps merge, null deletes a key, lists of
// containers/volumes/env merge by name, volumeMounts by mountPath, ports by containerPort or
// port, and an item {<merge key>: x, $patch: delete} removes the base's item x; other lists
// are replaced. Patch items come first, then the base's unmatched items
// (kustomize's order).
Json strategic_merge(const Json& base, const Json& patch);

}  // namespace llmd::testing
