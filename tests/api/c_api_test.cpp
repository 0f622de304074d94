#include "hoist/hoist.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "hoist/hoist.hpp"
#include "test_util.h"

namespace {

std::string Corpus(const char* relative) { return hoist::testing::CorpusDir() + "/" + relative; }

TEST(CApiTest, OpensListsLoadsAndVerifies) {
  hoist_model* model = nullptr;
  ASSERT_EQ(hoist_model_open(Corpus("gguf/dummy-10-tensors.gguf").c_str(), &model), HOIST_OK);
  EXPECT_STREQ(hoist_model_format(model), "gguf");
  ASSERT_EQ(hoist_model_tensor_count(model), 10u);
  hoist_tensor_info info{};
  ASSERT_EQ(hoist_model_tensor(model, 0, &info), HOIST_OK);
  EXPECT_STREQ(info.name, "tensor_0");
  EXPECT_STREQ(info.dtype, "F32");
  ASSERT_EQ(info.ndim, 4u);
  EXPECT_EQ(info.shape[0], 4u);
  EXPECT_EQ(info.nbytes, 5376u);
  EXPECT_NE(std::strstr(hoist_model_metadata_json(model), "some.parameter.uint8"), nullptr);

  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "sim";
  options.checksum = 1;
  hoist_loaded* loaded = nullptr;
  ASSERT_EQ(hoist_load(model, &options, &loaded), HOIST_OK) << hoist_last_error();
  uint64_t xxh3 = 0;
  ASSERT_EQ(hoist_loaded_checksum(loaded, 0, &xxh3), HOIST_OK);
  EXPECT_EQ(xxh3, 0x4722a534a9254fcaull);  // corpus/reference.json
  EXPECT_NE(hoist_loaded_tensor(loaded, 9), nullptr);
  size_t mismatches = 99;
  EXPECT_EQ(hoist_loaded_verify(loaded, &mismatches), HOIST_OK);
  EXPECT_EQ(mismatches, 0u);
  EXPECT_NE(std::strstr(hoist_loaded_report_json(loaded), "\"device\":\"sim\""), nullptr);
  hoist_loaded_free(loaded);
  hoist_model_close(model);
}

TEST(CApiTest, ErrorsCarryCodesAndMessages) {
  hoist_model* model = nullptr;
  EXPECT_EQ(hoist_model_open("/nonexistent.gguf", &model), HOIST_NOT_FOUND);
  EXPECT_NE(std::strstr(hoist_last_error(), "/nonexistent.gguf"), nullptr);
  EXPECT_EQ(hoist_model_open(nullptr, &model), HOIST_INVALID_ARGUMENT);
  ASSERT_EQ(hoist_model_open(Corpus("gguf/dummy-10-tensors.gguf").c_str(), &model), HOIST_OK);
  size_t index = 0;
  EXPECT_EQ(hoist_model_find(model, "nope", &index), HOIST_NOT_FOUND);
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "sim:fail_copy_after=100";
  hoist_loaded* loaded = nullptr;
  EXPECT_EQ(hoist_load(model, &options, &loaded), HOIST_DEVICE_ERROR);
  EXPECT_EQ(loaded, nullptr);
  options.device = "sim:bandwidth=20KB/s";
  options.progress = [](void*, uint64_t, uint64_t) { return 1; };
  EXPECT_EQ(hoist_load(model, &options, &loaded), HOIST_CANCELLED);
  hoist_model_close(model);
}

TEST(CApiTest, LoadIntoCallerBuffers) {
  hoist::Model model(Corpus("safetensors/hadamards.safetensors"));
  std::vector<std::vector<unsigned char>> buffers(model.tensor_count());
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = "host";
  hoist::Loaded loaded =
      model.load_into(options, [&](size_t i, const hoist_tensor_info& t) -> void* {
        buffers[i].resize(t.nbytes);
        return buffers[i].data();
      });
  EXPECT_EQ(loaded.tensor(0), buffers[0].data());
  EXPECT_EQ(loaded.verify(), 0u);
  const size_t first = model.find("1");
  EXPECT_EQ(buffers[first].size(), 1u);
}

TEST(CppApiTest, ThrowsWithTheMessage) {
  try {
    hoist::Model model("/nonexistent.safetensors");
    FAIL() << "no exception";
  } catch (const hoist::Error& e) {
    EXPECT_EQ(e.status(), HOIST_NOT_FOUND);
    EXPECT_NE(std::string(e.what()).find("/nonexistent.safetensors"), std::string::npos);
  }
}

}  // namespace
