#include "cli/usage_error.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace tern::cli {

namespace {

// Levenshtein distance (insertions, deletions, substitutions); no library in Debian offers one for C++ strings.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The candidate nearest to `word`, if it is a typo away: at most 2 edits or a fifth of the word's letters
// (`--max-model-length` for `--max-model-len`), and fewer than half of them.
std::string nearest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 5) + 1;
  for (const std::string& candidate : candidates) {
    const size_t distance = edit_distance(word, candidate);
    if (distance < best_distance && 2 * distance < word.size()) {
      best = candidate;
      best_distance = distance;
    }
  }
  return best;
}

// The innermost subcommand the parse entered (the app itself without one).
const CLI::App& innermost(const CLI::App& app) {
  const CLI::App* current = &app;
  while (!current->get_subcommands().empty()) current = current->get_subcommands().back();
  return *current;
}

std::vector<std::string> long_options(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::Option* option : app.get_options()) {
    for (const std::string& name : option->get_lnames()) names.push_back("--" + name);
  }
  return names;
}

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (!sub->get_name().empty()) names.push_back(sub->get_name());
  }
  return names;
}

}  // namespace

std::string usage_error_message(const CLI::App& app, const CLI::ParseError& error) {
  const std::vector<std::string> unexpected = app.remaining(true);
  if (unexpected.empty()) return error.what();
  const CLI::App& command = innermost(app);
  const bool in_command = &command != &app;
  std::string message;
  bool after_option = false;
  for (const std::string& argument : unexpected) {
    const std::string value = argument.substr(0, argument.find('='));
    const bool option = value.rfind("-", 0) == 0;
    // A word after an unknown option is most likely its value.
    if (std::exchange(after_option, option) && !option) continue;
    if (!message.empty()) message += "; ";
    if (option) {
      message += "unknown option " + value;
      if (in_command) message += " for `" + app.get_name() + " " + command.get_name() + "`";
      const std::string suggestion = nearest(value, long_options(command));
      if (!suggestion.empty()) message += " (did you mean " + suggestion + "?)";
    } else if (!in_command) {
      message += "unknown command '" + argument + "'";
      const std::string suggestion = nearest(argument, subcommand_names(app));
      if (!suggestion.empty()) message += " (did you mean '" + suggestion + "'?)";
    } else {
      message += "unexpected argument '" + argument + "'";
    }
  }
  return message;
}

}  // namespace tern::cli
