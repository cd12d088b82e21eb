#pragma once
// YAML -> JSON for configuration documents: plain scalars follow the YAML 1.2 core schema
// (null, booleans, integers, floats), quoted scalars stay strings. Plugin parameters and the
// policy documents are validated as JSON, whatever file format they came in.
#include <nlohmann/json.hpp>
#include <yaml-cpp/yaml.h>

namespace llmd::epp {

nlohmann::json yaml_to_json(const YAML::Node& n);

}  // namespace llmd::epp
