#include "model/hub_cache.h"

#include <cstdlib>
#include <fstream>
#include <regex>

#include "core/error.h"

namespace tern {

namespace {

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

// huggingface_hub's repo id rule: an optional namespace and a name, each of letters, digits, '-', '_' and '.', not
// starting or ending with '-' or '.'; the revision is a branch, a tag or a commit.
bool is_model_id(const std::string& id) {
  static const std::regex pattern(R"(^([A-Za-z0-9]([\w.-]*[A-Za-z0-9_])?/)?[A-Za-z0-9]([\w.-]*[A-Za-z0-9_])?$)");
  return std::regex_match(id, pattern) && id.find("..") == std::string::npos && id.find("--") == std::string::npos;
}

std::string read_first_line(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
  return line;
}

}  // namespace

std::filesystem::path hub_cache_dir() {
  for (const char* name : {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"}) {
    if (const std::string dir = env_or_empty(name); !dir.empty()) return dir;
  }
  if (const std::string home = env_or_empty("HF_HOME"); !home.empty()) return std::filesystem::path(home) / "hub";
  if (const std::string xdg = env_or_empty("XDG_CACHE_HOME"); !xdg.empty()) {
    return std::filesystem::path(xdg) / "huggingface" / "hub";
  }
  return std::filesystem::path(env_or_empty("HOME")) / ".cache" / "huggingface" / "hub";
}

std::filesystem::path resolve_model_path(const std::string& model) {
  if (std::filesystem::is_directory(model)) return model;
  const size_t at = model.rfind('@');
  const std::string id = model.substr(0, at);
  const std::string revision = at == std::string::npos ? "main" : model.substr(at + 1);
  if (!is_model_id(id) || revision.empty() || revision.find('/') == 0 || revision.find("..") != std::string::npos) {
    fail("--model {}: no such directory (nor a Hugging Face model id such as Qwen/Qwen3-8B)", model);
  }
  std::string folder = "models--" + id;
  for (size_t slash = folder.find('/'); slash != std::string::npos; slash = folder.find('/')) {
    folder.replace(slash, 1, "--");
  }
  const std::filesystem::path repo = hub_cache_dir() / folder;
  const std::filesystem::path ref = repo / "refs" / revision;
  std::vector<std::string> tried;
  if (std::filesystem::is_regular_file(ref)) {
    const std::filesystem::path snapshot = repo / "snapshots" / read_first_line(ref);
    if (std::filesystem::is_directory(snapshot)) return snapshot;
    tried.push_back(fmt::format("{} (which names {}, missing)", ref.string(), snapshot.string()));
  } else {
    tried.push_back(ref.string());
    const std::filesystem::path snapshot = repo / "snapshots" / revision;  // a commit given as the revision
    if (std::filesystem::is_directory(snapshot)) return snapshot;
    tried.push_back(snapshot.string());
  }
  std::string looked;
  for (const auto& path : tried) looked += "\n  " + path;
  fail("--model {}: not a directory, and not in the Hugging Face cache (no network access is used); looked at:{}\n"
       "Download it where this machine has network access (huggingface-cli download {}) into that cache, or set "
       "HF_HUB_CACHE or HF_HOME to the cache that has it, or give the model's directory.",
       model, looked, id);
}

}  // namespace tern
