// Placing a model across devices by cutting its weights (tensor parallelism, as vLLM and
// llama.cpp's --split-mode row do) or by copying every weight to every device. Each tensor is
// cut by the first of the user's rules whose pattern matches its name, else by the built-in
// rule for llama-style names: attention q/k/v and MLP gate/up by output rows, attention output
// and MLP down by input columns, embeddings and the output head by vocabulary rows, their
// biases with them (a bias of a column-cut weight is whole on every device), and everything
// else (norms, routers, fused or unknown weights) whole on every device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/tensor_directory.h"
#include "plan/load_plan.h"

namespace hoist {

enum class Cut : uint8_t {
  kRows,       // the output dimension: each device a range of rows, one file range each
  kColumns,    // the input dimension: each device a range of every row's columns
  kReplicate,  // the whole tensor on every device
  kOneDevice,  // the whole tensor on one device (a rule's `device`)
};

// "rows", "columns", "replicate", "device".
const char* CutName(Cut cut);

struct CutRule {
  std::string pattern;  // glob over the whole name: '*' any run, '?' one character
  Cut cut = Cut::kReplicate;
  uint32_t device = 0;  // for kOneDevice: an index into the load's devices
};

// The built-in rule for a tensor name.
Cut DefaultCut(const std::string& name);

// A plan file: one JSON object whose keys are patterns and whose values are "rows", "columns",
// "replicate" or a device index (0-based, in --device order), tried in file order. A pattern
// given twice, more than kMaxCutRules patterns, or a stop signal while it is read is an error
// (kCancelled for the signal); errors name `path` and the entry. Linear in the text's length.
inline constexpr size_t kMaxCutRules = 65536;
Result<std::vector<CutRule>> ParseCutRules(const std::string& json_text, const std::string& path,
                                           uint32_t devices);

// How each tensor of dir is cut: the first matching rule's cut, else DefaultCut's. A device
// index beyond `devices` is kInvalidArgument.
std::vector<CutRule> ChooseCuts(const TensorDirectory& dir, const std::vector<CutRule>& rules);

// The regions that place every tensor of dir by its cut among shares.size() devices, each
// device's range of rows or columns in proportion to its share (columns in whole elements or
// quantization blocks). A tensor with fewer rows (or columns) than devices, or whose rows do
// not divide its bytes, is whole on every device. Regions carry no destination.
Result<std::vector<TensorRegion>> CutTensors(const TensorDirectory& dir,
                                             const std::vector<CutRule>& cuts,
                                             const std::vector<double>& shares);

}  // namespace hoist
