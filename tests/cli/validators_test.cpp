// The numeric flags' validators (src/cli/validators.h): what a bad value is told, and the values they pass.
#include "cli/validators.h"

#include <gtest/gtest.h>

#include <string>

namespace tern::cli {
namespace {

// The error of `--value TEXT` under `validator`, or "passed".
std::string check(const CLI::Validator& validator, const std::string& text) {
  CLI::App app{"test", "tern"};
  double value = 0;
  app.add_option("--value", value)->check(validator);
  const std::string flag = "--value=" + text;
  const char* argv[] = {"tern", flag.c_str()};
  try {
    app.parse(2, argv);
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "passed";
}

TEST(ValidatorsTest, NamesWhatIsWrongWithTheValue) {
  EXPECT_EQ(check(non_negative(), "-3"), "--value: -3 is negative (it takes 0 or more)");
  EXPECT_EQ(check(non_negative(), "abc"), "--value: 'abc' is not a number");
  EXPECT_EQ(check(non_negative(), "1e999"), "--value: '1e999' is not a number");
  EXPECT_EQ(check(positive(), "0"), "--value: 0 is not positive (it takes more than 0)");
  EXPECT_EQ(check(positive(), "-0.5"), "--value: -0.5 is not positive (it takes more than 0)");
  EXPECT_EQ(check(between(0.0, 1.0), "1.5"), "--value: 1.5 is outside 0 to 1");
  EXPECT_EQ(check(between(1.0, 1e9), "0"), "--value: 0 is outside 1 to 1000000000");
  EXPECT_EQ(check(between(0.0, 1.0), "nan"), "--value: 'nan' is not a number");
}

TEST(ValidatorsTest, PassesTheValuesInRange) {
  EXPECT_EQ(check(non_negative(), "0"), "passed");
  EXPECT_EQ(check(non_negative(), "12"), "passed");
  EXPECT_EQ(check(positive(), "0.25"), "passed");
  EXPECT_EQ(check(between(0.0, 1.0), "0"), "passed");
  EXPECT_EQ(check(between(0.0, 1.0), "1"), "passed");
}

}  // namespace
}  // namespace tern::cli
