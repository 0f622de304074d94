// The S3 source against an S3-compatible server on loopback (tests/reference/s3_server.mjs:
// s3rver, with every request's Signature V4 computed again by AWS's own signer), the models
// uploaded by AWS's command-line client: every shape of model loads byte-exact by s3:// name,
// a wrong secret is refused with the server's reason, credentials come from a profile file.
#include <signal.h>
#include <sys/wait.h>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "format/model.h"
#include "format/sample_model.h"
#include "io/hub.h"
#include "io/loopback.h"
#include "io/s3.h"
#include "io/signing.h"
#include "pipeline/load_checks.h"
#include "test_util.h"

namespace hoist {
namespace {

using testing::ExpectByteExact;
using testing::MakeDevice;
using testing::RunHoist;

// The S3 server (tests/reference/s3_server.mjs) over `dir`/objects, bucket "models". Its
// counts: requests signed, refused, expired, keys issued by each credentials service; its
// knobs: statedSeconds, hardMs, delayMs.
std::unique_ptr<testing::ReferenceServer> StartS3Server(const std::string& dir) {
  std::filesystem::create_directories(dir + "/objects");
  return std::make_unique<testing::ReferenceServer>(
      std::vector<std::string>{HOIST_NODE, HOIST_S3_SERVER, dir + "/objects", "models"},
      dir + "/server.out");
}

class S3StorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartS3Server(tmp_.path());
    ASSERT_TRUE(server_->ok()) << "the S3 server did not start; see " << tmp_.File("server.out")
                               << "(.err)";
    // Only what the test sets: no profile of the machine's leaks in.
    Set("AWS_CONFIG_FILE", tmp_.File("no-config"));
    Set("AWS_SHARED_CREDENTIALS_FILE", tmp_.File("no-credentials"));
    Set("AWS_ACCESS_KEY_ID", "S3RVER");
    Set("AWS_SECRET_ACCESS_KEY", "S3RVER");
    Set("AWS_REGION", "us-east-1");
    Set("AWS_ENDPOINT_URL", server_->endpoint());
    Set("AWS_EC2_METADATA_DISABLED", "true");
  }
  void TearDown() override {
    for (const std::string& name : set_) unsetenv(name.c_str());
  }

  void Set(const std::string& name, const std::string& value) {
    setenv(name.c_str(), value.c_str(), 1);
    set_.push_back(name);
  }

  // Writes a sample model locally under `name` and uploads its directory's files with the AWS
  // command-line client to s3://models/PREFIX/; the local model.
  TensorDirectory Upload(const std::string& name, SampleSpec spec) {
    const std::string path = tmp_.File("local/" + name);
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    auto written = WriteSampleModel(path, spec);
    EXPECT_TRUE(written.ok()) << written.status().ToString();
    const std::string dir = std::filesystem::path(path).parent_path().string();
    const std::string prefix = dir.substr(tmp_.File("local").size());
    EXPECT_EQ(testing::Run({HOIST_AWS, "--endpoint-url", server_->endpoint(), "s3", "cp",
                            "--recursive", "--only-show-errors", dir, "s3://models" + prefix + "/"},
                           tmp_.File("aws.out")),
              0)
        << "aws s3 cp failed; see " << tmp_.File("aws.out") << "(.err)";
    auto opened = ReadModelDirectory(path);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    return opened.ok() ? std::move(opened).value() : TensorDirectory{};
  }

  static Result<std::unique_ptr<LoadedModel>> LoadName(const std::string& name,
                                                       TensorDirectory* dir_out, int threads = 4,
                                                       uint64_t chunk_bytes = 1 << 20) {
    HOIST_ASSIGN_OR_RETURN(const ModelLocation where, LocateModel(name));
    HOIST_ASSIGN_OR_RETURN(TensorDirectory dir, ReadModelDirectory(where.storage, where.path));
    LoadOptions options;
    options.threads = threads;
    options.chunk_bytes = chunk_bytes;
    auto model = Load(dir, MakeDevice("host"), options);
    *dir_out = std::move(dir);
    return model;
  }

  testing::TempDir tmp_;
  std::unique_ptr<testing::ReferenceServer> server_;
  std::vector<std::string> set_;
};

TEST_F(S3StorageTest, EveryShapeOfModelLoadsByteExactByItsS3Name) {
  struct Case {
    std::string local;  // where the sample is written (and uploaded from)
    std::string name;   // what the user names
    std::string format;
    int shards;
  };
  for (const Case& c :
       {Case{"a/model.safetensors", "s3://models/a/model.safetensors", "safetensors", 1},
        Case{"b/m.gguf", "s3://models/b/m.gguf", "gguf", 1},
        Case{"c/model.safetensors.index.json", "s3://models/c/model.safetensors.index.json",
             "safetensors", 3},
        Case{"d/m-00001-of-00002.gguf", "s3://models/d/m-00001-of-00002.gguf", "gguf", 2},
        // A prefix is a directory, as a local one: its index found, every shard under it.
        Case{"e/model.safetensors.index.json", "s3://models/e", "safetensors", 2},
        Case{"f with space/model.safetensors", "s3://models/f with space/", "safetensors", 1}}) {
    SCOPED_TRACE(c.name);
    SampleSpec spec;
    spec.format = c.format;
    spec.shards = c.shards;
    spec.target_bytes = 4 << 20;
    const TensorDirectory local = Upload(c.local, spec);
    TensorDirectory remote;
    auto model = LoadName(c.name, &remote);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ASSERT_EQ(remote.tensors.size(), local.tensors.size());
    ASSERT_EQ(remote.files.size(), static_cast<size_t>(c.shards));
    EXPECT_EQ(remote.files[0].path.rfind("s3://models/", 0), 0u) << remote.files[0].path;
    ExpectByteExact(local, **model);
    EXPECT_EQ(remote.source().description(), "S3");
  }
  // Every request was signed and every signature held.
  const nlohmann::json counts = server_->Counts();
  EXPECT_GT(counts.value("signed", 0), 0);
  EXPECT_EQ(counts.value("refused", -1), 0);
}

TEST_F(S3StorageTest, AWrongSecretIsRefusedWithTheServersReasonAndNeverPrinted) {
  Upload("a/model.safetensors", SampleSpec{"safetensors", 1 << 20});
  Set("AWS_SECRET_ACCESS_KEY", "not-the-secret");
  const auto r = RunHoist({"load", "s3://models/a/model.safetensors", "--device", "host"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "hoist: s3://models/a/model.safetensors: 403 Forbidden: SignatureDoesNotMatch: The "
            "request signature we calculated does not match the signature you provided. Check "
            "your key and signing method. (the server refused the request: check the "
            "credentials, access key S3RVER from AWS_ACCESS_KEY_ID)\n");
  EXPECT_GT(server_->Counts().value("refused", 0), 0);
}

TEST_F(S3StorageTest, CredentialsAndRegionComeFromAProfileWhenTheEnvironmentHasNone) {
  const TensorDirectory local = Upload("a/model.safetensors", SampleSpec{"safetensors", 1 << 20});
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  unsetenv("AWS_REGION");
  std::ofstream(tmp_.File("credentials"))
      << "[default]\naws_access_key_id = WRONG\naws_secret_access_key = WRONG\n\n"
      << "[loader]\naws_access_key_id = S3RVER\naws_secret_access_key = S3RVER\n";
  std::ofstream(tmp_.File("config")) << "[profile loader]\nregion = eu-west-1\n";
  Set("AWS_SHARED_CREDENTIALS_FILE", tmp_.File("credentials"));
  Set("AWS_CONFIG_FILE", tmp_.File("config"));
  Set("AWS_PROFILE", "loader");
  auto config = S3ConfigFromEnvironment();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ASSERT_NE(config->credentials, nullptr);
  EXPECT_EQ(config->credentials->name(), "profile 'loader'");
  EXPECT_EQ(config->credentials->Current()->access_key_id, "S3RVER");
  EXPECT_EQ(config->region, "eu-west-1");
  TensorDirectory remote;
  auto model = LoadName("s3://models/a/model.safetensors", &remote);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ExpectByteExact(local, **model);

  // The default profile's wrong key: refused, naming where the key came from.
  Set("AWS_PROFILE", "default");
  const auto r = RunHoist({"inspect", "s3://models/a/model.safetensors"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("403 Forbidden: InvalidAccessKeyId: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("access key WRONG from profile 'default'"), std::string::npos) << r.err;

  // Half a pair is refused before any request.
  Set("AWS_ACCESS_KEY_ID", "S3RVER");
  const auto half = RunHoist({"inspect", "s3://models/a/model.safetensors"});
  EXPECT_EQ(half.exit_code, 1);
  EXPECT_EQ(half.err,
            "hoist: s3://models/a/model.safetensors: AWS_ACCESS_KEY_ID is set without "
            "AWS_SECRET_ACCESS_KEY: S3 requests need both or neither\n");
}

TEST_F(S3StorageTest, TheCliLoadsAnS3NameAndReportsItsSource) {
  Upload("g/m.gguf", SampleSpec{"gguf", 2 << 20});
  auto r = RunHoist({"verify", "s3://models/g/m.gguf", "--device", "sim"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = RunHoist({"load", "s3://models/g", "--device", "host", "--json", "--quiet"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  EXPECT_EQ(report["source"]["kind"], "S3");
  EXPECT_GT(report["source"]["requests"].get<uint64_t>(), 0u);
  EXPECT_GE(report["source"]["bytes"].get<uint64_t>(), report["bytes"].get<uint64_t>());
  r = RunHoist({"load", "s3://models/nothing/m.gguf", "--device", "host"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "hoist: s3://models/nothing/m.gguf: no such object, nor objects under it\n");
  r = RunHoist({"load", "s3://Models/m.gguf", "--device", "host"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err,
            "hoist: s3://Models/m.gguf: 'Models' is not an S3 bucket name (3 to 63 lowercase "
            "letters, digits, dots and hyphens; s3://BUCKET/KEY)\n");
}

// The sources of temporary credentials the AWS SDKs read, each faked on the S3 server's port
// (tests/reference/s3_server.mjs): the keys each issues sign every request of a load, and the
// server checks every signature with the issued secret and the session token.
TEST_F(S3StorageTest, EachSourceOfTemporaryCredentialsSignsALoadByteExact) {
  const TensorDirectory local = Upload("a/model.safetensors", SampleSpec{"safetensors", 1 << 20});
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  std::ofstream(tmp_.File("web-token")) << "web-identity-token\n";
  std::ofstream(tmp_.File("container-token")) << "container-authorization-token";
  const std::string endpoint = server_->endpoint();
  struct Case {
    std::string source;  // the credentials' name in messages
    std::vector<std::pair<std::string, std::string>> environment;
    std::string issuer;
  };
  for (const Case& c :
       {Case{"web identity (role arn:aws:iam::123456789012:role/loader, "
             "AWS_WEB_IDENTITY_TOKEN_FILE)",
             {{"AWS_WEB_IDENTITY_TOKEN_FILE", tmp_.File("web-token")},
              {"AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/loader"}},
             "sts"},
        Case{"the container credentials endpoint (" + endpoint + "/__container/creds)",
             {{"AWS_CONTAINER_CREDENTIALS_FULL_URI", endpoint + "/__container/creds"},
              {"AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", tmp_.File("container-token")}},
             "container"},
        Case{"the instance metadata service (role loader-role)",
             {{"AWS_EC2_METADATA_DISABLED", "false"},
              {"AWS_EC2_METADATA_SERVICE_ENDPOINT", endpoint}},
             "imds"}}) {
    SCOPED_TRACE(c.source);
    for (const auto& [name, value] : c.environment) Set(name, value);
    auto config = S3ConfigFromEnvironment();
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    ASSERT_NE(config->credentials, nullptr);
    EXPECT_EQ(config->credentials->name(), c.source);
    EXPECT_EQ(config->credentials->Current()->access_key_id.rfind("ASIA", 0), 0u);
    TensorDirectory remote;
    auto model = LoadName("s3://models/a/model.safetensors", &remote);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ExpectByteExact(local, **model);
    for (const auto& [name, value] : c.environment) unsetenv(name.c_str());
    // One fetch for the configuration above, one for the load's; none more while they live.
    EXPECT_EQ(server_->Counts()["issued"][c.issuer], 2);
  }
  const nlohmann::json counts = server_->Counts();
  EXPECT_GT(counts.value("signed", 0), 0);
  EXPECT_EQ(counts.value("refused", -1), 0);
}

TEST_F(S3StorageTest, AProfilesCredentialProcessGivesItsKeysOrIsNamedWhenItFails) {
  const TensorDirectory local = Upload("a/model.safetensors", SampleSpec{"safetensors", 1 << 20});
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  std::ofstream(tmp_.File("config"))
      << "[profile process]\ncredential_process = printf '{\"Version\": 1, \"AccessKeyId\": "
         "\"S3RVER\", \"SecretAccessKey\": \"S3RVER\"}'\n\n"
      << "[profile failing]\ncredential_process = sh -c 'echo no session >&2; exit 3'\n\n"
      << "[profile chatty]\ncredential_process = echo not json\n\n"
      << "[profile sso]\nsso_session = corp\nsso_account_id = 1\n";
  Set("AWS_CONFIG_FILE", tmp_.File("config"));
  Set("AWS_PROFILE", "process");
  auto config = S3ConfigFromEnvironment();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->credentials->name(), "the credential_process of profile 'process'");
  TensorDirectory remote;
  auto model = LoadName("s3://models/a/model.safetensors", &remote);
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ExpectByteExact(local, **model);

  const std::string name = "s3://models/a/model.safetensors";
  struct Refusal {
    std::string profile;
    std::string err;
  };
  for (const Refusal& c :
       {Refusal{"failing", "no session\nhoist: " + name +
                               ": S3 credentials from the credential_process of profile "
                               "'failing': the command exited with status 3 (its error output "
                               "is above)\n"},
        Refusal{"chatty", "hoist: " + name +
                              ": S3 credentials from the credential_process of profile 'chatty': "
                              "the command's output is not a JSON object with \"Version\": 1\n"},
        Refusal{"sso", "hoist: " + name +
                           ": AWS profile 'sso' signs in through IAM Identity Center but lacks "
                           "sso_account_id, sso_role_name or sso_region (in the profile or its "
                           "sso-session section)\n"}}) {
    Set("AWS_PROFILE", c.profile);
    const auto r = RunHoist({"inspect", name});
    EXPECT_EQ(r.exit_code, 1) << c.profile;
    EXPECT_EQ(r.err, c.err);
  }
}

// A source that refuses is named with what it said; the token sent to it never is (each
// message is compared whole).
TEST_F(S3StorageTest, ACredentialsSourceThatRefusesIsNamedAndItsTokenNeverPrinted) {
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  const std::string name = "s3://models/a/model.safetensors";
  const std::string endpoint = server_->endpoint();
  std::ofstream(tmp_.File("web-token")) << "stolen-web-token\n";
  Set("AWS_WEB_IDENTITY_TOKEN_FILE", tmp_.File("web-token"));
  Set("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/loader");
  auto r = RunHoist({"inspect", name});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "hoist: " + name +
                       ": S3 credentials from web identity (role "
                       "arn:aws:iam::123456789012:role/loader, AWS_WEB_IDENTITY_TOKEN_FILE): " +
                       endpoint +
                       "/ answered 403 Forbidden: AccessDenied: Not authorized to perform "
                       "sts:AssumeRoleWithWebIdentity\n");
  unsetenv("AWS_ROLE_ARN");
  r = RunHoist({"inspect", name});
  EXPECT_EQ(r.err, "hoist: " + name +
                       ": AWS_WEB_IDENTITY_TOKEN_FILE is set without AWS_ROLE_ARN: a web "
                       "identity needs both\n");
  unsetenv("AWS_WEB_IDENTITY_TOKEN_FILE");

  Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", endpoint + "/__container/creds");
  Set("AWS_CONTAINER_AUTHORIZATION_TOKEN", "stolen-container-token");
  r = RunHoist({"inspect", name});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "hoist: " + name + ": S3 credentials from the container credentials endpoint (" +
                       endpoint + "/__container/creds): " + endpoint +
                       "/__container/creds answered 401 Unauthorized: "
                       "{\"code\":\"Unauthorized\",\"message\":\"not authorized\"}\n");
  // Over plain http, the token goes to loopback and the container agents' addresses only.
  Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", "http://203.0.113.9:8080/creds");
  r = RunHoist({"inspect", name});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.err, "hoist: " + name +
                       ": AWS_CONTAINER_CREDENTIALS_FULL_URI 'http://203.0.113.9:8080/creds': a "
                       "container credentials endpoint over http must be on loopback or the "
                       "container agent's address (169.254.170.2, 169.254.170.23), else https: "
                       "its token is not sent there\n");
}

// IAM Identity Center: the sign-in `aws sso login` cached, found by the SHA-1 of the
// sso-session's name (or of a legacy profile's start URL), exchanged at the portal for the
// role's keys; an expired or missing sign-in says to log in again, and no message holds the
// sign-in's token.
TEST_F(S3StorageTest, AProfilesIamIdentityCenterSignInGivesTheRolesKeys) {
  const TensorDirectory local = Upload("a/model.safetensors", SampleSpec{"safetensors", 1 << 20});
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  const std::string name = "s3://models/a/model.safetensors";
  std::ofstream(tmp_.File("config"))
      << "[profile dev]\nsso_session = corp\nsso_account_id = 123456789012\n"
         "sso_role_name = loader-sso\nregion = us-east-1\n\n"
      << "[sso-session corp]\nsso_region = us-east-1\n"
         "sso_start_url = https://corp.awsapps.com/start\n\n"
      << "[profile legacy]\nsso_start_url = https://legacy.awsapps.com/start\n"
         "sso_region = us-east-1\nsso_account_id = 123456789012\nsso_role_name = loader-sso\n\n"
      << "[profile stranger]\nsso_session = corp\nsso_account_id = 123456789012\n"
         "sso_role_name = admin\n";
  Set("AWS_CONFIG_FILE", tmp_.File("config"));
  Set("AWS_PROFILE", "dev");
  // HOME is put back after the test, not unset: the suite's other tests run in this process.
  struct RestoreHome {
    std::string home = std::getenv("HOME") != nullptr ? std::getenv("HOME") : "";
    ~RestoreHome() { setenv("HOME", home.c_str(), 1); }
  } restore_home;
  setenv("HOME", tmp_.path().c_str(), 1);
  Set("AWS_ENDPOINT_URL_SSO", server_->endpoint());
  const std::string cache = tmp_.File(".aws/sso/cache");
  std::filesystem::create_directories(cache);
  // sha1("corp") (by sha1sum), as the AWS CLI names the sso-session's cache.
  const std::string session_file = cache + "/ee0bfd2552fbd840c02cc48b6e823320543c450f.json";
  auto write_cache = [](const std::string& file, const std::string& token,
                        const std::string& expires) {
    std::ofstream(file) << "{\"startUrl\": \"https://corp.awsapps.com/start\", \"region\": "
                           "\"us-east-1\", \"accessToken\": \""
                        << token << "\", \"expiresAt\": \"" << expires << "\"}";
  };
  auto digest = Sha1Hex("corp");
  ASSERT_TRUE(digest.ok()) << digest.status().ToString();
  EXPECT_EQ(*digest, "ee0bfd2552fbd840c02cc48b6e823320543c450f");
  write_cache(session_file, "sso-access-token", "2099-01-01T00:00:00Z");
  // sha1("https://legacy.awsapps.com/start"), by sha1sum
  write_cache(cache + "/79e435d7a515078e81c9dffc35f38d5687ebd3a7.json", "sso-access-token",
              "2099-01-01T00:00:00UTC");
  for (const char* profile : {"dev", "legacy"}) {
    SCOPED_TRACE(profile);
    Set("AWS_PROFILE", profile);
    auto config = S3ConfigFromEnvironment();
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    ASSERT_NE(config->credentials, nullptr);
    EXPECT_EQ(config->credentials->name(),
              std::string("IAM Identity Center (profile '") + profile + "', role loader-sso)");
    TensorDirectory remote;
    auto model = LoadName(name, &remote);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ExpectByteExact(local, **model);
  }
  EXPECT_EQ(server_->Counts()["issued"]["sso"], 4);
  auto expect_refused = [&](const std::string& profile, const std::string& why) {
    Set("AWS_PROFILE", profile);
    const auto r = RunHoist({"inspect", name});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "hoist: " + name + ": S3 credentials from IAM Identity Center (profile '" +
                         profile + "', " + why + "\n");
    EXPECT_EQ(r.err.find("sso-access-token"), std::string::npos);
  };
  expect_refused("stranger", "role admin): " + server_->endpoint() +
                                 "/federation/credentials?account_id=123456789012&role_name=admin "
                                 "answered 403 Forbidden: {\"message\":\"No access\"}");
  write_cache(session_file, "sso-access-token", "2020-01-01T00:00:00Z");
  expect_refused("dev", "role loader-sso): the sign-in cached at " + session_file +
                            " expired at 2020-01-01T00:00:00Z: run `aws sso login --profile dev`");
  std::filesystem::remove(session_file);
  expect_refused("dev", "role loader-sso): no sign-in cached at " + session_file +
                            ": run `aws sso login --profile dev`");
  EXPECT_EQ(server_->Counts().value("refused", -1), 0);
}

// Keys that live shorter than the load: fetched again before they expire, every request
// signed with live ones (the server refuses a key 2 s after it issued it, while its stated
// Expiration lies 301 s ahead: 1 s past the five-minute window).
TEST_F(S3StorageTest, CredentialsThatExpireDuringALoadAreFetchedAgainBeforeTheyDo) {
  const TensorDirectory local = Upload("r/model.safetensors", SampleSpec{"safetensors", 16 << 20});
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  Set("AWS_CONTAINER_CREDENTIALS_FULL_URI", server_->endpoint() + "/__container/creds");
  Set("AWS_CONTAINER_AUTHORIZATION_TOKEN", "container-authorization-token");
  server_->Configure("statedSeconds=301&hardMs=2000&delayMs=100");
  TensorDirectory remote;
  // 64 ranged GETs of 256 KiB on 2 readers, each answered after 100 ms: over 3 s.
  auto model = LoadName("s3://models/r/model.safetensors", &remote, 2, 256 << 10);
  server_->Configure("statedSeconds=3600&hardMs=0&delayMs=0");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ExpectByteExact(local, **model);
  const nlohmann::json counts = server_->Counts();
  EXPECT_GE(counts["issued"]["container"].get<int>(), 3);
  EXPECT_EQ(counts.value("expired", -1), 0);
  EXPECT_EQ(counts.value("refused", -1), 0);
}

}  // namespace
}  // namespace hoist
