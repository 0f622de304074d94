// A new placement policy is a place function and one row: these test-only policies are added
// with RegisterPlacementPolicy, without touching src/, and the façade and the C API load by
// them as by the built-in splits. "alternate" puts whole tensors on the devices in turn;
// "halves" cuts every tensor's bytes in two, the first half on the first device.
#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "api/request.h"
#include "format/sample_model.h"
// Reaches the registered policy through the entries deprecated for the plan ones as well.
#include "hoist/hoist.h"
#include "plan/placement/policy.h"
#include "test_util.h"

// Pushed here and popped at the end so that, in a unity build, the files bundled with this
// one keep their deprecation warnings (a HOIST_NO_DEPRECATED_WARNINGS define would come
// after hoist.h was already read for an earlier file of the bundle).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace hoist {
namespace {

Result<std::vector<TensorRegion>> Alternate(const PlacementInput& input) {
  std::vector<TensorRegion> parts;
  for (size_t i = 0; i < input.dir->tensors.size(); ++i) {
    parts.push_back(WholePart(*input.dir, i, static_cast<uint32_t>(i % input.devices)));
  }
  return parts;
}

// Halves in whole 8-byte words, so that no element of the sample's dtypes is cut; a tensor of
// fewer than two words is whole on the first device.
Result<std::vector<TensorRegion>> Halves(const PlacementInput& input) {
  std::vector<TensorRegion> parts;
  for (size_t i = 0; i < input.dir->tensors.size(); ++i) {
    const uint64_t n = input.dir->tensors[i].nbytes;
    if (n == 0) continue;
    const uint64_t half = n / 16 * 8;
    if (half == 0 || input.devices < 2) {
      parts.push_back(WholePart(*input.dir, i, 0));
      continue;
    }
    parts.push_back({i, n, 0, 1, 0, half, nullptr, 0});
    parts.push_back({i, n, 0, 1, half, n, nullptr, 1});
  }
  return parts;
}

// Puts tensor 0 twice: PlaceModel must refuse it.
Result<std::vector<TensorRegion>> Twice(const PlacementInput& input) {
  return std::vector<TensorRegion>{WholePart(*input.dir, 0, 0), WholePart(*input.dir, 0, 1)};
}

void RegisterOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    ASSERT_TRUE(RegisterPlacementPolicy({"alternate", true, false, "", Alternate}).ok());
    ASSERT_TRUE(RegisterPlacementPolicy({"halves", false, false, "", Halves}).ok());
    ASSERT_TRUE(RegisterPlacementPolicy({"twice", true, false, "", Twice}).ok());
  });
}

class RegisteredPolicyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RegisterOnce();
    SampleSpec spec;
    spec.target_bytes = 1 << 20;
    ASSERT_TRUE(WriteSampleModel(tmp_.File("m.safetensors"), spec).ok());
    auto dir = OpenModel({tmp_.File("m.safetensors"), nullptr, std::nullopt});
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    dir_ = std::move(dir).value();
  }

  LoadRequest Request(const char* split) {
    LoadRequest request;
    request.device = "sim,sim";
    auto policy = ParseSplit(split, "split");
    EXPECT_TRUE(policy.ok()) << policy.status().ToString();
    if (policy.ok()) request.split = *policy;
    return request;
  }

  testing::TempDir tmp_;
  TensorDirectory dir_;
};

TEST_F(RegisteredPolicyTest, AWholeTensorPolicyLoadsThroughTheFacade) {
  auto loaded = Load(dir_, Request("alternate"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_FALSE(loaded->plan().by_parts);
  ASSERT_EQ(loaded->model().size(), dir_.tensors.size());
  for (size_t i = 0; i < dir_.tensors.size(); ++i) {
    EXPECT_EQ(loaded->model().device_index(i), i % 2) << dir_.tensors[i].name;
  }
  auto mismatches = Verify(*loaded, 2, 10, 10);  // every byte against the file
  ASSERT_TRUE(mismatches.ok()) << mismatches.status().ToString();
  EXPECT_TRUE(mismatches->empty());
}

TEST_F(RegisteredPolicyTest, APartsPolicyLoadsItsPartsThroughTheFacade) {
  auto loaded = Load(dir_, Request("halves"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  ASSERT_TRUE(loaded->plan().by_parts);
  const std::vector<TensorRegion>& parts = loaded->plan().parts;
  ASSERT_EQ(loaded->directory().tensors.size(), parts.size());
  std::vector<uint64_t> bytes(dir_.tensors.size(), 0);
  for (size_t p = 0; p < parts.size(); ++p) {
    EXPECT_EQ(loaded->model().device_index(p), parts[p].device);
    bytes[parts[p].tensor] += parts[p].column_end - parts[p].column_begin;
  }
  for (size_t i = 0; i < dir_.tensors.size(); ++i) EXPECT_EQ(bytes[i], dir_.tensors[i].nbytes);
  auto mismatches = Verify(*loaded, 2, 10, 10);
  ASSERT_TRUE(mismatches.ok()) << mismatches.status().ToString();
  EXPECT_TRUE(mismatches->empty());
}

TEST_F(RegisteredPolicyTest, TheCApiReachesBothByName) {
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(tmp_.File("m.safetensors").c_str(), &model), HOIST_OK);
  const size_t tensors = hoist_model_tensor_count(model);
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "sim,sim";
  options.split = "alternate";
  std::vector<uint32_t> device_of(tensors, 9);
  ASSERT_EQ(hoist_model_place(model, &options, device_of.data(), tensors), HOIST_OK)
      << hoist_last_error();
  hoist_loaded* loaded = nullptr;
  ASSERT_EQ(hoist_load(model, &options, &loaded), HOIST_OK) << hoist_last_error();
  for (size_t i = 0; i < tensors; ++i) {
    EXPECT_EQ(device_of[i], i % 2);
    EXPECT_EQ(hoist_loaded_tensor_device(loaded, i), static_cast<int>(i % 2));
  }
  EXPECT_EQ(hoist_loaded_verify(loaded, nullptr), HOIST_OK) << hoist_last_error();
  hoist_loaded_free(loaded);

  size_t count = 0;
  ASSERT_EQ(hoist_model_split(model, &options, "halves", nullptr, 0, &count), HOIST_OK)
      << hoist_last_error();
  std::vector<hoist_part> parts(count);
  ASSERT_EQ(hoist_model_split(model, &options, "halves", parts.data(), count, &count), HOIST_OK);
  options.split = "halves";
  ASSERT_EQ(hoist_load(model, &options, &loaded), HOIST_OK) << hoist_last_error();
  for (size_t p = 0; p < count; ++p) {
    hoist_part got{};
    ASSERT_EQ(hoist_loaded_part(loaded, p, &got), HOIST_OK) << hoist_last_error();
    EXPECT_EQ(got.tensor, parts[p].tensor);
    EXPECT_EQ(got.column_begin, parts[p].column_begin);
    EXPECT_EQ(got.device, parts[p].device);
  }
  EXPECT_EQ(hoist_loaded_verify(loaded, nullptr), HOIST_OK) << hoist_last_error();
  hoist_loaded_free(loaded);
  hoist_model_close(model);
}

TEST_F(RegisteredPolicyTest, APolicysMistakesAreRefusedNamingIt) {
  auto loaded = Load(dir_, Request("twice"));
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(loaded.status().message(),
            "the twice split's part of tensor '" + dir_.tensors[0].name +
                "' is not the tensor's one whole part: the policy places whole tensors");

  auto again = RegisterPlacementPolicy({"tensor", false, false, "", Halves});
  EXPECT_EQ(again.status().message(), "a placement policy named 'tensor' exists");
  auto unknown = ParseSplit("diagonal", "--split");
  EXPECT_EQ(unknown.status().message().rfind(
                "--split 'diagonal' is not a split: layer, tensor, replicate, ", 0),
            0u)
      << unknown.status().message();
  EXPECT_NE(unknown.status().message().find("halves"), std::string::npos);
}

}  // namespace
}  // namespace hoist

#pragma GCC diagnostic pop
