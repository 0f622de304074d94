// The names of a GGUF split set, as llama.cpp's gguf-split writes them:
// PREFIX-NNNNN-of-MMMMM.gguf, numbered from 1.
#ifndef HOIST_FORMAT_GGUF_SPLIT_NAME_H_
#define HOIST_FORMAT_GGUF_SPLIT_NAME_H_

#include <optional>
#include <string>
#include <string_view>

namespace hoist {

struct GgufSplitName {
  std::string prefix;  // everything before "-NNNNN-of-MMMMM.gguf"
  int number = 0;
  int count = 0;
};

// The parts of a split file's name, or nullopt for any other name. The numbers are as written:
// whether they make sense (1 <= number <= count) is the caller's rule.
std::optional<GgufSplitName> ParseGgufSplitName(std::string_view path);

// PREFIX-NNNNN-of-MMMMM.gguf.
std::string GgufSplitPath(std::string_view prefix, int number, int count);

}  // namespace hoist

#endif  // HOIST_FORMAT_GGUF_SPLIT_NAME_H_
