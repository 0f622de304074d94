#include "format/directory_json.h"

namespace hoist {

std::string DumpJson(const nlohmann::ordered_json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

nlohmann::ordered_json DirectoryToJson(const TensorDirectory& dir) {
  nlohmann::ordered_json out;
  out["format"] = dir.format;
  out["version"] = dir.version;
  out["files"] = nlohmann::ordered_json::array();
  for (const FileEntry& f : dir.files) out["files"].push_back({{"path", f.path}, {"size", f.size}});
  out["metadata"] = nlohmann::ordered_json::object();
  for (const MetadataEntry& m : dir.metadata) {
    nlohmann::ordered_json entry{{"type", m.type}};
    if (!m.element_type.empty()) entry["element_type"] = m.element_type;
    entry["count"] = m.count;
    entry["value"] = m.value;
    out["metadata"][m.key] = std::move(entry);
  }
  out["tensors"] = nlohmann::ordered_json::array();
  uint64_t stored = 0;  // a packed model's: what its file holds for the tensors
  for (const TensorEntry& t : dir.tensors) {
    out["tensors"].push_back({{"name", t.name},
                              {"dtype", t.dtype},
                              {"shape", t.shape},
                              {"file", t.file},
                              {"offset", t.offset},
                              {"nbytes", t.nbytes}});
    if (t.stored_bytes != 0) out["tensors"].back()["stored_bytes"] = t.stored_bytes;
    stored += t.stored_bytes;
  }
  out["total_bytes"] = dir.total_bytes();
  if (stored != 0) out["stored_bytes"] = stored;
  if (!dir.warnings.empty()) out["warnings"] = dir.warnings;
  return out;
}

}  // namespace hoist
