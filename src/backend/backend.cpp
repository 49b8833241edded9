// Defaults of the Backend ops that only some architectures need: a backend that lacks one fails by name when a
// model calls it, instead of computing something else.
#include "backend/backend.h"

#include "core/error.h"

namespace tern {

Tensor Backend::concat_columns(const Tensor&, const Tensor&) { fail("backend {} has no concat_columns op", name()); }

Tensor Backend::gated_activation(const Tensor&, const GluActivation&) {
  fail("backend {} has no gated_activation op", name());
}

Tensor Backend::grouped_linear(const Tensor&, const Tensor&) { fail("backend {} has no grouped_linear op", name()); }

ExpertRouting Backend::route_experts(const Tensor&, const RouterParams&, const StepContext&) {
  fail("backend {} has no route_experts op", name());
}

Tensor Backend::moe_experts(const Tensor&, const ExpertRouting&, const ExpertWeights&, const GluActivation&) {
  fail("backend {} has no moe_experts op", name());
}

void Backend::rope_at(Tensor&, const RopeTable&, std::span<const int32_t>, bool) {
  fail("backend {} has no rope_at op", name());
}

}  // namespace tern
