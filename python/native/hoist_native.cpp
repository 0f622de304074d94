// hoist._native: the Python extension over hoist's C API (include/hoist/hoist.h). It only
// opens models and fills destinations that the Python side allocated (torch or numpy);
// python/hoist/ builds the user-facing API on it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hoist/hoist.h"

namespace py = pybind11;

namespace {

// hoist._errors.make_error(message, status, status_name) → an instance of HoistError or a
// subclass, chosen by the status's integer.
PyObject* g_make_error = nullptr;

[[noreturn]] void Raise(hoist_status status) {
  py::object make_error = py::reinterpret_borrow<py::object>(g_make_error);
  // A message may quote a file's bytes that are not UTF-8 (a GGUF key or name): shown escaped,
  // as \xNN, rather than failing the raise itself with UnicodeDecodeError.
  const char* message = hoist_last_error();
  PyObject* text = PyUnicode_DecodeUTF8(message, static_cast<Py_ssize_t>(std::strlen(message)),
                                        "backslashreplace");
  if (text == nullptr) throw py::error_already_set();
  py::object error = make_error(py::reinterpret_steal<py::str>(text), static_cast<int>(status),
                                std::string(hoist_status_name(status)));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

struct ModelDeleter {
  void operator()(hoist_model* m) const { hoist_model_close(m); }
};
struct LoadedDeleter {
  void operator()(hoist_loaded* l) const { hoist_loaded_free(l); }
};

// Tensor names cross into Python as str, a byte that is not UTF-8 as a lone surrogate
// (surrogateescape, as os.fsdecode gives file names), and back to the same bytes: GGUF names
// are bytes, and a name no decoder accepts must still load.
py::str NameToPython(const char* name) {
  PyObject* text =
      PyUnicode_DecodeUTF8(name, static_cast<Py_ssize_t>(std::strlen(name)), "surrogateescape");
  if (text == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(text);
}

std::string NameFromPython(const py::str& name) {
  PyObject* bytes = PyUnicode_AsEncodedString(name.ptr(), "utf-8", "surrogateescape");
  if (bytes == nullptr) throw py::error_already_set();
  return std::string(py::reinterpret_steal<py::bytes>(bytes));
}

// Per tensor of `model`, its dtype's block: (values, bytes); (0, 0) for a dtype without one.
std::vector<std::pair<uint32_t, uint32_t>> BlocksOf(const hoist_model* model) {
  const size_t n = hoist_model_tensor_count(model);
  std::vector<std::pair<uint32_t, uint32_t>> out(n, {0, 0});
  for (size_t i = 0; i < n; ++i) {
    if (hoist_model_tensor_block(model, i, &out[i].first, &out[i].second) != HOIST_OK) {
      out[i] = {0, 0};
    }
  }
  return out;
}

// One tensor: (name, dtype, shape, nbytes, file index, byte offset).
using TensorTuple =
    std::tuple<py::str, std::string, std::vector<uint64_t>, uint64_t, uint32_t, uint64_t>;

// State shared with the C callbacks of one load. Destinations are resolved before the GIL is
// released; the progress callback takes the GIL back to check for Ctrl-C and to call Python.
struct LoadCall {
  std::unordered_map<size_t, uintptr_t> destinations;  // tensor index → address
  py::object progress;                                 // None or callable(done, total) → bool
  std::optional<py::error_already_set> python_error;   // raised by the callback or a signal
};

void* Destination(void* user, size_t index, const hoist_tensor_info*) {
  auto* call = static_cast<LoadCall*>(user);
  auto it = call->destinations.find(index);
  return it == call->destinations.end() ? nullptr : reinterpret_cast<void*>(it->second);
}

int Progress(void* user, uint64_t done, uint64_t total) {
  auto* call = static_cast<LoadCall*>(user);
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) {  // Ctrl-C: KeyboardInterrupt is now set
    call->python_error.emplace();
    return 1;
  }
  if (call->progress.is_none()) return 0;
  try {
    py::object keep_going = call->progress(done, total);
    if (!keep_going.is_none() && !keep_going.cast<bool>()) return 1;
  } catch (py::error_already_set& e) {
    call->python_error.emplace(std::move(e));
    return 1;
  }
  return 0;
}

// Options for one load: the device(s) and the engine's settings; progress reports to `call`
// (Ctrl-C, and the Python callback when there is one).
hoist_load_options LoadOptions(const std::string& device, int threads, uint64_t chunk_bytes,
                               uint64_t staging_bytes, double stall_timeout_s, bool direct_io,
                               LoadCall* call) {
  hoist_load_options options;
  hoist_load_options_init(&options);
  options.device = device.c_str();
  options.threads = threads;
  options.chunk_bytes = chunk_bytes;
  options.staging_bytes = staging_bytes;
  options.stall_timeout_s = stall_timeout_s;
  options.direct_io = direct_io ? 1 : 0;
  options.progress = Progress;
  options.progress_user = call;
  return options;
}

// Runs one load (`load` fills the hoist_loaded) without the GIL; raises what the callbacks
// caught (Ctrl-C, the callback's exception) or the load's error; returns the loaded model.
template <typename LoadFn>
std::unique_ptr<hoist_loaded, LoadedDeleter> RunLoadKeeping(LoadCall& call, LoadFn&& load) {
  hoist_loaded* raw = nullptr;
  hoist_status status = HOIST_OK;
  {
    py::gil_scoped_release release;
    status = load(&raw);
  }
  std::unique_ptr<hoist_loaded, LoadedDeleter> loaded(raw);
  if (call.python_error) {
    call.python_error->restore();
    throw py::error_already_set();
  }
  if (status != HOIST_OK) Raise(status);
  return loaded;
}

// RunLoadKeeping for a load into the caller's memory: returns the report.
template <typename LoadFn>
std::string RunLoad(LoadCall& call, LoadFn&& load) {
  return hoist_loaded_report_json(RunLoadKeeping(call, std::forward<LoadFn>(load)).get());
}

// One part: (tensor index, row bytes, first row, end row, first column byte, end column byte,
// device index).
using PartTuple = std::tuple<size_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uint32_t>;

// A load into memory hoist allocated (rank mode): its parts and where each landed. The memory
// lives as long as this object; Python's tensors over it hold it.
class Loaded {
 public:
  Loaded(std::unique_ptr<hoist_loaded, LoadedDeleter> loaded, std::shared_ptr<hoist_model> model)
      : model_(std::move(model)), loaded_(std::move(loaded)) {}

  // (part, address) per part, in the load's order.
  std::vector<std::pair<PartTuple, uintptr_t>> parts() const {
    std::vector<std::pair<PartTuple, uintptr_t>> out;
    for (size_t i = 0;; ++i) {
      hoist_part p{};
      if (hoist_loaded_part(loaded_.get(), i, &p) != HOIST_OK) break;  // past the last part
      out.emplace_back(PartTuple{p.tensor, p.row_bytes, p.row_begin, p.row_end, p.column_begin,
                                 p.column_end, p.device},
                       reinterpret_cast<uintptr_t>(hoist_loaded_tensor(loaded_.get(), i)));
    }
    return out;
  }
  std::string report() const { return hoist_loaded_report_json(loaded_.get()); }

 private:
  std::shared_ptr<hoist_model> model_;  // the loaded model reads its directory
  std::unique_ptr<hoist_loaded, LoadedDeleter> loaded_;
};

// Rank mode's exchange, run by Python (torch.distributed): start(block address, chunk bytes)
// begins it and returns what poll() asks (True once finished). Called on the loading thread,
// which takes the GIL for them; an exception fails the load and is raised by RunLoadKeeping.
struct Exchange {
  LoadCall* call;
  py::object start;
  py::object poll;
  py::object pending;  // what start returned

  static int Start(void* user, void* block, uint64_t chunk_bytes) {
    auto* self = static_cast<Exchange*>(user);
    py::gil_scoped_acquire gil;
    try {
      self->pending = self->start(reinterpret_cast<uintptr_t>(block), chunk_bytes);
    } catch (py::error_already_set& e) {
      self->call->python_error.emplace(std::move(e));
      return 1;
    }
    return 0;
  }
  // Ctrl-C raised while poll runs fails it: the engine then keeps the block (the exchange may
  // still write into it) and RunLoadKeeping raises KeyboardInterrupt.
  static int Poll(void* user) {
    auto* self = static_cast<Exchange*>(user);
    py::gil_scoped_acquire gil;
    try {
      return self->poll(self->pending).cast<bool>() ? 1 : 0;
    } catch (py::error_already_set& e) {
      self->call->python_error.emplace(std::move(e));
      return -1;
    }
  }
};

// One load consumed as a stream (hoist.iter_tensors). The load runs on its own thread; Python
// hands out destinations (Provide) and takes tensors as they land (Next). Reader threads never
// take the GIL: a destination the readers ask for before Python has provided it is waited for
// here, and a landed tensor is queued here.
class Stream {
 public:
  Stream(std::shared_ptr<hoist_model> model, std::vector<std::string> names, std::string device,
         int threads, uint64_t chunk_bytes, uint64_t staging_bytes, double stall_timeout_s,
         bool direct_io)
      : model_(std::move(model)), names_(std::move(names)), device_(std::move(device)) {
    options_ = LoadOptions(device_, threads, chunk_bytes, staging_bytes, stall_timeout_s, direct_io,
                           nullptr);  // its own progress callback, below
    for (const std::string& n : names_) name_ptrs_.push_back(n.c_str());
    options_.names = name_ptrs_.data();
    options_.name_count = name_ptrs_.size();
    options_.destinations_when_needed = 1;
    // What Python provided ahead is given at once: the reader then keeps its copies flowing
    // instead of settling them before each tensor.
    options_.destination_at_once = [](void* user, size_t index, const hoist_tensor_info*) -> void* {
      auto* self = static_cast<Stream*>(user);
      std::lock_guard<std::mutex> lock(self->mutex_);
      const auto it = self->provided_.find(index);
      return it != self->provided_.end() ? reinterpret_cast<void*>(it->second) : nullptr;
    };
    options_.destination_at_once_user = this;
    options_.tensor_loaded = [](void* user, size_t index) {
      auto* self = static_cast<Stream*>(user);
      {
        std::lock_guard<std::mutex> lock(self->mutex_);
        self->landed_.push_back(index);
      }
      self->cv_.notify_all();
    };
    options_.tensor_loaded_user = this;
    options_.progress = [](void* user, uint64_t, uint64_t) -> int {
      auto* self = static_cast<Stream*>(user);
      std::lock_guard<std::mutex> lock(self->mutex_);
      return self->closed_ ? 1 : 0;
    };
    options_.progress_user = this;
    thread_ = std::thread([this] { Run(); });
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { Close(); }

  // Addresses for tensors (by index), each with room for the tensor's bytes.
  void Provide(const std::vector<std::pair<size_t, uintptr_t>>& destinations) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const auto& [index, address] : destinations) provided_[index] = address;
    }
    cv_.notify_all();
  }

  // The index of the next tensor that landed; None once the load is done. Raises the load's
  // error, and KeyboardInterrupt on Ctrl-C (the load is then cancelled).
  py::object Next() {
    for (;;) {
      std::optional<size_t> index;
      bool finished = false;
      {
        py::gil_scoped_release release;
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait_for(lock, std::chrono::milliseconds(100),
                     [&] { return !landed_.empty() || finished_; });
        if (!landed_.empty()) {
          index = landed_.front();
          landed_.pop_front();
        }
        finished = finished_;
      }
      if (index) return py::int_(*index);
      if (finished) break;
      if (PyErr_CheckSignals() != 0) {
        Close();
        throw py::error_already_set();
      }
    }
    if (status_ != HOIST_OK) {
      py::object make_error = py::reinterpret_borrow<py::object>(g_make_error);
      py::object error =
          make_error(error_, static_cast<int>(status_), std::string(hoist_status_name(status_)));
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
      throw py::error_already_set();
    }
    return py::none();
  }

  // Cancels the load if it still runs and waits for its thread; what it was given stays the
  // caller's. Safe to call more than once.
  void Close() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      closed_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) {
      py::gil_scoped_release release;
      thread_.join();
    }
  }

  std::string report() {
    std::lock_guard<std::mutex> lock(mutex_);
    return report_;
  }

 private:
  void Run() {
    hoist_loaded* raw = nullptr;
    const hoist_status status = hoist_load_into(
        model_.get(), &options_,
        [](void* user, size_t index, const hoist_tensor_info*) -> void* {
          auto* self = static_cast<Stream*>(user);
          std::unique_lock<std::mutex> lock(self->mutex_);
          self->cv_.wait(lock, [&] { return self->closed_ || self->provided_.count(index) != 0; });
          if (self->closed_) return nullptr;
          return reinterpret_cast<void*>(self->provided_[index]);
        },
        this, &raw);
    std::unique_ptr<hoist_loaded, LoadedDeleter> loaded(raw);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      status_ = status;
      if (status != HOIST_OK) error_ = hoist_last_error();
      if (loaded) report_ = hoist_loaded_report_json(loaded.get());
      finished_ = true;
    }
    cv_.notify_all();
  }

  std::shared_ptr<hoist_model> model_;
  std::vector<std::string> names_;
  std::vector<const char*> name_ptrs_;
  std::string device_;
  hoist_load_options options_{};
  std::mutex mutex_;
  std::condition_variable cv_;
  std::unordered_map<size_t, uintptr_t> provided_;
  std::deque<size_t> landed_;
  bool closed_ = false;
  bool finished_ = false;
  hoist_status status_ = HOIST_OK;
  std::string error_;
  std::string report_;
  std::thread thread_;
};

// One tensor read by a Reader: its host memory, the Python object's while it lives (buffer
// protocol: torch.frombuffer and numpy.frombuffer keep it alive while they view it).
class HostBuffer {
 public:
  explicit HostBuffer(hoist_host_tensor* tensor) : tensor_(tensor) {}
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;
  ~HostBuffer() { hoist_host_tensor_free(tensor_); }

  py::buffer_info Buffer() const {
    return py::buffer_info(hoist_host_tensor_data(tensor_), 1,
                           py::format_descriptor<uint8_t>::format(), 1,
                           {static_cast<py::ssize_t>(nbytes())}, {1}, /*readonly=*/false);
  }
  uint64_t nbytes() const { return hoist_host_tensor_size(tensor_); }
  bool pinned() const { return hoist_host_tensor_pinned(tensor_) != 0; }

 private:
  hoist_host_tensor* tensor_;
};

// A consumer-ordered reader of whole tensors into host memory (hoist_reader_open).
class Reader {
 public:
  Reader(std::shared_ptr<hoist_model> model, hoist_reader* reader)
      : model_(std::move(model)), reader_(reader) {}
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;
  ~Reader() { Close(); }

  // Tensor `index`, waited for without the GIL; Ctrl-C raises KeyboardInterrupt within 0.1 s
  // (the read goes on: asking again waits for it).
  std::unique_ptr<HostBuffer> Take(size_t index) {
    if (reader_ == nullptr) {
      throw py::value_error("the reader is closed");
    }
    for (;;) {
      hoist_host_tensor* tensor = nullptr;
      hoist_status status = HOIST_OK;
      {
        py::gil_scoped_release release;
        status = hoist_reader_take(reader_, index, 100, &tensor);
      }
      if (status != HOIST_OK) Raise(status);
      if (tensor != nullptr) return std::make_unique<HostBuffer>(tensor);
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }

  py::dict Stats() const {
    hoist_reader_stats s{};
    if (reader_ != nullptr) hoist_reader_stats_get(reader_, &s);
    py::dict out;
    out["hits"] = s.hits;
    out["waits"] = s.waits;
    out["misses"] = s.misses;
    out["batches"] = s.batches;
    out["read_bytes"] = s.read_bytes;
    return out;
  }

  // Stops the read-ahead; tensors taken stay valid. Safe to call more than once.
  void Close() {
    hoist_reader* reader = std::exchange(reader_, nullptr);
    if (reader == nullptr) return;
    py::gil_scoped_release release;
    hoist_reader_close(reader);
  }

 private:
  std::shared_ptr<hoist_model> model_;  // the reader reads its directory
  hoist_reader* reader_;
};

class Model {
 public:
  explicit Model(const std::string& path) {
    hoist_model_source source;
    hoist_model_source_init(&source);
    source.kind = HOIST_SOURCE_PATH;
    source.path = path.c_str();
    Open(source);
  }

  // A model over the bytes of one safetensors or GGUF file (any object with the buffer
  // protocol), read in place: the model holds `data`, which must not change while it is used.
  static std::unique_ptr<Model> FromBytes(const py::buffer& data, const std::string& name) {
    auto model = std::unique_ptr<Model>(new Model());
    model->held_ = data;
    const py::buffer_info info = data.request();
    hoist_model_source source;
    hoist_model_source_init(&source);
    source.kind = HOIST_SOURCE_MEMORY;
    source.path = name.c_str();
    source.bytes = info.ptr;
    source.size = static_cast<uint64_t>(info.size) * static_cast<uint64_t>(info.itemsize);
    model->Open(source);
    return model;
  }

  // Where a load onto `devices` (joined by commas) would put each tensor: an index into them
  // per tensor, by layers in proportion to shares (empty: free memory).
  std::vector<uint32_t> Place(const std::string& devices, const std::vector<double>& shares,
                              const std::string& split_plan) {
    const hoist_load_options options = PlacementOptions(devices, shares, split_plan);
    std::vector<uint32_t> device_of;
    for (const auto& part : PlanParts(
             [&](hoist_plan** out) { return hoist_model_plan(model_.get(), &options, out); })) {
      device_of.push_back(std::get<6>(part));
    }
    return device_of;
  }

  // The plan of a load with `split` onto `devices` (joined by commas): one PartTuple per part
  // (a whole tensor is one part).
  std::vector<PartTuple> Split(const std::string& devices, const std::string& split,
                               const std::vector<double>& shares, const std::string& split_plan) {
    hoist_load_options options = PlacementOptions(devices, shares, split_plan);
    options.split = split.c_str();
    return PlanParts(
        [&](hoist_plan** out) { return hoist_model_plan(model_.get(), &options, out); });
  }

  // The parts `split` gives `devices` devices, without opening any (a rank's share of a job).
  std::vector<PartTuple> Cut(const std::string& split, uint32_t devices,
                             const std::vector<double>& shares, const std::string& split_plan) {
    static const std::string kNoDevice = "auto";  // a cut opens none
    hoist_load_options options = PlacementOptions(kNoDevice, shares, split_plan);
    options.split = split.c_str();
    return PlanParts([&](hoist_plan** out) {
      return hoist_model_plan_cut(model_.get(), &options, devices, out);
    });
  }

  // Loads parts (a PartTuple and an address on its device each) onto `devices` in one load;
  // returns the report.
  std::string LoadParts(const std::vector<std::pair<PartTuple, uintptr_t>>& parts,
                        const std::string& devices, const py::object& progress, int threads,
                        uint64_t chunk_bytes, uint64_t staging_bytes, double stall_timeout_s,
                        bool direct_io) {
    std::vector<hoist_part> native;
    native.reserve(parts.size());
    for (const auto& [part, address] : parts) {
      const auto& [tensor, row_bytes, r0, r1, c0, c1, device] = part;
      native.push_back(
          {tensor, row_bytes, r0, r1, c0, c1, device, reinterpret_cast<void*>(address)});
    }
    return LoadCallersParts(native, devices, progress, threads, chunk_bytes, staging_bytes,
                            stall_timeout_s, direct_io);
  }

  // Loads the caller's parts (each with its destination) onto `devices` as one plan; returns
  // the report.
  std::string LoadCallersParts(const std::vector<hoist_part>& parts, const std::string& devices,
                               const py::object& progress, int threads, uint64_t chunk_bytes,
                               uint64_t staging_bytes, double stall_timeout_s, bool direct_io) {
    hoist_plan* raw = nullptr;
    if (hoist_status status = hoist_plan_from_parts(model_.get(), parts.data(), parts.size(), &raw);
        status != HOIST_OK) {
      Raise(status);
    }
    const std::unique_ptr<hoist_plan, void (*)(hoist_plan*)> plan(raw, hoist_plan_free);
    LoadCall call;
    call.progress = progress;
    hoist_load_options options = LoadOptions(devices, threads, chunk_bytes, staging_bytes,
                                             stall_timeout_s, direct_io, &call);
    return RunLoad(call, [&](hoist_loaded** out) {
      return hoist_load_plan(model_.get(), &options, plan.get(), out);
    });
  }

  // Rank `rank` of a job of `world` processes loads its parts of `split` onto `device` (one),
  // the tensors every rank holds whole gathered through start and poll (Exchange).
  std::unique_ptr<Loaded> LoadRank(const std::string& split, uint32_t rank, uint32_t world,
                                   const std::string& device, const std::vector<double>& shares,
                                   const std::string& split_plan, const py::object& start,
                                   const py::object& poll, const py::object& progress,
                                   const std::vector<py::str>& names, int threads,
                                   uint64_t chunk_bytes, uint64_t staging_bytes,
                                   double stall_timeout_s, bool direct_io) {
    LoadCall call;
    call.progress = progress;
    hoist_load_options options =
        LoadOptions(device, threads, chunk_bytes, staging_bytes, stall_timeout_s, direct_io, &call);
    std::vector<std::string> name_bytes;
    std::vector<const char*> name_ptrs;
    for (const py::str& name : names) name_bytes.push_back(NameFromPython(name));
    for (const std::string& name : name_bytes) name_ptrs.push_back(name.c_str());
    options.names = name_ptrs.empty() ? nullptr : name_ptrs.data();
    options.name_count = name_ptrs.size();
    if (!split_plan.empty()) options.split_plan = split_plan.c_str();
    if (!shares.empty()) {
      options.split_shares = shares.data();
      options.split_share_count = shares.size();
    }
    Exchange exchange{&call, start, poll, py::none()};
    const hoist_all_gather gather{Exchange::Start, Exchange::Poll, &exchange};
    auto loaded = RunLoadKeeping(call, [&](hoist_loaded** out) {
      return hoist_load_rank_ex(model_.get(), &options, split.c_str(), rank, world, &gather, out);
    });
    return std::make_unique<Loaded>(std::move(loaded), model_);
  }

  // Loads regions of tensors, (tensor index, row bytes, first row, end row, first column
  // byte, end column byte, address), into the given addresses on `device`; returns the report.
  using RegionTuple =
      std::tuple<size_t, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t, uintptr_t>;
  std::string LoadRegions(const std::vector<RegionTuple>& regions, const std::string& device,
                          int threads, uint64_t chunk_bytes, uint64_t staging_bytes,
                          double stall_timeout_s, bool direct_io) {
    std::vector<hoist_part> parts;
    parts.reserve(regions.size());
    for (const auto& [tensor, row_bytes, r0, r1, c0, c1, address] : regions) {
      parts.push_back({tensor, row_bytes, r0, r1, c0, c1, 0, reinterpret_cast<void*>(address)});
    }
    return LoadCallersParts(parts, device, py::none(), threads, chunk_bytes, staging_bytes,
                            stall_timeout_s, direct_io);
  }

  // Starts a load of the named tensors (by index order of the caller's choosing) as a stream.
  // A consumer-ordered reader of the tensors at `indices` (all when empty) into host memory.
  std::unique_ptr<Reader> OpenReader(const std::vector<size_t>& indices, int pinned,
                                     uint64_t ahead_bytes, int threads, uint64_t chunk_bytes,
                                     uint64_t staging_bytes, double stall_timeout_s,
                                     bool direct_io) {
    hoist_load_options load = LoadOptions("host", threads, chunk_bytes, staging_bytes,
                                          stall_timeout_s, direct_io, nullptr);
    load.progress = nullptr;
    hoist_reader_options options;
    hoist_reader_options_init(&options);
    options.tensors = indices.data();
    options.tensor_count = indices.size();
    options.pinned = pinned;
    options.ahead_bytes = ahead_bytes;
    hoist_reader* reader = nullptr;
    const hoist_status status = hoist_reader_open(model_.get(), &load, &options, &reader);
    if (status != HOIST_OK) Raise(status);
    return std::make_unique<Reader>(model_, reader);
  }

  std::unique_ptr<Stream> StreamTensors(const std::vector<py::str>& names,
                                        const std::string& device, int threads,
                                        uint64_t chunk_bytes, uint64_t staging_bytes,
                                        double stall_timeout_s, bool direct_io) {
    std::vector<std::string> name_bytes;
    name_bytes.reserve(names.size());
    for (const py::str& name : names) name_bytes.push_back(NameFromPython(name));
    return std::make_unique<Stream>(model_, std::move(name_bytes), device, threads, chunk_bytes,
                                    staging_bytes, stall_timeout_s, direct_io);
  }

  std::string format() const { return hoist_model_format(model_.get()); }
  std::string metadata_json() const { return hoist_model_metadata_json(model_.get()); }

  std::vector<TensorTuple> tensors() const {
    std::vector<TensorTuple> out;
    const size_t n = hoist_model_tensor_count(model_.get());
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      hoist_tensor_info t{};
      const hoist_status status = hoist_model_tensor(model_.get(), i, &t);
      if (status != HOIST_OK) Raise(status);
      out.emplace_back(NameToPython(t.name), t.dtype,
                       std::vector<uint64_t>(t.shape, t.shape + t.ndim), t.nbytes, t.file,
                       t.offset);
    }
    return out;
  }

  // Per tensor, its dtype's block: (values, bytes); (0, 0) for a dtype without one.
  std::vector<std::pair<uint32_t, uint32_t>> blocks() const { return BlocksOf(model_.get()); }

  // Copies the named tensors into the given addresses (each with room for the tensor's
  // nbytes, on `device`) and returns the load report (JSON). The caller keeps the memory
  // alive and owns it; hoist allocates nothing on the device.
  std::string LoadInto(const std::vector<std::pair<py::str, uintptr_t>>& destinations,
                       const std::string& device, const py::object& progress, int threads,
                       uint64_t chunk_bytes, uint64_t staging_bytes, double stall_timeout_s,
                       bool checksum, bool direct_io, const std::vector<uint32_t>& placement) {
    LoadCall call;
    call.progress = progress;
    std::vector<std::string> name_bytes;
    name_bytes.reserve(destinations.size());
    for (const auto& destination : destinations) {
      name_bytes.push_back(NameFromPython(destination.first));
    }
    std::vector<const char*> names;
    names.reserve(destinations.size());
    for (size_t i = 0; i < destinations.size(); ++i) {
      size_t index = 0;
      const hoist_status status = hoist_model_find(model_.get(), name_bytes[i].c_str(), &index);
      if (status != HOIST_OK) Raise(status);
      call.destinations[index] = destinations[i].second;
      names.push_back(name_bytes[i].c_str());
    }
    hoist_load_options options =
        LoadOptions(device, threads, chunk_bytes, staging_bytes, stall_timeout_s, direct_io, &call);
    options.checksum = checksum ? 1 : 0;
    options.names = names.data();
    options.name_count = names.size();
    if (!placement.empty()) {
      options.placement = placement.data();
      options.placement_count = placement.size();
    }
    return RunLoad(call, [&](hoist_loaded** out) {
      return hoist_load_into(model_.get(), &options, Destination, &call, out);
    });
  }

 private:
  // Options naming `devices` (joined by commas), their shares and a tensor split's plan file
  // (empty: none); all three must outlive them.
  static hoist_load_options PlacementOptions(const std::string& devices,
                                             const std::vector<double>& shares,
                                             const std::string& split_plan) {
    hoist_load_options options;
    hoist_load_options_init(&options);
    options.device = devices.c_str();
    if (!split_plan.empty()) options.split_plan = split_plan.c_str();
    if (!shares.empty()) {
      options.split_shares = shares.data();
      options.split_share_count = shares.size();
    }
    return options;
  }

  // The parts of the plan `make` (hoist_model_plan or hoist_model_plan_cut) gives, made
  // without the GIL.
  template <typename MakeFn>
  static std::vector<PartTuple> PlanParts(MakeFn&& make) {
    hoist_plan* raw = nullptr;
    hoist_status status = HOIST_OK;
    {
      py::gil_scoped_release release;
      status = make(&raw);
    }
    if (status != HOIST_OK) Raise(status);
    const std::unique_ptr<hoist_plan, void (*)(hoist_plan*)> plan(raw, hoist_plan_free);
    std::vector<PartTuple> out;
    out.reserve(hoist_plan_part_count(plan.get()));
    for (size_t i = 0; i < hoist_plan_part_count(plan.get()); ++i) {
      hoist_part p{};
      if (hoist_status s = hoist_plan_part(plan.get(), i, &p); s != HOIST_OK) Raise(s);
      out.emplace_back(p.tensor, p.row_bytes, p.row_begin, p.row_end, p.column_begin, p.column_end,
                       p.device);
    }
    return out;
  }

  Model() = default;

  void Open(const hoist_model_source& source) {
    hoist_model* raw = nullptr;
    hoist_status status = HOIST_OK;
    {
      py::gil_scoped_release release;
      status = hoist_model_open_ex(&source, &raw);
    }
    if (status != HOIST_OK) Raise(status);
    // The bytes (for a model in memory) live as long as the last user of the model: a stream
    // holds model_ too.
    model_.reset(raw, [held = held_](hoist_model* m) mutable {
      hoist_model_close(m);
      if (held) {
        py::gil_scoped_acquire gil;
        held = py::object();
      }
    });
  }

  py::object held_;  // the buffer a model in memory reads, or None
  std::shared_ptr<hoist_model> model_;
};

// A model attached from its holder (hoist_attach): the tensors' addresses, valid until close()
// or until this object goes; Python's tensors over them hold it.
class Attached {
 public:
  Attached(const std::string& name, const std::string& device, bool share, double timeout_s) {
    hoist_attach_options options;
    hoist_attach_options_init(&options);
    options.device = device.empty() ? nullptr : device.c_str();
    options.share = share ? 1 : 0;
    options.timeout_s = timeout_s;
    hoist_model* model = nullptr;
    hoist_loaded* loaded = nullptr;
    hoist_status status = HOIST_OK;
    {
      py::gil_scoped_release released;
      status = hoist_attach(name.c_str(), &options, &model, &loaded);
    }
    if (status != HOIST_OK) Raise(status);
    model_.reset(model);
    loaded_.reset(loaded);
  }

  // (name, dtype, shape, nbytes, address, device index) of every tensor, in the holder's order.
  std::vector<std::tuple<py::str, std::string, std::vector<uint64_t>, uint64_t, uintptr_t, int>>
  tensors() const {
    Check();
    std::vector<std::tuple<py::str, std::string, std::vector<uint64_t>, uint64_t, uintptr_t, int>>
        out;
    for (size_t i = 0; i < hoist_model_tensor_count(model_.get()); ++i) {
      hoist_tensor_info t{};
      if (hoist_model_tensor(model_.get(), i, &t) != HOIST_OK) Raise(HOIST_ERROR);
      out.emplace_back(NameToPython(t.name), t.dtype,
                       std::vector<uint64_t>(t.shape, t.shape + t.ndim), t.nbytes,
                       reinterpret_cast<uintptr_t>(hoist_loaded_tensor(loaded_.get(), i)),
                       hoist_loaded_tensor_device(loaded_.get(), i));
    }
    return out;
  }
  std::string report() const {
    Check();
    return hoist_loaded_report_json(loaded_.get());
  }
  std::string format() const {
    Check();
    return hoist_model_format(model_.get());
  }
  // Per tensor: (values, bytes) of its dtype's block; (0, 0) where hoist has no geometry.
  std::vector<std::pair<uint32_t, uint32_t>> blocks() const {
    Check();
    return BlocksOf(model_.get());
  }
  void close() {
    loaded_.reset();
    model_.reset();
  }

 private:
  void Check() const {
    if (!loaded_) throw py::value_error("the attached model was closed");
  }
  std::unique_ptr<hoist_model, ModelDeleter> model_;
  std::unique_ptr<hoist_loaded, LoadedDeleter> loaded_;
};

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "hoist's native core; use the hoist package, not this module";
  py::object errors = py::module_::import("hoist._errors");
  g_make_error = errors.attr("make_error").ptr();
  Py_INCREF(g_make_error);  // held for the life of the process
  py::class_<Model>(m, "Model")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def_static("from_bytes", &Model::FromBytes, py::arg("data"), py::arg("name"))
      .def_property_readonly("format", &Model::format)
      .def_property_readonly("metadata_json", &Model::metadata_json)
      .def("tensors", &Model::tensors)
      .def("blocks", &Model::blocks)
      .def("load_into", &Model::LoadInto, py::arg("destinations"), py::arg("device"),
           py::arg("progress"), py::arg("threads") = 0, py::arg("chunk_bytes") = 0,
           py::arg("staging_bytes") = 0, py::arg("stall_timeout_s") = 0.0,
           py::arg("checksum") = false, py::arg("direct_io") = false,
           py::arg("placement") = std::vector<uint32_t>{})
      .def("place", &Model::Place, py::arg("devices"), py::arg("shares"),
           py::arg("split_plan") = "")
      .def("split", &Model::Split, py::arg("devices"), py::arg("split"), py::arg("shares"),
           py::arg("split_plan") = "")
      .def("cut", &Model::Cut, py::arg("split"), py::arg("devices"), py::arg("shares"),
           py::arg("split_plan") = "")
      .def("load_parts", &Model::LoadParts, py::arg("parts"), py::arg("devices"),
           py::arg("progress"), py::arg("threads") = 0, py::arg("chunk_bytes") = 0,
           py::arg("staging_bytes") = 0, py::arg("stall_timeout_s") = 0.0,
           py::arg("direct_io") = false)
      .def("load_regions", &Model::LoadRegions, py::arg("regions"), py::arg("device"),
           py::arg("threads") = 0, py::arg("chunk_bytes") = 0, py::arg("staging_bytes") = 0,
           py::arg("stall_timeout_s") = 0.0, py::arg("direct_io") = false)
      .def("load_rank", &Model::LoadRank, py::arg("split"), py::arg("rank"), py::arg("world"),
           py::arg("device"), py::arg("shares"), py::arg("split_plan"), py::arg("start"),
           py::arg("poll"), py::arg("progress"), py::arg("names") = std::vector<py::str>{},
           py::arg("threads") = 0, py::arg("chunk_bytes") = 0, py::arg("staging_bytes") = 0,
           py::arg("stall_timeout_s") = 0.0, py::arg("direct_io") = false)
      .def("stream", &Model::StreamTensors, py::arg("names"), py::arg("device"),
           py::arg("threads") = 0, py::arg("chunk_bytes") = 0, py::arg("staging_bytes") = 0,
           py::arg("stall_timeout_s") = 0.0, py::arg("direct_io") = false)
      .def("reader", &Model::OpenReader, py::arg("indices"), py::arg("pinned") = -1,
           py::arg("ahead_bytes") = 0, py::arg("threads") = 0, py::arg("chunk_bytes") = 0,
           py::arg("staging_bytes") = 0, py::arg("stall_timeout_s") = 0.0,
           py::arg("direct_io") = false);
  py::class_<Reader>(m, "Reader")
      .def("take", &Reader::Take, py::arg("index"))
      .def("stats", &Reader::Stats)
      .def("close", &Reader::Close);
  py::class_<HostBuffer>(m, "HostBuffer", py::buffer_protocol())
      .def_buffer(&HostBuffer::Buffer)
      .def_property_readonly("nbytes", &HostBuffer::nbytes)
      .def_property_readonly("pinned", &HostBuffer::pinned);
  py::class_<Loaded>(m, "Loaded")
      .def("parts", &Loaded::parts)
      .def_property_readonly("report", &Loaded::report);
  py::class_<Attached>(m, "Attached")
      .def(py::init<const std::string&, const std::string&, bool, double>(), py::arg("name"),
           py::arg("device"), py::arg("share"), py::arg("timeout_s"))
      .def("tensors", &Attached::tensors)
      .def_property_readonly("report", &Attached::report)
      .def_property_readonly("format", &Attached::format)
      .def("blocks", &Attached::blocks)
      .def("close", &Attached::close);
  py::class_<Stream>(m, "Stream")
      .def("provide", &Stream::Provide, py::arg("destinations"))
      .def("next", &Stream::Next)
      .def("close", &Stream::Close)
      .def_property_readonly("report", &Stream::report);
  m.attr("version") = hoist_version();
  m.def(
      "split_places_parts",
      [](const std::string& split) {
        int places_parts = 0;
        const hoist_status status = hoist_split_places_parts(split.c_str(), &places_parts);
        if (status != HOIST_OK) Raise(status);
        return places_parts != 0;
      },
      "whether the split places parts of tensors (tensor, replicate) rather than whole ones");
  m.def(
      "on_host_memory_reuse",
      [](py::object settle) {
        static py::object* held = new py::object();  // the process's hook, never destroyed
        *held = std::move(settle);
        if (held->is_none()) {
          hoist_set_host_memory_reuse_hook(nullptr, nullptr);
          return;
        }
        hoist_set_host_memory_reuse_hook(
            [](void* user) {
              if (Py_IsInitialized() == 0) return;
              py::gil_scoped_acquire gil;
              try {
                (*static_cast<py::object*>(user))();
              } catch (py::error_already_set& e) {
                e.discard_as_unraisable("hoist's host memory reuse hook");
              }
            },
            held);
      },
      "settle() runs before pinned host memory freed by its tensors is handed out again");
  m.def(
      "is_remote", [](const std::string& name) { return hoist_name_is_remote(name.c_str()) != 0; },
      "whether hoist reads the model a name names from elsewhere than the local file system");
  m.def(
      "held_models",
      [] {
        const char* text = nullptr;
        {
          py::gil_scoped_release released;
          text = hoist_held_models_json();
        }
        if (text == nullptr) Raise(HOIST_ERROR);
        return std::string(text);
      },
      "JSON of what this user's holders (hoist serve) hold");
  m.def(
      "release_cached_memory", [] { hoist_release_cached_memory(); },
      "unpin and free the staging memory GPU loads keep for the next load");
}
