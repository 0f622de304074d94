// C++ API: RAII over the C API (same core, same stable ABI). Errors throw hoist::Error,
// which carries the status and hoist's message.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "hoist/hoist.h"

namespace hoist {

class Error : public std::runtime_error {
 public:
  Error(hoist_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  hoist_status status() const { return status_; }

 private:
  hoist_status status_;
};

inline void Check(hoist_status status) {
  if (status != HOIST_OK) throw Error(status, hoist_last_error());
}

// Tensors on a device. Keeps the model it was loaded from alive (verify reads its files), so a
// temporary Model is fine: `auto loaded = hoist::Model(path).load(options);`.
class Loaded {
 public:
  explicit Loaded(hoist_loaded* loaded, std::shared_ptr<hoist_model> model = nullptr)
      : model_(std::move(model)), loaded_(loaded, hoist_loaded_free) {}
  void* tensor(size_t index) const { return hoist_loaded_tensor(loaded_.get(), index); }
  uint64_t checksum(size_t index) const {
    uint64_t value = 0;
    Check(hoist_loaded_checksum(loaded_.get(), index, &value));
    return value;
  }
  // Number of mismatching tensors (0 when all match).
  size_t verify() {
    size_t mismatches = 0;
    const hoist_status s = hoist_loaded_verify(loaded_.get(), &mismatches);
    if (s != HOIST_OK && s != HOIST_VERIFY_MISMATCH) Check(s);
    return mismatches;
  }
  std::string report_json() const { return hoist_loaded_report_json(loaded_.get()); }
  hoist_loaded* get() const { return loaded_.get(); }

 private:
  std::shared_ptr<hoist_model> model_;  // declared first: freed after loaded_
  std::unique_ptr<hoist_loaded, void (*)(hoist_loaded*)> loaded_;
};

class Model {
 public:
  explicit Model(const std::string& path) {
    hoist_model* m = nullptr;
    Check(hoist_model_open(path.c_str(), &m));
    model_.reset(m, hoist_model_close);
  }
  std::string format() const { return hoist_model_format(model_.get()); }
  std::string metadata_json() const { return hoist_model_metadata_json(model_.get()); }
  size_t tensor_count() const { return hoist_model_tensor_count(model_.get()); }
  hoist_tensor_info tensor(size_t index) const {
    hoist_tensor_info info{};
    Check(hoist_model_tensor(model_.get(), index, &info));
    return info;
  }
  size_t find(const std::string& name) const {
    size_t index = 0;
    Check(hoist_model_find(model_.get(), name.c_str(), &index));
    return index;
  }
  Loaded load(const hoist_load_options& options) {
    hoist_loaded* out = nullptr;
    Check(hoist_load(model_.get(), &options, &out));
    return Loaded(out, model_);
  }
  // destination(index, info) returns the device pointer for each tensor.
  Loaded load_into(const hoist_load_options& options,
                   const std::function<void*(size_t, const hoist_tensor_info&)>& destination) {
    auto trampoline = [](void* user, size_t index, const hoist_tensor_info* info) -> void* {
      return (*static_cast<const std::function<void*(size_t, const hoist_tensor_info&)>*>(user))(
          index, *info);
    };
    hoist_loaded* out = nullptr;
    Check(hoist_load_into(
        model_.get(), &options, trampoline,
        const_cast<std::function<void*(size_t, const hoist_tensor_info&)>*>(&destination), &out));
    return Loaded(out, model_);
  }
  hoist_model* get() const { return model_.get(); }

 private:
  std::shared_ptr<hoist_model> model_;  // shared with every Loaded made from it
};

}  // namespace hoist
