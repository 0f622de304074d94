// "Did you mean ...?": the name nearest to a mistyped one (commands, options, devices).
#pragma once

#include <string>
#include <vector>

namespace hoist {

// The candidate nearest to `typed` (Levenshtein distance, insertions, deletions and
// substitutions; a swap of two neighbours counts once), or empty when even the nearest is
// further than a third of the longer word (at least 2).
std::string NearestName(const std::string& typed, const std::vector<std::string>& candidates);

}  // namespace hoist
