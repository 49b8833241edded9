// Real chat templates of public models (data/templates, sources in its index.json) rendered on fourteen
// conversations must match what transformers' apply_chat_template renders for them byte for byte, and fail
// where it raises (data/template_goldens.json, made by make_template_goldens.py).
#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/template.h"
#include "core/error.h"

namespace tern::chat {
namespace {

const std::filesystem::path kDataDir = std::filesystem::path(__FILE__).parent_path() / "data";

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

nlohmann::ordered_json read_json(const std::filesystem::path& path) { return nlohmann::ordered_json::parse(read_text(path)); }

// The goldens fix strftime_now to one instant (their "strftime_now" field) so they do not change with the day.
Value fixed_strftime_now(const std::string& iso_instant) {
  std::tm instant{};
  std::istringstream(iso_instant) >> std::get_time(&instant, "%Y-%m-%dT%H:%M:%S");
  std::mktime(&instant);  // fills in the day of the week and of the year
  return Value::function("strftime_now", [instant](const CallArgs& args) {
    std::string format = args.get(0, "format").to_str();
    char buffer[256];
    size_t len = std::strftime(buffer, sizeof(buffer), format.c_str(), &instant);
    return Value(std::string(buffer, len));
  });
}

// The variables transformers' render_jinja_template passes: messages, tools, documents, add_generation_prompt,
// the tokenizer's special tokens and the extra keyword arguments.
ValueMap variables_for(const nlohmann::ordered_json& conversation, const nlohmann::ordered_json& model,
                       const Value& strftime_now) {
  ValueMap variables;
  for (const char* token : {"bos_token", "eos_token"}) {
    if (model.contains(token) && model[token].is_string()) variables.set(token, Value(model[token].get<std::string>()));
  }
  variables.set("messages", Value::from_json(conversation["messages"]));
  variables.set("tools", conversation.contains("tools") ? Value::from_json(conversation["tools"]) : Value::none());
  variables.set("documents", Value::none());
  variables.set("add_generation_prompt", Value(conversation["add_generation_prompt"].get<bool>()));
  variables.set("strftime_now", strftime_now);
  if (conversation.contains("kwargs")) {
    for (auto it = conversation["kwargs"].begin(); it != conversation["kwargs"].end(); ++it) {
      variables.set(it.key(), Value::from_json(it.value()));
    }
  }
  return variables;
}

TEST(RealTemplatesTest, EveryConversationRendersAsTransformersRendersIt) {
  const auto index = read_json(kDataDir / "templates" / "index.json");
  const auto goldens = read_json(kDataDir / "template_goldens.json");
  const auto& conversations = goldens["conversations"];
  const Value strftime_now = fixed_strftime_now(goldens["strftime_now"].get<std::string>());
  ASSERT_GE(index.size(), 60u);
  ASSERT_EQ(goldens["templates"].size(), index.size());

  size_t num_pairs = 0;
  size_t num_matching = 0;
  for (auto model = index.begin(); model != index.end(); ++model) {
    const std::string& name = model.key();
    const std::string source = read_text(kDataDir / "templates" / (name + ".jinja"));
    std::optional<Template> chat_template;
    std::string parse_error;
    try {
      chat_template.emplace(source);
    } catch (const Error& e) {
      parse_error = e.what();
    }
    const auto& expected_by_conversation = goldens["templates"][name];
    for (auto conversation = conversations.begin(); conversation != conversations.end(); ++conversation) {
      SCOPED_TRACE(name + " / " + conversation.key());
      const auto& expected = expected_by_conversation[conversation.key()];
      ++num_pairs;
      std::string rendered;
      std::string error = parse_error;
      if (chat_template) {
        try {
          rendered = chat_template->render(variables_for(conversation.value(), model.value(), strftime_now));
        } catch (const Error& e) {
          error = e.what();
        }
      }
      if (expected.contains("error")) {
        EXPECT_NE(error, "") << "the reference raised " << expected["error"].get<std::string>() << ": "
                             << expected["message"].get<std::string>() << "\nwe rendered:\n" << rendered;
        num_matching += !error.empty();
        continue;
      }
      if (!error.empty()) {
        ADD_FAILURE() << "failed where the reference renders: " << error;
        continue;
      }
      EXPECT_EQ(rendered, expected["rendered"].get<std::string>());
      num_matching += rendered == expected["rendered"].get<std::string>();
    }
  }
  std::printf("%zu of %zu template x conversation pairs match %s\n", num_matching, num_pairs,
              goldens["reference"].get<std::string>().c_str());
  EXPECT_EQ(num_matching, num_pairs);
}

}  // namespace
}  // namespace tern::chat
