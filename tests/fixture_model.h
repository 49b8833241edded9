#pragma once
// A fixture model loaded on the CPU backend, for tests that drive an engine over it.
#include <memory>
#include <string>

#include "backend/backend.h"
#include "fixtures.h"
#include "model/model.h"

namespace tern::testing {

struct FixtureModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
};

inline FixtureModel load_fixture_model(const std::string& name) {
  FixtureModel loaded;
  loaded.backend = make_cpu_backend(2);
  loaded.model = load_model(fixtures_dir() / "models" / name, *loaded.backend);
  return loaded;
}

}  // namespace tern::testing
