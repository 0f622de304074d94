// The C API (include/hoist/hoist.h) over the façade (api/request.h): this file only translates
// the C spelling of a request. Statuses become codes here (base/status.h's rows) and messages go
// to a thread-local slot; nothing throws across this boundary.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <exception>
#include <iterator>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "api/attach_into.h"
#include "api/held_model.h"
#include "api/host_reader.h"
#include "api/request.h"
#include "base/build_info.h"
#include "format/directory_json.h"
#include "format/dtypes.h"
#include "io/http_storage.h"
#include "io/hub.h"
#define HOIST_NO_DEPRECATED_WARNINGS  // this file defines the deprecated entries
#include "hoist/hoist.h"
#include "pipeline/report_json.h"

struct hoist_model {
  hoist::TensorDirectory dir;
  std::string metadata_json;
};

struct hoist_loaded {
  explicit hoist_loaded(hoist::CompletedLoad l) : loaded(std::move(l)) {}
  hoist::CompletedLoad loaded;
  std::string report_json;
};

struct hoist_plan {
  enum class Kind {
    kPlaced,   // hoist_model_plan: for `device`, checked against its devices' memory
    kCut,      // hoist_model_plan_cut: a job's shares, read and not loaded
    kCallers,  // hoist_plan_from_parts: for the devices of the options it is loaded with
  };
  Kind kind = Kind::kPlaced;
  hoist::ModelPlan plan;
  std::string device;  // kPlaced: the device string the options gave
};

struct hoist_reader {
  std::unique_ptr<hoist::ReadAhead> reader;
};

struct hoist_host_tensor {
  hoist::HostTensor tensor;
};

namespace {

// The calling thread's last message, in a plain array: MinGW runs a thread_local's destructor
// at thread exit over storage already freed, so what each engine thread keeps owns no memory.
constexpr size_t kLastErrorCapacity = 4096;
thread_local char g_last_error[kLastErrorCapacity];

// A longer message is cut at a character boundary and ends in "...".
void KeepLastError(std::string_view message) {
  size_t n = message.size();
  const bool cut = n >= kLastErrorCapacity;
  if (cut) {
    n = kLastErrorCapacity - 4;
    while (n > 0 && (static_cast<unsigned char>(message[n]) & 0xC0) == 0x80) --n;
  }
  std::memcpy(g_last_error, message.data(), n);
  if (cut) std::memcpy(g_last_error + n, "...", 3);
  g_last_error[cut ? n + 3 : n] = '\0';
}

// hoist_load_options as hoist 0.1 defined it: up to and including progress_user.
constexpr size_t kLoadOptionsV1Size = offsetof(hoist_load_options, tensor_loaded);

// The C API's status of each of the core's codes, indexed by hoist::Code: the values hoist.h
// promises.
constexpr hoist_status kCStatuses[] = {
    HOIST_OK,           HOIST_INVALID_MODEL,    HOIST_IO_ERROR,
    HOIST_NOT_FOUND,    HOIST_INVALID_ARGUMENT, HOIST_STALLED,
    HOIST_DEVICE_ERROR, HOIST_VERIFY_MISMATCH,  HOIST_CANCELLED,
    HOIST_UNAVAILABLE,  HOIST_FILE_CHANGED,     HOIST_ERROR,
};
static_assert(std::size(kCStatuses) == static_cast<size_t>(hoist::Code::kInternal) + 1,
              "every code of the core has its C status");
static_assert(kCStatuses[static_cast<size_t>(hoist::Code::kStalled)] == HOIST_STALLED &&
              kCStatuses[static_cast<size_t>(hoist::Code::kFileChanged)] == HOIST_FILE_CHANGED &&
              kCStatuses[static_cast<size_t>(hoist::Code::kInternal)] == HOIST_ERROR);

hoist_status CStatus(hoist::Code code) { return kCStatuses[static_cast<size_t>(code)]; }

hoist_status Fail(const hoist::Status& status) {
  KeepLastError(hoist::RedactSecrets(status.message()));
  return CStatus(status.code());
}

hoist_status Invalid(const std::string& what) { return Fail(hoist::Status::InvalidArgument(what)); }

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
hoist::Status CopyOptions(const hoist_load_options* options, hoist_load_options* o) {
  hoist_load_options_init(o);
  if (options == nullptr) return hoist::Status::Ok();
  if (options->struct_size < kLoadOptionsV1Size) {
    return hoist::Status::InvalidArgument(
        "hoist_load_options.struct_size is too small: call hoist_load_options_init");
  }
  std::memcpy(o, options, std::min<size_t>(options->struct_size, sizeof *o));
  return hoist::Status::Ok();
}

template <typename T>
hoist::Result<std::vector<T>> Array(const T* items, size_t count, const char* what) {
  if (items == nullptr && count != 0) {
    return hoist::Status::InvalidArgument(std::string(what) + " is NULL but its count is not 0");
  }
  return std::vector<T>(items, items + count);
}

// The settings and callbacks of a request. The callbacks hold copies of what they call: a
// reader left behind by a stuck read may outlive the call.
hoist::Status ToLoadOptions(const hoist_load_options& o, hoist::LoadOptions* lo) {
  lo->threads = o.threads;
  lo->chunk_bytes = o.chunk_bytes;
  lo->staging_bytes = o.staging_bytes;
  if (o.stall_timeout_s != 0) lo->stall_timeout_s = o.stall_timeout_s;  // NaN, < 0: refused
  lo->checksum = o.checksum != 0;
  lo->io = o.direct_io != 0 ? hoist::IoMode::kDirect : hoist::IoMode::kBuffered;
  HOIST_ASSIGN_OR_RETURN(const std::vector<const char*> names,
                         Array(o.names, o.name_count, "names"));
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == nullptr) {
      return hoist::Status::InvalidArgument("names[" + std::to_string(i) + "] is NULL");
    }
    lo->names.emplace_back(names[i]);
  }
  if (o.progress != nullptr) {
    lo->progress = [fn = o.progress, user = o.progress_user](const hoist::LoadProgress& p) {
      return fn(user, p.copied_bytes, p.total_bytes) == 0;
    };
  }
  if (o.tensor_loaded != nullptr) {
    lo->tensor_loaded = [fn = o.tensor_loaded, user = o.tensor_loaded_user](size_t index) {
      fn(user, index);
    };
  }
  lo->destinations_when_needed = o.destinations_when_needed != 0;
  if (o.destination_at_once != nullptr) {
    lo->destination_at_once = [fn = o.destination_at_once, user = o.destination_at_once_user](
                                  size_t index,
                                  const hoist::TensorEntry& t) -> hoist::Result<void*> {
      const hoist_tensor_info info = Info(t);
      return fn(user, index, &info);
    };
  }
  return hoist::Status::Ok();
}

// The request the options spell; the façade checks it.
hoist::Result<hoist::LoadRequest> ToRequest(const hoist_load_options* options) {
  hoist_load_options o;
  HOIST_RETURN_IF_ERROR(CopyOptions(options, &o));
  hoist::LoadRequest request;
  request.device = o.device != nullptr ? o.device : "auto";
  if (o.split != nullptr && *o.split != '\0') {
    HOIST_ASSIGN_OR_RETURN(request.split, hoist::ParseSplit(o.split, "split"));
  }
  if (o.split_plan != nullptr) request.split_plan = o.split_plan;
  // An array and its count go together: a pointer with no count is a caller's mistake too.
  if ((o.placement == nullptr) != (o.placement_count == 0)) {
    return hoist::Status::InvalidArgument("placement and placement_count go together");
  }
  if ((o.split_shares == nullptr) != (o.split_share_count == 0)) {
    return hoist::Status::InvalidArgument("split_shares and split_share_count go together");
  }
  request.shares.assign(o.split_shares, o.split_shares + o.split_share_count);
  request.placement.assign(o.placement, o.placement + o.placement_count);
  HOIST_RETURN_IF_ERROR(ToLoadOptions(o, &request.options));
  return request;
}

hoist_status Finish(hoist::Result<hoist::CompletedLoad> loaded, hoist_loaded** out) {
  if (!loaded.ok()) return Fail(loaded.status());
  auto result = std::make_unique<hoist_loaded>(std::move(loaded).value());
  result->report_json = hoist::DumpJson(hoist::ReportToJson(result->loaded.model().report));
  *out = result.release();
  return HOIST_OK;
}

// One load through the façade; `adjust` adds what the entry point itself carries (destinations,
// parts) to the request the options spell.
template <typename Adjust>
hoist_status LoadWith(hoist_model* model, const hoist_load_options* options, hoist_loaded** out,
                      Adjust&& adjust) {
  if (model == nullptr || out == nullptr) return Invalid("model and out must not be NULL");
  auto request = ToRequest(options);
  if (!request.ok()) return Fail(request.status());
  adjust(*request);
  return Finish(hoist::Load(model->dir, *request), out);
}

hoist::Result<std::vector<hoist::TensorRegion>> ToRegions(const hoist_part* parts, size_t count) {
  HOIST_ASSIGN_OR_RETURN(const std::vector<hoist_part> given, Array(parts, count, "parts"));
  std::vector<hoist::TensorRegion> regions;
  regions.reserve(given.size());
  for (const hoist_part& p : given) {
    regions.push_back({p.tensor, p.row_bytes, p.row_begin, p.row_end, p.column_begin, p.column_end,
                       p.destination, p.device});
  }
  return regions;
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

// The parts `split` (the options' own when NULL) gives `devices` devices, opening none.
hoist::Result<std::vector<hoist::TensorRegion>> CutFor(const hoist_model& model,
                                                       const hoist_load_options* options,
                                                       const char* split, uint32_t devices) {
  HOIST_ASSIGN_OR_RETURN(hoist::LoadRequest request, ToRequest(options));
  if (split != nullptr) {
    HOIST_ASSIGN_OR_RETURN(request.split, hoist::ParseSplit(split, "split"));
  }
  return hoist::CutForDevices(model.dir, request, devices);
}

// The request that loads `plan`: the options' settings and devices, the plan's parts (a plan of
// parts) or placement and destinations (a plan of whole tensors).
hoist::Result<hoist::LoadRequest> PlanLoadRequest(const hoist_load_options* options,
                                                  const hoist_plan& p) {
  if (p.kind == hoist_plan::Kind::kCut) {
    return hoist::Status::InvalidArgument(
        "a plan cut for " + std::to_string(p.plan.devices) +
        " devices without opening them is a job's shares: hoist_load_rank loads a rank's");
  }
  HOIST_ASSIGN_OR_RETURN(hoist::LoadRequest request, ToRequest(options));
  if (p.kind == hoist_plan::Kind::kPlaced && request.device != p.device) {
    return hoist::Status::InvalidArgument("the plan was made for device '" + p.device +
                                          "'; the options name '" + request.device + "'");
  }
  request.shares.clear();
  request.split_plan.clear();
  request.placement.clear();
  const std::vector<hoist::TensorRegion>& parts = p.plan.parts;
  // Parts of no bytes need no memory: they count either way.
  size_t given = 0;
  size_t holding = 0;
  for (const hoist::TensorRegion& r : parts) {
    if ((r.row_end - r.row_begin) * (r.column_end - r.column_begin) == 0) continue;
    ++holding;
    if (r.destination != nullptr) ++given;
  }
  if (given != 0 && given != holding) {
    return hoist::Status::InvalidArgument(
        std::to_string(given) + " of the plan's " + std::to_string(holding) +
        " parts that hold bytes have a destination: every part has one or none has");
  }
  if (p.plan.by_parts) {
    request.split = p.plan.split;
    request.parts = parts;
    return request;
  }
  request.split = &hoist::DefaultPlacementPolicy();
  if (p.plan.devices > 1) request.placement = hoist::DeviceOfTensors(parts, parts.size());
  if (given != 0) {
    std::vector<void*> destinations;
    destinations.reserve(parts.size());
    for (const hoist::TensorRegion& r : parts) destinations.push_back(r.destination);
    request.options.destination = [destinations = std::move(destinations)](
                                      size_t index,
                                      const hoist::TensorEntry&) -> hoist::Result<void*> {
      return destinations[index];
    };
  }
  return request;
}

hoist_status OpenModel(const hoist::ModelSource& source, hoist_model** out) {
  auto dir = hoist::OpenModel(source);
  if (!dir.ok()) return Fail(dir.status());
  auto model = std::make_unique<hoist_model>();
  model->dir = std::move(dir).value();
  model->metadata_json = hoist::DumpJson(hoist::DirectoryToJson(model->dir)["metadata"]);
  *out = model.release();
  return HOIST_OK;
}

}  // namespace

extern "C" {

void hoist_load_options_init(hoist_load_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->device = "auto";
}

void hoist_model_source_init(hoist_model_source* source) {
  if (source == nullptr) return;
  std::memset(source, 0, sizeof *source);
  source->struct_size = sizeof *source;
}

hoist_status hoist_model_open(const char* path, hoist_model** out) {
  if (path == nullptr || out == nullptr) return Invalid("path and out must not be NULL");
  return Guarded([&] { return OpenModel({path, nullptr, std::nullopt, 0}, out); });
}

hoist_status hoist_model_open_ex(const hoist_model_source* source, hoist_model** out) {
  if (source == nullptr || out == nullptr) return Invalid("source and out must not be NULL");
  if (source->struct_size < sizeof *source) {
    return Invalid("hoist_model_source.struct_size is too small: call hoist_model_source_init");
  }
  return Guarded([&] {
    // Read as the integer a C caller may have put there: an enum holding a value it does not
    // name is not to be loaded as one.
    std::underlying_type_t<hoist_source_kind> kind = 0;
    std::memcpy(&kind, &source->kind, sizeof kind);
    switch (kind) {
      case HOIST_SOURCE_PATH:
        if (source->path == nullptr) return Invalid("a path source needs a path");
        return OpenModel({source->path, nullptr, std::nullopt, 0}, out);
      case HOIST_SOURCE_MEMORY: {
        if (source->bytes == nullptr && source->size != 0) {
          return Invalid("a memory source's bytes are NULL but its size is not 0");
        }
        // The caller keeps the bytes until hoist_model_close: no owner, no copy.
        const hoist::SharedBytes bytes{nullptr, static_cast<const unsigned char*>(source->bytes),
                                       static_cast<size_t>(source->size)};
        return OpenModel({source->path != nullptr ? source->path : "<memory>", nullptr, bytes, 0},
                         out);
      }
    }
    return Invalid("hoist_model_source.kind is not a hoist_source_kind");
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

hoist_status hoist_model_tensor_block(const hoist_model* model, size_t index, uint32_t* elements,
                                      uint32_t* bytes) {
  if (model == nullptr || elements == nullptr || bytes == nullptr) {
    return Invalid("model, elements and bytes must not be NULL");
  }
  if (index >= model->dir.tensors.size()) return Invalid("tensor index out of range");
  const hoist::TensorEntry& t = model->dir.tensors[index];
  const std::optional<hoist::DtypeBlock> block = hoist::BlockOf(model->dir.format, t.dtype);
  if (!block) {
    return Invalid("tensor '" + t.name + "' has dtype '" + t.dtype +
                   "', which hoist has no block geometry for");
  }
  *elements = block->elements;
  *bytes = block->bytes;
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
  return Guarded([&] { return LoadWith(model, options, out, [](hoist::LoadRequest&) {}); });
}

hoist_status hoist_load_into(hoist_model* model, const hoist_load_options* options,
                             hoist_destination_fn destination, void* user, hoist_loaded** out) {
  if (destination == nullptr) return Invalid("destination must not be NULL");
  return Guarded([&] {
    return LoadWith(model, options, out, [&](hoist::LoadRequest& request) {
      request.options.destination =
          [destination, user](size_t index, const hoist::TensorEntry& t) -> hoist::Result<void*> {
        const hoist_tensor_info info = Info(t);
        void* p = destination(user, index, &info);
        if (p == nullptr && t.nbytes > 0) {
          return hoist::Status::InvalidArgument(
              "the destination callback gave no pointer for tensor '" + t.name + "'");
        }
        return p;
      };
    });
  });
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
    return LoadWith(model, options, out, [&](hoist::LoadRequest& request) {
      request.parts = std::move(parts);
      request.parts_on_one_device = true;
    });
  });
}

hoist_status hoist_load_parts(hoist_model* model, const hoist_load_options* options,
                              const hoist_part* parts, size_t count, hoist_loaded** out) {
  return Guarded([&] {
    auto regions = ToRegions(parts, count);
    if (!regions.ok()) return Fail(regions.status());
    return LoadWith(model, options, out,
                    [&](hoist::LoadRequest& request) { request.parts = std::move(*regions); });
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
    auto request = ToRequest(options);
    if (!request.ok()) return Fail(request.status());
    auto parsed = hoist::ParseSplit(split, "split");
    if (!parsed.ok()) return Fail(parsed.status());
    request->split = *parsed;
    if (request->split->whole_tensors) {
      return Invalid("split '" + request->split->name +
                     "' places whole tensors (hoist_model_place): tensor or replicate");
    }
    if (hoist::Status s = hoist::CheckRequest(*request); !s.ok()) return Fail(s);
    auto devices = hoist::OpenRequestDevices(*request);
    if (!devices.ok()) return Fail(devices.status());
    auto placed = hoist::PlaceParts(model->dir, *devices, *request);
    if (!placed.ok()) return Fail(placed.status());
    WriteParts(*placed, parts, capacity, count);
    return HOIST_OK;
  });
}

hoist_status hoist_model_cut(const hoist_model* model, const char* split, uint32_t devices,
                             const double* shares, size_t share_count, hoist_part* parts,
                             size_t capacity, size_t* count) {
  hoist_load_options options;
  hoist_load_options_init(&options);
  if (share_count != 0) {  // hoist_model_cut takes a pointer with no count as no shares
    options.split_shares = shares;
    options.split_share_count = share_count;
  }
  return hoist_model_cut_ex(model, &options, split, devices, parts, capacity, count);
}

hoist_status hoist_model_cut_ex(const hoist_model* model, const hoist_load_options* options,
                                const char* split, uint32_t devices, hoist_part* parts,
                                size_t capacity, size_t* count) {
  if (model == nullptr || split == nullptr || count == nullptr) {
    return Invalid("model, split and count must not be NULL");
  }
  if (parts == nullptr && capacity != 0) return Invalid("parts is NULL but capacity is not 0");
  if (devices == 0) return Invalid("devices must be at least 1");
  return Guarded([&] {
    auto cut = CutFor(*model, options, split, devices);
    if (!cut.ok()) return Fail(cut.status());
    WriteParts(*cut, parts, capacity, count);
    return HOIST_OK;
  });
}

hoist_status hoist_model_plan(hoist_model* model, const hoist_load_options* options,
                              hoist_plan** out) {
  if (model == nullptr || out == nullptr) return Invalid("model and out must not be NULL");
  return Guarded([&] {
    auto request = ToRequest(options);
    if (!request.ok()) return Fail(request.status());
    auto plan = hoist::PlanRequest(model->dir, *request);
    if (!plan.ok()) return Fail(plan.status());
    *out = new hoist_plan{hoist_plan::Kind::kPlaced, std::move(plan).value(), request->device};
    return HOIST_OK;
  });
}

hoist_status hoist_model_plan_cut(const hoist_model* model, const hoist_load_options* options,
                                  uint32_t devices, hoist_plan** out) {
  if (model == nullptr || out == nullptr) return Invalid("model and out must not be NULL");
  if (devices == 0) return Invalid("devices must be at least 1");
  return Guarded([&] {
    auto request = ToRequest(options);
    if (!request.ok()) return Fail(request.status());
    auto cut = hoist::CutForDevices(model->dir, *request, devices);
    if (!cut.ok()) return Fail(cut.status());
    hoist::ModelPlan plan{request->split, devices, true, std::move(cut).value()};
    *out = new hoist_plan{hoist_plan::Kind::kCut, std::move(plan), ""};
    return HOIST_OK;
  });
}

hoist_status hoist_plan_from_parts(const hoist_model* model, const hoist_part* parts, size_t count,
                                   hoist_plan** out) {
  if (model == nullptr || out == nullptr) return Invalid("model and out must not be NULL");
  return Guarded([&] {
    auto regions = ToRegions(parts, count);
    if (!regions.ok()) return Fail(regions.status());
    for (size_t i = 0; i < regions->size(); ++i) {
      if ((*regions)[i].tensor >= model->dir.tensors.size()) {
        return Invalid("parts[" + std::to_string(i) + "].tensor is " +
                       std::to_string((*regions)[i].tensor) + "; the model has " +
                       std::to_string(model->dir.tensors.size()) + " tensors");
      }
    }
    uint32_t devices = 0;
    for (const hoist::TensorRegion& r : *regions) devices = std::max(devices, r.device + 1);
    hoist::ModelPlan plan{&hoist::DefaultPlacementPolicy(), devices, true,
                          std::move(regions).value()};
    *out = new hoist_plan{hoist_plan::Kind::kCallers, std::move(plan), ""};
    return HOIST_OK;
  });
}

size_t hoist_plan_part_count(const hoist_plan* plan) {
  return plan != nullptr ? plan->plan.parts.size() : 0;
}

hoist_status hoist_plan_part(const hoist_plan* plan, size_t index, hoist_part* out) {
  if (plan == nullptr || out == nullptr) return Invalid("plan and out must not be NULL");
  if (index >= plan->plan.parts.size()) return Invalid("part index out of range");
  const hoist::TensorRegion& r = plan->plan.parts[index];
  *out = {r.tensor,       r.row_bytes,  r.row_begin, r.row_end,
          r.column_begin, r.column_end, r.device,    r.destination};
  return HOIST_OK;
}

hoist_status hoist_plan_set_destination(hoist_plan* plan, size_t index, void* destination) {
  if (plan == nullptr) return Invalid("plan must not be NULL");
  if (index >= plan->plan.parts.size()) return Invalid("part index out of range");
  plan->plan.parts[index].destination = destination;
  return HOIST_OK;
}

hoist_status hoist_load_plan(hoist_model* model, const hoist_load_options* options,
                             const hoist_plan* plan, hoist_loaded** out) {
  if (model == nullptr || plan == nullptr || out == nullptr) {
    return Invalid("model, plan and out must not be NULL");
  }
  return Guarded([&] {
    auto request = PlanLoadRequest(options, *plan);
    if (!request.ok()) return Fail(request.status());
    return Finish(hoist::Load(model->dir, *request), out);
  });
}

void hoist_plan_free(hoist_plan* plan) { delete plan; }

hoist_status hoist_load_rank_ex(hoist_model* model, const hoist_load_options* options,
                                const char* split, uint32_t rank, uint32_t world,
                                const hoist_all_gather* all_gather, hoist_loaded** out) {
  if (model == nullptr || split == nullptr || all_gather == nullptr ||
      all_gather->start == nullptr || out == nullptr) {
    return Invalid("model, split, all_gather, its start and out must not be NULL");
  }
  return Guarded([&] {
    auto request = ToRequest(options);
    if (!request.ok()) return Fail(request.status());
    auto parsed = hoist::ParseSplit(split, "split");
    if (!parsed.ok()) return Fail(parsed.status());
    request->split = *parsed;
    const hoist_all_gather exchange = *all_gather;
    hoist::AllGather gather;
    gather.start = [exchange](void* block, uint64_t chunk_bytes) {
      if (exchange.start(exchange.user, block, chunk_bytes) != 0) {
        return hoist::Status::DeviceError("the all-gather callback failed");
      }
      return hoist::Status::Ok();
    };
    if (exchange.poll != nullptr) {
      gather.poll = [exchange]() -> hoist::Result<bool> {
        const int finished = exchange.poll(exchange.user);
        if (finished < 0)
          return hoist::Status::DeviceError("the all-gather failed (its poll said so)");
        return finished != 0;
      };
    }
    return Finish(hoist::LoadAsRank(model->dir, *request, rank, world, gather), out);
  });
}

hoist_status hoist_load_rank(hoist_model* model, const hoist_load_options* options,
                             const char* split, uint32_t rank, uint32_t world,
                             hoist_all_gather_fn all_gather, void* user, hoist_loaded** out) {
  const hoist_all_gather exchange{all_gather, nullptr, user};
  return hoist_load_rank_ex(model, options, split, rank, world, &exchange, out);
}

hoist_status hoist_split_places_parts(const char* split, int* places_parts) {
  if (split == nullptr || places_parts == nullptr) {
    return Invalid("split and places_parts must not be NULL");
  }
  return Guarded([&] {
    auto policy = hoist::ParseSplit(split, "split");
    if (!policy.ok()) return Fail(policy.status());
    *places_parts = (*policy)->whole_tensors ? 0 : 1;
    return HOIST_OK;
  });
}

int hoist_name_is_remote(const char* name) {
  return name != nullptr && hoist::IsRemoteName(name) ? 1 : 0;
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
    auto request = ToRequest(options);
    if (!request.ok()) return Fail(request.status());
    if (!request->split->whole_tensors) {
      return Invalid("split '" + request->split->name +
                     "' places parts: hoist_model_split says where");
    }
    auto plan = hoist::PlanRequest(model->dir, *request);
    if (!plan.ok()) return Fail(plan.status());
    const std::vector<uint32_t> placed = hoist::DeviceOfTensors(plan->parts, count);
    std::copy(placed.begin(), placed.end(), device_of);
    return HOIST_OK;
  });
}

int hoist_loaded_tensor_device(const hoist_loaded* loaded, size_t index) {
  if (loaded == nullptr) return -1;
  const hoist::LoadedModel& m = loaded->loaded.model();
  if (index >= m.size() || !m.loaded(index)) return -1;
  return static_cast<int>(m.device_index(index));
}

void* hoist_loaded_tensor(const hoist_loaded* loaded, size_t index) {
  if (loaded == nullptr || index >= loaded->loaded.model().size()) return nullptr;
  return loaded->loaded.model().data(index);
}

hoist_status hoist_loaded_part(const hoist_loaded* loaded, size_t index, hoist_part* out) {
  if (loaded == nullptr || out == nullptr) return Invalid("loaded and out must not be NULL");
  const hoist::ModelPlan& plan = loaded->loaded.plan();
  const size_t count =
      plan.by_parts ? plan.parts.size() : loaded->loaded.directory().tensors.size();
  if (index >= count) return Invalid("part index out of range");
  const hoist::TensorRegion r =
      plan.by_parts ? plan.parts[index] : hoist::WholePart(loaded->loaded.directory(), index, 0);
  *out = {r.tensor,
          r.row_bytes,
          r.row_begin,
          r.row_end,
          r.column_begin,
          r.column_end,
          static_cast<uint32_t>(std::max(0, hoist_loaded_tensor_device(loaded, index))),
          hoist_loaded_tensor(loaded, index)};
  return HOIST_OK;
}

hoist_status hoist_loaded_checksum(const hoist_loaded* loaded, size_t index, uint64_t* xxh3) {
  if (loaded == nullptr || xxh3 == nullptr) return Invalid("NULL argument");
  const std::vector<uint64_t>& checksums = loaded->loaded.model().checksums();
  if (checksums.empty()) return Invalid("the load was made without checksum");
  if (index >= checksums.size()) return Invalid("tensor index out of range");
  *xxh3 = checksums[index];
  return HOIST_OK;
}

hoist_status hoist_loaded_verify(hoist_loaded* loaded, size_t* mismatches) {
  if (loaded == nullptr) return Invalid("loaded must not be NULL");
  return Guarded([&] {
    auto found = hoist::Verify(loaded->loaded, hoist::DefaultReaderThreads(), 1000,
                               hoist::kDefaultStallTimeoutSeconds);
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

const char* hoist_held_models_json(void) {
  std::string built;
  const hoist_status status = Guarded([&] {
    auto held = hoist::ListHeld(2.0);
    if (!held.ok()) return Fail(held.status());
    nlohmann::ordered_json j = {{"held", nlohmann::ordered_json::array()}};
    for (const hoist::HeldSummary& s : *held) j["held"].push_back(hoist::SummaryToJson(s));
    built = hoist::DumpJson(j);
    return HOIST_OK;
  });
  if (status != HOIST_OK) return nullptr;
  static thread_local std::string text;  // valid until this thread's next call
  text = std::move(built);
  return text.c_str();
}

void hoist_attach_options_init(hoist_attach_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
}

hoist_status hoist_attach(const char* name, const hoist_attach_options* options,
                          hoist_model** model, hoist_loaded** loaded) {
  if (name == nullptr || model == nullptr || loaded == nullptr) {
    return Invalid("name, model and loaded must not be NULL");
  }
  *model = nullptr;
  *loaded = nullptr;
  hoist_attach_options defaults;
  hoist_attach_options_init(&defaults);
  if (options == nullptr) options = &defaults;
  if (options->struct_size < sizeof *options) {
    return Invalid("hoist_attach_options.struct_size is too small: call hoist_attach_options_init");
  }
  if (!(options->timeout_s >= 0 && options->timeout_s <= hoist::kMaxStallTimeoutSeconds)) {
    return Invalid("timeout_s must be from 0 to " + std::to_string(hoist::kMaxStallTimeoutSeconds) +
                   " seconds");
  }
  return Guarded([&] {
    hoist::AttachRequest request{name, options->device != nullptr ? options->device : "",
                                 options->share != 0,
                                 options->timeout_s > 0 ? options->timeout_s : 10};
    auto attached = hoist::Attach(request);
    if (!attached.ok()) return Fail(attached.status());
    auto held = std::make_unique<hoist_model>();
    held->dir = std::move(attached->dir);
    held->metadata_json = "{}";
    hoist::CompletedLoad load(held->dir, std::move(attached->model), attached->plan, nullptr,
                              attached->verifiable);
    auto result = std::make_unique<hoist_loaded>(std::move(load));
    result->report_json = hoist::DumpJson(hoist::ReportToJson(result->loaded.model().report));
    *model = held.release();
    *loaded = result.release();
    return HOIST_OK;
  });
}

hoist_status hoist_attach_into(const hoist_model* model, const char* device, double timeout_s,
                               hoist_destination_fn destination, void* user,
                               uint64_t* copied_bytes) {
  if (model == nullptr || device == nullptr || destination == nullptr) {
    return Invalid("model, device and destination must not be NULL");
  }
  if (copied_bytes != nullptr) *copied_bytes = 0;
  if (!(timeout_s >= 0 && timeout_s <= hoist::kMaxStallTimeoutSeconds)) {
    return Invalid("timeout_s must be from 0 to " + std::to_string(hoist::kMaxStallTimeoutSeconds) +
                   " seconds");
  }
  return Guarded([&] {
    const hoist::TensorDirectory& dir = model->dir;
    auto copied = hoist::AttachInto(
        dir, device,
        [&](size_t index) {
          const hoist_tensor_info info = Info(dir.tensors[index]);
          return destination(user, index, &info);
        },
        timeout_s > 0 ? timeout_s : 10);
    if (!copied.ok()) return Fail(copied.status());
    if (copied_bytes != nullptr) *copied_bytes = *copied;
    return HOIST_OK;
  });
}

void hoist_reader_options_init(hoist_reader_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof *options);
  options->struct_size = sizeof *options;
  options->pinned = -1;
}

hoist_status hoist_reader_open(hoist_model* model, const hoist_load_options* load,
                               const hoist_reader_options* options, hoist_reader** out) {
  if (model == nullptr || out == nullptr) return Invalid("model and out must not be NULL");
  *out = nullptr;
  if (options != nullptr && options->struct_size < sizeof *options) {
    return Invalid("hoist_reader_options.struct_size is too small: call hoist_reader_options_init");
  }
  return Guarded([&] {
    auto request = ToRequest(load);
    if (!request.ok()) return Fail(request.status());
    hoist::HostReaderRequest reader_request;
    reader_request.load = std::move(*request);
    if (options != nullptr) {
      auto tensors = Array(options->tensors, options->tensor_count, "tensors");
      if (!tensors.ok()) return Fail(tensors.status());
      reader_request.indices = std::move(*tensors);
      using Pin = hoist::HostReaderRequest::Pin;
      reader_request.pin = options->pinned < 0    ? Pin::kSettings
                           : options->pinned == 0 ? Pin::kOff
                                                  : Pin::kOn;
      reader_request.ahead_bytes = options->ahead_bytes;
    }
    auto reader = hoist::OpenHostReader(model->dir, reader_request);
    if (!reader.ok()) return Fail(reader.status());
    *out = new hoist_reader{std::move(*reader)};
    return HOIST_OK;
  });
}

hoist_status hoist_reader_take(hoist_reader* reader, size_t index, uint32_t timeout_ms,
                               hoist_host_tensor** out) {
  if (reader == nullptr || out == nullptr) return Invalid("reader and out must not be NULL");
  *out = nullptr;
  return Guarded([&] {
    auto taken = reader->reader->Take(index, timeout_ms / 1000.0);
    if (!taken.ok()) return Fail(taken.status());
    if (taken->has_value()) *out = new hoist_host_tensor{std::move(**taken)};
    return HOIST_OK;
  });
}

void hoist_reader_stats_get(const hoist_reader* reader, hoist_reader_stats* out) {
  if (reader == nullptr || out == nullptr) return;
  const hoist::ReadAheadStats s = reader->reader->stats();
  *out = {s.hits, s.waits, s.misses, s.batches, s.read_bytes};
}

void hoist_reader_close(hoist_reader* reader) {
  if (reader == nullptr) return;
  reader->reader->Close();
  delete reader;
}

void* hoist_host_tensor_data(const hoist_host_tensor* tensor) {
  return tensor == nullptr ? nullptr : tensor->tensor.data;
}

uint64_t hoist_host_tensor_size(const hoist_host_tensor* tensor) {
  return tensor == nullptr ? 0 : tensor->tensor.nbytes;
}

int hoist_host_tensor_pinned(const hoist_host_tensor* tensor) {
  return tensor != nullptr && tensor->tensor.slab && tensor->tensor.slab->pinned ? 1 : 0;
}

void hoist_host_tensor_free(hoist_host_tensor* tensor) { delete tensor; }

void hoist_set_host_memory_reuse_hook(hoist_reuse_fn settle, void* user) {
  if (settle == nullptr) {
    hoist::SetHostMemoryReuseHook({});
    return;
  }
  hoist::SetHostMemoryReuseHook([settle, user] { settle(user); });
}

void hoist_release_cached_memory(void) {
  hoist::ReleaseHostSlabs();
  hoist::ReleaseCachedMemory();
}

const char* hoist_last_error(void) { return g_last_error; }

const char* hoist_version(void) { return hoist::Version(); }

const char* hoist_status_name(hoist_status status) {
  // The rows' names are literals: their data() ends in a NUL.
  for (size_t code = 0; code < std::size(kCStatuses); ++code) {
    if (kCStatuses[code] == status) return hoist::RowOf(static_cast<hoist::Code>(code)).name.data();
  }
  return "unknown";
}

}  // extern "C"
