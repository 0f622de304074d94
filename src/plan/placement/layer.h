// Placing a model across devices by layers, as llama.cpp's --split-mode layer does: consecutive
// layers on each device in proportion to its weight, the input embeddings with the first
// layers and everything else outside the layers (the output head, the final norm) with the last.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "format/tensor_directory.h"
#include "plan/load_plan.h"

namespace hoist {

// The layer a tensor name belongs to: N in "blk.N." (GGUF), "layers.N.", "h.N.", "layer.N." or
// "blocks.N." (safetensors checkpoints); -1 when it names none.
int LayerIndex(const std::string& name);

// weights: one positive share per device (free memory, or --tensor-split 3,1). Each device's
// bytes are as close to its share of the model's as whole layers allow; a device may get none
// when there are fewer layers than devices. kInvalidArgument for no devices or a weight that is
// not a positive finite number.
Result<Placement> SplitByLayer(const TensorDirectory& dir, const std::vector<double>& weights);

}  // namespace hoist
