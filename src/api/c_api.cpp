// The C API (include/hoist/hoist.h) over the core. Statuses become codes here and messages go
// to a thread-local slot; nothing throws across this boundary.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "base/platform.h"
#include "device/checked_device.h"
#include "format/directory_json.h"
#include "format/model.h"
#include "hoist/hoist.h"
#include "pipeline/device_placement.h"
#include "pipeline/loader.h"
#include "pipeline/report_json.h"

struct hoist_model {
  hoist::TensorDirectory dir;
  std::string metadata_json;
};

struct hoist_loaded {
  hoist_model* model = nullptr;
  std::unique_ptr<hoist::LoadedModel> loaded;
  std::string report_json;
  bool regions = false;  // its tensors are regions (hoist_load_regions), not the model's
  // For hoist_load_parts: the directory whose tensor i is part i (what verify compares).
  std::unique_ptr<hoist::TensorDirectory> parts;
};

namespace {

thread_local std::string g_last_error;

// hoist_load_options as hoist 0.1 defined it: up to and including progress_user.
constexpr size_t kLoadOptionsV1Size = offsetof(hoist_load_options, tensor_loaded);

hoist_status Fail(const hoist::Status& status) {
  g_last_error = status.message();
  switch (status.code()) {
    case hoist::Code::kOk:
      return HOIST_OK;
    case hoist::Code::kInvalidModel:
      return HOIST_INVALID_MODEL;
    case hoist::Code::kIoError:
      return HOIST_IO_ERROR;
    case hoist::Code::kNotFound:
      return HOIST_NOT_FOUND;
    case hoist::Code::kInvalidArgument:
      return HOIST_INVALID_ARGUMENT;
    case hoist::Code::kStalled:
      return HOIST_STALLED;
    case hoist::Code::kDeviceError:
      return HOIST_DEVICE_ERROR;
    case hoist::Code::kVerifyMismatch:
      return HOIST_VERIFY_MISMATCH;
    case hoist::Code::kCancelled:
      return HOIST_CANCELLED;
    case hoist::Code::kUnavailable:
      return HOIST_UNAVAILABLE;
    case hoist::Code::kFileChanged:
      return HOIST_FILE_CHANGED;
    case hoist::Code::kInternal:
      return HOIST_ERROR;
  }
  return HOIST_ERROR;
}

hoist_status Invalid(const char* what) { return Fail(hoist::Status::InvalidArgument(what)); }

// Runs an entry point's body so that no exception crosses the C boundary: every failure the
// core knows of is already a Status; this is the net under the rest (out of memory, a broken
// invariant in a library).
template <typename F>
hoist_status Guarded(F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(hoist::Status::Internal("out of memory"));
  } catch (const std::exception& e) {
    return Fail(hoist::Status::Internal(std::string("unexpected failure: ") + e.what()));
  } catch (...) {
    return Fail(hoist::Status::Internal("unexpected failure"));
  }
}

hoist_tensor_info Info(const hoist::TensorEntry& t) {
  return {t.name.c_str(), t.dtype.c_str(), t.shape.data(), static_cast<uint32_t>(t.shape.size()),
          t.file,         t.offset,        t.nbytes};
}

// The fields a caller's struct_size covers; the rest keep their defaults (a caller built
// against an older header passes a smaller struct).
hoist_status CopyOptions(const hoist_load_options* options, hoist_load_options* o) {
  hoist_load_options_init(o);
  if (options == nullptr) return HOIST_OK;
  if (options->struct_size < kLoadOptionsV1Size) {
    return Invalid("hoist_load_options.struct_size is too small: call hoist_load_options_init");
  }
  std::memcpy(o, options, std::min<size_t>(options->struct_size, sizeof *o));
  return HOIST_OK;
}

// The options' placement checked, or the layer split across several devices.
hoist::Result<std::vector<uint32_t>> Placement(
    const hoist::TensorDirectory& dir, const hoist_load_options& o,
    const std::vector<std::shared_ptr<hoist::CheckedDevice>>& devices) {
  if ((o.placement == nullptr) != (o.placement_count == 0)) {
    return hoist::Status::InvalidArgument("placement and placement_count go together");
  }
  if ((o.split_shares == nullptr) != (o.split_share_count == 0)) {
    return hoist::Status::InvalidArgument("split_shares and split_share_count go together");
  }
  if (o.placement != nullptr) {
    if (o.placement_count != dir.tensors.size()) {
      return hoist::Status::InvalidArgument("placement_count is " +
                                            std::to_string(o.placement_count) + "; the model has " +
                                            std::to_string(dir.tensors.size()) + " tensors");
    }
    return std::vector<uint32_t>(o.placement, o.placement + o.placement_count);
  }
  std::vector<double> shares;
  if (o.split_shares != nullptr)
    shares.assign(o.split_shares, o.split_shares + o.split_share_count);
  return hoist::PlaceByLayer(dir, devices, shares,
                             "give it a smaller share (hoist_load_options.split_shares)");
}

// The options every load takes (checked by the caller with CheckLoadOptions). The callbacks
// hold copies of what they call: a reader left behind by a stuck read may outlive the call.
hoist::LoadOptions CommonLoadOptions(const hoist_load_options& o) {
  hoist::LoadOptions lo;
  lo.threads = o.threads;
  lo.chunk_bytes = o.chunk_bytes;
  lo.staging_bytes = o.staging_bytes;
  if (o.stall_timeout_s != 0) lo.stall_timeout_s = o.stall_timeout_s;  // NaN, < 0: refused
  lo.checksum = o.checksum != 0;
  lo.io = o.direct_io != 0 ? hoist::IoMode::kDirect : hoist::IoMode::kBuffered;
  if (o.progress != nullptr) {
    lo.progress = [fn = o.progress, user = o.progress_user](const hoist::LoadProgress& p) {
      return fn(user, p.copied_bytes, p.total_bytes) == 0;
    };
  }
  return lo;
}

// regions: a load of regions (hoist_load_regions, one device) or of parts (hoist_load_parts,
// `parts` set) when not null.
hoist_status LoadImpl(hoist_model* model, const hoist_load_options* options,
                      hoist_destination_fn destination, void* user, hoist_loaded** out,
                      const std::vector<hoist::TensorRegion>* regions = nullptr,
                      bool parts = false) {
  if (model == nullptr || out == nullptr) return Invalid("model and out must not be NULL");
  hoist_load_options o;
  if (hoist_status s = CopyOptions(options, &o); s != HOIST_OK) return s;
  auto devices = hoist::OpenDevices(o.device != nullptr ? o.device : "auto", "device");
  if (!devices.ok()) return Fail(devices.status());
  hoist::LoadOptions lo = CommonLoadOptions(o);
  if (o.names == nullptr && o.name_count != 0)
    return Invalid("names is NULL but name_count is not 0");
  for (size_t i = 0; o.names != nullptr && i < o.name_count; ++i) {
    if (o.names[i] == nullptr) {
      return Fail(hoist::Status::InvalidArgument("names[" + std::to_string(i) + "] is NULL"));
    }
    lo.names.emplace_back(o.names[i]);
  }
  if (hoist::Status s = hoist::CheckLoadOptions(lo); !s.ok()) return Fail(s);
  if (o.tensor_loaded != nullptr) {
    lo.tensor_loaded = [fn = o.tensor_loaded, user = o.tensor_loaded_user](size_t index) {
      fn(user, index);
    };
  }
  if (o.destinations_when_needed != 0 && destination == nullptr) {
    return Invalid("destinations_when_needed is for hoist_load_into");
  }
  lo.destinations_when_needed = o.destinations_when_needed != 0;
  if (destination != nullptr) {
    lo.destination = [destination, user](size_t index,
                                         const hoist::TensorEntry& t) -> hoist::Result<void*> {
      const hoist_tensor_info info = Info(t);
      void* p = destination(user, index, &info);
      if (p == nullptr && t.nbytes > 0) {
        return hoist::Status::InvalidArgument(
            "the destination callback gave no pointer for tensor '" + t.name + "'");
      }
      return p;
    };
  }
  if (regions != nullptr && !parts && devices->size() != 1) {
    return Invalid("a load of regions goes to one device");
  }
  if (regions != nullptr && (o.placement != nullptr || lo.destinations_when_needed)) {
    return Invalid("a load of regions or parts takes no placement or destinations_when_needed");
  }
  auto result = std::make_unique<hoist_loaded>();
  if (parts) {
    auto dir = hoist::RegionDirectory(model->dir, *regions);
    if (!dir.ok()) return Fail(dir.status());
    result->parts = std::make_unique<hoist::TensorDirectory>(std::move(dir).value());
  }
  hoist::Result<std::unique_ptr<hoist::LoadedModel>> loaded = hoist::Status::Internal("no load");
  if (regions != nullptr) {
    loaded = hoist::LoadRegions(model->dir, *devices, *regions, lo);
  } else {
    auto placement = Placement(model->dir, o, *devices);
    if (!placement.ok()) return Fail(placement.status());
    lo.placement = std::move(placement).value();
    loaded = hoist::Load(model->dir, *devices, lo);
  }
  if (!loaded.ok()) return Fail(loaded.status());
  result->model = model;
  result->regions = regions != nullptr && !parts;
  result->loaded = std::move(loaded).value();
  result->report_json = hoist::DumpJson(hoist::ReportToJson(result->loaded->report));
  *out = result.release();
  return HOIST_OK;
}

// Up to `capacity` of the regions as parts; *count: how many there are.
void WriteParts(const std::vector<hoist::TensorRegion>& regions, hoist_part* parts, size_t capacity,
                size_t* count) {
  *count = regions.size();
  for (size_t i = 0; i < regions.size() && i < capacity; ++i) {
    const hoist::TensorRegion& r = regions[i];
    parts[i] = {r.tensor,       r.row_bytes,  r.row_begin, r.row_end,
                r.column_begin, r.column_end, r.device,    nullptr};
  }
}

}  // namespace

extern "C" {

void hoist_load_options_init(hoist_load_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->device = "auto";
}

hoist_status hoist_model_open(const char* path, hoist_model** out) {
  if (path == nullptr || out == nullptr) return Invalid("path and out must not be NULL");
  return Guarded([&] {
    auto dir = hoist::ReadModelDirectory(path);
    if (!dir.ok()) return Fail(dir.status());
    auto model = std::make_unique<hoist_model>();
    model->dir = std::move(dir).value();
    model->dir.IndexNames();
    model->metadata_json = hoist::DumpJson(hoist::DirectoryToJson(model->dir)["metadata"]);
    *out = model.release();
    return HOIST_OK;
  });
}

void hoist_model_close(hoist_model* model) { delete model; }

const char* hoist_model_format(const hoist_model* model) {
  return model != nullptr ? model->dir.format.c_str() : "";
}

const char* hoist_model_metadata_json(const hoist_model* model) {
  return model != nullptr ? model->metadata_json.c_str() : "{}";
}

size_t hoist_model_tensor_count(const hoist_model* model) {
  return model != nullptr ? model->dir.tensors.size() : 0;
}

hoist_status hoist_model_tensor(const hoist_model* model, size_t index, hoist_tensor_info* out) {
  if (model == nullptr || out == nullptr) return Invalid("model and out must not be NULL");
  if (index >= model->dir.tensors.size()) return Invalid("tensor index out of range");
  *out = Info(model->dir.tensors[index]);
  return HOIST_OK;
}

hoist_status hoist_model_find(const hoist_model* model, const char* name, size_t* index) {
  if (model == nullptr || name == nullptr || index == nullptr) return Invalid("NULL argument");
  return Guarded([&] {
    const hoist::TensorEntry* t = model->dir.Find(name);
    if (t == nullptr)
      return Fail(hoist::Status::NotFound(std::string("no tensor named '") + name + "'"));
    *index = static_cast<size_t>(t - model->dir.tensors.data());
    return HOIST_OK;
  });
}

hoist_status hoist_load(hoist_model* model, const hoist_load_options* options, hoist_loaded** out) {
  return Guarded([&] { return LoadImpl(model, options, nullptr, nullptr, out); });
}

hoist_status hoist_load_into(hoist_model* model, const hoist_load_options* options,
                             hoist_destination_fn destination, void* user, hoist_loaded** out) {
  if (destination == nullptr) return Invalid("destination must not be NULL");
  return Guarded([&] { return LoadImpl(model, options, destination, user, out); });
}

hoist_status hoist_load_regions(hoist_model* model, const hoist_load_options* options,
                                const hoist_region* regions, size_t count, hoist_loaded** out) {
  if (regions == nullptr && count != 0) return Invalid("regions is NULL but count is not 0");
  return Guarded([&] {
    std::vector<hoist::TensorRegion> parts;
    parts.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      const hoist_region& r = regions[i];
      if (r.destination == nullptr) {
        return Invalid(("regions[" + std::to_string(i) + "].destination is NULL").c_str());
      }
      parts.push_back({r.tensor, r.row_bytes, r.row_begin, r.row_end, r.column_begin, r.column_end,
                       r.destination});
    }
    return LoadImpl(model, options, nullptr, nullptr, out, &parts);
  });
}

hoist_status hoist_model_split(hoist_model* model, const hoist_load_options* options,
                               const char* split, hoist_part* parts, size_t capacity,
                               size_t* count) {
  if (model == nullptr || split == nullptr || count == nullptr) {
    return Invalid("model, split and count must not be NULL");
  }
  if (parts == nullptr && capacity != 0) return Invalid("parts is NULL but capacity is not 0");
  return Guarded([&] {
    hoist_load_options o;
    if (hoist_status s = CopyOptions(options, &o); s != HOIST_OK) return s;
    auto devices = hoist::OpenDevices(o.device != nullptr ? o.device : "auto", "device");
    if (!devices.ok()) return Fail(devices.status());
    std::vector<double> shares;
    if (o.split_shares != nullptr)
      shares.assign(o.split_shares, o.split_shares + o.split_share_count);
    auto placed = hoist::PlaceParts(model->dir, *devices, split, shares, {},
                                    "give it a smaller share (hoist_load_options.split_shares)");
    if (!placed.ok()) return Fail(placed.status());
    WriteParts(*placed, parts, capacity, count);
    return HOIST_OK;
  });
}

hoist_status hoist_model_cut(const hoist_model* model, const char* split, uint32_t devices,
                             const double* shares, size_t share_count, hoist_part* parts,
                             size_t capacity, size_t* count) {
  if (model == nullptr || split == nullptr || count == nullptr) {
    return Invalid("model, split and count must not be NULL");
  }
  if (parts == nullptr && capacity != 0) return Invalid("parts is NULL but capacity is not 0");
  if (shares == nullptr && share_count != 0)
    return Invalid("shares is NULL but share_count is not 0");
  if (devices == 0) return Invalid("devices must be at least 1");
  return Guarded([&] {
    auto cut = hoist::CutModel(model->dir, split, devices,
                               std::vector<double>(shares, shares + share_count), {});
    if (!cut.ok()) return Fail(cut.status());
    WriteParts(*cut, parts, capacity, count);
    return HOIST_OK;
  });
}

hoist_status hoist_load_parts(hoist_model* model, const hoist_load_options* options,
                              const hoist_part* parts, size_t count, hoist_loaded** out) {
  if (parts == nullptr && count != 0) return Invalid("parts is NULL but count is not 0");
  return Guarded([&] {
    std::vector<hoist::TensorRegion> regions;
    regions.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      const hoist_part& p = parts[i];
      regions.push_back({p.tensor, p.row_bytes, p.row_begin, p.row_end, p.column_begin,
                         p.column_end, p.destination, p.device});
    }
    return LoadImpl(model, options, nullptr, nullptr, out, &regions, /*parts=*/true);
  });
}

hoist_status hoist_load_rank(hoist_model* model, const hoist_load_options* options,
                             const char* split, uint32_t rank, uint32_t world,
                             hoist_all_gather_fn all_gather, void* user, hoist_loaded** out) {
  if (model == nullptr || split == nullptr || all_gather == nullptr || out == nullptr) {
    return Invalid("model, split, all_gather and out must not be NULL");
  }
  return Guarded([&] {
    hoist_load_options o;
    if (hoist_status s = CopyOptions(options, &o); s != HOIST_OK) return s;
    if (o.names != nullptr || o.placement != nullptr || o.checksum != 0 ||
        o.destinations_when_needed != 0) {
      return Invalid("rank mode takes no names, placement, checksum or destinations_when_needed");
    }
    auto cut = hoist::CutModel(
        model->dir, split, world == 0 ? 1 : world,
        std::vector<double>(o.split_shares, o.split_shares + o.split_share_count), {});
    if (!cut.ok()) return Fail(cut.status());
    auto devices = hoist::OpenDevices(o.device != nullptr ? o.device : "auto", "device");
    if (!devices.ok()) return Fail(devices.status());
    if (devices->size() != 1) return Invalid("rank mode loads onto one device per process");
    const hoist::LoadOptions lo = CommonLoadOptions(o);
    if (hoist::Status s = hoist::CheckLoadOptions(lo); !s.ok()) return Fail(s);
    const hoist::AllGather exchange = [all_gather, user](void* block, uint64_t chunk_bytes) {
      if (all_gather(user, block, chunk_bytes) != 0) {
        return hoist::Status::DeviceError("the all-gather callback failed");
      }
      return hoist::Status::Ok();
    };
    std::vector<hoist::TensorRegion> mine;
    auto loaded =
        hoist::LoadRank(model->dir, devices->front(), *cut, rank, world, exchange, lo, &mine);
    if (!loaded.ok()) return Fail(loaded.status());
    auto parts = hoist::RegionDirectory(model->dir, mine);
    if (!parts.ok()) return Fail(parts.status());
    auto result = std::make_unique<hoist_loaded>();
    result->model = model;
    result->parts = std::make_unique<hoist::TensorDirectory>(std::move(parts).value());
    result->loaded = std::move(loaded).value();
    result->report_json = hoist::DumpJson(hoist::ReportToJson(result->loaded->report));
    *out = result.release();
    return HOIST_OK;
  });
}

hoist_status hoist_model_place(hoist_model* model, const hoist_load_options* options,
                               uint32_t* device_of, size_t count) {
  if (model == nullptr || device_of == nullptr)
    return Invalid("model and device_of must not be NULL");
  if (count != model->dir.tensors.size()) {
    return Fail(
        hoist::Status::InvalidArgument("count is " + std::to_string(count) + "; the model has " +
                                       std::to_string(model->dir.tensors.size()) + " tensors"));
  }
  return Guarded([&] {
    hoist_load_options o;
    if (hoist_status s = CopyOptions(options, &o); s != HOIST_OK) return s;
    auto devices = hoist::OpenDevices(o.device != nullptr ? o.device : "auto", "device");
    if (!devices.ok()) return Fail(devices.status());
    auto placement = Placement(model->dir, o, *devices);
    if (!placement.ok()) return Fail(placement.status());
    for (size_t i = 0; i < count; ++i) device_of[i] = placement->empty() ? 0 : (*placement)[i];
    return HOIST_OK;
  });
}

int hoist_loaded_tensor_device(const hoist_loaded* loaded, size_t index) {
  if (loaded == nullptr || index >= loaded->loaded->pointers.size() ||
      !loaded->loaded->loaded(index)) {
    return -1;
  }
  return loaded->loaded->placement.empty() ? 0 : static_cast<int>(loaded->loaded->placement[index]);
}

void* hoist_loaded_tensor(const hoist_loaded* loaded, size_t index) {
  if (loaded == nullptr || index >= loaded->loaded->pointers.size()) return nullptr;
  return loaded->loaded->data(index);
}

hoist_status hoist_loaded_checksum(const hoist_loaded* loaded, size_t index, uint64_t* xxh3) {
  if (loaded == nullptr || xxh3 == nullptr) return Invalid("NULL argument");
  if (loaded->loaded->checksums.empty()) return Invalid("the load was made without checksum");
  if (index >= loaded->loaded->checksums.size()) return Invalid("tensor index out of range");
  *xxh3 = loaded->loaded->checksums[index];
  return HOIST_OK;
}

hoist_status hoist_loaded_verify(hoist_loaded* loaded, size_t* mismatches) {
  if (loaded == nullptr) return Invalid("loaded must not be NULL");
  if (loaded->regions) return Invalid("a load of regions is checked against its own bytes only");
  return Guarded([&] {
    const hoist::TensorDirectory& dir = loaded->parts ? *loaded->parts : loaded->model->dir;
    auto found = hoist::Verify(dir, *loaded->loaded, hoist::DefaultReaderThreads(), 1000);
    if (!found.ok()) return Fail(found.status());
    if (mismatches != nullptr) *mismatches = found->size();
    if (found->empty()) return HOIST_OK;
    return Fail(hoist::Status::VerifyMismatch("tensor '" + found->front().tensor +
                                              "' differs from the file at byte " +
                                              std::to_string(found->front().file_offset)));
  });
}

const char* hoist_loaded_report_json(const hoist_loaded* loaded) {
  return loaded != nullptr ? loaded->report_json.c_str() : "{}";
}

void hoist_loaded_free(hoist_loaded* loaded) { delete loaded; }

void hoist_release_cached_memory(void) { hoist::ReleaseCachedMemory(); }

const char* hoist_last_error(void) { return g_last_error.c_str(); }

const char* hoist_status_name(hoist_status status) {
  switch (status) {
    case HOIST_OK:
      return "ok";
    case HOIST_ERROR:
      return "error";
    case HOIST_INVALID_MODEL:
      return "invalid model";
    case HOIST_STALLED:
      return "stalled";
    case HOIST_DEVICE_ERROR:
      return "device error";
    case HOIST_VERIFY_MISMATCH:
      return "verify mismatch";
    case HOIST_CANCELLED:
      return "cancelled";
    case HOIST_IO_ERROR:
      return "I/O error";
    case HOIST_NOT_FOUND:
      return "not found";
    case HOIST_INVALID_ARGUMENT:
      return "invalid argument";
    case HOIST_UNAVAILABLE:
      return "unavailable";
    case HOIST_FILE_CHANGED:
      return "model changed";
  }
  return "unknown";
}

}  // extern "C"
