// A build without libcurl: URLs are named, and refused with the reason.
#include "io/http_storage.h"

namespace hoist {
namespace {

Status NoHttp(const std::string& name) {
  return Status::Unavailable(RedactUrl(name) +
                             ": this build of hoist has no HTTP source (libcurl was not found "
                             "when it was built; install libcurl4-openssl-dev and rebuild)");
}

class NoHttpStorage final : public Storage {
 public:
  std::string description() const override { return "HTTP (not built)"; }
  StorageCapabilities capabilities() const override { return {}; }
  Result<std::unique_ptr<File>> Open(const std::string& name, const OpenOptions&) override {
    return NoHttp(name);
  }
  Result<EntryType> Type(const std::string& name) override { return NoHttp(name); }
  Result<std::vector<std::string>> ListFiles(const std::string& dir) override {
    return NoHttp(dir);
  }
  Result<std::string> ResolveInside(const std::string& dir, const std::string&) override {
    return NoHttp(dir);
  }
  std::string Parent(const std::string& name) const override { return name; }
  std::string Join(const std::string& dir, const std::string& file) const override {
    return dir + "/" + file;
  }
};

}  // namespace

std::shared_ptr<Storage> MakeHttpStorage(const HttpOptions& /*options*/) {
  return std::make_shared<NoHttpStorage>();
}

Result<ServiceAnswer> AskService(const ServiceRequest& request) { return NoHttp(request.url); }

}  // namespace hoist
