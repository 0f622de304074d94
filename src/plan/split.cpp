#include "plan/split.h"

#include <string>

namespace hoist {

const char* SplitName(Split split) {
  switch (split) {
    case Split::kLayer:
      return "layer";
    case Split::kTensor:
      return "tensor";
    case Split::kReplicate:
      return "replicate";
  }
  return "layer";
}

Result<Split> ParseSplit(std::string_view text, std::string_view option) {
  for (const Split split : {Split::kLayer, Split::kTensor, Split::kReplicate}) {
    if (text == SplitName(split)) return split;
  }
  std::string message(option);
  message.append(" '").append(text).append("' is not a split: layer, tensor or replicate");
  return Status::InvalidArgument(std::move(message));
}

}  // namespace hoist
