// The interpreter against Python's Jinja2: jinja_cases.json holds templates and what Jinja2 renders for them in
// the environment transformers uses (see make_jinja_cases.py). Errors are checked here directly.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "chat/template.h"
#include "core/error.h"
#include "core/nesting_limit.h"
#include "core/ordered_json_parser.h"

namespace tern::chat {
namespace {

nlohmann::ordered_json read_cases() {
  std::ifstream in(std::filesystem::path(__FILE__).parent_path() / "jinja_cases.json");
  return nlohmann::ordered_json::parse(in);
}

ValueMap context_of(const nlohmann::ordered_json& json) {
  ValueMap context;
  for (auto it = json.begin(); it != json.end(); ++it) context.set(it.key(), Value::from_json(it.value()));
  return context;
}

std::string render(const std::string& source, const ValueMap& context = {}) {
  return Template(source).render(context);
}

// The message of the tern::Error that rendering `source` throws ("" if none).
std::string render_error(const std::string& source, const ValueMap& context = {}) {
  try {
    render(source, context);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(TemplateTest, MatchesJinja2OnEveryReferenceCase) {
  auto cases = read_cases();
  ValueMap context = context_of(cases["context"]);
  ASSERT_GT(cases["cases"].size(), 50u);
  for (const auto& c : cases["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>() + ": " + c["template"].get<std::string>());
    try {
      EXPECT_EQ(render(c["template"].get<std::string>(), context), c["expected"].get<std::string>());
    } catch (const Error& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
}

TEST(TemplateTest, GenerationBlockRendersItsBody) {
  EXPECT_EQ(render("a{% generation %}b{{ 1 + 1 }}{% endgeneration %}c"), "ab2c");
}

TEST(TemplateTest, SyntaxErrorsNameLineAndColumn) {
  EXPECT_EQ(render_error("line one\n{% if x %}\nno end"),
            "chat template syntax error at line 3, column 7: unexpected end of template, expected 'elif' or "
            "'else' or 'endif'");
  EXPECT_EQ(render_error("ok\n  {{ 1 + }}"), "chat template syntax error at line 2, column 10: expected an expression, got '}}'");
  EXPECT_EQ(render_error("{% frobnicate %}"), "chat template syntax error at line 1, column 4: unknown tag 'frobnicate'");
  EXPECT_EQ(render_error("{{ 'unterminated }}"), "chat template syntax error at line 1, column 4: unterminated string literal");
  EXPECT_EQ(render_error("\n\n   {{ x"), "chat template syntax error at line 3, column 4: unclosed '{{' (missing '}}')");
  EXPECT_EQ(render_error("{% break %}"), "chat template syntax error at line 1, column 4: 'break' outside of a for loop");
  EXPECT_NE(render_error("{{ a b }}"), "");
  EXPECT_NE(render_error("{% for %}{% endfor %}"), "");
  EXPECT_NE(render_error("{% set %}"), "");
  EXPECT_NE(render_error("{# never closed"), "");
}

TEST(TemplateTest, RuntimeErrorsNameLineAndColumn) {
  EXPECT_EQ(render_error("\n  {{ 'a' + 1 }}"),
            "chat template error at line 2, column 10: can only concatenate str (not \"int\") to str");
  EXPECT_EQ(render_error("{{ missing.attr }}"), "chat template error at line 1, column 11: 'missing' is undefined");
  EXPECT_EQ(render_error("{{ {'a': 1}.b.c }}"),
            "chat template error at line 1, column 14: 'dict object' has no attribute 'b'");
  EXPECT_EQ(render_error("{{ 1 | nosuchfilter }}"), "chat template error at line 1, column 8: no filter named 'nosuchfilter'");
  EXPECT_EQ(render_error("{{ 1 is nosuchtest }}"), "chat template error at line 1, column 9: no test named 'nosuchtest'");
  EXPECT_EQ(render_error("{{ 1 // 0 }}"), "chat template error at line 1, column 6: integer division by zero");
  EXPECT_EQ(render_error("{% set x = 1 %}{% set x.y = 2 %}"),
            "chat template error at line 1, column 19: cannot set attribute 'y' of 'x': only namespace() objects can "
            "be changed");
  EXPECT_EQ(render_error("{% for a, b in [1] %}{% endfor %}"),
            "chat template error at line 1, column 4: cannot unpack into 2 names: 'int' object is not iterable");
  EXPECT_EQ(render_error("{{ none|length }}"), "chat template error at line 1, column 9: object of type 'NoneType' has no len()");
  EXPECT_EQ(render_error("{{ [1].append(2) }}"),
            "chat template error at line 1, column 14: list.append() is not allowed: chat templates render in an "
            "immutable sandbox");
  EXPECT_EQ(render_error("{{ 5() }}"), "chat template error at line 1, column 5: 'int' object is not callable");
}

// Where Jinja2 raises, these raise too (the messages are Python's, with the template position).
TEST(TemplateTest, ErrorsOfTheNewerBuiltinsMatchPython) {
  EXPECT_EQ(render_error("{{ {none: 1, true: 2}|dictsort }}"),
            "chat template error at line 1, column 23: '<' not supported between instances of 'bool' and 'NoneType'");
  EXPECT_NE(render_error("{{ {(1, 2): 1}|tojson }}").find("keys must be str, int, float, bool or None, not tuple"),
            std::string::npos);
  EXPECT_NE(render_error("{{ {[1]: 2} }}").find("unhashable type: 'list'"), std::string::npos);
  EXPECT_NE(render_error("{{ {'a': 1}.keys()[0] }}").find("'dict_keys' object is not subscriptable"), std::string::npos);
  EXPECT_NE(render_error("{{ {'a': 1}.keys()|tojson }}").find("Object of type dict_keys is not JSON serializable"),
            std::string::npos);
  EXPECT_NE(render_error("{{ [1] + (2,) }}").find("can only concatenate list (not \"tuple\") to list"), std::string::npos);
  EXPECT_NE(render_error("{{ f(*5) }}").find("'int' object is not iterable"), std::string::npos);
  EXPECT_NE(render_error("{{ dict(**[1]) }}").find("argument after ** must be a mapping, not list"), std::string::npos);
  EXPECT_NE(render_error("{{ dict(a=1, **{'a': 2}) }}").find("got multiple values for keyword argument 'a'"),
            std::string::npos);
  EXPECT_NE(render_error("{{ f(*[1], 2) }}").find("positional argument after an unpacked argument"), std::string::npos);
  EXPECT_NE(render_error("{{ '{} {}'.format(1) }}").find("Replacement index 1 out of range"), std::string::npos);
  EXPECT_NE(render_error("{{ '{0} {}'.format(1, 2) }}").find("cannot switch from manual field specification"),
            std::string::npos);
  EXPECT_NE(render_error("{{ '{:d}'.format('x') }}").find("Unknown format code 'd' for object of type 'str'"),
            std::string::npos);
  EXPECT_NE(render_error("{{ 'a}'.format() }}").find("Single '}' encountered"), std::string::npos);
  EXPECT_NE(render_error("{{ '{:{:{:{}}}}'.format(1, 2, 3, 4) }}").find("Max string recursion exceeded"), std::string::npos);
  EXPECT_NE(render_error("{{ '%(a)s' % (1,) }}").find("format requires a mapping"), std::string::npos);
  EXPECT_NE(render_error("{{ '%(a)s' % {'b': 1} }}").find("'a'"), std::string::npos);
  EXPECT_NE(render_error("{{ '%d' % 'x' }}").find("%d format: a real number is required, not str"), std::string::npos);
  EXPECT_NE(render_error("{{ '%s %s' % (1,) }}").find("not enough arguments for format string"), std::string::npos);
  EXPECT_NE(render_error("{{ '%s' % (1, 2) }}").find("not all arguments converted"), std::string::npos);
  EXPECT_NE(render_error("{{ 'abc'|truncate(2) }}").find("expected length >= 3, got 2"), std::string::npos);
  EXPECT_NE(render_error("{{ [1]|batch(0)|list }}").find("linecount must be positive"), std::string::npos);
  EXPECT_NE(render_error("{{ [1]|slice(0)|list }}").find("division or modulo by zero"), std::string::npos);
  EXPECT_NE(render_error("{{ 'a'.partition('') }}").find("empty separator"), std::string::npos);
  EXPECT_NE(render_error("{{ 'a'.center(3, 'xy') }}").find("fill character must be exactly one character"),
            std::string::npos);
  EXPECT_NE(render_error("{% for x in [1] %}{{ loop([2]) }}{% endfor %}").find("Tried to call non recursive loop"),
            std::string::npos);
  EXPECT_NE(render_error("{{ range(2 ** 64) }}").find("int too large"), std::string::npos);
  EXPECT_NE(render_error("{{ '\\N{NO SUCH CHARACTER NAME}' }}").find("unknown Unicode character name"), std::string::npos);
}

TEST(TemplateTest, RaiseExceptionReportsTheTemplatesMessage) {
  ValueMap context;
  context.set("messages", Value(ValueList{}));
  EXPECT_EQ(render_error("{% if not messages %}\n{{ raise_exception('Conversation roles must alternate!') }}{% endif %}",
                         context),
            "chat template raised an exception at line 2, column 19: Conversation roles must alternate!");
}

TEST(TemplateTest, RunawayTemplatesFailInsteadOfExhaustingTheMachine) {
  EXPECT_NE(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").find("macro calls nested deeper than"),
            std::string::npos);
  EXPECT_NE(render_error("{{ range(100000000)|length }}").find("range() longer than"), std::string::npos);
  EXPECT_NE(render_error("{% for a in range(10000) %}{% for b in range(200) %}{% endfor %}{% endfor %}")
                .find("loop iterations"),
            std::string::npos);
  EXPECT_NE(render_error("{{ 'x' * 100000000 }}").find("too large"), std::string::npos);
  EXPECT_NE(render_error("{% for x in [1] recursive %}{{ loop([x]) }}{% endfor %}").find("recursive loop nested deeper than"),
            std::string::npos);
  EXPECT_NE(render_error("{{ " + std::string(1000, '(') + "1" + std::string(1000, ')') + " }}").find("nested too deeply"),
            std::string::npos);
  EXPECT_NE(render_error("{{ " + std::string(1000, '[') + std::string(1000, ']') + " }}").find("nested too deeply"),
            std::string::npos);
  EXPECT_NE(render_error("{{ 10 ** 100000 }}").find("integer result longer than"), std::string::npos);
  EXPECT_NE(render_error("{{ (10 ** 5000) * (10 ** 5000) * (10 ** 5000) }}").find("integer result longer than"), std::string::npos);
}

TEST(TemplateTest, StrftimeNowFormatsTheCurrentDate) {
  std::string year = render("{{ strftime_now('%Y') }}");
  ASSERT_EQ(year.size(), 4u);
  EXPECT_GE(std::stoi(year), 2024);
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y')|length }}"), "11");
}

TEST(TemplateTest, OptionsTurnOffTrimAndLstrip) {
  TemplateOptions plain{false, false};
  EXPECT_EQ(Template("a\n  {% if true %}\nb{% endif %}", plain).render({}), "a\n  \nb");
  EXPECT_EQ(Template("a\n  {% if true %}\nb{% endif %}").render({}), "a\nb");
}

TEST(TemplateTest, ValuesConvertFromJsonKeepingKeyOrderAndKinds) {
  auto json = nlohmann::ordered_json::parse(R"({"z": 1, "a": [true, null, 2.5, "s"], "big": 18446744073709551615})");
  Value value = Value::from_json(json);
  // Python's json module reads integers exactly, at any size.
  EXPECT_EQ(value.to_json_text(), R"({"z": 1, "a": [true, null, 2.5, "s"], "big": 18446744073709551615})");
  EXPECT_EQ(value.to_json().dump(), R"({"z":1,"a":[true,null,2.5,"s"],"big":18446744073709551615})");
}

TEST(TemplateTest, ValuesFromJsonNestedPastTheLimitAreAnError) {
  // Tool-call arguments arrive as JSON text inside a string, past the request body's own nesting check.
  for (size_t depth : {27'000, 270'000}) {
    const auto json = parse_ordered_json(std::string(depth, '[') + std::string(depth, ']'));
    try {
      Value::from_json(json);
      ADD_FAILURE() << "converted JSON nested " << depth << " levels";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), "chat template input: " + nesting_limit_message());
    }
  }
  const auto at_limit = parse_ordered_json(std::string(kMaxNestingDepth, '[') + std::string(kMaxNestingDepth, ']'));
  EXPECT_EQ(Value::from_json(at_limit).to_json_text().size(), 2u * kMaxNestingDepth);
}

}  // namespace
}  // namespace tern::chat
