// How a model is placed across several devices: the one spelling of a split that every front
// end parses (--split, hoist_load_options.split, Python's split=).
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"

namespace hoist {

enum class Split : uint8_t {
  kLayer,      // whole tensors: consecutive layers per device (llama.cpp's --split-mode layer)
  kTensor,     // parts: each weight cut among the devices (tensor parallel)
  kReplicate,  // parts: every tensor whole on every device
};

// "layer", "tensor", "replicate".
const char* SplitName(Split split);

// The split spelled `text`; anything else is kInvalidArgument naming `option` and the choices.
Result<Split> ParseSplit(std::string_view text, std::string_view option);

// Whether the split places parts of tensors (a load of parts) rather than whole tensors.
inline bool SplitMakesParts(Split split) { return split != Split::kLayer; }

}  // namespace hoist
