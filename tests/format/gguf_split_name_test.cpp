#include "format/gguf_split_name.h"

#include <gtest/gtest.h>

namespace hoist {
namespace {

TEST(GgufSplitName, ReadsWhatGgufSplitWrites) {
  auto split = ParseGgufSplitName("/models/llama-70b-00002-of-00013.gguf");
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->prefix, "/models/llama-70b");
  EXPECT_EQ(split->number, 2);
  EXPECT_EQ(split->count, 13);
  EXPECT_EQ(GgufSplitPath(split->prefix, 1, split->count), "/models/llama-70b-00001-of-00013.gguf");

  // The numbers as written, whether or not they make a set: that is the caller's rule.
  split = ParseGgufSplitName("-00000-of-00000.gguf");
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(split->prefix, "");
  EXPECT_EQ(split->number, 0);

  for (const char* other :
       {"model.gguf", "m-0001-of-00002.gguf", "m-00001-of-0002.gguf",
        "m-00001-of-00002.safetensors", "m_00001-of-00002.gguf", "m-00001-to-00002.gguf",
        "m-0000a-of-00002.gguf", "00001-of-00002.gguf", "m-00001-of-00002.gguf.part", ""}) {
    EXPECT_FALSE(ParseGgufSplitName(other).has_value()) << other;
  }
}

}  // namespace
}  // namespace hoist
