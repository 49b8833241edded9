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
  nlohmann::ordered_json schema;
  std::vector<std::string> instances;
};

struct AjvReport {
  bool ran = false;    // node and ajv were found and the validator ran
  int status = 0;      // its exit status: 0 when every instance validates
  std::string output;  // one line per failure ("FAIL name: ..." or "UNCHECKED name: ..."), then the totals line
};

// Validates every instance of every case; a missing node or ajv is a test failure naming the install command.
inline AjvReport run_ajv(const std::vector<SchemaInstances>& cases, const std::string& label) {
  std::filesystem::path validator = TERN_GRAMMAR_VALIDATOR_DIR;
  if (std::system("node --version > /dev/null 2>&1") != 0) {
    ADD_FAILURE() << "Node.js is required to validate JSON outputs: install nodejs, then run "
                     "`npm ci --prefix tests/grammar/validator`";
    return {};
  }
  for (const char* package : {"ajv", "ajv-formats", "ajv-draft-04"}) {
    if (!std::filesystem::exists(validator / "node_modules" / package)) {
      ADD_FAILURE() << package << " is not installed: run `npm ci --prefix tests/grammar/validator`";
      return {};
    }
  }
  nlohmann::ordered_json input;
  input["cases"] = nlohmann::ordered_json::array();
  for (const auto& c : cases) {
    input["cases"].push_back({{"name", c.name}, {"schema", c.schema}, {"instances", c.instances}});
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
  AjvReport report;
  report.ran = true;
  report.status = std::system(command.c_str());
  std::ifstream result(output_path);
  report.output.assign((std::istreambuf_iterator<char>(result)), std::istreambuf_iterator<char>());
  std::filesystem::remove(input_path);
  std::filesystem::remove(output_path);
  return report;
}

inline void expect_valid_with_ajv(const std::vector<SchemaInstances>& cases, const std::string& label) {
  size_t total = 0;
  for (const auto& c : cases) total += c.instances.size();
  AjvReport report = run_ajv(cases, label);
  if (!report.ran) return;
  EXPECT_EQ(report.status, 0) << report.output;
  EXPECT_NE(report.output.find("ajv: " + std::to_string(total) + " instances checked, 0 failures"), std::string::npos)
      << report.output;
}

}  // namespace tern::testing
