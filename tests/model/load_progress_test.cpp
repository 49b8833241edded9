// Weight loading reports its progress: the checkpoint's size up front, the bytes each load copies, and one final
// report once the model is built.
#include "model/load_progress.h"

#include <gtest/gtest.h>

#include "backend/backend.h"
#include "fixtures.h"
#include "model/model.h"
#include "model/safetensors.h"

namespace tern {
namespace {

struct Report {
  int64_t loaded = 0;
  int64_t total = 0;
  bool done = false;
};

TEST(LoadProgress, LoadingAFixtureReportsItsBytesAndFinishesOnce) {
  const auto dir = testing::fixtures_dir() / "models" / "llama";
  int64_t checkpoint_bytes = 0;
  const auto file = SafetensorsFile::open(dir / "model.safetensors");
  for (const auto& [name, info] : file->tensors()) {
    checkpoint_bytes += static_cast<int64_t>(info.size_bytes);
  }
  std::vector<Report> reports;
  LoadProgress progress(
      [&](int64_t loaded, int64_t total, double, bool done) { reports.push_back({loaded, total, done}); },
      std::chrono::milliseconds(0));
  const auto backend = make_cpu_backend(1);
  const auto model = load_model(dir, *backend, &progress);
  progress.finish();
  ASSERT_GE(reports.size(), 2u);  // every load with no interval, then the end
  for (size_t i = 0; i + 1 < reports.size(); ++i) {
    EXPECT_FALSE(reports[i].done);
    EXPECT_EQ(reports[i].total, checkpoint_bytes);
    if (i > 0) EXPECT_GE(reports[i].loaded, reports[i - 1].loaded);
  }
  const Report& last = reports.back();
  EXPECT_TRUE(last.done);
  // Every tensor of the checkpoint is read once.
  EXPECT_EQ(last.loaded, checkpoint_bytes);
}

TEST(LoadProgress, ReportsNoOftenerThanItsInterval) {
  int reports = 0;
  LoadProgress progress([&](int64_t, int64_t, double, bool) { ++reports; }, std::chrono::hours(1));
  progress.set_total(100);
  for (int i = 0; i < 100; ++i) progress.add_loaded(1);
  EXPECT_EQ(reports, 0);
  progress.finish();
  EXPECT_EQ(reports, 1);
}

}  // namespace
}  // namespace tern
