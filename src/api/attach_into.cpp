#include "api/attach_into.h"

#include <filesystem>
#include <system_error>

#include "api/held_model.h"
#include "device/checked_device.h"

namespace hoist {
namespace {

std::string AbsolutePath(const std::string& path) {
  std::error_code error;
  return std::filesystem::absolute(path, error).lexically_normal().string();
}

bool SameFile(const FileIdentity& a, const FileIdentity& b) {
  return a.known && b.known && a.device == b.device && a.inode == b.inode && a.size == b.size &&
         a.modified_ns == b.modified_ns;
}

// The holder's files and tensors must be those `expected` describes, one for one.
Status CheckSameModel(const TensorDirectory& expected, const AttachedModel& held,
                      const std::string& holder) {
  if (held.dir.files.size() != expected.files.size()) {
    return Status::FileChanged(holder + " holds " + std::to_string(held.dir.files.size()) +
                               " files of " + expected.files[0].path + ", not " +
                               std::to_string(expected.files.size()));
  }
  for (size_t f = 0; f < expected.files.size(); ++f) {
    if (!SameFile(held.dir.files[f].identity, expected.files[f].identity)) {
      return Status::FileChanged(holder + " read another version of " + expected.files[f].path +
                                 " than the one opened here (its device, inode, size or last "
                                 "write differ): its bytes are not taken");
    }
  }
  for (const TensorEntry& t : held.dir.tensors) {
    const TensorEntry* mine = expected.Find(t.name);
    if (mine == nullptr || mine->dtype != t.dtype || mine->shape != t.shape ||
        mine->nbytes != t.nbytes || mine->offset != t.offset || mine->file != t.file) {
      return Status::FileChanged(holder + " describes tensor '" + t.name +
                                 "' otherwise than the file opened here");
    }
  }
  return Status::Ok();
}

}  // namespace

Result<uint64_t> AttachInto(const TensorDirectory& expected, const std::string& device,
                            const AttachDestination& destination, double timeout_s) {
  if (expected.files.empty()) return Status::InvalidArgument("a model without files");
  const std::string model = AbsolutePath(expected.files[0].path);
  HOIST_ASSIGN_OR_RETURN(std::vector<HeldSummary> held, ListHeld(timeout_s));
  const HeldSummary* holder = nullptr;
  for (const HeldSummary& s : held) {
    if (s.stale || s.model != model) continue;
    for (const std::string& d : s.devices) {
      if (d == device) holder = &s;
    }
  }
  if (holder == nullptr) {
    return Status::NotFound("no holder of " + model + " on " + device);
  }
  AttachRequest request;
  request.name = holder->socket;
  request.device = device;
  request.share = true;  // mapped, copied from below into the caller's memory, let go
  request.timeout_s = timeout_s;
  HOIST_ASSIGN_OR_RETURN(AttachedModel attached, Attach(request));
  const std::string who =
      "the holder '" + holder->name + "' (pid " + std::to_string(holder->pid) + ")";
  if (!attached.verifiable) {
    return Status::NotFound(who + " holds parts of tensors, not whole ones");
  }
  HOIST_RETURN_IF_ERROR(CheckSameModel(expected, attached, who));
  uint64_t copied = 0;
  for (size_t i = 0; i < attached.dir.tensors.size(); ++i) {
    const TensorEntry& t = attached.dir.tensors[i];
    if (t.nbytes == 0 || !attached.model->loaded(i)) continue;
    const size_t index = static_cast<size_t>(expected.Find(t.name) - expected.tensors.data());
    void* to = destination(index);
    if (to == nullptr) continue;
    HOIST_RETURN_IF_ERROR(attached.model->device_of(i).CopyWithinDevice(to, attached.model->data(i),
                                                                        t.nbytes,
                                                                        /*external=*/true));
    copied += t.nbytes;
  }
  return copied;
}

}  // namespace hoist
