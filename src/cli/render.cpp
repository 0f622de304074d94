#include "cli/render.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "base/units.h"
#include "format/directory_json.h"

namespace hoist::cli {
namespace {

std::string ShapeText(const std::vector<uint64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string ValueText(const MetadataEntry& m) {
  constexpr size_t kShownItems = 4;
  constexpr size_t kShownChars = 80;
  if (m.type == "ARRAY") {
    std::string s = "[" + m.element_type + " x " + std::to_string(m.count) + "] [";
    for (size_t i = 0; i < m.value.size() && i < kShownItems; ++i) {
      if (i > 0) s += ", ";
      s += DumpJson(m.value[i]);
    }
    if (m.value.size() > kShownItems) s += ", ...";
    return s + "]";
  }
  std::string s = m.value.is_string() ? m.value.get<std::string>() : DumpJson(m.value);
  if (s.size() > kShownChars) s = s.substr(0, kShownChars) + "...";
  for (char& c : s) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  return s;
}

// One row per tensor; a packed model's also show what the file holds for them and its share.
void WriteTensorTable(const TensorDirectory& dir, std::ostringstream& os) {
  if (dir.tensors.empty()) return;
  size_t name_width = 4;
  for (const TensorEntry& t : dir.tensors) name_width = std::max(name_width, t.name.size());
  const bool packed = std::any_of(dir.tensors.begin(), dir.tensors.end(),
                                  [](const TensorEntry& t) { return t.stored_bytes != 0; });
  char line[512];
  std::snprintf(line, sizeof line, "  %-*s  %-8s  %-24s  %4s  %14s  %14s%s\n",
                static_cast<int>(name_width), "name", "dtype", "shape", "file", "offset", "bytes",
                packed ? "          stored   ratio" : "");
  os << line;
  for (const TensorEntry& t : dir.tensors) {
    os << "  " << t.name << std::string(name_width - t.name.size(), ' ');
    std::snprintf(line, sizeof line, "  %-8s  %-24s  %4u  %14llu  %14llu", t.dtype.c_str(),
                  ShapeText(t.shape).c_str(), t.file, static_cast<unsigned long long>(t.offset),
                  static_cast<unsigned long long>(t.nbytes));
    os << line;
    if (packed) {
      std::snprintf(
          line, sizeof line, "  %14llu  %5.1f%%", static_cast<unsigned long long>(t.stored_bytes),
          t.nbytes > 0 ? 100.0 * static_cast<double>(t.stored_bytes) / static_cast<double>(t.nbytes)
                       : 100.0);
      os << line;
    }
    os << "\n";
  }
}

}  // namespace

std::string DirectoryToText(const TensorDirectory& dir) {
  std::ostringstream os;
  char line_buffer[256];
  os << "format    " << dir.format;
  if (dir.version != 0) os << " v" << dir.version;
  os << "\nfiles     " << dir.files.size() << "\n";
  for (size_t i = 0; i < dir.files.size(); ++i) {
    const FileEntry& f = dir.files[i];
    os << "  [" << i << "] " << f.path << " (" << FormatBytes(f.size);
    // A packed file reads as the original's bytes; on disk it is what it stores.
    if (f.identity.known && f.identity.size != f.size) {
      os << " as read, " << FormatBytes(f.identity.size) << " on disk";
    }
    os << ")\n";
  }
  os << "metadata  " << dir.metadata.size() << " keys\n";
  for (const MetadataEntry& m : dir.metadata) {
    os << "  " << m.key << " (" << m.type << ") = " << ValueText(m) << "\n";
  }
  os << "tensors   " << dir.tensors.size() << "\n";
  WriteTensorTable(dir, os);
  std::map<std::string, std::pair<uint64_t, uint64_t>> by_dtype;
  for (const TensorEntry& t : dir.tensors) {
    auto& [count, bytes] = by_dtype[t.dtype];
    ++count;
    bytes += t.nbytes;
  }
  if (!by_dtype.empty()) os << "by dtype\n";
  for (const auto& [dtype, cb] : by_dtype) {
    os << "  " << dtype << ": " << cb.first << " tensors, " << FormatBytes(cb.second) << "\n";
  }
  os << "total     " << FormatBytes(dir.total_bytes()) << " (" << dir.total_bytes() << " bytes)\n";
  uint64_t stored = 0;
  for (const TensorEntry& t : dir.tensors) stored += t.stored_bytes;
  if (stored > 0 && dir.total_bytes() > 0) {
    std::snprintf(line_buffer, sizeof line_buffer, "stored    %s (%.1f%% of the tensors' bytes)\n",
                  FormatBytes(stored).c_str(),
                  100.0 * static_cast<double>(stored) / static_cast<double>(dir.total_bytes()));
    os << line_buffer;
  }
  for (const std::string& w : dir.warnings) os << "warning: " << w << "\n";
  return os.str();
}

}  // namespace hoist::cli
