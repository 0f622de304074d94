#include "base/status.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace hoist {
namespace {

TEST(StatusTest, InvalidModelNamesFileByteAndRule) {
  Status s = Status::InvalidModel("m.gguf", 16, "duplicate metadata key 'a'");
  EXPECT_EQ(s.code(), Code::kInvalidModel);
  EXPECT_EQ(s.message(), "m.gguf: duplicate metadata key 'a' at byte 16");
}

TEST(StatusTest, ErrnoBecomesIoErrorOrNotFound) {
  Status missing = ErrnoStatus(ENOENT, "cannot open", "x.bin");
  EXPECT_EQ(missing.code(), Code::kNotFound);
  EXPECT_EQ(missing.message(), "x.bin: cannot open: No such file or directory");
  Status eio = ErrnoStatus(EIO, "read failed", "x.bin", 4096);
  EXPECT_EQ(eio.code(), Code::kIoError);
  EXPECT_EQ(eio.message(), "x.bin: read failed at byte 4096: Input/output error");
}

TEST(StatusTest, ResultCarriesValueOrStatus) {
  Result<int> good = 7;
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(good.value(), 7);
  Result<int> bad = Status::IoError("boom");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "boom");
  Result<int> from_ok = Status::Ok();
  EXPECT_EQ(from_ok.status().code(), Code::kInternal);
}

TEST(StatusTest, WithContextPrefixesMessage) {
  EXPECT_EQ(Status::IoError("b").WithContext("a").message(), "a: b");
  EXPECT_TRUE(Status::Ok().WithContext("a").ok());
}

}  // namespace
}  // namespace hoist
