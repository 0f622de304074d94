#include "pack/exponent_code.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <numeric>
#include <thread>

#include "base/checksum.h"
#include "base/threads.h"

namespace hoist {
namespace {

// Value i of width W (little-endian hosts only, as the loader). W is a template argument so
// that every copy is a load of a known size, not a call.
template <int W>
uint64_t ValueAt(const uint8_t* data, uint64_t i) {
  uint64_t v = 0;
  std::memcpy(&v, data + i * W, W);
  return v;
}

// Code lengths of at most kMaxCodeBits for `counts` (Huffman's, then limited as JPEG's Annex
// K.3 limits them: a longest pair moves up, a shorter code moves down, until none is too long).
std::array<uint8_t, 256> CodeLengths(const std::array<uint64_t, 256>& counts) {
  std::array<uint8_t, 256> lengths{};
  std::vector<int> present;
  for (int s = 0; s < 256; ++s) {
    if (counts[s] > 0) present.push_back(s);
  }
  if (present.empty()) return lengths;
  if (present.size() == 1) {
    lengths[present[0]] = 1;
    return lengths;
  }
  // Huffman over the present symbols: nodes 0..n-1 leaves, then internal ones.
  const size_t n = present.size();
  std::vector<uint64_t> weight(2 * n);
  std::vector<int> parent(2 * n, -1);
  std::vector<int> order(n);
  for (size_t i = 0; i < n; ++i) weight[i] = counts[present[i]];
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) { return weight[a] < weight[b]; });
  // Two queues (sorted leaves, internal nodes in creation order) give the two lightest.
  size_t leaf = 0;
  size_t inner = n;
  size_t next = n;
  auto take = [&]() {
    if (leaf < n && (inner >= next || weight[order[leaf]] <= weight[inner])) return order[leaf++];
    return static_cast<int>(inner++);
  };
  while (next < 2 * n - 1) {
    const int a = take();
    const int b = take();
    weight[next] = weight[a] + weight[b];
    parent[a] = parent[b] = static_cast<int>(next);
    ++next;
  }
  std::vector<int> depth(2 * n - 1, 0);
  for (int i = static_cast<int>(2 * n - 3); i >= 0; --i) depth[i] = depth[parent[i]] + 1;
  std::array<int, 64> per_length{};
  for (size_t i = 0; i < n; ++i) ++per_length[std::min(depth[i], 63)];
  for (int i = 63; i > kMaxCodeBits; --i) {
    while (per_length[i] > 0) {
      int j = i - 2;
      while (per_length[j] == 0) --j;
      per_length[i] -= 2;
      per_length[i - 1] += 1;
      per_length[j + 1] += 2;
      per_length[j] -= 1;
    }
  }
  // The shortest codes to the most frequent symbols.
  std::vector<int> by_count(present);
  std::stable_sort(by_count.begin(), by_count.end(),
                   [&](int a, int b) { return counts[a] > counts[b]; });
  size_t at = 0;
  for (int length = 1; length <= kMaxCodeBits; ++length) {
    for (int k = 0; k < per_length[length]; ++k)
      lengths[by_count[at++]] = static_cast<uint8_t>(length);
  }
  return lengths;
}

// Canonical codes for the lengths, bit-reversed so that a decoder reads them least significant
// bit first. 0 for absent symbols.
std::array<uint16_t, 256> Codes(const std::array<uint8_t, 256>& lengths) {
  std::array<uint16_t, 256> codes{};
  uint32_t code = 0;
  for (int length = 1; length <= kMaxCodeBits; ++length) {
    for (int s = 0; s < 256; ++s) {
      if (lengths[s] != length) continue;
      uint32_t reversed = 0;
      for (int b = 0; b < length; ++b) reversed |= ((code >> b) & 1u) << (length - 1 - b);
      codes[s] = static_cast<uint16_t>(reversed);
      ++code;
    }
    code <<= 1;
  }
  return codes;
}

class BitWriter {
 public:
  explicit BitWriter(std::vector<uint8_t>* out) : out_(out) {}
  void Put(uint32_t bits, int n) {
    buffer_ |= static_cast<uint64_t>(bits) << filled_;
    filled_ += n;
    total_ += static_cast<uint64_t>(n);
    while (filled_ >= 8) {
      out_->push_back(static_cast<uint8_t>(buffer_));
      buffer_ >>= 8;
      filled_ -= 8;
    }
  }
  // Writes the last partial byte (its high bits zero).
  void Flush() {
    if (filled_ > 0) out_->push_back(static_cast<uint8_t>(buffer_));
    buffer_ = 0;
    filled_ = 0;
  }
  uint64_t bits() const { return total_; }

 private:
  std::vector<uint8_t>* out_;
  uint64_t buffer_ = 0;
  int filled_ = 0;
  uint64_t total_ = 0;
};

}  // namespace

std::optional<FloatSplit> SplitOf(std::string_view dtype) {
  if (dtype == "BF16") return FloatSplit{2, 7};
  if (dtype == "F16") return FloatSplit{2, 8};
  if (dtype == "F32") return FloatSplit{4, 23};
  return std::nullopt;
}

uint64_t ExponentCoded::bytes() const {
  return code_lengths.size() + group_start_bits.size() * 16 + unit_bits.size() * 2 + coded.size() +
         rest.size();
}

namespace {

// Codes group g's units into `out` (whole bytes: every group starts at a byte) and its values'
// rest into c.rest; records its units' lengths and its checksum.
template <int W>
void EncodeGroup(const uint8_t* data, uint64_t g, const std::array<uint16_t, 256>& codes,
                 ExponentCoded& c, std::vector<uint8_t>* out) {
  const int shift = c.split.shift;
  const uint64_t low_mask = (uint64_t{1} << shift) - 1;
  const uint64_t units = c.unit_bits.size();
  BitWriter writer(out);
  uint8_t* rest = c.rest.data() + g * kGroupValues * static_cast<uint64_t>(W - 1);
  for (uint64_t u = g * kGroupUnits; u < std::min(units, (g + 1) * kGroupUnits); ++u) {
    const uint64_t start = writer.bits();
    const uint64_t end = std::min(c.values, (u + 1) * kUnitValues);
    for (uint64_t i = u * kUnitValues; i < end; ++i) {
      const uint64_t v = ValueAt<W>(data, i);
      const uint32_t symbol = (v >> shift) & 0xff;
      writer.Put(codes[symbol], c.code_lengths[symbol]);
      const uint64_t kept = (v & low_mask) | ((v >> (shift + 8)) << shift);
      std::memcpy(rest, &kept, W - 1);
      rest += W - 1;
    }
    c.unit_bits[u] = static_cast<uint16_t>(writer.bits() - start);
  }
  writer.Flush();
  const uint64_t first = g * kGroupValues;
  const uint64_t n = std::min<uint64_t>(kGroupValues, c.values - first);
  c.group_checksums[g] = Xxh3(data + first * W, n * W);
}

template <int W>
std::array<uint64_t, 256> SymbolCounts(const uint8_t* data, uint64_t values, int shift) {
  std::array<uint64_t, 256> counts{};
  for (uint64_t i = 0; i < values; ++i) ++counts[(ValueAt<W>(data, i) >> shift) & 0xff];
  return counts;
}

}  // namespace

ExponentCoded EncodeExponents(const uint8_t* data, uint64_t values, FloatSplit split, int threads) {
  ExponentCoded c;
  c.split = split;
  c.values = values;
  const int w = split.value_bytes;
  const bool wide = w == 4;
  c.code_lengths = CodeLengths(wide ? SymbolCounts<4>(data, values, split.shift)
                                    : SymbolCounts<2>(data, values, split.shift));
  const std::array<uint16_t, 256> codes = Codes(c.code_lengths);
  const uint64_t units = (values + kUnitValues - 1) / kUnitValues;
  const uint64_t groups = (units + kGroupUnits - 1) / kGroupUnits;
  c.unit_bits.resize(units);
  c.group_start_bits.resize(groups);
  c.group_checksums.resize(groups);
  c.rest.resize(values * static_cast<uint64_t>(w - 1));
  // Groups start at whole bytes, so each is coded on its own, by any thread.
  std::vector<std::vector<uint8_t>> coded(groups);
  std::atomic<uint64_t> next{0};
  auto work = [&] {
    for (uint64_t g; (g = next++) < groups;) {
      if (wide) {
        EncodeGroup<4>(data, g, codes, c, &coded[g]);
      } else {
        EncodeGroup<2>(data, g, codes, c, &coded[g]);
      }
    }
  };
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads && static_cast<uint64_t>(t) < groups; ++t) {
    Result<std::thread> helper = StartThread("an encoder thread", work);
    if (!helper.ok()) break;  // fewer helpers: the calling thread does the rest
    helpers.push_back(std::move(helper).value());
  }
  work();
  for (std::thread& t : helpers) t.join();
  uint64_t total = 0;
  for (const auto& part : coded) total += part.size();
  c.coded.reserve(total + 8);
  for (uint64_t g = 0; g < groups; ++g) {
    c.group_start_bits[g] = c.coded.size() * 8;
    c.coded.insert(c.coded.end(), coded[g].begin(), coded[g].end());
  }
  c.coded.insert(c.coded.end(), 8, 0);
  return c;
}

ExponentView ViewOf(const ExponentCoded& c) {
  return {c.split,
          c.values,
          c.code_lengths,
          c.group_start_bits,
          c.group_checksums,
          c.unit_bits,
          c.coded,
          c.rest,
          0,
          0};
}

Result<std::vector<uint16_t>> DecodingTable(std::span<const uint8_t> code_lengths,
                                            const std::string& what) {
  if (code_lengths.size() != 256) {
    return Status(
        Code::kInvalidModel,
        what + ": the code table has " + std::to_string(code_lengths.size()) + " lengths, not 256");
  }
  std::array<uint8_t, 256> lengths{};
  uint64_t kraft = 0;  // in units of 2^-kMaxCodeBits
  for (int s = 0; s < 256; ++s) {
    lengths[s] = code_lengths[s];
    if (lengths[s] > kMaxCodeBits) {
      return Status(Code::kInvalidModel, what + ": symbol " + std::to_string(s) + "'s code is " +
                                             std::to_string(lengths[s]) + " bits, more than " +
                                             std::to_string(kMaxCodeBits));
    }
    if (lengths[s] > 0) kraft += uint64_t{1} << (kMaxCodeBits - lengths[s]);
  }
  if (kraft > (uint64_t{1} << kMaxCodeBits)) {
    return Status(Code::kInvalidModel, what + ": the code lengths are no prefix code");
  }
  const std::array<uint16_t, 256> codes = Codes(lengths);
  std::vector<uint16_t> table(size_t{1} << kMaxCodeBits, 0);
  for (int s = 0; s < 256; ++s) {
    const int length = lengths[s];
    if (length == 0) continue;
    for (uint32_t high = 0; high < (1u << (kMaxCodeBits - length)); ++high) {
      table[codes[s] | (high << length)] = static_cast<uint16_t>(s | (length << 8));
    }
  }
  return table;
}

namespace {

constexpr int kLanes = 8;

// One function on purpose, past the length and complexity limits: split into a batch set-up,
// a code reader and a value joiner (always inlined, the batch's state copied into locals), it
// decoded 5-15% slower on this machine's GCC 12 -O2 (128 MiB of BF16, alternated runs).
template <int W>
// NOLINTNEXTLINE(readability-function-size,readability-function-cognitive-complexity)
Status DecodeGroupsOf(const ExponentView& v, std::span<const uint16_t> table, uint64_t first,
                      uint64_t last, uint8_t* out, const std::string& what) {
  const int shift = v.split.shift;
  const uint64_t low_mask = (uint64_t{1} << shift) - 1;
  const uint64_t units = v.unit_bits.size();
  auto corrupt = [&](uint64_t group, const std::string& rule) {
    const uint64_t a = group * kGroupValues;
    const uint64_t b = std::min(v.values, a + kGroupValues);
    return Status(Code::kInvalidModel, what + ", block " + std::to_string(group) + " (values " +
                                           std::to_string(a) + "-" + std::to_string(b - 1) +
                                           "): " + rule + " (the packed file is corrupt)");
  };
  uint8_t symbols[kLanes][kUnitValues];
  uint8_t* at = out;
  const uint8_t* coded = v.coded.data() - v.coded_base;
  for (uint64_t g = first; g < last; ++g) {
    uint8_t* group_out = at;
    const uint64_t group_values = std::min<uint64_t>(kGroupValues, v.values - g * kGroupValues);
    const uint64_t rest_first = g * kGroupValues * static_cast<uint64_t>(W - 1);
    if (rest_first < v.rest_base ||
        rest_first + group_values * static_cast<uint64_t>(W - 1) > v.rest_base + v.rest.size()) {
      return corrupt(g, "its kept bits lie outside the rest");
    }
    const uint64_t first_unit = g * kGroupUnits;
    const uint64_t end_unit = std::min(units, first_unit + kGroupUnits);
    uint64_t next_bit = v.group_start_bits[g];
    // kLanes units at a time, their codes read in turn: the chains of dependent loads of
    // different units overlap (one unit alone waits on each load before the next).
    for (uint64_t u0 = first_unit; u0 < end_unit; u0 += kLanes) {
      const int lanes = static_cast<int>(std::min<uint64_t>(kLanes, end_unit - u0));
      uint64_t bit[kLanes] = {};
      uint64_t end_bit[kLanes] = {};
      uint32_t n[kLanes] = {};
      uint32_t longest = 0;
      for (int k = 0; k < lanes; ++k) {
        bit[k] = next_bit;
        end_bit[k] = next_bit + v.unit_bits[u0 + k];
        next_bit = end_bit[k];
        // Every byte a unit's 64-bit loads may touch lies inside the coded part held.
        if (bit[k] / 8 < v.coded_base || (end_bit[k] + 7) / 8 + 8 > v.coded_base + v.coded.size()) {
          return corrupt(g, "its coded bits lie outside the coded stream");
        }
        const uint64_t first_value = (u0 + k) * kUnitValues;
        n[k] = static_cast<uint32_t>(std::min(v.values, first_value + kUnitValues) - first_value);
        longest = std::max(longest, n[k]);
      }
      uint32_t missing = 0;
      for (uint32_t i = 0; i < longest; ++i) {
        for (int k = 0; k < lanes; ++k) {
          if (i >= n[k]) continue;
          uint64_t window = 0;
          std::memcpy(&window, coded + bit[k] / 8, 8);
          const uint16_t entry = table[(window >> (bit[k] % 8)) & ((1u << kMaxCodeBits) - 1)];
          missing |= static_cast<uint32_t>((entry >> 8) == 0);
          // Never past the unit's recorded end (its loads were checked up to there): codes that
          // run over stop one bit past it, which the length check below reports.
          bit[k] = std::min<uint64_t>(bit[k] + (entry >> 8), end_bit[k] + 1);
          symbols[k][i] = static_cast<uint8_t>(entry);
        }
      }
      if (missing != 0) return corrupt(g, "a code that the table does not hold");
      for (int k = 0; k < lanes; ++k) {
        const uint64_t u = u0 + k;
        if (bit[k] != end_bit[k]) {
          return corrupt(g, "unit " + std::to_string(u) + " decodes to " +
                                std::to_string(bit[k] - (end_bit[k] - v.unit_bits[u])) +
                                " bits, not the " + std::to_string(v.unit_bits[u]) + " recorded");
        }
        // The values: symbols and kept bits joined, a loop the compiler vectorises.
        const uint8_t* rest = v.rest.data() + (u * kUnitValues * (W - 1) - v.rest_base);
        for (uint32_t i = 0; i < n[k]; ++i) {
          uint64_t kept = 0;
          std::memcpy(&kept, rest + static_cast<size_t>(i) * (W - 1), W - 1);
          const uint64_t value = (kept & low_mask) |
                                 (static_cast<uint64_t>(symbols[k][i]) << shift) |
                                 ((kept >> shift) << (shift + 8));
          std::memcpy(at + static_cast<size_t>(i) * W, &value, W);
        }
        at += static_cast<size_t>(n[k]) * W;
      }
    }
    if (Xxh3(group_out, static_cast<size_t>(at - group_out)) != v.group_checksums[g]) {
      return corrupt(g, "its decoded bytes do not match the recorded checksum");
    }
  }
  return Status::Ok();
}

}  // namespace

Status DecodeGroups(const ExponentView& v, std::span<const uint16_t> table, uint64_t first,
                    uint64_t last, uint8_t* out, const std::string& what) {
  return v.split.value_bytes == 4 ? DecodeGroupsOf<4>(v, table, first, last, out, what)
                                  : DecodeGroupsOf<2>(v, table, first, last, out, what);
}

}  // namespace hoist
