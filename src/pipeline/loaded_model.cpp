// A loaded model's state: where each tensor lives, and the device blocks it owns.
#include <utility>

#include "pipeline/loader.h"

namespace hoist {

LoadedModel::LoadedModel(std::vector<std::shared_ptr<CheckedDevice>> devices, size_t tensors)
    : devices_(std::move(devices)),
      pointers_(tensors, nullptr),
      loaded_(tensors, false),
      blocks_(devices_.size(), nullptr) {}

LoadedModel::~LoadedModel() {
  for (size_t d = 0; d < blocks_.size() && d < devices_.size(); ++d) {
    if (blocks_[d] != nullptr) (void)devices_[d]->FreeDevice(blocks_[d]);
  }
}

void LoadedModel::SetLoaded(size_t i, void* p, uint32_t device) {
  pointers_[i] = p;
  loaded_[i] = true;
  if (device != 0 && placement_.empty()) placement_.assign(pointers_.size(), 0);
  if (!placement_.empty()) placement_[i] = device;
}

void LoadedModel::SetPlacement(std::vector<uint32_t> placement) {
  placement_ = std::move(placement);
}

void LoadedModel::SetStrides(std::vector<RowStride> strides) { strides_ = std::move(strides); }

void LoadedModel::SetChecksums(std::vector<uint64_t> checksums) {
  checksums_ = std::move(checksums);
}

void LoadedModel::AdoptBlock(size_t d, void* block) { blocks_[d] = block; }

void LoadedModel::LeaveAllocated(size_t d) {
  if (d < blocks_.size()) blocks_[d] = nullptr;
}

}  // namespace hoist
