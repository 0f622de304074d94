// Models in Azure Blob Storage, named az://CONTAINER/BLOB: read through the HTTP source
// (http_storage.h) from the Blob service's REST API (a blob with ranges, a prefix listed as a
// directory), each request authorised with the storage account's shared key, a SAS token or a
// bearer token from Microsoft Entra ID (azure_credentials.h), or anonymous for a public container.
// This file is the part without libcurl: names, where the configuration comes from, the URLs,
// the signature, the listing's XML.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"
#include "io/endpoint.h"
#include "io/oauth2.h"

namespace hoist {

struct AzureConfig {
  std::string account;
  // The account's Blob service: https://ACCOUNT.blob.core.windows.net, or a connection
  // string's BlobEndpoint (Azurite's http://127.0.0.1:10000/devstoreaccount1).
  std::string blob_endpoint;
  // At most one of the three; none: requests go anonymous (a public container). None is ever
  // printed; `credentials_origin` says where they came from.
  std::string shared_key;  // the account key's bytes (base64-decoded)
  std::string sas;         // a SAS token: the query, without '?'
  std::shared_ptr<BearerTokenSource> token;
  std::string credentials_origin;
};

struct AzureBlob {
  std::string container;
  std::string blob;     // may be empty (the container's top) or end in '/' (a prefix)
  std::string account;  // a blob URL's; "" for az:// (the environment's)
};

bool IsAzureUrl(std::string_view name);
// Whether `name` is a blob's URL in Azure's public cloud,
// https://ACCOUNT.blob.core.windows.net/CONTAINER/BLOB, without a query (a URL with a SAS is
// read as any URL) or user information.
bool IsAzureBlobUrl(std::string_view name);

// The container and blob of az://CONTAINER/BLOB, or of a blob URL (its path percent-decoded);
// kInvalidArgument naming the rule a name breaks (a container is 3 to 63 lowercase letters,
// digits and single hyphens, starting and ending with a letter or digit; a blob's name is at
// most 1024 bytes, without a line break).
Result<AzureBlob> ParseAzureName(std::string_view name);

// What AzureConfigFromEnvironment reads, as the Azure CLI and SDKs name it ("" when unset).
struct AzureEnvironment {
  std::string connection_string;  // AZURE_STORAGE_CONNECTION_STRING
  std::string account;            // AZURE_STORAGE_ACCOUNT
  std::string key;                // AZURE_STORAGE_KEY (base64)
  std::string sas;                // AZURE_STORAGE_SAS_TOKEN
  // Workload identity (AKS): the federated token file, the app's client id and its tenant.
  std::string federated_token_file;  // AZURE_FEDERATED_TOKEN_FILE
  std::string client_id;             // AZURE_CLIENT_ID (also picks a user-assigned identity)
  std::string tenant_id;             // AZURE_TENANT_ID
  std::string authority_host;        // AZURE_AUTHORITY_HOST (default login.microsoftonline.com)
  // Managed identity: App Service's and Container Apps' endpoint and its secret header, else the
  // instance metadata service at AZURE_POD_IDENTITY_AUTHORITY_HOST or 169.254.169.254.
  std::string identity_endpoint;  // IDENTITY_ENDPOINT
  std::string identity_header;    // IDENTITY_HEADER
  std::string imds_host;          // AZURE_POD_IDENTITY_AUTHORITY_HOST
};
AzureEnvironment AzureEnvironmentVariables();

// The configuration, credentials in this order: the connection string's key or SAS; the
// account's key; a SAS token; workload identity; a managed identity (asked for one second; not
// asked for an emulator's loopback endpoint unless AZURE_POD_IDENTITY_AUTHORITY_HOST names one);
// none. `url_account`: a blob URL's account, which the endpoint is then; the environment's key
// or SAS goes to it only when they are that account's. kInvalidArgument naming what is missing
// or malformed; a source that fails, its error.
Result<AzureConfig> AzureConfigFrom(const AzureEnvironment& environment, const AskServiceFn& ask,
                                    const std::string& url_account = "");

// The URL that serves a blob's bytes (without the SAS, which the endpoint appends).
std::string AzureBlobUrl(const AzureConfig& config, const AzureBlob& blob);

// The URL of one page of List Blobs for the blobs directly under `prefix` (delimiter "/").
std::string AzureListUrl(const AzureConfig& config, const std::string& container,
                         const std::string& prefix, const std::string& marker);

// One page of a List Blobs answer; kIoError when it is not one.
Result<ObjectListing> ParseAzureListing(std::string_view xml);

// The Shared Key signature's string to sign for `request` (Azure's "Authorize with Shared Key"),
// its x-ms- headers being `ms_headers` ("name:value", lower-case names, sorted).
std::string AzureStringToSign(const std::string& account, const OutgoingRequest& request,
                              const std::vector<std::string>& ms_headers);

// The Azure endpoint (endpoint.h): az://CONTAINER/BLOB names, each request authorised as
// `config` says, a prefix listed as a directory.
std::shared_ptr<const Endpoint> MakeAzureEndpoint(AzureConfig config);

}  // namespace hoist
