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

inline std::string Version() { return hoist_version(); }

// Tensors on a device. Keeps the model it was loaded from alive (verify reads its files), so a
// temporary Model is fine: `auto loaded = hoist::Model(path).load(options);`.
class Loaded {
 public:
  explicit Loaded(hoist_loaded* loaded, std::shared_ptr<hoist_model> model = nullptr)
      : model_(std::move(model)), loaded_(loaded, hoist_loaded_free) {}
  void* tensor(size_t index) const { return hoist_loaded_tensor(loaded_.get(), index); }
  // The index of the options' device that holds tensor (or part) `index`; -1: not loaded.
  int device(size_t index) const { return hoist_loaded_tensor_device(loaded_.get(), index); }
  // What part `index` is and where it was loaded (a whole tensor for a load of whole tensors).
  hoist_part part(size_t index) const {
    hoist_part out{};
    Check(hoist_loaded_part(loaded_.get(), index, &out));
    return out;
  }
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

// A load's plan (hoist_plan): its parts, each whole tensor one part; set where parts land,
// then Model::load(options, plan).
class Plan {
 public:
  explicit Plan(hoist_plan* plan) : plan_(plan, hoist_plan_free) {}
  size_t size() const { return hoist_plan_part_count(plan_.get()); }
  hoist_part part(size_t index) const {
    hoist_part out{};
    Check(hoist_plan_part(plan_.get(), index, &out));
    return out;
  }
  std::vector<hoist_part> parts() const {
    std::vector<hoist_part> out;
    for (size_t i = 0; i < size(); ++i) out.push_back(part(i));
    return out;
  }
  void set_destination(size_t index, void* destination) {
    Check(hoist_plan_set_destination(plan_.get(), index, destination));
  }
  hoist_plan* get() const { return plan_.get(); }

 private:
  std::unique_ptr<hoist_plan, void (*)(hoist_plan*)> plan_;
};

class Model {
 public:
  explicit Model(const std::string& path) {
    hoist_model* m = nullptr;
    Check(hoist_model_open(path.c_str(), &m));
    model_.reset(m, hoist_model_close);
  }
  // A model over the bytes of one safetensors or GGUF file in memory, read in place: they must
  // stay unchanged and allocated while the model or anything loaded from it is in use.
  static Model FromBytes(const void* bytes, uint64_t size, const std::string& name = "<memory>") {
    hoist_model_source source;
    hoist_model_source_init(&source);
    source.kind = HOIST_SOURCE_MEMORY;
    source.path = name.c_str();
    source.bytes = bytes;
    source.size = size;
    hoist_model* m = nullptr;
    Check(hoist_model_open_ex(&source, &m));
    return Model(std::shared_ptr<hoist_model>(m, hoist_model_close));
  }
  std::string format() const { return hoist_model_format(model_.get()); }
  std::string metadata_json() const { return hoist_model_metadata_json(model_.get()); }
  size_t tensor_count() const { return hoist_model_tensor_count(model_.get()); }
  hoist_tensor_info tensor(size_t index) const {
    hoist_tensor_info info{};
    Check(hoist_model_tensor(model_.get(), index, &info));
    return info;
  }
  // Tensor index's dtype as blocks: {values per block, bytes per block}.
  std::pair<uint32_t, uint32_t> block(size_t index) const {
    uint32_t elements = 0;
    uint32_t bytes = 0;
    Check(hoist_model_tensor_block(model_.get(), index, &elements, &bytes));
    return {elements, bytes};
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
  // What load(options) would do (hoist_model_plan).
  Plan plan(const hoist_load_options& options) {
    hoist_plan* out = nullptr;
    Check(hoist_model_plan(model_.get(), &options, &out));
    return Plan(out);
  }
  // The parts the options' split gives `devices` devices, opening none (hoist_model_plan_cut).
  Plan plan_cut(const hoist_load_options& options, uint32_t devices) const {
    hoist_plan* out = nullptr;
    Check(hoist_model_plan_cut(model_.get(), &options, devices, &out));
    return Plan(out);
  }
  // A plan of the caller's own parts (hoist_plan_from_parts).
  Plan plan_from_parts(const std::vector<hoist_part>& parts) const {
    hoist_plan* out = nullptr;
    Check(hoist_plan_from_parts(model_.get(), parts.data(), parts.size(), &out));
    return Plan(out);
  }
  Loaded load(const hoist_load_options& options, const Plan& plan) {
    hoist_loaded* out = nullptr;
    Check(hoist_load_plan(model_.get(), &options, plan.get(), &out));
    return Loaded(out, model_);
  }
  // The entries before plans, over them, kept for one release.
  [[deprecated("use plan")]] std::vector<uint32_t> place(const hoist_load_options& options) {
    std::vector<uint32_t> device_of;
    for (const hoist_part& p : plan(options).parts()) device_of.push_back(p.device);
    return device_of;
  }
  [[deprecated("use plan")]] std::vector<hoist_part> split(const hoist_load_options& options,
                                                           const std::string& split) {
    hoist_load_options with_split = options;
    with_split.split = split.c_str();
    return plan(with_split).parts();
  }
  [[deprecated("use plan_cut")]] std::vector<hoist_part> cut(const hoist_load_options& options,
                                                             const std::string& split,
                                                             uint32_t devices) const {
    hoist_load_options with_split = options;
    with_split.split = split.c_str();
    return plan_cut(with_split, devices).parts();
  }
  [[deprecated("use plan_from_parts")]] Loaded load_regions(
      const hoist_load_options& options, const std::vector<hoist_region>& regions) {
    std::vector<hoist_part> parts;
    for (const hoist_region& r : regions) {
      parts.push_back({r.tensor, r.row_bytes, r.row_begin, r.row_end, r.column_begin, r.column_end,
                       0, r.destination});
    }
    return load(options, plan_from_parts(parts));
  }
  [[deprecated("use plan_from_parts")]] Loaded load_parts(const hoist_load_options& options,
                                                          const std::vector<hoist_part>& parts) {
    return load(options, plan_from_parts(parts));
  }
  // Rank mode (hoist_load_rank): all_gather(block, chunk_bytes) is the job's exchange and
  // returns 0, or nonzero to fail the load.
  Loaded load_rank(const hoist_load_options& options, const std::string& split, uint32_t rank,
                   uint32_t world, const std::function<int(void*, uint64_t)>& all_gather) {
    auto trampoline = [](void* user, void* block, uint64_t chunk_bytes) -> int {
      return (*static_cast<const std::function<int(void*, uint64_t)>*>(user))(block, chunk_bytes);
    };
    hoist_loaded* out = nullptr;
    Check(hoist_load_rank(model_.get(), &options, split.c_str(), rank, world, trampoline,
                          const_cast<std::function<int(void*, uint64_t)>*>(&all_gather), &out));
    return Loaded(out, model_);
  }
  // Rank mode with an exchange hoist waits for under the stall timeout (hoist_load_rank_ex):
  // start(block, chunk_bytes) begins it and returns 0 (nonzero fails the load); poll() answers 1
  // once it has finished, 0 while it runs, negative if it failed.
  Loaded load_rank(const hoist_load_options& options, const std::string& split, uint32_t rank,
                   uint32_t world, const std::function<int(void*, uint64_t)>& start,
                   const std::function<int()>& poll) {
    struct Exchange {
      const std::function<int(void*, uint64_t)>* start;
      const std::function<int()>* poll;
    } exchange{&start, &poll};
    hoist_all_gather gather;
    gather.start = [](void* user, void* block, uint64_t chunk_bytes) -> int {
      return (*static_cast<Exchange*>(user)->start)(block, chunk_bytes);
    };
    gather.poll = [](void* user) -> int { return (*static_cast<Exchange*>(user)->poll)(); };
    gather.user = &exchange;
    hoist_loaded* out = nullptr;
    Check(hoist_load_rank_ex(model_.get(), &options, split.c_str(), rank, world, &gather, &out));
    return Loaded(out, model_);
  }
  hoist_model* get() const { return model_.get(); }

 private:
  explicit Model(std::shared_ptr<hoist_model> model) : model_(std::move(model)) {}

  std::shared_ptr<hoist_model> model_;  // shared with every Loaded made from it
};

}  // namespace hoist
