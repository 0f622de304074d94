// The GCS source against a fake of Google Cloud Storage's JSON API on loopback
// (tests/reference/gcs_server.mjs), which checks every request's token and verifies every
// service-account assertion's RS256 signature with the account's public key: models load
// byte-exact by gs:// name with a token from each credentials source (a service account's key,
// gcloud's authorized user, the metadata server) or none (a public bucket); each refusal names
// its source and never a key or a token; a token that expires mid-load is fetched again.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "format/model.h"
#include "format/sample_model.h"
#include "io/gcs.h"
#include "io/hub.h"
#include "io/loopback.h"
#include "pipeline/load_checks.h"
#include "test_util.h"

namespace hoist {
namespace {

using testing::ExpectByteExact;
using testing::MakeDevice;
using testing::ReferenceServer;
using testing::RunHoist;

class GcsStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ReferenceServer>(
        std::vector<std::string>{HOIST_NODE, HOIST_GCS_SERVER, tmp_.path()},
        tmp_.File("server.out"));
    ASSERT_TRUE(server_->ok()) << "the GCS server did not start; see " << tmp_.File("server.out")
                               << "(.err)";
    // Only what the test sets: no credentials of the machine's leak in, no metadata server
    // is asked but the fake's.
    Set("STORAGE_EMULATOR_HOST", "127.0.0.1:" + std::to_string(server_->port()));
    Set("CLOUDSDK_CONFIG", tmp_.File("no-gcloud"));
    Set("GOOGLE_APPLICATION_CREDENTIALS", tmp_.File("service-account.json"));
    Set("NO_GCE_CHECK", "true");
    Unset("GCE_METADATA_HOST");
  }
  void TearDown() override {
    for (const std::string& name : set_) testing::SetVariable(name.c_str(), nullptr);
  }

  void Set(const std::string& name, const std::string& value) {
    testing::SetVariable(name.c_str(), value.c_str());
    set_.push_back(name);
  }
  void Unset(const std::string& name) {
    testing::SetVariable(name.c_str(), nullptr);
    set_.push_back(name);
  }

  // Writes a sample model as the object gs://BUCKET/`object` (its shards beside it); the model
  // read from the local files.
  TensorDirectory Put(const std::string& bucket, const std::string& object, SampleSpec spec) {
    const std::string path = tmp_.File("objects/" + bucket + "/" + object);
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    auto written = WriteSampleModel(path, spec);
    EXPECT_TRUE(written.ok()) << written.status().ToString();
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

  // Loads `name` and compares every tensor with `local`'s.
  static void ExpectLoadsByteExact(const std::string& name, const TensorDirectory& local) {
    TensorDirectory remote;
    auto model = LoadName(name, &remote);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ASSERT_EQ(remote.tensors.size(), local.tensors.size());
    EXPECT_EQ(remote.files[0].path.rfind("gs://", 0), 0u) << remote.files[0].path;
    EXPECT_EQ(remote.source().description(), "GCS");
    ExpectByteExact(local, **model);
  }

  std::string Text(const std::string& file) const {
    std::ifstream in(tmp_.File(file));
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  // A credentials file `name` holding `doc`.
  std::string WriteCredentials(const std::string& name, const nlohmann::json& doc) const {
    std::ofstream(tmp_.File(name)) << doc.dump();
    return tmp_.File(name);
  }

  testing::TempDir tmp_;
  std::unique_ptr<ReferenceServer> server_;
  std::vector<std::string> set_;
};

TEST_F(GcsStorageTest, EveryShapeOfModelLoadsByteExactWithAServiceAccountsToken) {
  struct Case {
    std::string object;  // where the sample is written
    std::string name;    // what the user names
    std::string format;
    int shards;
  };
  int loads = 0;
  for (const Case& c :
       {Case{"a/model.safetensors", "gs://models/a/model.safetensors", "safetensors", 1},
        Case{"b/m.gguf", "gs://models/b/m.gguf", "gguf", 1},
        Case{"c/model.safetensors.index.json", "gs://models/c/model.safetensors.index.json",
             "safetensors", 3},
        // A prefix is a directory, as a local one: its index found, every shard under it.
        Case{"d/model.safetensors.index.json", "gs://models/d", "safetensors", 2},
        Case{"e/m-00001-of-00002.gguf", "gs://models/e/", "gguf", 2},
        Case{"f with space/model.safetensors", "gs://models/f with space/", "safetensors", 1}}) {
    SCOPED_TRACE(c.name);
    SampleSpec spec;
    spec.format = c.format;
    spec.shards = c.shards;
    spec.target_bytes = 4 << 20;
    ExpectLoadsByteExact(c.name, Put("models", c.object, spec));
    ++loads;
  }
  // One token per load, each from a signed assertion the server verified; every request
  // carried a live one.
  const nlohmann::json counts = server_->Counts();
  EXPECT_EQ(counts["issued"]["serviceAccount"].get<int>(), loads);
  EXPECT_EQ(counts.value("rejectedAssertions", -1), 0);
  EXPECT_EQ(counts.value("refused", -1), 0);
  EXPECT_EQ(counts.value("anonymous", -1), 0);
  EXPECT_GT(counts.value("served", 0), loads);
}

TEST_F(GcsStorageTest, EachOtherCredentialsSourceLoadsByteExact) {
  const TensorDirectory local = Put("models", "a/model.safetensors", {"safetensors", 1 << 20});
  const TensorDirectory open = Put("public", "a/model.safetensors", {"safetensors", 1 << 20});
  Unset("GOOGLE_APPLICATION_CREDENTIALS");
  {
    SCOPED_TRACE("gcloud's authorized user");
    std::filesystem::create_directories(tmp_.File("gcloud"));
    std::filesystem::copy_file(tmp_.File("authorized-user.json"),
                               tmp_.File("gcloud/application_default_credentials.json"));
    Set("CLOUDSDK_CONFIG", tmp_.File("gcloud"));
    ExpectLoadsByteExact("gs://models/a/model.safetensors", local);
    EXPECT_EQ(server_->Counts()["issued"]["user"].get<int>(), 1);
    Set("CLOUDSDK_CONFIG", tmp_.File("no-gcloud"));
  }
  {
    SCOPED_TRACE("the metadata server");
    Set("GCE_METADATA_HOST", "127.0.0.1:" + std::to_string(server_->port()));
    ExpectLoadsByteExact("gs://models/a/model.safetensors", local);
    EXPECT_EQ(server_->Counts()["issued"]["metadata"].get<int>(), 1);
    Unset("GCE_METADATA_HOST");
  }
  {
    SCOPED_TRACE("none: a public bucket");
    ExpectLoadsByteExact("gs://public/a/model.safetensors", open);
    EXPECT_GT(server_->Counts().value("anonymous", 0), 0);
  }
  const nlohmann::json counts = server_->Counts();
  EXPECT_EQ(counts.value("refused", -1), 0);
  EXPECT_EQ(counts["issued"]["serviceAccount"].get<int>(), 0);
}

TEST_F(GcsStorageTest, EachRefusalNamesItsSourceAndNeverAKeyOrAToken) {
  Put("models", "a/model.safetensors", {"safetensors", 1 << 20});
  const std::string name = "gs://models/a/model.safetensors";
  const std::string token_uri = server_->endpoint() + "/token";
  const nlohmann::json user = nlohmann::json::parse(Text("authorized-user.json"));
  const std::vector<std::string> secrets = {"PRIVATE KEY", "assertion", "ya29.",
                                            user["client_secret"], user["refresh_token"]};
  auto expect_refused = [&](const std::string& why) {
    const auto r = RunHoist({"load", name, "--device", "host"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "hoist: " + name + ": " + why + "\n");
    for (const std::string& secret : secrets) {
      EXPECT_EQ(r.err.find(secret), std::string::npos) << secret;
    }
  };
  {
    SCOPED_TRACE("a key the token endpoint does not know");
    const std::string key = tmp_.File("foreign-service-account.json");
    Set("GOOGLE_APPLICATION_CREDENTIALS", key);
    expect_refused(
        "GCS credentials from the service account "
        "loader@hoist-test.iam.gserviceaccount.com (" +
        key + "): " + token_uri +
        " answered 400 Bad Request: invalid_grant: Invalid JWT Signature.");
    EXPECT_EQ(server_->Counts().value("rejectedAssertions", 0), 1);
  }
  {
    SCOPED_TRACE("a user whose client secret is wrong");
    nlohmann::json wrong = user;
    wrong["client_secret"] = "not-the-secret";
    const std::string file = WriteCredentials("wrong-user.json", wrong);
    Set("GOOGLE_APPLICATION_CREDENTIALS", file);
    expect_refused("GCS credentials from the authorized user of " + file + ": " + token_uri +
                   " answered 401 Unauthorized: invalid_client: Unauthorized");
  }
  {
    SCOPED_TRACE("a key whose token endpoint is plain http elsewhere");
    nlohmann::json doc = nlohmann::json::parse(Text("service-account.json"));
    doc["token_uri"] = "http://203.0.113.9/token";
    const std::string file = WriteCredentials("elsewhere.json", doc);
    Set("GOOGLE_APPLICATION_CREDENTIALS", file);
    expect_refused(file +
                   ": its token_uri 'http://203.0.113.9/token' is not https (nor http on "
                   "loopback): no key is sent there");
  }
  {
    SCOPED_TRACE("a key that is not one");
    nlohmann::json doc = nlohmann::json::parse(Text("service-account.json"));
    doc["private_key"] = "-----BEGIN PRIVATE KEY-----\nbm90IGEga2V5\n-----END PRIVATE KEY-----\n";
    const std::string file = WriteCredentials("broken.json", doc);
    Set("GOOGLE_APPLICATION_CREDENTIALS", file);
    expect_refused(
        "GCS credentials from the service account "
        "loader@hoist-test.iam.gserviceaccount.com (" +
        file + "): its private_key: not a PEM RSA private key");
  }
  {
    SCOPED_TRACE("credentials of a type hoist does not read");
    const std::string file =
        WriteCredentials("federated.json", {{"type", "external_account"}, {"audience", "x"}});
    Set("GOOGLE_APPLICATION_CREDENTIALS", file);
    expect_refused(file +
                   ": credentials of type 'external_account' are not read by hoist (it reads "
                   "service_account and authorized_user keys, and the metadata server's tokens)");
  }
  {
    SCOPED_TRACE("no credentials, a private bucket");
    Unset("GOOGLE_APPLICATION_CREDENTIALS");
    expect_refused(
        "401 Unauthorized: Anonymous caller does not have storage.objects.get access to the "
        "Google Cloud Storage bucket models. (the server refused the request: check the "
        "credentials, none found: the requests went without a token)");
  }
  {
    SCOPED_TRACE("a bucket name GCS does not allow");
    const auto r = RunHoist({"inspect", "gs://Models/a/model.safetensors"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err,
              "hoist: gs://Models/a/model.safetensors: 'Models' is not a GCS bucket name (3 to 63 "
              "lowercase letters, digits, '-', '_' and '.', starting and ending with a letter or "
              "digit; gs://BUCKET/OBJECT)\n");
  }
}

// A token that lives shorter than the load: fetched again before it expires, every request
// sent with a live one (the server refuses a token 2 s after it issued it, while its stated
// expires_in is 301 s: 1 s past the five-minute window).
TEST_F(GcsStorageTest, ATokenThatExpiresDuringALoadIsFetchedAgainBeforeItDoes) {
  const TensorDirectory local = Put("models", "r/model.safetensors", {"safetensors", 16 << 20});
  server_->Configure("statedSeconds=301&hardMs=2000&delayMs=100");
  TensorDirectory remote;
  // 64 ranged GETs of 256 KiB on 2 readers, each answered after 100 ms: over 3 s.
  auto model = LoadName("gs://models/r/model.safetensors", &remote, 2, 256 << 10);
  server_->Configure("statedSeconds=3600&hardMs=0&delayMs=0");
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  ExpectByteExact(local, **model);
  const nlohmann::json counts = server_->Counts();
  EXPECT_GE(counts["issued"]["serviceAccount"].get<int>(), 3);
  EXPECT_EQ(counts.value("expired", -1), 0);
  EXPECT_EQ(counts.value("refused", -1), 0);
}

TEST_F(GcsStorageTest, AServerThatLiesIsRefused) {
  SampleSpec sharded{"safetensors", 1 << 20};
  sharded.shards = 2;
  Put("models", "d/model.safetensors.index.json", sharded);
  Put("models", "a/model.safetensors", {"safetensors", 1 << 20});
  {
    SCOPED_TRACE("a listing that names an object outside its prefix");
    server_->Configure("lie=listing");
    const auto r = RunHoist({"inspect", "gs://models/d/"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err,
              "hoist: gs://models/d/: the listing names the object 'd/../secret.safetensors', "
              "which does not lie plainly under the prefix (an empty, '.' or '..' part, or "
              "another prefix): refused\n");
  }
  {
    SCOPED_TRACE("an object whose ETag changes while it is read");
    server_->Configure("lie=etag");
    const auto r = RunHoist({"load", "gs://models/a/model.safetensors", "--device", "host"});
    EXPECT_EQ(r.exit_code, 6) << r.err;
    EXPECT_NE(r.err.find("changed while it was read"), std::string::npos) << r.err;
  }
  server_->Configure("lie=");
}

}  // namespace
}  // namespace hoist
