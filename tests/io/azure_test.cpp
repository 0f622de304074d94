// The rules of az:// names, connection strings and the environment's credentials, Shared Key's
// string to sign, List Blobs' answers and base64, without a server: a fake in place of the
// network, as a metadata service or a firewall would answer.
#include "io/azure.h"

#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <string>
#include <vector>

#include "io/oauth2.h"

namespace hoist {
namespace {

// A network where nothing answers (no metadata service here), counting what was asked.
AskServiceFn Unreachable(int* asked) {
  return [asked](const ServiceRequest&) -> Result<ServiceAnswer> {
    ++*asked;
    return Status::IoError("could not connect");
  };
}

TEST(Azure, NamesAreContainersAndBlobs) {
  auto name = ParseAzureName("az://my-models/dir/model.safetensors");
  ASSERT_TRUE(name.ok()) << name.status().ToString();
  EXPECT_EQ(name->container, "my-models");
  EXPECT_EQ(name->blob, "dir/model.safetensors");
  name = ParseAzureName("az://abc");
  ASSERT_TRUE(name.ok());
  EXPECT_EQ(name->blob, "");
  for (const char* bad : {"az://ab/x", "az://Models/x", "az://-models/x", "az://models-/x",
                          "az://mod--els/x", "az://mod_els/x", "az:///x", "gs://models/x"}) {
    EXPECT_FALSE(ParseAzureName(bad).ok()) << bad;
  }
  EXPECT_EQ(ParseAzureName("az://Models/x").status().message(),
            "az://Models/x: 'Models' is not an Azure container name (3 to 63 lowercase letters, "
            "digits and single hyphens, starting and ending with a letter or digit; "
            "az://CONTAINER/BLOB)");
  EXPECT_EQ(ParseAzureName("az://models/a\r\nHost: evil").status().message(),
            "az://models/a  Host: evil: a blob's name is at most 1024 bytes, without a line "
            "break");
  EXPECT_FALSE(ParseAzureName("az://models/" + std::string(1025, 'x')).ok());
  EXPECT_TRUE(ParseAzureName("az://models/" + std::string(1024, 'x')).ok());
}

TEST(Azure, ABlobsUrlIsAnAzureNameOfItsAccount) {
  EXPECT_TRUE(IsAzureBlobUrl("https://hoistmodels.blob.core.windows.net/models/m.safetensors"));
  EXPECT_TRUE(IsAzureBlobUrl("HTTPS://HoistModels.Blob.Core.Windows.Net/models/"));
  for (const char* other :
       {"https://hoistmodels.blob.core.windows.net/models/m.safetensors?sv=1&sig=x",
        "http://hoistmodels.blob.core.windows.net/models/m",
        "https://u:p@a.blob.core.windows.net/c",
        "https://hoistmodels.blob.core.windows.net.evil.com/models/m",
        "https://x.blob.core.windows.net/models/m", "https://example.org/models/m",
        "az://models/m"}) {
    EXPECT_FALSE(IsAzureBlobUrl(other)) << other;
  }
  auto blob = ParseAzureName("https://HoistModels.blob.core.windows.net/models/a%20dir/m%231.gguf");
  ASSERT_TRUE(blob.ok()) << blob.status().ToString();
  EXPECT_EQ(blob->account, "hoistmodels");
  EXPECT_EQ(blob->container, "models");
  EXPECT_EQ(blob->blob, "a dir/m#1.gguf");
  EXPECT_EQ(ParseAzureName("az://models/m")->account, "");
  // The environment's key goes to its own account only.
  int asked = 0;
  AzureEnvironment e;
  e.account = "hoistmodels";
  e.key = Base64("a key");
  auto config = AzureConfigFrom(e, Unreachable(&asked), "hoistmodels");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->shared_key, "a key");
  EXPECT_EQ(config->blob_endpoint, "https://hoistmodels.blob.core.windows.net");
  e.imds_host = "127.0.0.1:9";
  config = AzureConfigFrom(e, Unreachable(&asked), "otheraccount");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->shared_key, "");
  EXPECT_EQ(config->account, "otheraccount");
  EXPECT_EQ(config->blob_endpoint, "https://otheraccount.blob.core.windows.net");
  EXPECT_EQ(config->credentials_origin, "none found: the requests went anonymous");
  EXPECT_EQ(asked, 1);
  // No account in the environment at all: the URL's is enough.
  config = AzureConfigFrom(AzureEnvironment{}, Unreachable(&asked), "otheraccount");
  EXPECT_TRUE(config.ok()) << config.status().ToString();
}

TEST(Azure, TheEnvironmentNamesTheAccountAndItsCredentials) {
  int asked = 0;
  AzureEnvironment e;
  e.imds_host = "127.0.0.1:9";  // asked where nothing answers
  auto config = AzureConfigFrom(e, Unreachable(&asked));
  EXPECT_EQ(config.status().message(),
            "az:// names need the storage account: set AZURE_STORAGE_ACCOUNT (or "
            "AZURE_STORAGE_CONNECTION_STRING)");
  e.account = "Not_An_Account";
  EXPECT_EQ(AzureConfigFrom(e, Unreachable(&asked)).status().message(),
            "AZURE_STORAGE_ACCOUNT='Not_An_Account' is not a storage account's name (3 to 24 "
            "lowercase letters and digits)");
  e.account = "hoistmodels";
  e.key = "not base64!";
  EXPECT_EQ(AzureConfigFrom(e, Unreachable(&asked)).status().message(),
            "AZURE_STORAGE_KEY is not base64");
  e.key = Base64("a key");
  config = AzureConfigFrom(e, Unreachable(&asked));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->blob_endpoint, "https://hoistmodels.blob.core.windows.net");
  EXPECT_EQ(config->shared_key, "a key");
  EXPECT_EQ(config->credentials_origin, "the account key (AZURE_STORAGE_KEY)");
  e.key.clear();
  e.sas = "?sv=2019-12-12&sp=rl&sig=abc%3D";
  config = AzureConfigFrom(e, Unreachable(&asked));
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->sas, "sv=2019-12-12&sp=rl&sig=abc%3D");
  EXPECT_EQ(asked, 0);
  e.sas = "sv=1&sig=a b";
  EXPECT_EQ(AzureConfigFrom(e, Unreachable(&asked)).status().message(),
            "the SAS token is not a URL's query: refused");
  // Nothing else: the metadata service is asked once, and no answer is no credentials.
  e.sas.clear();
  config = AzureConfigFrom(e, Unreachable(&asked));
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(asked, 1);
  EXPECT_FALSE(config->token);
  EXPECT_EQ(config->credentials_origin, "none found: the requests went anonymous");
}

TEST(Azure, ConnectionStringsAreReadAsTheSdksReadThem) {
  int asked = 0;
  AzureEnvironment e;
  e.account = "ignored";  // a connection string wins
  e.connection_string =
      "DefaultEndpointsProtocol=https;AccountName=hoistmodels;AccountKey=" + Base64("k=1") +
      ";EndpointSuffix=core.chinacloudapi.cn";
  auto config = AzureConfigFrom(e, Unreachable(&asked));
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->account, "hoistmodels");
  EXPECT_EQ(config->blob_endpoint, "https://hoistmodels.blob.core.chinacloudapi.cn");
  EXPECT_EQ(config->shared_key, "k=1");
  EXPECT_EQ(config->credentials_origin, "the account key of AZURE_STORAGE_CONNECTION_STRING");
  e.connection_string = "UseDevelopmentStorage=true";
  config = AzureConfigFrom(e, Unreachable(&asked));
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->account, "devstoreaccount1");
  EXPECT_EQ(config->blob_endpoint, "http://127.0.0.1:10000/devstoreaccount1");
  EXPECT_EQ(config->shared_key.size(), 64u);
  e.connection_string = "BlobEndpoint=https://127.0.0.1:1/acct/;SharedAccessSignature=sv=1&sig=x";
  config = AzureConfigFrom(e, Unreachable(&asked));
  ASSERT_TRUE(config.ok());
  EXPECT_EQ(config->blob_endpoint, "https://127.0.0.1:1/acct");
  EXPECT_EQ(config->sas, "sv=1&sig=x");
  // An emulator's endpoint without credentials: anonymous, no metadata service asked.
  e.connection_string = "BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1";
  config = AzureConfigFrom(e, Unreachable(&asked));
  ASSERT_TRUE(config.ok());
  EXPECT_FALSE(config->token);
  EXPECT_EQ(asked, 0);
  e.connection_string = "DefaultEndpointsProtocol=https";
  EXPECT_EQ(AzureConfigFrom(e, Unreachable(&asked)).status().message(),
            "AZURE_STORAGE_CONNECTION_STRING: names neither AccountName nor BlobEndpoint");
  e.connection_string = "AccountName=hoistmodels;AccountKey=@@@";
  EXPECT_EQ(AzureConfigFrom(e, Unreachable(&asked)).status().message(),
            "AZURE_STORAGE_CONNECTION_STRING: its AccountKey is not base64");
}

TEST(Azure, WorkloadIdentityNeedsItsClientAndTenant) {
  int asked = 0;
  AzureEnvironment e;
  e.connection_string = "BlobEndpoint=https://127.0.0.1:1/acct";
  e.federated_token_file = "/var/run/secrets/azure/tokens/azure-identity-token";
  EXPECT_EQ(AzureConfigFrom(e, Unreachable(&asked)).status().message(),
            "AZURE_FEDERATED_TOKEN_FILE is set, so workload identity needs AZURE_CLIENT_ID and "
            "AZURE_TENANT_ID too");
  e.client_id = "c";
  e.tenant_id = "t/../x";
  EXPECT_EQ(AzureConfigFrom(e, Unreachable(&asked)).status().message(),
            "AZURE_TENANT_ID 't/../x' is not a tenant's id");
  e.tenant_id = "t";
  e.authority_host = "http://login.example.com";
  EXPECT_EQ(AzureConfigFrom(e, Unreachable(&asked)).status().message(),
            "AZURE_AUTHORITY_HOST 'http://login.example.com' is not https (nor http on "
            "loopback): no token is sent there");
  EXPECT_EQ(asked, 0);
}

TEST(Azure, SharedKeySignsTheMethodRangeHeadersAndResource) {
  const std::vector<std::string> ms = {"x-ms-date:Sun, 06 Dec 2026 18:00:00 GMT",
                                       "x-ms-version:2021-08-06"};
  EXPECT_EQ(
      AzureStringToSign(
          "acct", {"GET", "https://127.0.0.1:1/acct/models/a%20b/m.safetensors", "bytes=0-1048575"},
          ms),
      "GET\n\n\n\n\n\n\n\n\n\n\nbytes=0-1048575\n"
      "x-ms-date:Sun, 06 Dec 2026 18:00:00 GMT\nx-ms-version:2021-08-06\n"
      "/acct/acct/models/a%20b/m.safetensors");
  // Query parameters decoded, names lower-case and sorted.
  EXPECT_EQ(
      AzureStringToSign("acct",
                        {"GET",
                         "https://acct.blob.core.windows.net/models?restype=container&comp=list&"
                         "delimiter=%2F&prefix=d%2F&Marker=m1",
                         ""},
                        ms),
      "GET\n\n\n\n\n\n\n\n\n\n\n\n"
      "x-ms-date:Sun, 06 Dec 2026 18:00:00 GMT\nx-ms-version:2021-08-06\n"
      "/acct/models\ncomp:list\ndelimiter:/\nmarker:m1\nprefix:d/\nrestype:container");
  EXPECT_EQ(AzureStringToSign("acct", {"HEAD", "https://acct.blob.core.windows.net/c/b", ""}, ms)
                .substr(0, 5),
            "HEAD\n");
}

TEST(Azure, ListingsAreReadOrRefused) {
  auto listing = ParseAzureListing(
      R"(<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="x" )"
      R"(ContainerName="models"><Prefix>d/</Prefix><Delimiter>/</Delimiter><Blobs>)"
      R"(<Blob><Name>d/a&amp;b.safetensors</Name><Properties><Content-Length>3</Content-Length>)"
      R"(</Properties></Blob><BlobPrefix><Name>d/sub/</Name></BlobPrefix></Blobs>)"
      R"(<NextMarker>2!88!next</NextMarker></EnumerationResults>)");
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  EXPECT_EQ(listing->keys, std::vector<std::string>{"d/a&b.safetensors"});
  EXPECT_EQ(listing->prefixes, std::vector<std::string>{"d/sub/"});
  EXPECT_EQ(listing->next_token, "2!88!next");
  listing = ParseAzureListing("<EnumerationResults><Blobs/><NextMarker/></EnumerationResults>");
  ASSERT_TRUE(listing.ok());
  EXPECT_TRUE(listing->keys.empty());
  EXPECT_EQ(listing->next_token, "");
  for (const char* bad : {"", "<ListBucketResult/>",
                          "<EnumerationResults><Blobs><Blob><Size>1</Size></Blob></Blobs>"
                          "</EnumerationResults>"}) {
    EXPECT_EQ(ParseAzureListing(bad).status().code(), Code::kIoError) << bad;
  }
  AzureConfig config;
  config.blob_endpoint = "https://acct.blob.core.windows.net/";
  EXPECT_EQ(AzureBlobUrl(config, {"models", "a dir/m#1?.safetensors"}),
            "https://acct.blob.core.windows.net/models/a%20dir/m%231%3F.safetensors");
  EXPECT_EQ(AzureListUrl(config, "models", "a dir/", "m/1="),
            "https://acct.blob.core.windows.net/models?restype=container&comp=list&"
            "delimiter=%2F&prefix=a%20dir%2F&marker=m%2F1%3D");
}

TEST(TokenAnswers, ALifeIsSecondsAsANumberOrDigitsOrAnExpiryTime) {
  auto token = ParseTokenAnswer("Azure", "the test", R"({"access_token":"t","expires_in":"3599"})");
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  ASSERT_TRUE(token->expiration.has_value());
  const auto left = *token->expiration - std::chrono::system_clock::now();
  EXPECT_GT(left, std::chrono::seconds(3590));
  EXPECT_LE(left, std::chrono::seconds(3599));
  const std::string later = std::to_string(std::time(nullptr) + 600);
  token = ParseTokenAnswer("Azure", "the test",
                           R"({"access_token":"t","expires_on":")" + later + R"("})");
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  EXPECT_GT(*token->expiration - std::chrono::system_clock::now(), std::chrono::seconds(590));
  EXPECT_FALSE(ParseTokenAnswer("Azure", "s", R"({"access_token":"t"})")->expiration.has_value());
  EXPECT_EQ(ParseTokenAnswer("Azure", "the test", R"({"access_token":"t","expires_on":"12"})")
                .status()
                .message(),
            "Azure credentials from the test: the token's expires_on '\"12\"' is not a count of "
            "seconds from 1 to a year ahead");
  EXPECT_EQ(ParseTokenAnswer("Azure", "the test", R"({"access_token":"t","expires_in":"1e3"})")
                .status()
                .message(),
            "Azure credentials from the test: the token's expires_in '\"1e3\"' is not a count of "
            "seconds from 1 to a year ahead");
  EXPECT_EQ(ParseTokenAnswer("Azure", "the test", R"({"access_token":"a\nb"})").status().message(),
            "Azure credentials from the test: the access token holds a control character: "
            "refused");
}

TEST(Base64, EncodesAndDecodesRfc4648) {
  EXPECT_EQ(Base64(""), "");
  EXPECT_EQ(Base64("f"), "Zg==");
  EXPECT_EQ(Base64("fo"), "Zm8=");
  EXPECT_EQ(Base64("foo"), "Zm9v");
  EXPECT_EQ(Base64("\xfb\xff\xfe"), "+//+");
  for (const std::string text : {"", "f", "fo", "foo", "foob", "fooba", "foobar"}) {
    EXPECT_EQ(DecodeBase64(Base64(text)).value_or("?"), text);
  }
  EXPECT_EQ(DecodeBase64("Zm9vYg").value_or("?"), "foob");  // padding optional
  for (const char* bad : {"Z", "Zm9v!", "Zm 9v", "-__-"}) {
    EXPECT_FALSE(DecodeBase64(bad).has_value()) << bad;
  }
}

}  // namespace
}  // namespace hoist
