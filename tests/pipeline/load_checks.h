// Checks that the pipeline's tests share: byte-exact comparison of a load with its files.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/checksum.h"
#include "device/checked_device.h"
#include "format/model.h"
#include "format/sample_model.h"
#include "pipeline/loader.h"
#include "test_util.h"

namespace hoist::testing {

// Tensor t's bytes, read with one plain read of the model's storage.
inline std::vector<unsigned char> FileBytes(const TensorDirectory& dir, const TensorEntry& t) {
  std::vector<unsigned char> bytes(t.nbytes);
  auto file = dir.source().Open(dir.files[t.file].path, {});
  EXPECT_TRUE(file.ok()) << file.status().ToString();
  if (file.ok() && t.nbytes > 0) {
    EXPECT_TRUE((*file)->ReadExact(t.offset, bytes.data(), bytes.size()).ok());
  }
  return bytes;
}

// Loaded tensor i's `nbytes` bytes, copied back from its device.
inline std::vector<unsigned char> LoadedBytes(LoadedModel& model, size_t i, uint64_t nbytes) {
  std::vector<unsigned char> got(nbytes);
  if (nbytes > 0) {
    EXPECT_TRUE(model.device_of(i)
                    .CopyToHost(got.data(), model.data(i), nbytes, model.external_destinations())
                    .ok());
  }
  return got;
}

// Every loaded tensor equals the file's bytes (read independently), and every checksum equals
// XXH3 of those bytes.
inline void ExpectByteExact(const TensorDirectory& dir, LoadedModel& model) {
  for (size_t i = 0; i < dir.tensors.size(); ++i) {
    if (!model.loaded(i)) continue;
    const TensorEntry& t = dir.tensors[i];
    const std::vector<unsigned char> want = FileBytes(dir, t);
    ASSERT_TRUE(LoadedBytes(model, i, t.nbytes) == want) << "tensor " << t.name << " differs";
    if (!model.checksums().empty()) {
      EXPECT_EQ(model.checksums()[i], Xxh3(want.data(), want.size())) << t.name;
    }
  }
}

inline std::shared_ptr<CheckedDevice> MakeDevice(const std::string& spec) {
  auto d = OpenDevice(spec);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.value();
}

inline TensorDirectory Sample(const TempDir& dir, const std::string& name, SampleSpec spec) {
  auto written = WriteSampleModel(dir.File(name), spec);
  EXPECT_TRUE(written.ok()) << written.status().ToString();
  auto opened = ReadModelDirectory(spec.shards > 1 && spec.format == "gguf" ? written->files[0].path
                                                                            : dir.File(name));
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  return std::move(opened).value();
}

}  // namespace hoist::testing
