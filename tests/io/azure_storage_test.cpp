// The Azure source against Azurite, Microsoft's emulator of Blob Storage (from npm), over HTTPS
// with its OAuth check on, and loopback fakes of the Entra ID token services
// (tests/reference/azure_server.mjs): Azurite checks every request's Shared Key signature, SAS
// and bearer token. Models load byte-exact by az:// name with the account's key, a SAS, a token
// from workload identity, App Service's identity endpoint or the instance metadata service, or
// none (a public container); each refusal names its source and never a key or a token.
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

constexpr const char* kEmulatorKey =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
constexpr const char* kTenant = "72f988bf-86f1-41af-91ab-2d7cd011db47";

class AzureStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // The models first: the server uploads what lies under objects/ as it starts.
    SampleSpec small{"safetensors", 1 << 20};
    local_ = Put("models", "a/model.safetensors", small);
    open_ = Put("public", "a/model.safetensors", small);
    shapes_.push_back({"az://models/b/m.gguf", Put("models", "b/m.gguf", {"gguf", 2 << 20})});
    SampleSpec sharded{"safetensors", 3 << 20};
    sharded.shards = 3;
    shapes_.push_back({"az://models/c/model.safetensors.index.json",
                       Put("models", "c/model.safetensors.index.json", sharded)});
    sharded.shards = 2;
    // A prefix is a directory, as a local one: its index found, every shard under it.
    shapes_.push_back({"az://models/d", Put("models", "d/model.safetensors.index.json", sharded)});
    SampleSpec split{"gguf", 2 << 20};
    split.shards = 2;
    shapes_.push_back({"az://models/e/", Put("models", "e/m-00001-of-00002.gguf", split)});
    shapes_.push_back(
        {"az://models/f with space/", Put("models", "f with space/model.safetensors", small)});
    server_ = std::make_unique<ReferenceServer>(
        std::vector<std::string>{HOIST_NODE, HOIST_AZURE_SERVER, tmp_.path()},
        tmp_.File("server.out"));
    ASSERT_TRUE(server_->ok()) << "Azurite did not start; see " << tmp_.File("server.out")
                               << "(.err)";
    blob_endpoint_ =
        "https://127.0.0.1:" +
        std::to_string(nlohmann::json::parse(Text("azurite.json"))["blobPort"].get<int>()) +
        "/devstoreaccount1";
    // Only what the test sets: no credentials of the machine's leak in, no metadata service
    // is asked but the fake's.
    Set("CURL_CA_BUNDLE", tmp_.File("cert.pem"));
    Set("AZURE_STORAGE_CONNECTION_STRING", KeyConnection(kEmulatorKey));
    for (const char* name :
         {"AZURE_STORAGE_ACCOUNT", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN",
          "AZURE_FEDERATED_TOKEN_FILE", "AZURE_CLIENT_ID", "AZURE_TENANT_ID",
          "AZURE_AUTHORITY_HOST", "IDENTITY_ENDPOINT", "IDENTITY_HEADER",
          "AZURE_POD_IDENTITY_AUTHORITY_HOST", "SSL_CERT_FILE"}) {
      Unset(name);
    }
  }
  void TearDown() override {
    for (const std::string& name : set_) testing::SetVariable(name.c_str(), nullptr);
  }

  std::string KeyConnection(const std::string& key) const {
    return "DefaultEndpointsProtocol=https;AccountName=devstoreaccount1;AccountKey=" + key +
           ";BlobEndpoint=" + blob_endpoint_ + ";";
  }
  void Set(const std::string& name, const std::string& value) {
    testing::SetVariable(name.c_str(), value.c_str());
    set_.push_back(name);
  }
  void Unset(const std::string& name) {
    testing::SetVariable(name.c_str(), nullptr);
    set_.push_back(name);
  }

  // Writes a sample model as the blob az://CONTAINER/`blob` (its shards beside it); the model
  // read from the local files.
  TensorDirectory Put(const std::string& container, const std::string& blob, SampleSpec spec) {
    const std::string path = tmp_.File("objects/" + container + "/" + blob);
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    auto written = WriteSampleModel(path, spec);
    EXPECT_TRUE(written.ok()) << written.status().ToString();
    auto opened = ReadModelDirectory(path);
    EXPECT_TRUE(opened.ok()) << opened.status().ToString();
    return opened.ok() ? std::move(opened).value() : TensorDirectory{};
  }

  // Loads `name` and compares every tensor with `local`'s.
  static void ExpectLoadsByteExact(const std::string& name, const TensorDirectory& local) {
    auto where = LocateModel(name);
    ASSERT_TRUE(where.ok()) << where.status().ToString();
    auto remote = ReadModelDirectory(where->storage, where->path);
    ASSERT_TRUE(remote.ok()) << remote.status().ToString();
    ASSERT_EQ(remote->tensors.size(), local.tensors.size());
    EXPECT_EQ(remote->files[0].path.rfind("az://", 0), 0u) << remote->files[0].path;
    EXPECT_EQ(remote->source().description(), "Azure");
    LoadOptions options;
    options.threads = 4;
    options.chunk_bytes = 1 << 20;
    auto model = Load(*remote, MakeDevice("host"), options);
    ASSERT_TRUE(model.ok()) << model.status().ToString();
    ExpectByteExact(local, **model);
  }

  std::string Text(const std::string& file) const {
    std::ifstream in(tmp_.File(file));
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  std::string TokenHost() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  testing::TempDir tmp_;
  std::unique_ptr<ReferenceServer> server_;
  std::vector<std::string> set_;
  std::string blob_endpoint_;
  TensorDirectory local_;
  TensorDirectory open_;
  std::vector<std::pair<std::string, TensorDirectory>> shapes_;
};

TEST_F(AzureStorageTest, EveryShapeOfModelLoadsByteExactWithTheAccountsKey) {
  ExpectLoadsByteExact("az://models/a/model.safetensors", local_);
  for (const auto& [name, local] : shapes_) {
    SCOPED_TRACE(name);
    ExpectLoadsByteExact(name, local);
  }
  // The command line too, its JSON naming the blob.
  const auto r =
      RunHoist({"load", "az://models/a/model.safetensors", "--device", "host", "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\"path\":\"az://models/a/model.safetensors\""), std::string::npos) << r.out;
}

TEST_F(AzureStorageTest, EachOtherCredentialsSourceLoadsByteExact) {
  const std::string name = "az://models/a/model.safetensors";
  {
    SCOPED_TRACE("a SAS token");
    Set("AZURE_STORAGE_CONNECTION_STRING",
        "BlobEndpoint=" + blob_endpoint_ + ";SharedAccessSignature=" + Text("sas-token"));
    ExpectLoadsByteExact(name, local_);
  }
  // Tokens: the connection string names the endpoint alone.
  Set("AZURE_STORAGE_CONNECTION_STRING", "BlobEndpoint=" + blob_endpoint_);
  {
    SCOPED_TRACE("workload identity");
    Set("AZURE_FEDERATED_TOKEN_FILE", tmp_.File("federated-token"));
    Set("AZURE_CLIENT_ID", "hoist-client");
    Set("AZURE_TENANT_ID", kTenant);
    Set("AZURE_AUTHORITY_HOST", "http://" + TokenHost());
    ExpectLoadsByteExact(name, local_);
    EXPECT_EQ(server_->Counts()["issued"]["workload"].get<int>(), 1);
    Unset("AZURE_FEDERATED_TOKEN_FILE");
    Unset("AZURE_CLIENT_ID");
  }
  {
    SCOPED_TRACE("App Service's identity endpoint");
    Set("IDENTITY_ENDPOINT", "http://" + TokenHost() + "/identity");
    Set("IDENTITY_HEADER", "identity-secret");
    ExpectLoadsByteExact(name, local_);
    EXPECT_EQ(server_->Counts()["issued"]["appService"].get<int>(), 1);
    Unset("IDENTITY_ENDPOINT");
    Unset("IDENTITY_HEADER");
  }
  {
    SCOPED_TRACE("the instance metadata service");
    Set("AZURE_POD_IDENTITY_AUTHORITY_HOST", TokenHost());
    ExpectLoadsByteExact(name, local_);
    EXPECT_EQ(server_->Counts()["issued"]["imds"].get<int>(), 1);
    Unset("AZURE_POD_IDENTITY_AUTHORITY_HOST");
  }
  {
    SCOPED_TRACE("none: a public container");
    ExpectLoadsByteExact("az://public/a/model.safetensors", open_);
  }
  EXPECT_EQ(server_->Counts().value("refused", -1), 0);
}

TEST_F(AzureStorageTest, EachRefusalNamesItsSourceAndNeverAKeyOrAToken) {
  const std::string name = "az://models/a/model.safetensors";
  const std::vector<std::string> secrets = {
      kEmulatorKey, Text("sas-token"), Text("federated-token").substr(0, 40),
      "sig=",       "identity-secret", "eyJ"};
  auto expect_refused = [&](const std::string& why) {
    const auto r = RunHoist({"load", name, "--device", "host"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err, "hoist: " + name + ": " + why + "\n");
    for (const std::string& secret : secrets) {
      EXPECT_EQ(r.err.find(secret), std::string::npos) << secret;
    }
  };
  {
    SCOPED_TRACE("a key that is not the account's");
    Set("AZURE_STORAGE_CONNECTION_STRING",
        KeyConnection("bm90LXRoZS1rZXktbm90LXRoZS1rZXktbm90LXRoZS1rZXktbm90LXRoZS1rZXk="));
    // Azurite's answer to the first request, a HEAD (whose answer has no body).
    expect_refused(
        "400 Authentication information is not given in the correct format. Check the value of "
        "Authorization header.");
  }
  Set("AZURE_STORAGE_CONNECTION_STRING", "BlobEndpoint=" + blob_endpoint_);
  {
    SCOPED_TRACE("a federated token the tenant does not trust");
    std::ofstream(tmp_.File("other-token")) << "eyJhbGciOiJSUzI1NiJ9.other.sig\n";
    Set("AZURE_FEDERATED_TOKEN_FILE", tmp_.File("other-token"));
    Set("AZURE_CLIENT_ID", "hoist-client");
    Set("AZURE_TENANT_ID", kTenant);
    Set("AZURE_AUTHORITY_HOST", "http://" + TokenHost());
    expect_refused("Azure credentials from workload identity (" + tmp_.File("other-token") +
                   "): http://" + TokenHost() + "/" + kTenant +
                   "/oauth2/v2.0/token answered 401 Unauthorized: invalid_client: AADSTS700211: "
                   "no matching federated identity");
    Unset("AZURE_FEDERATED_TOKEN_FILE");
  }
  {
    SCOPED_TRACE("an identity endpoint's wrong secret");
    Set("IDENTITY_ENDPOINT", "http://" + TokenHost() + "/identity");
    Set("IDENTITY_HEADER", "not-the-secret");
    expect_refused(
        "Azure credentials from the managed identity endpoint (IDENTITY_ENDPOINT): "
        "http://" +
        TokenHost() +
        "/identity?api-version=2019-08-01&resource=https%3A%2F%2Fstorage.azure.com%2F"
        "&client_id=hoist-client answered 401 Unauthorized: unauthorized: the identity "
        "header is wrong");
    Unset("IDENTITY_ENDPOINT");
  }
  {
    SCOPED_TRACE("no credentials, a private container");
    const auto r = RunHoist({"load", name, "--device", "host"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("none found: the requests went anonymous"), std::string::npos) << r.err;
  }
  {
    SCOPED_TRACE("a blob URL's container name Azure does not allow: the Azure source's rule");
    const auto r = RunHoist({"inspect", "https://hoistmodels.blob.core.windows.net/Models/m"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err,
              "hoist: https://hoistmodels.blob.core.windows.net/Models/m: 'Models' is not an Azure "
              "container name (3 to 63 lowercase letters, digits and single hyphens, starting "
              "and ending with a letter or digit; az://CONTAINER/BLOB)\n");
  }
  {
    SCOPED_TRACE("a container name Azure does not allow");
    const auto r = RunHoist({"inspect", "az://Models/a/model.safetensors"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.err,
              "hoist: az://Models/a/model.safetensors: 'Models' is not an Azure container name "
              "(3 to 63 lowercase letters, digits and single hyphens, starting and ending with a "
              "letter or digit; az://CONTAINER/BLOB)\n");
  }
  EXPECT_EQ(server_->Counts()["issued"]["workload"].get<int>(), 0);
}

}  // namespace
}  // namespace hoist
