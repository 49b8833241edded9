// --model as a Hugging Face id: the snapshot a revision names in a hub cache laid out as huggingface_hub lays it
// out, the cache found from the same environment variables, and errors that name every path looked at.
#include "model/hub_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>

#include "core/error.h"

namespace tern {
namespace {

namespace fs = std::filesystem;

// Sets an environment variable for one test (unset when `value` is null) and puts it back afterwards.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class HubCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("tern_hub_cache_" + std::to_string(getpid()));
    fs::remove_all(root_);
    repo_ = root_ / "hub" / "models--Org--Model-1.5B";
    make_snapshot("a1b2c3", "main");
    make_snapshot("d4e5f6", "v2");
  }
  void TearDown() override { fs::remove_all(root_); }

  void make_snapshot(const std::string& commit, const std::string& ref) {
    fs::create_directories(repo_ / "snapshots" / commit);
    std::ofstream(repo_ / "snapshots" / commit / "config.json") << "{}";
    fs::create_directories(repo_ / "refs");
    std::ofstream(repo_ / "refs" / ref) << commit;  // huggingface_hub writes the hash without a newline
  }

  std::string error_of(const std::string& model) {
    try {
      resolve_model_path(model);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }

  fs::path root_;
  fs::path repo_;
  ScopedEnv legacy_{"HUGGINGFACE_HUB_CACHE", nullptr};
  ScopedEnv xdg_{"XDG_CACHE_HOME", nullptr};
};

TEST_F(HubCacheTest, AnIdResolvesToTheSnapshotItsRevisionNames) {
  ScopedEnv cache("HF_HUB_CACHE", (root_ / "hub").c_str());
  EXPECT_EQ(resolve_model_path("Org/Model-1.5B"), repo_ / "snapshots" / "a1b2c3");
  EXPECT_EQ(resolve_model_path("Org/Model-1.5B@main"), repo_ / "snapshots" / "a1b2c3");
  EXPECT_EQ(resolve_model_path("Org/Model-1.5B@v2"), repo_ / "snapshots" / "d4e5f6");
  EXPECT_EQ(resolve_model_path("Org/Model-1.5B@d4e5f6"), repo_ / "snapshots" / "d4e5f6");  // a commit
}

TEST_F(HubCacheTest, TheCacheIsFoundFromHfHomeWhenHfHubCacheIsUnset) {
  ScopedEnv cache("HF_HUB_CACHE", nullptr);
  ScopedEnv home("HF_HOME", root_.c_str());
  EXPECT_EQ(hub_cache_dir(), root_ / "hub");
  EXPECT_EQ(resolve_model_path("Org/Model-1.5B"), repo_ / "snapshots" / "a1b2c3");
}

TEST_F(HubCacheTest, TheDefaultCacheIsUnderHome) {
  ScopedEnv cache("HF_HUB_CACHE", nullptr);
  ScopedEnv home("HF_HOME", nullptr);
  ScopedEnv user_home("HOME", "/home/someone");
  EXPECT_EQ(hub_cache_dir(), fs::path("/home/someone/.cache/huggingface/hub"));
}

TEST_F(HubCacheTest, ADirectoryIsTakenAsItIs) {
  ScopedEnv cache("HF_HUB_CACHE", (root_ / "hub").c_str());
  const fs::path dir = repo_ / "snapshots" / "a1b2c3";
  EXPECT_EQ(resolve_model_path(dir.string()), dir);
}

TEST_F(HubCacheTest, AMissingIdOrRevisionNamesThePathsLookedAt) {
  ScopedEnv cache("HF_HUB_CACHE", (root_ / "hub").c_str());
  const std::string missing = error_of("Org/Other");
  EXPECT_NE(missing.find((root_ / "hub" / "models--Org--Other" / "refs" / "main").string()), std::string::npos)
      << missing;
  EXPECT_NE(missing.find((root_ / "hub" / "models--Org--Other" / "snapshots" / "main").string()), std::string::npos)
      << missing;
  EXPECT_NE(missing.find("not in the Hugging Face cache"), std::string::npos) << missing;
  const std::string revision = error_of("Org/Model-1.5B@v3");
  EXPECT_NE(revision.find((repo_ / "refs" / "v3").string()), std::string::npos) << revision;
}

TEST_F(HubCacheTest, ARefNamingAMissingSnapshotSaysSo) {
  ScopedEnv cache("HF_HUB_CACHE", (root_ / "hub").c_str());
  fs::remove_all(repo_ / "snapshots" / "a1b2c3");
  const std::string error = error_of("Org/Model-1.5B");
  EXPECT_NE(error.find("which names"), std::string::npos) << error;
}

TEST_F(HubCacheTest, APathThatIsNoIdIsAMissingDirectory) {
  for (const std::string model : {"/no/such/model", "./model", "a/b/c", "Org/../etc", "Org/Model@"}) {
    const std::string error = error_of(model);
    EXPECT_NE(error.find("no such directory"), std::string::npos) << model << ": " << error;
  }
}

}  // namespace
}  // namespace tern
