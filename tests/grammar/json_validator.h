#pragma once
// Runs the ajv validator (tests/grammar/validator, Node.js) over generated JSON texts. Missing node or ajv is a test
// failure with the command that installs them, never a skip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tern::testing {

struct SchemaInstances {
  std::string name;
  nlohmann::json schema;
  std::vector<std::string> instances;
};

inline void expect_valid_with_ajv(const std::vector<SchemaInstances>& cases, const std::string& label) {
  std::filesystem::path validator = TERN_GRAMMAR_VALIDATOR_DIR;
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    ADD_FAILURE() << "Node.js is required to validate JSON outputs: install nodejs, then run "
                     "`npm ci --prefix tests/grammar/validator`";
    return;
  }
  if (!std::filesystem::exists(validator / "node_modules" / "ajv") || !std::filesystem::exists(validator / "node_modules" / "ajv-formats")) {
    ADD_FAILURE() << "ajv is not installed: run `npm ci --prefix tests/grammar/validator`";
    return;
  }
  nlohmann::json input;
  input["cases"] = nlohmann::json::array();
  size_t total = 0;
  for (const auto& c : cases) {
    input["cases"].push_back({{"name", c.name}, {"schema", c.schema}, {"instances", c.instances}});
    total += c.instances.size();
  }
  auto dir = std::filesystem::temp_directory_path();
  auto stem = "tern_grammar_" + label + "_" + std::to_string(::getpid());
  auto input_path = dir / (stem + ".json");
  auto output_path = dir / (stem + ".out");
  {
    std::ofstream out(input_path);
    out << input.dump();  // throws on invalid UTF-8 in an output, which is a failure too
  }
  std::string command = "node " + (validator / "validate.js").string() + " " + input_path.string() + " > " + output_path.string() + " 2>&1";
  int status = std::system(command.c_str());
  std::ifstream result(output_path);
  std::string report((std::istreambuf_iterator<char>(result)), std::istreambuf_iterator<char>());
  EXPECT_EQ(status, 0) << report;
  EXPECT_NE(report.find("ajv: " + std::to_string(total) + " instances checked, 0 failures"), std::string::npos) << report;
  std::filesystem::remove(input_path);
  std::filesystem::remove(output_path);
}

}  // namespace tern::testing
