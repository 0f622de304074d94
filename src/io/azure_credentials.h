// Bearer tokens for Azure Storage from Microsoft Entra ID, where Azure's SDKs find them for a
// program without a user: workload identity (a Kubernetes service account's federated token
// exchanged as a client assertion), then a managed identity (App Service's identity endpoint, else
// the instance metadata service of a VM or an AKS node). Tokens are fetched again before they
// expire, during a load.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "io/azure.h"
#include "io/oauth2.h"

namespace hoist {

// The first source that has a token (fetched once, so that a source that fails says so before
// any blob is asked for), or null when none has. `imds_host`: the metadata service's host[:port],
// "" when it is not asked. An error names the source and what it refused, never a token.
Result<std::shared_ptr<BearerTokenSource>> FindAzureToken(const AzureEnvironment& environment,
                                                          const std::string& imds_host,
                                                          const AskServiceFn& ask);

}  // namespace hoist
