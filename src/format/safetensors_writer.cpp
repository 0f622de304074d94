#include <algorithm>
#include <string>
#include <vector>

#include "base/units.h"
#include "format/safetensors.h"
#include "format/writer_common.h"

namespace hoist {

Result<TensorDirectory> WriteSafetensors(const std::string& path,
                                         const std::map<std::string, std::string>& metadata,
                                         const std::vector<SafetensorsTensorSpec>& tensors,
                                         const TensorFill& fill) {
  TensorDirectory dir;
  dir.format = "safetensors";
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    header["__metadata__"] = metadata;
    for (const auto& [k, v] : metadata) dir.metadata.push_back({k, "STRING", "", 1, v});
  }
  uint64_t offset = 0;
  for (const SafetensorsTensorSpec& spec : tensors) {
    HOIST_ASSIGN_OR_RETURN(uint64_t nbytes, SafetensorsTensorBytes(spec.dtype, spec.shape));
    header[spec.name] = {
        {"dtype", spec.dtype}, {"shape", spec.shape}, {"data_offsets", {offset, offset + nbytes}}};
    dir.tensors.push_back({spec.name, spec.dtype, spec.shape, 0, offset, nbytes});
    offset += nbytes;
  }
  std::string text = header.dump();
  // Pad with spaces so the data starts 8-byte aligned, as the official writer does.
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  const uint64_t data_start = 8 + text.size();
  for (TensorEntry& t : dir.tensors) t.offset += data_start;
  const uint64_t file_size = data_start + offset;

  const uint64_t length = text.size();
  std::string prefix(reinterpret_cast<const char*>(&length), 8);
  prefix += text;
  HOIST_RETURN_IF_ERROR(WriteModelFile(path, prefix, file_size, dir, fill));
  return dir;
}

}  // namespace hoist
