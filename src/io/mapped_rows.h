// Copying rows out of a read-only file mapping without the risk a mapping brings: a page that
// can no longer be read (the file shrank under the mapping, or the disk failed while the page
// was faulted in) raises SIGBUS, which kills a process that does not catch it. POSIX only
// (mapped_rows_posix.cpp); the posix File uses it to gather column slices out of the page cache.
#pragma once

#include <cstdint>

namespace hoist {

// Copies `width` bytes of each of `rows` rows, `pitch` bytes apart from src, packed into dst.
// src and its rows lie inside [mapping, mapping + mapping_bytes), a mapping of a file. Returns
// false, with dst partly written, when a page of the mapping could not be read (SIGBUS) or 256
// copies are under way already; a fault anywhere else is left to the handler that was there
// before (a crash stays a crash).
// Thread safe. The first call installs a SIGBUS handler for the process that passes every
// signal it does not own to the handler installed before it.
bool CopyRowsFromMapping(const unsigned char* src, uint64_t width, uint64_t pitch, uint64_t rows,
                         unsigned char* dst, const void* mapping, uint64_t mapping_bytes);

}  // namespace hoist
