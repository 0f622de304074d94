// The machine's file system behind Storage: the one place outside the platform files that
// asks the file system anything (what a name is, what a directory holds, where a link leads).
#include <algorithm>
#include <filesystem>
#include <string>
#include <system_error>

#include "io/storage.h"

namespace hoist {
namespace {

namespace fs = std::filesystem;

class LocalFileSystem final : public Storage {
 public:
  std::string description() const override { return "local file system"; }

  StorageCapabilities capabilities() const override {
    StorageCapabilities caps;
    caps.direct_io = true;  // a file system that refuses it is found when a file is opened
#if !defined(_WIN32)
    caps.read_advice = true;
#endif
    return caps;
  }

  Result<std::unique_ptr<File>> Open(const std::string& name, const OpenOptions& options) override {
    return OpenFile(name, options);
  }

  Result<EntryType> Type(const std::string& name) override {
    std::error_code ec;
    const fs::file_status st = fs::status(name, ec);
    if (ec || !fs::exists(st)) {
      // What the system said: a missing file, a link loop, a name too long, a directory that
      // may not be searched are different troubles with different cures.
      if (!ec) ec = std::make_error_code(std::errc::no_such_file_or_directory);
      const Code code =
          ec == std::errc::no_such_file_or_directory ? Code::kNotFound : Code::kIoError;
      return Status(code, name + ": " + ec.message());
    }
    if (fs::is_directory(st)) return EntryType::kDirectory;
    return fs::is_regular_file(st) ? EntryType::kFile : EntryType::kOther;
  }

  Result<std::vector<std::string>> ListFiles(const std::string& dir) override {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      std::error_code type_error;  // an entry that cannot be examined is passed over...
      if (entry.is_regular_file(type_error)) names.push_back(entry.path().generic_string());
      // ...unless it is named as a model's file: a link to itself or to nothing would
      // otherwise leave "no model files here".
      const std::string name = entry.path().filename().string();
      if (!name.ends_with(".safetensors") && !name.ends_with(".gguf") &&
          !name.ends_with(".hoistpack")) {
        continue;
      }
      if (type_error) {  // a link to itself, or to nothing (ENOENT)
        return Status::IoError(entry.path().generic_string() +
                               ": cannot be followed: " + type_error.message());
      }
    }
    if (ec)
      return Status::IoError(fs::path(dir).generic_string() + ": cannot list: " + ec.message());
    std::sort(names.begin(), names.end());
    return names;
  }

  Result<std::string> ResolveInside(const std::string& dir, const std::string& file) override {
    const fs::path candidate = fs::path(dir) / file;
    std::error_code ec;
    const fs::path real_dir = fs::canonical(dir, ec);
    if (ec) {
      return Status::IoError(fs::path(dir).generic_string() + ": cannot resolve: " + ec.message());
    }
    const fs::path real = fs::canonical(candidate, ec);
    if (ec) {
      return Status::NotFound(candidate.generic_string() + ": cannot be opened: " + ec.message());
    }
    // A Hugging Face cache snapshot (REPO/snapshots/COMMIT) links each file to REPO/blobs/.
    const bool cache_blob = real_dir.parent_path().filename() == "snapshots" &&
                            real.parent_path() == real_dir.parent_path().parent_path() / "blobs";
    if (real.parent_path() != real_dir && !cache_blob) {
      return Status::InvalidArgument("'" + file +
                                     "' is a link that leads outside the model's directory (to " +
                                     real.generic_string() + ")");
    }
    return candidate.generic_string();
  }

  std::string Parent(const std::string& name) const override {
    const fs::path parent = fs::path(name).parent_path();
    return parent.empty() ? "." : parent.generic_string();
  }

  std::string Join(const std::string& dir, const std::string& file) const override {
    return (fs::path(dir) / file).generic_string();
  }
};

}  // namespace

std::shared_ptr<Storage> LocalStorage() {
  static const std::shared_ptr<Storage> local = std::make_shared<LocalFileSystem>();
  return local;
}

}  // namespace hoist
