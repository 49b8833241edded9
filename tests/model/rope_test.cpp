// Rotary frequencies against values computed with transformers' formulas (modeling_rope_utils.py) by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "core/error.h"
#include "model/rope.h"

namespace tern {
namespace {

TEST(RopeTest, DefaultFrequencies) {
  RopeConfig rope;
  rope.theta = 10000.0;
  const auto f = rope_frequencies(rope, 8, 2048);
  ASSERT_EQ(f.inv_freq.size(), 4u);
  EXPECT_FLOAT_EQ(f.inv_freq[0], 1.0f);
  EXPECT_FLOAT_EQ(f.inv_freq[1], 0.1f);    // 10000^(-2/8)
  EXPECT_FLOAT_EQ(f.inv_freq[3], 0.001f);  // 10000^(-6/8)
  EXPECT_EQ(f.attention_scaling, 1.0f);
}

TEST(RopeTest, LinearDividesByFactor) {
  RopeConfig rope;
  rope.type = "linear";
  rope.factor = 4.0;
  EXPECT_FLOAT_EQ(rope_frequencies(rope, 8, 2048).inv_freq[1], 0.025f);
}

TEST(RopeTest, Llama3KeepsHighFrequenciesAndScalesLowOnes) {
  // Llama 3.1: theta 500000, factor 8, low 1, high 4, original 8192, head_dim 128.
  const auto config = nlohmann::json::parse(R"({"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3",
      "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})");
  const RopeConfig rope = RopeConfig::from_config(config);
  const auto f = rope_frequencies(rope, 128, 131072);
  for (int i = 0; i < 64; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 128);
    const double wavelen = 2 * std::numbers::pi / base;
    if (wavelen < 8192 / 4.0) EXPECT_FLOAT_EQ(f.inv_freq[i], base) << i;
    else if (wavelen > 8192 / 1.0) EXPECT_FLOAT_EQ(f.inv_freq[i], base / 8) << i;
    else {
      const double smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0);
      EXPECT_FLOAT_EQ(f.inv_freq[i], (1 - smooth) * base / 8 + smooth * base) << i;
    }
  }
  EXPECT_FLOAT_EQ(f.inv_freq[63], std::pow(500000.0, -126.0 / 128) / 8);  // the lowest frequency is scaled
}

TEST(RopeTest, YarnRampsBetweenInterpolationAndExtrapolation) {
  // DeepSeek-V3 style: factor 40, original 4096, mscale 1, mscale_all_dim 1 -> attention factor 1.
  RopeConfig rope;
  rope.type = "yarn";
  rope.theta = 10000.0;
  rope.factor = 40.0;
  rope.original_max_position_embeddings = 4096;
  rope.mscale = 1.0;
  rope.mscale_all_dim = 1.0;
  const auto f = rope_frequencies(rope, 64, 163840);
  EXPECT_FLOAT_EQ(f.attention_scaling, 1.0f);
  // find_correction_dim(32) = 64*ln(4096/(32*2pi))/(2 ln 10000) = 10.22 -> floor 10; (1) -> 22.93 -> ceil 23.
  EXPECT_FLOAT_EQ(f.inv_freq[5], std::pow(10000.0, -10.0 / 64));        // below low: extrapolated (unchanged)
  EXPECT_FLOAT_EQ(f.inv_freq[31], std::pow(10000.0, -62.0 / 64) / 40);  // above high: interpolated
  const double ramp = (16 - 10.0) / (23 - 10.0);
  const double base = std::pow(10000.0, -32.0 / 64);
  EXPECT_FLOAT_EQ(f.inv_freq[16], base / 40 * ramp + base * (1 - ramp));
  // Without mscale: attention factor 0.1 ln(40) + 1.
  rope.mscale = rope.mscale_all_dim = 0.0;
  EXPECT_FLOAT_EQ(rope_frequencies(rope, 64, 163840).attention_scaling, 0.1 * std::log(40.0) + 1.0);
}

TEST(RopeTest, ReadsBothConfigStyles) {
  const auto v5 = nlohmann::json::parse(R"({"rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}})");
  const auto v4 = nlohmann::json::parse(R"({"rope_theta": 1000000.0, "rope_scaling": null})");
  EXPECT_EQ(RopeConfig::from_config(v5).theta, 1e6);
  EXPECT_EQ(RopeConfig::from_config(v4).theta, 1e6);
  EXPECT_EQ(RopeConfig::from_config(v4).type, "default");
  EXPECT_THROW(RopeConfig::from_config(nlohmann::json::parse(R"({"rope_scaling": {"rope_type": "su"}})")), Error);
}

TEST(RopeTest, Bf16CheckpointsRotateByFloat32Frequencies) {
  // 1e6^(-2/16) = 0.1778279 in float32; a bf16 buffer would hold 0.177734375, 5e-4 off: after 10,000 positions the
  // pair would have turned almost a radian away from where the model was trained to expect it.
  const auto bf16 = nlohmann::json::parse(R"({"dtype": "bfloat16", "rope_parameters": {"rope_theta": 1000000.0}})");
  const auto f32 = nlohmann::json::parse(R"({"torch_dtype": "float32", "rope_theta": 1000000.0})");
  EXPECT_FLOAT_EQ(rope_frequencies(RopeConfig::from_config(bf16), 16, 512).inv_freq[1], 0.1778279f);
  EXPECT_EQ(rope_frequencies(RopeConfig::from_config(bf16), 16, 512).inv_freq,
            rope_frequencies(RopeConfig::from_config(f32), 16, 512).inv_freq);
}

}  // namespace
}  // namespace tern
