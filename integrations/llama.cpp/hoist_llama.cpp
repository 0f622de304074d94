// hoist_llama_load: llama.cpp builds the model and allocates its tensors from the GGUF's metadata
// (llama_model_init_from_user), its callback records where each tensor went, then hoist reads
// every tensor's bytes into that memory, one load per device.
#include "hoist/llama.h"

#include <strings.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"
#include "hoist/hoist.h"

namespace {

thread_local std::string g_last_error;

struct GgufFree {
  void operator()(gguf_context* c) const { gguf_free(c); }
};
struct GgmlFree {
  void operator()(ggml_context* c) const { ggml_free(c); }
};
struct ModelClose {
  void operator()(hoist_model* m) const { hoist_model_close(m); }
};
using Gguf = std::unique_ptr<gguf_context, GgufFree>;
using GgmlContext = std::unique_ptr<ggml_context, GgmlFree>;
using HoistModel = std::unique_ptr<hoist_model, ModelClose>;

// The metadata llama.cpp builds the model from: the first file's keys and the tensors of every
// file of a split set, as its own loader sees them.
struct Metadata {
  Gguf merged;
  std::vector<Gguf> files;
  std::vector<GgmlContext> tensors;  // each file's tensor descriptions (no data)
};

bool ReadMetadata(const std::string& path, Metadata& out, std::string& error) {
  ggml_context* first_tensors = nullptr;
  Gguf first(gguf_init_from_file(path.c_str(), {/*no_alloc=*/true, &first_tensors}));
  if (first == nullptr) {
    error = path + ": llama.cpp's GGUF reader refused its header";
    return false;
  }
  out.tensors.emplace_back(first_tensors);
  const int64_t count_key = gguf_find_key(first.get(), "split.count");
  uint32_t splits = 1;
  if (count_key >= 0) {
    if (gguf_get_kv_type(first.get(), count_key) != GGUF_TYPE_UINT16) {
      error = path + ": split.count is not a UINT16";
      return false;
    }
    splits = gguf_get_val_u16(first.get(), count_key);
  }
  out.files.push_back(std::move(first));
  if (splits <= 1) return true;
  char prefix[4096];
  if (llama_split_prefix(prefix, sizeof prefix, path.c_str(), 0, static_cast<int>(splits)) == 0) {
    error = path + ": not the first file of a split set of " + std::to_string(splits) +
            " (NAME-00001-of-" + std::to_string(splits) + ".gguf)";
    return false;
  }
  out.merged.reset(gguf_init_empty());
  gguf_set_kv(out.merged.get(), out.files[0].get());
  for (uint32_t i = 1; i < splits; ++i) {
    char split_path[4096];
    llama_split_path(split_path, sizeof split_path, prefix, static_cast<int>(i),
                     static_cast<int>(splits));
    ggml_context* tensors = nullptr;
    Gguf file(gguf_init_from_file(split_path, {/*no_alloc=*/true, &tensors}));
    if (file == nullptr) {
      error = std::string(split_path) + ": llama.cpp's GGUF reader refused its header";
      return false;
    }
    out.files.push_back(std::move(file));
    out.tensors.emplace_back(tensors);
  }
  for (const GgmlContext& ctx : out.tensors) {
    for (ggml_tensor* t = ggml_get_first_tensor(ctx.get()); t != nullptr;
         t = ggml_get_next_tensor(ctx.get(), t)) {
      if (gguf_find_tensor(out.merged.get(), ggml_get_name(t)) >= 0) {
        error = path + ": tensor '" + ggml_get_name(t) + "' is in more than one file of the set";
        return false;
      }
      gguf_add_tensor(out.merged.get(), t);
    }
  }
  return true;
}

gguf_context* MetadataOf(const Metadata& m) {
  return m.merged != nullptr ? m.merged.get() : m.files[0].get();
}

// One tensor llama.cpp allocated, and the model's tensor that fills it.
struct Placed {
  ggml_tensor* tensor = nullptr;
  size_t index = 0;
};

// What the set_tensor_data callback learns: every tensor llama.cpp made, or the first reason
// the model cannot be filled from the file.
struct Recorder {
  hoist_model* model = nullptr;
  std::string path;
  std::vector<Placed> placed;
  std::string error;
};

std::string ShapeText(const uint64_t* shape, uint32_t ndim) {
  std::string s = "[";
  for (uint32_t i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The model's tensor `name` must be what llama.cpp made: its type and shape (ggml lists the
// innermost dimension first, hoist the outermost), so its bytes fit the memory exactly.
bool Matches(const ggml_tensor* t, const hoist_tensor_info& info, std::string& why) {
  if (strcasecmp(ggml_type_name(t->type), info.dtype) != 0) {  // ggml spells "q8_0"
    why = std::string("llama.cpp made it ") + ggml_type_name(t->type) + ", the file holds " +
          info.dtype;
    return false;
  }
  bool same = info.ndim >= 1 && info.ndim <= GGML_MAX_DIMS;
  for (int d = 0; same && d < GGML_MAX_DIMS; ++d) {
    const uint64_t file_dim = d < static_cast<int>(info.ndim) ? info.shape[info.ndim - 1 - d] : 1;
    same = static_cast<uint64_t>(t->ne[d]) == file_dim;
  }
  if (!same || ggml_nbytes(t) != info.nbytes) {
    why = "llama.cpp expects shape [" + std::to_string(t->ne[3]) + ", " + std::to_string(t->ne[2]) +
          ", " + std::to_string(t->ne[1]) + ", " + std::to_string(t->ne[0]) + "], the file holds " +
          ShapeText(info.shape, info.ndim);
    return false;
  }
  return true;
}

void Record(ggml_tensor* t, void* user) {
  auto* r = static_cast<Recorder*>(user);
  if (!r->error.empty()) return;
  const char* name = ggml_get_name(t);
  size_t index = 0;
  if (hoist_model_find(r->model, name, &index) != HOIST_OK) {
    r->error = r->path + ": llama.cpp made tensor '" + name +
               "', which the file does not hold: this libllama creates optional tensors the "
               "metadata lacks (build it with third_party/llama.cpp's patch)";
    return;
  }
  hoist_tensor_info info{};
  std::string why;
  if (hoist_model_tensor(r->model, index, &info) != HOIST_OK || !Matches(t, info, why)) {
    r->error = r->path + ": tensor '" + name + "': " + why;
    return;
  }
  r->placed.push_back({t, index});
}

// Where hoist reads a tensor to: a device pointer ("cuda:N", "hip:N"), a host pointer ("host"), or
// "" for memory only the buffer's own set_tensor can fill (repacking, split across devices).
std::string DirectDevice(const ggml_tensor* t) {
  if (t->buffer == nullptr || t->data == nullptr) return "";
  if (ggml_backend_buffer_is_host(t->buffer)) return "host";
  ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(t->buffer);
  ggml_backend_dev_t dev = ggml_backend_buft_get_device(buft);
  if (dev == nullptr || ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_GPU ||
      ggml_backend_dev_buffer_type(dev) != buft) {
    return "";
  }
  // ggml names its CUDA and HIP devices by the runtime's ordinal: CUDA0, ROCm1.
  const std::string name = ggml_backend_dev_name(dev);
  const size_t digits = name.find_first_of("0123456789");
  if (digits == std::string::npos) return "";
  if (name.rfind("CUDA", 0) == 0) return "cuda:" + name.substr(digits);
  if (name.rfind("ROCm", 0) == 0) return "hip:" + name.substr(digits);
  return "";
}

// Progress over every load of the call, passed on to llama.cpp's callback.
struct Progress {
  llama_progress_callback callback = nullptr;
  void* user = nullptr;
  uint64_t done_before = 0;  // bytes of the loads already finished
  uint64_t total = 0;
  bool cancelled = false;

  bool Report(uint64_t done) {
    if (callback == nullptr || total == 0) return true;
    const float fraction =
        static_cast<float>(static_cast<double>(done_before + done) / static_cast<double>(total));
    if (!callback(std::min(fraction, 1.0f), user)) cancelled = true;
    return !cancelled;
  }
};

int ReportProgress(void* user, uint64_t done, uint64_t /*total*/) {
  return static_cast<Progress*>(user)->Report(done) ? 0 : 1;
}

struct Group {
  std::vector<void*> destination_of;  // by the model's tensor index
  std::vector<bool> from_holder;      // by the model's tensor index: copied from a holder
  uint64_t bytes = 0;
};

void* DestinationOf(void* user, size_t index, const hoist_tensor_info* /*tensor*/) {
  const auto* g = static_cast<const Group*>(user);
  return index < g->destination_of.size() ? g->destination_of[index] : nullptr;
}

void* HolderDestinationOf(void* user, size_t index, const hoist_tensor_info* tensor) {
  auto* g = static_cast<Group*>(user);
  void* to = DestinationOf(user, index, tensor);
  if (to != nullptr) g->from_holder[index] = true;
  return to;
}

void Log(ggml_log_level level, const std::string& message) {
  ggml_log_callback log = nullptr;
  void* user = nullptr;
  llama_log_get(&log, &user);
  const std::string line = "hoist_llama_load: " + message + "\n";
  if (log != nullptr) {
    log(level, line.c_str(), user);
  } else if (level >= GGML_LOG_LEVEL_WARN) {
    std::fputs(line.c_str(), stderr);
  }
}

// The group's tensors that a holder (`hoist serve` of the same file on that device) holds,
// copied within the device; the bytes copied. Any failure leaves them to be read.
uint64_t TakeFromHolder(hoist_model* model, const std::string& device, Group& group,
                        const std::string& path) {
  uint64_t copied = 0;
  const auto start = std::chrono::steady_clock::now();
  const hoist_status status =
      hoist_attach_into(model, device.c_str(), 0, HolderDestinationOf, &group, &copied);
  if (status == HOIST_OK) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    char line[128];
    std::snprintf(line, sizeof line, " bytes on %s from the holder of the file in %.4f s",
                  device.c_str(), seconds);
    Log(GGML_LOG_LEVEL_INFO, path + ": " + std::to_string(copied) + line);
    return copied;
  }
  if (status != HOIST_NOT_FOUND) {
    Log(GGML_LOG_LEVEL_WARN, path + ": not taken from its holder on " + device + " (" +
                                 hoist_last_error() + "): read from the file");
  }
  group.from_holder.assign(group.destination_of.size(), false);
  return 0;
}

std::string Cancelled(const std::string& path) {
  return path + ": the load was cancelled (the progress callback returned false)";
}

std::string HoistError(const std::string& path, hoist_status status) {
  return path + ": " + hoist_status_name(status) + ": " + hoist_last_error();
}

// Reads `indices` into host memory hoist hands over one tensor at a time, each given to its
// buffer's set_tensor (which repacks or splits it) and freed.
bool SetThroughBackend(hoist_model* model, const hoist_load_options& load,
                       const std::vector<Placed>& tensors, Progress& progress,
                       const std::string& path, std::string& error) {
  std::vector<size_t> indices;
  for (const Placed& p : tensors) indices.push_back(p.index);
  hoist_reader_options options;
  hoist_reader_options_init(&options);
  options.tensors = indices.data();
  options.tensor_count = indices.size();
  hoist_reader* reader = nullptr;
  hoist_status status = hoist_reader_open(model, &load, &options, &reader);
  if (status != HOIST_OK) {
    error = HoistError(path, status);
    return false;
  }
  uint64_t done = 0;
  for (const Placed& p : tensors) {
    hoist_host_tensor* host = nullptr;
    while (status == HOIST_OK && host == nullptr && !progress.cancelled) {
      status = hoist_reader_take(reader, p.index, 100, &host);
      if (host == nullptr) progress.Report(done);
    }
    if (host == nullptr) break;
    ggml_backend_tensor_set(p.tensor, hoist_host_tensor_data(host), 0,
                            hoist_host_tensor_size(host));
    done += hoist_host_tensor_size(host);
    hoist_host_tensor_free(host);
    progress.Report(done);
  }
  hoist_reader_close(reader);
  progress.done_before += done;
  if (progress.cancelled) {
    error = Cancelled(path);
    return false;
  }
  if (status != HOIST_OK) {
    error = HoistError(path, status);
    return false;
  }
  return true;
}

// Fills every tensor llama.cpp made: each device's by pointer in one load, the rest through
// set_tensor, then each second tensor of the same name (a tied output) copied from the first.
bool Fill(hoist_model* model, const std::vector<Placed>& placed, const hoist_llama_options& opts,
          Progress& progress, const std::string& path, std::string& error) {
  const size_t count = hoist_model_tensor_count(model);
  std::map<std::string, Group> direct;
  std::vector<Placed> through_backend;
  std::vector<std::pair<ggml_tensor*, ggml_tensor*>> copies;  // from, to
  std::vector<ggml_tensor*> first_of(count, nullptr);
  for (const Placed& p : placed) {
    hoist_tensor_info info{};
    (void)hoist_model_tensor(model, p.index, &info);
    if (first_of[p.index] != nullptr) {
      copies.emplace_back(first_of[p.index], p.tensor);
      continue;
    }
    first_of[p.index] = p.tensor;
    progress.total += info.nbytes;
    const std::string device = info.nbytes == 0 ? "" : DirectDevice(p.tensor);
    if (device.empty()) {
      if (info.nbytes != 0) through_backend.push_back(p);
      continue;
    }
    Group& g = direct[device];
    if (g.destination_of.empty()) {
      g.destination_of.assign(count, nullptr);
      g.from_holder.assign(count, false);
    }
    g.destination_of[p.index] = p.tensor->data;
    g.bytes += info.nbytes;
  }
  // Asked once before the first byte (so a load can be cancelled before it starts) and once
  // after the last, whatever hoist's 100 ms reporting saw in between.
  if (!progress.Report(0)) {
    error = Cancelled(path);
    return false;
  }
  hoist_load_options load;
  hoist_load_options_init(&load);
  load.threads = opts.threads;
  load.chunk_bytes = opts.chunk_bytes;
  load.stall_timeout_s = opts.stall_timeout_s;
  load.direct_io = opts.direct_io;
  load.progress = ReportProgress;
  load.progress_user = &progress;
  for (auto& [device, group] : direct) {
    const uint64_t held = opts.no_holder ? 0 : TakeFromHolder(model, device, group, path);
    progress.done_before += held;
    std::vector<const char*> names;  // the tensors left to read
    for (size_t i = 0; i < count; ++i) {
      if (group.destination_of[i] != nullptr && !group.from_holder[i]) {
        hoist_tensor_info info{};
        (void)hoist_model_tensor(model, i, &info);
        names.push_back(info.name);
      }
    }
    if (names.empty()) continue;
    load.device = device.c_str();
    load.names = names.data();
    load.name_count = names.size();
    hoist_loaded* loaded = nullptr;
    const hoist_status status = hoist_load_into(model, &load, DestinationOf, &group, &loaded);
    hoist_loaded_free(loaded);
    if (status == HOIST_UNAVAILABLE && device != "host") {
      // This hoist has no backend for that GPU: its tensors go through set_tensor instead.
      for (const Placed& p : placed) {
        if (group.destination_of[p.index] == p.tensor->data && first_of[p.index] == p.tensor &&
            !group.from_holder[p.index]) {
          through_backend.push_back(p);
        }
      }
      continue;
    }
    if (status != HOIST_OK) {
      error = progress.cancelled ? Cancelled(path) : HoistError(path, status);
      return false;
    }
    progress.done_before += group.bytes - held;
  }
  // The reader takes every tensor it is given by index: none of the direct loads' names.
  load.device = nullptr;
  load.names = nullptr;
  load.name_count = 0;
  if (!through_backend.empty() &&
      !SetThroughBackend(model, load, through_backend, progress, path, error)) {
    return false;
  }
  for (const auto& [from, to] : copies) ggml_backend_tensor_copy(from, to);
  progress.done_before = progress.total;
  if (!progress.Report(0)) {
    error = Cancelled(path);
    return false;
  }
  return true;
}

void Fail(const std::string& message) {
  g_last_error = message;
  Log(GGML_LOG_LEVEL_ERROR, message);
}

}  // namespace

extern "C" {

void hoist_llama_options_init(hoist_llama_options* options) {
  if (options == nullptr) return;
  *options = hoist_llama_options{};
  options->struct_size = sizeof(hoist_llama_options);
}

const char* hoist_llama_last_error(void) { return g_last_error.c_str(); }

struct llama_model* hoist_llama_load(const char* path, struct llama_model_params params,
                                     const hoist_llama_options* options) {
  g_last_error.clear();
  hoist_llama_options opts;
  hoist_llama_options_init(&opts);
  if (options != nullptr) {
    if (options->struct_size != sizeof(hoist_llama_options)) {
      Fail(
          "hoist_llama_options.struct_size is not sizeof(hoist_llama_options): call "
          "hoist_llama_options_init");
      return nullptr;
    }
    opts = *options;
  }
  if (path == nullptr || *path == '\0') {
    Fail("no model path");
    return nullptr;
  }
  hoist_model* opened = nullptr;
  const hoist_status status = hoist_model_open(path, &opened);
  HoistModel model(opened);
  if (status != HOIST_OK) {
    Fail(HoistError(path, status));
    return nullptr;
  }
  if (std::strcmp(hoist_model_format(model.get()), "gguf") != 0) {
    Fail(std::string(path) + ": llama.cpp loads GGUF models; this is " +
         hoist_model_format(model.get()));
    return nullptr;
  }
  Metadata metadata;
  std::string error;
  if (!ReadMetadata(path, metadata, error)) {
    Fail(error);
    return nullptr;
  }
  Recorder recorder;
  recorder.model = model.get();
  recorder.path = path;
  llama_model* built = llama_model_init_from_user(MetadataOf(metadata), Record, &recorder, params);
  if (built == nullptr) {
    Fail(std::string(path) +
         ": llama.cpp could not build the model from its metadata (its log "
         "says why)");
    return nullptr;
  }
  Progress progress;
  progress.callback = params.progress_callback;
  progress.user = params.progress_callback_user_data;
  if (recorder.error.empty() && !params.vocab_only &&
      !Fill(model.get(), recorder.placed, opts, progress, path, recorder.error)) {
    if (recorder.error.empty()) recorder.error = std::string(path) + ": the load failed";
  }
  if (!recorder.error.empty()) {
    llama_model_free(built);
    Fail(recorder.error);
    return nullptr;
  }
  return built;
}

}  // extern "C"
