// hoist._native: the Python extension over hoist's C API (include/hoist/hoist.h). It only
// opens models and fills destinations that the Python side allocated (torch or numpy);
// python/hoist/ builds the user-facing API on it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "hoist/hoist.h"

namespace py = pybind11;

namespace {

// hoist._errors.make_error(message, status_name) → an instance of HoistError or a subclass.
PyObject* g_make_error = nullptr;

[[noreturn]] void Raise(hoist_status status) {
  py::object make_error = py::reinterpret_borrow<py::object>(g_make_error);
  py::object error =
      make_error(std::string(hoist_last_error()), std::string(hoist_status_name(status)));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(error.ptr())), error.ptr());
  throw py::error_already_set();
}

struct ModelDeleter {
  void operator()(hoist_model* m) const { hoist_model_close(m); }
};
struct LoadedDeleter {
  void operator()(hoist_loaded* l) const { hoist_loaded_free(l); }
};

// One tensor: (name, dtype, shape, nbytes, file index, byte offset).
using TensorTuple =
    std::tuple<std::string, std::string, std::vector<uint64_t>, uint64_t, uint32_t, uint64_t>;

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

class Model {
 public:
  explicit Model(const std::string& path) {
    hoist_model* raw = nullptr;
    hoist_status status = HOIST_OK;
    {
      py::gil_scoped_release release;
      status = hoist_model_open(path.c_str(), &raw);
    }
    if (status != HOIST_OK) Raise(status);
    model_.reset(raw);
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
      out.emplace_back(t.name, t.dtype, std::vector<uint64_t>(t.shape, t.shape + t.ndim), t.nbytes,
                       t.file, t.offset);
    }
    return out;
  }

  // Copies the named tensors into the given addresses (each with room for the tensor's
  // nbytes, on `device`) and returns the load report (JSON). The caller keeps the memory
  // alive and owns it; hoist allocates nothing on the device.
  std::string LoadInto(const std::vector<std::pair<std::string, uintptr_t>>& destinations,
                       const std::string& device, const py::object& progress, int threads,
                       uint64_t chunk_bytes, uint64_t staging_bytes, double stall_timeout_s,
                       bool checksum, bool direct_io) {
    LoadCall call;
    call.progress = progress;
    std::vector<const char*> names;
    names.reserve(destinations.size());
    for (const auto& [name, address] : destinations) {
      size_t index = 0;
      const hoist_status status = hoist_model_find(model_.get(), name.c_str(), &index);
      if (status != HOIST_OK) Raise(status);
      call.destinations[index] = address;
      names.push_back(name.c_str());
    }
    hoist_load_options options;
    hoist_load_options_init(&options);
    options.device = device.c_str();
    options.threads = threads;
    options.chunk_bytes = chunk_bytes;
    options.staging_bytes = staging_bytes;
    options.stall_timeout_s = stall_timeout_s;
    options.checksum = checksum ? 1 : 0;
    options.direct_io = direct_io ? 1 : 0;
    options.names = names.data();
    options.name_count = names.size();
    options.progress = Progress;
    options.progress_user = &call;
    hoist_loaded* raw = nullptr;
    hoist_status status = HOIST_OK;
    {
      py::gil_scoped_release release;
      status = hoist_load_into(model_.get(), &options, Destination, &call, &raw);
    }
    std::unique_ptr<hoist_loaded, LoadedDeleter> loaded(raw);
    if (call.python_error) {
      call.python_error->restore();
      throw py::error_already_set();
    }
    if (status != HOIST_OK) Raise(status);
    return hoist_loaded_report_json(loaded.get());
  }

 private:
  std::unique_ptr<hoist_model, ModelDeleter> model_;
};

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "hoist's native core; use the hoist package, not this module";
  py::object errors = py::module_::import("hoist._errors");
  g_make_error = errors.attr("make_error").ptr();
  Py_INCREF(g_make_error);  // held for the life of the process
  py::class_<Model>(m, "Model")
      .def(py::init<const std::string&>(), py::arg("path"))
      .def_property_readonly("format", &Model::format)
      .def_property_readonly("metadata_json", &Model::metadata_json)
      .def("tensors", &Model::tensors)
      .def("load_into", &Model::LoadInto, py::arg("destinations"), py::arg("device"),
           py::arg("progress"), py::arg("threads") = 0, py::arg("chunk_bytes") = 0,
           py::arg("staging_bytes") = 0, py::arg("stall_timeout_s") = 0.0,
           py::arg("checksum") = false, py::arg("direct_io") = false);
  m.def(
      "release_cached_memory", [] { hoist_release_cached_memory(); },
      "unpin and free the staging memory GPU loads keep for the next load");
}
