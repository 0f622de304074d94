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
  // For a load of parts: what part `index` is and where it was loaded.
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
  // Where a load with these options would put each tensor (an index into their devices).
  std::vector<uint32_t> place(const hoist_load_options& options) {
    std::vector<uint32_t> device_of(tensor_count());
    Check(hoist_model_place(model_.get(), &options, device_of.data(), device_of.size()));
    return device_of;
  }
  // The parts `split` gives the options' devices (hoist_model_split).
  std::vector<hoist_part> split(const hoist_load_options& options, const std::string& split) {
    return Parts([&](hoist_part* parts, size_t capacity, size_t* count) {
      return hoist_model_split(model_.get(), &options, split.c_str(), parts, capacity, count);
    });
  }
  // The parts `split` gives `devices` devices, opening none (hoist_model_cut_ex).
  std::vector<hoist_part> cut(const hoist_load_options& options, const std::string& split,
                              uint32_t devices) const {
    return Parts([&](hoist_part* parts, size_t capacity, size_t* count) {
      return hoist_model_cut_ex(model_.get(), &options, split.c_str(), devices, parts, capacity,
                                count);
    });
  }
  Loaded load_regions(const hoist_load_options& options, const std::vector<hoist_region>& regions) {
    hoist_loaded* out = nullptr;
    Check(hoist_load_regions(model_.get(), &options, regions.data(), regions.size(), &out));
    return Loaded(out, model_);
  }
  Loaded load_parts(const hoist_load_options& options, const std::vector<hoist_part>& parts) {
    hoist_loaded* out = nullptr;
    Check(hoist_load_parts(model_.get(), &options, parts.data(), parts.size(), &out));
    return Loaded(out, model_);
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

  // Asks `list` (parts, capacity, count) for the count, then the parts.
  template <typename List>
  static std::vector<hoist_part> Parts(List&& list) {
    size_t count = 0;
    Check(list(nullptr, 0, &count));
    std::vector<hoist_part> parts(count);
    Check(list(parts.data(), count, &count));
    parts.resize(count);
    return parts;
  }

  std::shared_ptr<hoist_model> model_;  // shared with every Loaded made from it
};

}  // namespace hoist
