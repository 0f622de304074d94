#include "format/packed.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>

#include <nlohmann/json.hpp>

#include "base/checksum.h"
#include "base/units.h"
#include "format/directory_json.h"
#include "format/gguf.h"
#include "format/json_text.h"
#include "format/packed_layout.h"
#include "format/safetensors.h"
#include "pack/exponent_code.h"

namespace hoist {
namespace {

constexpr char kMagic[8] = {'H', 'O', 'I', 'S', 'T', 'P', 'K', '1'};
constexpr uint64_t kPrologueBytes = 24;  // magic, the header's offset, its length
constexpr uint64_t kPackedAlign = 64;
constexpr uint64_t kMaxHeaderBytes = uint64_t{512} << 20;
// Smaller tensors are stored as they are: their table and index would cost what they save.
constexpr uint64_t kMinCodedBytes = 16 << 10;
// A coded form kept only when it saves at least this share of the bytes.
constexpr double kMaxCodedRatio = 0.95;

std::string Hex64(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016" PRIx64, v);
  return text;
}

// The decoded view of a packed file: reads of the virtual file of decoded tensors decode the
// groups they cover (on the calling thread); the gaps between tensors read as zeros.
class DecodedFile final : public File {
 public:
  DecodedFile(std::unique_ptr<File> packed, std::shared_ptr<const PackedLayout> layout)
      : packed_(std::move(packed)), layout_(std::move(layout)) {}

  const std::string& path() const override { return packed_->path(); }
  uint64_t size() const override { return layout_->decoded_size; }
  FileIdentity identity() const override { return packed_->identity(); }
  Result<FileIdentity> CurrentIdentity() override { return packed_->CurrentIdentity(); }
  void Abort() override { packed_->Abort(); }
  // A hint over decoded bytes is given for the whole packed file: its sections do not lie in
  // the decoded order (and dropping the cache, what a cold run asks, is for all of it).
  Status Advise(AccessHint hint, uint64_t /*offset*/, uint64_t /*length*/) override {
    return packed_->Advise(hint, 0, packed_->size());
  }

  Result<RawRead> ReadSome(uint64_t offset, void* dst, size_t n) override {
    if (n == 0 || offset >= size()) return RawRead{0, false};
    const auto& tensors = layout_->tensors;
    auto after =
        std::upper_bound(tensors.begin(), tensors.end(), offset,
                         [](uint64_t at, const PackedTensor& t) { return at < t.virtual_offset; });
    if (after == tensors.begin() ||
        offset >= std::prev(after)->virtual_offset + std::prev(after)->nbytes) {
      // A gap: zeros up to the next tensor.
      const uint64_t next = after == tensors.end() ? size() : after->virtual_offset;
      const size_t zeros = static_cast<size_t>(std::min<uint64_t>(n, next - offset));
      std::memset(dst, 0, zeros);
      return RawRead{zeros, false};
    }
    const PackedTensor& t = *std::prev(after);
    const uint64_t local = offset - t.virtual_offset;
    n = static_cast<size_t>(std::min<uint64_t>(n, t.nbytes - local));
    if (!t.coded) return packed_->ReadSome(t.data + local, dst, n);
    return ReadCoded(t, local, static_cast<unsigned char*>(dst), n);
  }

 private:
  Result<RawRead> ReadCoded(const PackedTensor& t, uint64_t local, unsigned char* dst, size_t n) {
    const uint64_t w = static_cast<uint64_t>(t.split.value_bytes);
    const uint64_t group_bytes = kGroupValues * w;
    const uint64_t groups = t.group_start_bits.size();
    const uint64_t first = local / group_bytes;
    // At most 8 MiB of decoded bytes per read; the caller asks again for the rest.
    const uint64_t last = std::min({groups, (local + n + group_bytes - 1) / group_bytes,
                                    first + std::max<uint64_t>(1, (8u << 20) / group_bytes)});
    const uint64_t coded_size = t.coded_end - t.coded_begin;
    const uint64_t coded_from = t.group_start_bits[first] / 8;
    const uint64_t coded_to =
        last < groups ? std::min(coded_size, t.group_start_bits[last] / 8 + 16) : coded_size;
    if (coded_from >= coded_to) {
      return Status(Code::kInvalidModel, path() + ": tensor " + t.name + ", block " +
                                             std::to_string(first) +
                                             ": its coded bits lie outside the coded stream "
                                             "(the packed file is corrupt)");
    }
    const uint64_t rest_from = first * kGroupValues * (w - 1);
    const uint64_t rest_to = std::min(t.values, last * kGroupValues) * (w - 1);
    const ScratchLease scratch(*this);
    std::vector<uint8_t>& coded = scratch->coded;
    std::vector<uint8_t>& rest = scratch->rest;
    std::vector<uint8_t>& decoded = scratch->decoded;
    coded.resize(coded_to - coded_from);
    rest.resize(rest_to - rest_from);
    HOIST_RETURN_IF_ERROR(
        packed_->ReadExact(t.coded_begin + coded_from, coded.data(), coded.size()));
    HOIST_RETURN_IF_ERROR(packed_->ReadExact(t.rest_begin + rest_from, rest.data(), rest.size()));
    ExponentView view;
    view.split = t.split;
    view.values = t.values;
    view.code_lengths = t.code_lengths;
    view.group_start_bits = t.group_start_bits;
    view.group_checksums = t.group_checksums;
    view.unit_bits = t.unit_bits;
    view.coded = coded;
    view.rest = rest;
    view.coded_base = coded_from;
    view.rest_base = rest_from;
    const uint64_t decoded_from = first * group_bytes;
    const uint64_t decoded_to = std::min(t.nbytes, last * group_bytes);
    const std::string what = path() + ": tensor " + t.name;
    // Decoded straight into dst when the read asks for whole groups from a group's start.
    if (local == decoded_from && n >= decoded_to - decoded_from) {
      HOIST_RETURN_IF_ERROR(DecodeGroups(view, t.table, first, last, dst, what));
      return RawRead{static_cast<size_t>(decoded_to - decoded_from), false};
    }
    decoded.resize(decoded_to - decoded_from);
    HOIST_RETURN_IF_ERROR(DecodeGroups(view, t.table, first, last, decoded.data(), what));
    const size_t copied = static_cast<size_t>(std::min<uint64_t>(n, decoded_to - local));
    std::memcpy(dst, decoded.data() + (local - decoded_from), copied);
    return RawRead{copied, false};
  }

  // A read's buffers, kept for the next read on any thread (not thread_local: MinGW ran a
  // thread_local's destructor at thread exit over storage already freed).
  struct Scratch {
    std::vector<uint8_t> coded;
    std::vector<uint8_t> rest;
    std::vector<uint8_t> decoded;
  };
  // One Scratch for one read, given back when the read returns, however it returns.
  class ScratchLease {
   public:
    explicit ScratchLease(DecodedFile& file) : file_(file) {
      std::lock_guard<std::mutex> lock(file_.scratch_mutex_);
      if (file_.free_scratch_.empty()) {
        scratch_ = std::make_unique<Scratch>();
      } else {
        scratch_ = std::move(file_.free_scratch_.back());
        file_.free_scratch_.pop_back();
      }
    }
    ~ScratchLease() {
      std::lock_guard<std::mutex> lock(file_.scratch_mutex_);
      file_.free_scratch_.push_back(std::move(scratch_));
    }
    ScratchLease(const ScratchLease&) = delete;
    ScratchLease& operator=(const ScratchLease&) = delete;
    Scratch* operator->() const { return scratch_.get(); }

   private:
    DecodedFile& file_;
    std::unique_ptr<Scratch> scratch_;
  };

  std::unique_ptr<File> packed_;
  std::shared_ptr<const PackedLayout> layout_;
  std::mutex scratch_mutex_;
  std::vector<std::unique_ptr<Scratch>> free_scratch_;
};

// The source a packed model is read through: its packed file opens as the decoded view; every
// other name, and every other question, goes to the source the file came from.
class DecodingStorage final : public Storage {
 public:
  DecodingStorage(std::shared_ptr<Storage> inner, std::shared_ptr<const PackedLayout> layout)
      : inner_(std::move(inner)), layout_(std::move(layout)) {}

  std::string description() const override { return inner_->description(); }
  StorageCapabilities capabilities() const override {
    StorageCapabilities c = inner_->capabilities();
    c.direct_io = false;  // the view's reads are not aligned blocks of the file
    c.read_advice = false;
    return c;
  }
  SourceCounters counters() const override { return inner_->counters(); }
  Result<std::unique_ptr<File>> Open(const std::string& name, const OpenOptions& options) override {
    if (name != layout_->path) return inner_->Open(name, options);
    OpenOptions buffered = options;
    buffered.direct = false;
    HOIST_ASSIGN_OR_RETURN(std::unique_ptr<File> packed, inner_->Open(name, buffered));
    return std::unique_ptr<File>(std::make_unique<DecodedFile>(std::move(packed), layout_));
  }
  Result<EntryType> Type(const std::string& name) override { return inner_->Type(name); }
  Result<std::vector<std::string>> ListFiles(const std::string& dir) override {
    return inner_->ListFiles(dir);
  }
  Result<std::string> ResolveInside(const std::string& dir, const std::string& file) override {
    return inner_->ResolveInside(dir, file);
  }
  std::string Parent(const std::string& name) const override { return inner_->Parent(name); }
  std::string Join(const std::string& dir, const std::string& file) const override {
    return inner_->Join(dir, file);
  }

 private:
  std::shared_ptr<Storage> inner_;
  std::shared_ptr<const PackedLayout> layout_;
};

// ---- writing ----

class PackWriter {
 public:
  explicit PackWriter(std::unique_ptr<WritableFile> out) : out_(std::move(out)) {}

  // Appends bytes at the next aligned place; [begin, end) in the file.
  Result<nlohmann::ordered_json> Append(const void* data, uint64_t n) {
    at_ = AlignUp(at_, kPackedAlign);
    const uint64_t begin = at_;
    const auto* p = static_cast<const unsigned char*>(data);
    for (uint64_t done = 0; done < n;) {
      const uint64_t piece = std::min<uint64_t>(n - done, 64u << 20);
      HOIST_RETURN_IF_ERROR(out_->WriteAt(at_ + done, p + done, static_cast<size_t>(piece)));
      done += piece;
    }
    at_ += n;
    return nlohmann::ordered_json::array({begin, at_});
  }

  Status Finish(const std::string& header) {
    at_ = AlignUp(at_, kPackedAlign);
    const uint64_t header_at = at_;
    HOIST_RETURN_IF_ERROR(out_->WriteAt(header_at, header.data(), header.size()));
    unsigned char prologue[kPrologueBytes];
    std::memcpy(prologue, kMagic, 8);
    const uint64_t length = header.size();
    std::memcpy(prologue + 8, &header_at, 8);
    std::memcpy(prologue + 16, &length, 8);
    HOIST_RETURN_IF_ERROR(out_->WriteAt(0, prologue, sizeof prologue));
    return out_->Close();
  }

 private:
  std::unique_ptr<WritableFile> out_;
  uint64_t at_ = kPrologueBytes;
};

template <typename T>
Result<nlohmann::ordered_json> AppendVector(PackWriter& w, const std::vector<T>& v) {
  return w.Append(v.data(), v.size() * sizeof(T));
}

// ---- reading ----

Status Bad(const std::string& path, uint64_t offset, const std::string& rule) {
  return Status::InvalidModel(path, offset, rule);
}

// A section [begin, end) of the file: inside the data (before the header), `bytes` long when
// bytes is given.
Result<std::pair<uint64_t, uint64_t>> Section(const nlohmann::json& j, const std::string& what,
                                              uint64_t data_end, uint64_t expected,
                                              const std::string& path, uint64_t header_at) {
  if (!j.is_array() || j.size() != 2 || !j[0].is_number_unsigned() || !j[1].is_number_unsigned()) {
    return Bad(path, header_at, what + " is not a [begin, end) pair of byte offsets");
  }
  const uint64_t begin = j[0].get<uint64_t>();
  const uint64_t end = j[1].get<uint64_t>();
  if (begin < kPrologueBytes || end < begin || end > data_end) {
    return Bad(path, header_at,
               what + " [" + std::to_string(begin) + ", " + std::to_string(end) +
                   ") lies outside the file's data (bytes " + std::to_string(kPrologueBytes) +
                   " to " + std::to_string(data_end) + ")");
  }
  if (expected != UINT64_MAX && end - begin != expected) {
    return Bad(path, begin,
               what + " holds " + std::to_string(end - begin) + " bytes, not the " +
                   std::to_string(expected) + " its tensor needs");
  }
  return std::make_pair(begin, end);
}

template <typename T>
Status ReadVector(File& file, std::pair<uint64_t, uint64_t> section, std::vector<T>* out) {
  out->resize((section.second - section.first) / sizeof(T));
  if (out->empty()) return Status::Ok();
  return file.ReadExact(section.first, out->data(), out->size() * sizeof(T));
}

}  // namespace

bool SniffPacked(const unsigned char* head, size_t n) {
  return n >= 8 && std::memcmp(head, kMagic, 8) == 0;
}

namespace {

// The tensor's values with their exponents coded, or nothing where coding does not pay (too
// small, not a float, or not small enough coded).
std::optional<ExponentCoded> CodeIfSmaller(const TensorEntry& t, const std::vector<uint8_t>& bytes,
                                           int threads) {
  const std::optional<FloatSplit> split = SplitOf(t.dtype);
  if (!split || t.nbytes < kMinCodedBytes ||
      t.nbytes % static_cast<uint64_t>(split->value_bytes) != 0) {
    return std::nullopt;
  }
  ExponentCoded coded =
      EncodeExponents(bytes.data(), t.nbytes / split->value_bytes, *split, threads);
  if (static_cast<double>(coded.bytes()) > kMaxCodedRatio * static_cast<double>(t.nbytes)) {
    return std::nullopt;
  }
  return coded;
}

// Appends a coded tensor's sections; its header entry names them.
Status AppendCoded(PackWriter& writer, const ExponentCoded& coded, nlohmann::ordered_json* entry) {
  (*entry)["stored"] = "exponent-huffman";
  (*entry)["value_bytes"] = coded.split.value_bytes;
  (*entry)["shift"] = coded.split.shift;
  (*entry)["values"] = coded.values;
  nlohmann::ordered_json sections;
  HOIST_ASSIGN_OR_RETURN(sections["code_lengths"], writer.Append(coded.code_lengths.data(), 256));
  HOIST_ASSIGN_OR_RETURN(sections["group_start_bits"],
                         AppendVector(writer, coded.group_start_bits));
  HOIST_ASSIGN_OR_RETURN(sections["group_checksums"], AppendVector(writer, coded.group_checksums));
  HOIST_ASSIGN_OR_RETURN(sections["unit_bits"], AppendVector(writer, coded.unit_bits));
  HOIST_ASSIGN_OR_RETURN(sections["coded"], AppendVector(writer, coded.coded));
  HOIST_ASSIGN_OR_RETURN(sections["rest"], AppendVector(writer, coded.rest));
  (*entry)["sections"] = std::move(sections);
  return Status::Ok();
}

Result<PackReport> WritePackedInto(const TensorDirectory& dir, std::unique_ptr<WritableFile> out,
                                   int threads) {
  PackWriter writer(std::move(out));
  PackReport report;
  nlohmann::ordered_json header;
  header["format"] = kPackedFormat;
  header["version"] = 1;
  header["source_format"] = dir.format;
  header["source_version"] = dir.version;
  header["metadata"] = DirectoryToJson(dir)["metadata"];
  header["tensors"] = nlohmann::ordered_json::array();
  std::vector<std::unique_ptr<File>> files(dir.files.size());
  std::vector<uint8_t> bytes;
  for (const TensorEntry& t : dir.tensors) {
    if (!files[t.file]) {
      HOIST_ASSIGN_OR_RETURN(files[t.file], dir.OpenAsParsed(t.file));
    }
    bytes.resize(t.nbytes);
    if (t.nbytes > 0) {
      HOIST_RETURN_IF_ERROR(files[t.file]->ReadExact(t.offset, bytes.data(), t.nbytes));
    }
    nlohmann::ordered_json entry{{"name", t.name},
                                 {"dtype", t.dtype},
                                 {"shape", t.shape},
                                 {"nbytes", t.nbytes},
                                 {"xxh3", Hex64(Xxh3(bytes.data(), bytes.size()))}};
    PackReport::Tensor row{t.name, t.dtype, t.nbytes, t.nbytes, false};
    if (const std::optional<ExponentCoded> coded = CodeIfSmaller(t, bytes, threads)) {
      HOIST_RETURN_IF_ERROR(AppendCoded(writer, *coded, &entry));
      row.stored = coded->bytes();
      row.coded = true;
    } else {
      entry["stored"] = "raw";
      HOIST_ASSIGN_OR_RETURN(entry["data"], writer.Append(bytes.data(), bytes.size()));
    }
    header["tensors"].push_back(std::move(entry));
    report.bytes += row.bytes;
    report.stored += row.stored;
    report.tensors.push_back(std::move(row));
  }
  HOIST_RETURN_IF_ERROR(writer.Finish(DumpJson(header)));
  return report;
}

}  // namespace

Result<PackReport> WritePacked(const TensorDirectory& dir, const std::string& out_path, int threads,
                               const std::function<Status(const std::string&)>& check) {
  std::string partial;
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> out, CreateFileBeside(out_path, &partial));
  Result<PackReport> report = WritePackedInto(dir, std::move(out), threads);
  Status checked = report.ok() && check ? check(partial) : Status::Ok();
  if (!report.ok() || !checked.ok()) {
    std::error_code ignored;
    std::filesystem::remove(partial, ignored);
    return report.ok() ? checked : report.status();
  }
  HOIST_RETURN_IF_ERROR(ReplaceWith(partial, out_path));
  return report;
}

namespace {

// A header's fields beside json_text.h's StringField and UnsignedField, read the same way: a
// field of the wrong type reads as absent, and the caller's check names it.
int64_t IntField(const nlohmann::json& j, const char* key, int64_t absent) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int64_t>() : absent;
}
nlohmann::json JsonField(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() ? *it : nlohmann::json();
}

// The JSON header of a packed file, checked to be hoist-packed version 1; its offset in
// *header_at.
Result<nlohmann::json> ReadHeader(File& file, uint64_t* header_at) {
  const std::string& path = file.path();
  if (file.size() < kPrologueBytes) {
    return Bad(path, 0, "a packed file starts with 24 bytes: magic, header offset and length");
  }
  unsigned char prologue[kPrologueBytes];
  HOIST_RETURN_IF_ERROR(file.ReadExact(0, prologue, sizeof prologue));
  if (!SniffPacked(prologue, sizeof prologue)) return Bad(path, 0, "no HOISTPK1 magic");
  uint64_t length = 0;
  std::memcpy(header_at, prologue + 8, 8);
  std::memcpy(&length, prologue + 16, 8);
  if (*header_at < kPrologueBytes || *header_at > file.size() ||
      length > file.size() - *header_at || length > kMaxHeaderBytes) {
    return Bad(path, 8,
               "the header (" + std::to_string(length) + " bytes at byte " +
                   std::to_string(*header_at) + ") lies outside the file's " +
                   std::to_string(file.size()) + " bytes or is larger than 512 MiB");
  }
  std::string text(length, '\0');
  if (length > 0) HOIST_RETURN_IF_ERROR(file.ReadExact(*header_at, text.data(), text.size()));
  nlohmann::json header = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) {
    return Bad(path, *header_at, "the header is not a JSON object");
  }
  if (StringField(header, "format") != kPackedFormat || IntField(header, "version", 0) != 1) {
    return Bad(path, *header_at, "the header is not hoist-packed version 1");
  }
  if (!header.contains("tensors") || !header["tensors"].is_array()) {
    return Bad(path, *header_at, "the header has no \"tensors\" array");
  }
  return header;
}

std::vector<MetadataEntry> MetadataOf(const nlohmann::json& header) {
  std::vector<MetadataEntry> metadata;
  const auto m = header.find("metadata");
  if (m == header.end() || !m->is_object()) return metadata;
  for (const auto& [key, value] : m->items()) {
    MetadataEntry entry;
    entry.key = key;
    entry.type = StringField(value, "type");
    if (entry.type.empty()) entry.type = "STRING";
    entry.element_type = StringField(value, "element_type");
    entry.count = std::max<uint64_t>(UnsignedField(value, "count").value_or(0), 1);
    entry.value = value.contains("value") ? value["value"] : nlohmann::json();
    metadata.push_back(std::move(entry));
  }
  return metadata;
}

// A tensor's bytes by its dtype and shape, as the format it was packed from spells them.
Result<uint64_t> BytesByDtypeAndShape(const std::string& source_format, const TensorEntry& t) {
  if (source_format == "gguf") return GgmlTensorBytes(t.dtype, t.shape);
  return SafetensorsTensorBytes(t.dtype, t.shape);
}

// "0123456789abcdef" (16 hex digits) as a number.
std::optional<uint64_t> ParseHex64(const std::string& text) {
  if (text.size() != 16) return std::nullopt;
  uint64_t v = 0;
  for (char c : text) {
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    if (c >= 'a' && c <= 'f') digit = c - 'a' + 10;
    if (digit < 0) return std::nullopt;
    v = (v << 4) | static_cast<uint64_t>(digit);
  }
  return v;
}

// Tensor i's name, dtype, shape and size from its header entry, its size checked against its
// dtype and shape as the source format's reader checks them.
Result<TensorEntry> TensorOf(const nlohmann::json& j, size_t i, const std::string& path,
                             uint64_t header_at, const std::string& source_format) {
  if (!j.is_object() || !j.contains("name") || !j["name"].is_string() || !j.contains("dtype") ||
      !j["dtype"].is_string() || !j.contains("nbytes") || !j["nbytes"].is_number_unsigned() ||
      !j.contains("shape") || !j["shape"].is_array()) {
    return Bad(path, header_at,
               "tensor " + std::to_string(i) + " lacks its name, dtype, shape or nbytes");
  }
  TensorEntry t;
  t.name = j["name"].get<std::string>();
  t.dtype = j["dtype"].get<std::string>();
  for (const auto& d : j["shape"]) {
    if (!d.is_number_unsigned()) return Bad(path, header_at, t.name + ": a dimension is no count");
    t.shape.push_back(d.get<uint64_t>());
  }
  t.nbytes = j["nbytes"].get<uint64_t>();
  auto by_shape = BytesByDtypeAndShape(source_format, t);
  if (!by_shape.ok()) return Bad(path, header_at, t.name + ": " + by_shape.status().message());
  if (*by_shape != t.nbytes) {
    return Bad(path, header_at,
               t.name + " is " + std::to_string(t.nbytes) + " bytes by its nbytes but " +
                   std::to_string(*by_shape) + " by its dtype and shape");
  }
  return t;
}

// A coded tensor's sections checked against its size and each other, its indexes read.
Status ReadCodedTensor(File& file, const nlohmann::json& j, const TensorEntry& t,
                       uint64_t header_at, PackedTensor* p) {
  const std::string& path = file.path();
  const std::optional<FloatSplit> split = SplitOf(t.dtype);
  if (!split || IntField(j, "value_bytes", 0) != split->value_bytes ||
      IntField(j, "shift", -1) != split->shift) {
    return Bad(
        path, header_at,
        t.name + ": a coded " + t.dtype + " tensor's value_bytes and shift are not its dtype's");
  }
  p->coded = true;
  p->split = *split;
  p->values = UnsignedField(j, "values").value_or(0);
  if (p->values == 0 || p->values * static_cast<uint64_t>(split->value_bytes) != t.nbytes) {
    return Bad(path, header_at,
               t.name + ": " + std::to_string(p->values) + " values are not its " +
                   std::to_string(t.nbytes) + " bytes");
  }
  const uint64_t units = (p->values + kUnitValues - 1) / kUnitValues;
  const uint64_t groups = (units + kGroupUnits - 1) / kGroupUnits;
  const nlohmann::json sections = JsonField(j, "sections");
  auto section = [&](const char* name, uint64_t expected) {
    return Section(JsonField(sections, name), t.name + "'s " + name, header_at, expected, path,
                   header_at);
  };
  HOIST_ASSIGN_OR_RETURN(auto lengths, section("code_lengths", 256));
  HOIST_ASSIGN_OR_RETURN(auto starts, section("group_start_bits", groups * 8));
  HOIST_ASSIGN_OR_RETURN(auto checksums, section("group_checksums", groups * 8));
  HOIST_ASSIGN_OR_RETURN(auto unit_bits, section("unit_bits", units * 2));
  HOIST_ASSIGN_OR_RETURN(auto coded, section("coded", UINT64_MAX));
  HOIST_ASSIGN_OR_RETURN(
      auto rest, section("rest", p->values * static_cast<uint64_t>(split->value_bytes - 1)));
  if (coded.second - coded.first < 8) {
    return Bad(path, coded.first, t.name + "'s coded stream lacks its 8 closing bytes");
  }
  HOIST_RETURN_IF_ERROR(ReadVector(file, lengths, &p->code_lengths));
  HOIST_RETURN_IF_ERROR(ReadVector(file, starts, &p->group_start_bits));
  HOIST_RETURN_IF_ERROR(ReadVector(file, checksums, &p->group_checksums));
  HOIST_RETURN_IF_ERROR(ReadVector(file, unit_bits, &p->unit_bits));
  const uint64_t coded_bits = (coded.second - coded.first) * 8;
  for (uint64_t g = 0; g < groups; ++g) {
    if (p->group_start_bits[g] >= coded_bits ||
        (g > 0 && p->group_start_bits[g] < p->group_start_bits[g - 1])) {
      return Bad(path, starts.first + g * 8,
                 t.name + ": block " + std::to_string(g) +
                     " starts outside its coded stream or before the block before it");
    }
  }
  // Every group's units end before the stream's 8 closing bytes, so a decoder that reads a
  // word ahead (the GPU's) stays inside the stream it was given.
  for (uint64_t g = 0; g < groups; ++g) {
    uint64_t end = p->group_start_bits[g];
    const uint64_t last_unit = std::min(units, (g + 1) * kGroupUnits);
    for (uint64_t u = g * kGroupUnits; u < last_unit; ++u) end += p->unit_bits[u];
    if (end > coded_bits - 64) {
      return Bad(path, unit_bits.first + g * kGroupUnits * 2,
                 t.name + ": block " + std::to_string(g) +
                     "'s units run past the end of its coded stream");
    }
  }
  HOIST_ASSIGN_OR_RETURN(p->table, DecodingTable(p->code_lengths, path + ": tensor " + t.name));
  p->coded_begin = coded.first;
  p->coded_end = coded.second;
  p->rest_begin = rest.first;
  p->rest_end = rest.second;
  return Status::Ok();
}

}  // namespace

Result<TensorDirectory> ReadPacked(File& file) {
  const std::string& path = file.path();
  uint64_t header_at = 0;
  HOIST_ASSIGN_OR_RETURN(const nlohmann::json header, ReadHeader(file, &header_at));
  const nlohmann::json& tensors = header["tensors"];
  TensorDirectory dir;
  dir.format = kPackedFormat;
  dir.metadata = MetadataOf(header);
  auto layout = std::make_shared<PackedLayout>();
  layout->path = path;
  layout->file_size = file.size();
  const std::string source_format = StringField(header, "source_format");
  if (source_format != "gguf" && source_format != "safetensors") {
    return Bad(
        path, header_at,
        "the header's source_format \"" + source_format + "\" is not \"gguf\" or \"safetensors\"");
  }
  uint64_t virtual_at = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const nlohmann::json& j = tensors[i];
    HOIST_ASSIGN_OR_RETURN(TensorEntry t, TensorOf(j, i, path, header_at, source_format));
    t.offset = virtual_at;
    PackedTensor p;
    p.name = t.name;
    p.virtual_offset = virtual_at;
    p.nbytes = t.nbytes;
    const std::string stored = StringField(j, "stored");
    if (stored == "raw") {
      HOIST_ASSIGN_OR_RETURN(auto data, Section(JsonField(j, "data"), t.name + "'s data", header_at,
                                                t.nbytes, path, header_at));
      p.data = data.first;
      // Nothing else guards a stored tensor's bytes: its recorded checksum is checked as it loads.
      t.recorded_xxh3 = ParseHex64(StringField(j, "xxh3"));
      if (!t.recorded_xxh3) {
        return Bad(path, header_at, t.name + ": a stored tensor's xxh3 is not 16 hex digits");
      }
    } else if (stored == "exponent-huffman") {
      HOIST_RETURN_IF_ERROR(ReadCodedTensor(file, j, t, header_at, &p));
    } else {
      return Bad(path, header_at,
                 t.name + ": stored as \"" + stored + "\", not \"raw\" or \"exponent-huffman\"");
    }
    t.stored_bytes = p.coded ? (p.coded_end - p.coded_begin) + (p.rest_end - p.rest_begin) +
                                   p.unit_bits.size() * 2 + p.group_start_bits.size() * 16 + 256
                             : t.nbytes;
    virtual_at = AlignUp(virtual_at + t.nbytes, kPackedAlign);
    dir.tensors.push_back(std::move(t));
    layout->tensors.push_back(std::move(p));
  }
  dir.IndexNames();
  for (size_t i = 0; i < dir.tensors.size(); ++i) {
    if (dir.Find(dir.tensors[i].name) != &dir.tensors[i]) {
      return Bad(path, header_at, "tensor " + dir.tensors[i].name + " is listed twice");
    }
  }
  layout->decoded_size = virtual_at;
  dir.files.push_back({path, virtual_at, file.identity()});
  std::shared_ptr<const PackedLayout> shared = std::move(layout);
  dir.packed = shared;
  dir.decoded_view = [shared](std::shared_ptr<Storage> inner) -> std::shared_ptr<Storage> {
    return std::make_shared<DecodingStorage>(std::move(inner), shared);
  };
  return dir;
}

}  // namespace hoist
