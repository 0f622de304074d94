// The environment knobs as ProcessSettings reads them: the defaults when unset, each spelling a
// user may write, and an error naming the variable for anything else.
#include "api/settings.h"

#include "io/http_storage.h"
#include "io/hub.h"
#include "test_util.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace hoist {
namespace {

using testing::SetVariable;

// Sets the variable for one test and restores the unset state after it.
class SettingsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const char* name : {"HOIST_AHEAD_MIB", "HOIST_PINNED_MIB", "HOIST_PIN", "HOIST_GATHER",
                             "HOIST_HTTP_RETRIES", "HOIST_HTTP_STALL_TIMEOUT"}) {
      SetVariable(name, nullptr);
    }
  }
};

TEST_F(SettingsTest, UnsetVariablesGiveTheDefaults) {
  const Result<Settings> s = ProcessSettings();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->ahead_bytes, 1024ULL << 20);
  EXPECT_EQ(s->pinned_limit_bytes, 8192ULL << 20);
  EXPECT_EQ(s->pin, PinMode::kAuto);
  EXPECT_TRUE(s->gather_cached_rows);
}

TEST_F(SettingsTest, EachSpellingIsRead) {
  SetVariable("HOIST_AHEAD_MIB", "1.5");
  SetVariable("HOIST_PINNED_MIB", "0");
  SetVariable("HOIST_PIN", "Off");
  SetVariable("HOIST_GATHER", "off");
  Result<Settings> s = ProcessSettings();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->ahead_bytes, 3ULL << 19);
  EXPECT_EQ(s->pinned_limit_bytes, 0U);
  EXPECT_EQ(s->pin, PinMode::kOff);
  EXPECT_FALSE(s->gather_cached_rows);

  SetVariable("HOIST_PIN", "yes");
  SetVariable("HOIST_GATHER", "1");
  s = ProcessSettings();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->pin, PinMode::kOn);
  EXPECT_TRUE(s->gather_cached_rows);
}

TEST_F(SettingsTest, AnyOtherValueIsRefusedNamingTheVariable) {
  struct Case {
    const char* name;
    const char* value;
    const char* message;
  };
  for (const Case& c :
       {Case{"HOIST_GATHER", "sometimes", "HOIST_GATHER='sometimes': expected on or off"},
        Case{"HOIST_PIN", "maybe", "HOIST_PIN='maybe': expected on, off or auto"},
        Case{"HOIST_AHEAD_MIB", "12x",
             "HOIST_AHEAD_MIB='12x': expected a number of MiB from 0 to 1073741824"},
        Case{"HOIST_PINNED_MIB", "-1",
             "HOIST_PINNED_MIB='-1': expected a number of MiB from 0 to "
             "1073741824"}}) {
    SCOPED_TRACE(c.name);
    SetVariable(c.name, c.value);
    const Result<Settings> s = ProcessSettings();
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), Code::kInvalidArgument);
    EXPECT_NE(s.status().message().find(c.message), std::string::npos) << s.status().ToString();
    SetVariable(c.name, nullptr);
  }
}

// The remote sources' knobs are read where a URL's source is made: a value they do not take is
// the open's error, never a silent default (atoi read "four" as 0 retries).
TEST_F(SettingsTest, TheHttpKnobsRefuseWhatTheyDoNotTake) {
  struct Case {
    const char* name;
    const char* value;
    const char* message;
  };
  for (const Case& c :
       {Case{"HOIST_HTTP_RETRIES", "four",
             "HOIST_HTTP_RETRIES='four': expected a count from 0 to 20"},
        Case{"HOIST_HTTP_RETRIES", "21", "HOIST_HTTP_RETRIES='21': expected a count from 0 to 20"},
        Case{"HOIST_HTTP_STALL_TIMEOUT", "0",
             "HOIST_HTTP_STALL_TIMEOUT='0': expected seconds above 0, at most 86400"},
        Case{"HOIST_HTTP_STALL_TIMEOUT", "5s",
             "HOIST_HTTP_STALL_TIMEOUT='5s': expected seconds above 0, at most 86400"}}) {
    SCOPED_TRACE(std::string(c.name) + "=" + c.value);
    SetVariable(c.name, c.value);
    for (const char* url : {"http://127.0.0.1:9/m.safetensors", "s3://bucket/m.safetensors"}) {
      const Result<ModelLocation> where = LocateModel(url);
      ASSERT_FALSE(where.ok()) << url;
      EXPECT_EQ(where.status().code(), Code::kInvalidArgument) << url;
      EXPECT_EQ(where.status().message(), c.message) << url;
    }
    SetVariable(c.name, nullptr);
  }
  SetVariable("HOIST_HTTP_RETRIES", "0");
  SetVariable("HOIST_HTTP_STALL_TIMEOUT", "2.5");
  const Result<HttpOptions> options = HttpOptionsFromEnvironment(1);
  ASSERT_TRUE(options.ok()) << options.status().ToString();
  EXPECT_EQ(options->retries, 0);
  EXPECT_EQ(options->stall_timeout_s, 1);  // the load's, the shorter
}

}  // namespace
}  // namespace hoist
