#include "epp/plugins/common/params.h"

#include <cmath>
#include <sstream>

namespace llmd::epp {

ParamReader::ParamReader(const nlohmann::json& params) : params_(params) {
  if (!params_.is_null() && !params_.is_object()) {
    fail("parameters must be a mapping, got " + std::string(params_.type_name()));
  }
}

const nlohmann::json* ParamReader::find(std::string_view key, std::string_view alias) {
  seen_.emplace(key);
  if (!alias.empty()) {
    seen_.emplace(alias);
  }
  if (!params_.is_object()) {
    return nullptr;
  }
  auto it = params_.find(std::string(key));
  auto ia = alias.empty() ? params_.end() : params_.find(std::string(alias));
  if (it != params_.end() && ia != params_.end()) {
    fail("parameters '" + std::string(key) + "' and '" + std::string(alias) +
         "' are the same setting; give one");
    return nullptr;
  }
  if (it != params_.end()) {
    return &*it;
  }
  return ia != params_.end() ? &*ia : nullptr;
}

void ParamReader::fail(std::string message) {
  if (error_.empty()) {
    error_ = std::move(message);
  }
}

ParamReader& ParamReader::get(std::string_view key, double& out, std::string_view alias) {
  if (const auto* v = find(key, alias)) {
    if (!v->is_number()) {
      fail("parameter '" + std::string(key) + "' must be a number, got " + v->dump());
    } else if (!std::isfinite(v->get<double>())) {
      fail("parameter '" + std::string(key) + "' must be finite");
    } else {
      out = v->get<double>();
    }
  }
  return *this;
}

ParamReader& ParamReader::get(std::string_view key, int64_t& out, std::string_view alias) {
  if (const auto* v = find(key, alias)) {
    if (v->is_number_integer()) {
      out = v->get<int64_t>();
    } else if (v->is_number_float() && std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9.0e15) {
      out = static_cast<int64_t>(v->get<double>());  // 200.0 is accepted as 200
    } else {
      fail("parameter '" + std::string(key) + "' must be an integer, got " + v->dump());
    }
  }
  return *this;
}

ParamReader& ParamReader::get(std::string_view key, bool& out, std::string_view alias) {
  if (const auto* v = find(key, alias)) {
    if (!v->is_boolean()) {
      fail("parameter '" + std::string(key) + "' must be true or false, got " + v->dump());
    } else {
      out = v->get<bool>();
    }
  }
  return *this;
}

ParamReader& ParamReader::get(std::string_view key, std::string& out, std::string_view alias) {
  if (const auto* v = find(key, alias)) {
    if (!v->is_string()) {
      fail("parameter '" + std::string(key) + "' must be a string, got " + v->dump());
    } else {
      out = v->get<std::string>();
    }
  }
  return *this;
}

bool ParamReader::has(std::string_view key) const {
  return params_.is_object() && params_.contains(std::string(key));
}

std::string ParamReader::finish() const {
  if (!error_.empty()) {
    return error_;
  }
  if (params_.is_object()) {
    for (const auto& [key, value] : params_.items()) {
      if (seen_.find(key) == seen_.end()) {
        std::string known;
        for (const auto& k : seen_) {
          known += (known.empty() ? "" : ", ") + k;
        }
        return "unknown parameter '" + key + "' (known: " + (known.empty() ? "none" : known) +
               ")";
      }
    }
  }
  return {};
}

std::string param_error(std::string_view key, double value, std::string_view what) {
  std::ostringstream os;
  os << "parameter '" << key << "' must be " << what << ", got " << value;
  return os.str();
}

}  // namespace llmd::epp
