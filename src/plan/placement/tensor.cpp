#include "plan/placement/tensor.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "base/platform.h"
#include "format/dtypes.h"
#include "plan/placement/builtin.h"

namespace hoist {
namespace {

bool GlobMatch(const std::string& pattern, const std::string& name) {
  size_t p = 0;
  size_t n = 0;
  size_t star = std::string::npos;  // the last '*' seen, and where in name it resumed
  size_t resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<std::string> Components(const std::string& name) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', start)) {
    parts.push_back(name.substr(start, dot - start));
    start = dot + 1;
  }
  parts.push_back(name.substr(start));
  return parts;
}

// Bytes of the smallest whole piece of a row: an element, or a quantization block.
uint64_t ColumnGranule(const TensorEntry& t) {
  if (const GgmlType* g = FindGgmlTypeByName(t.dtype); g != nullptr) return g->block_bytes;
  if (const SafetensorsDtype* d = FindSafetensorsDtype(t.dtype); d != nullptr && d->bits >= 8) {
    return d->bits / 8;
  }
  return 1;
}

// Where device d's range of `units` ends, by cumulative share.
std::vector<uint64_t> Boundaries(uint64_t units, const std::vector<double>& shares) {
  const double total = std::accumulate(shares.begin(), shares.end(), 0.0);
  std::vector<uint64_t> ends;
  double cumulative = 0;
  for (double s : shares) {
    cumulative += s;
    ends.push_back(static_cast<uint64_t>(
        std::llround(static_cast<double>(units) * std::min(1.0, cumulative / total))));
  }
  ends.back() = units;
  return ends;
}

}  // namespace

const char* CutName(Cut cut) {
  switch (cut) {
    case Cut::kRows:
      return "rows";
    case Cut::kColumns:
      return "columns";
    case Cut::kReplicate:
      return "replicate";
    case Cut::kOneDevice:
      return "device";
  }
  return "unknown";
}

Cut DefaultCut(const std::string& name) {
  static const std::set<std::string> by_rows = {
      "q_proj",        "k_proj", "v_proj", "gate_proj", "up_proj", "embed_tokens",
      "lm_head",       "wq",     "wk",     "wv",        "w1",      "w3",
      "attn_q",        "attn_k", "attn_v", "ffn_gate",  "ffn_up",  "token_embd",
      "tok_embeddings"};
  static const std::set<std::string> by_columns = {"o_proj", "down_proj",   "wo",
                                                   "w2",     "attn_output", "ffn_down"};
  const std::vector<std::string> parts = Components(name);
  const bool bias = parts.back() == "bias";
  if (name == "output.weight" || name == "output.bias") return Cut::kRows;
  for (const std::string& part : parts) {
    if (by_rows.count(part) != 0) return Cut::kRows;
    if (by_columns.count(part) != 0) return bias ? Cut::kReplicate : Cut::kColumns;
  }
  return Cut::kReplicate;
}

namespace {

// Reads a plan's one object a key at a time (nlohmann's SAX interface): the keys in file order,
// a repeated key refused, each key looked up once (linear in the file), the count bounded, and
// a stop signal seen every 1024 keys. Stops at the first error, which status() then holds.
class PlanReader final : public nlohmann::json_sax<nlohmann::json> {
 public:
  PlanReader(const std::string& path, uint32_t devices) : path_(path), devices_(devices) {}

  bool null() override { return Value("null"); }
  bool boolean(bool v) override { return Value(v ? "true" : "false"); }
  bool number_integer(number_integer_t v) override { return Value(std::to_string(v)); }
  bool number_unsigned(number_unsigned_t v) override {
    if (depth_ != 1 || v >= devices_) return Value(std::to_string(v));
    return Add(Cut::kOneDevice, static_cast<uint32_t>(v));
  }
  bool number_float(number_float_t v, const string_t& text) override {
    (void)v;
    return Value(text);
  }
  bool string(string_t& v) override {
    if (depth_ == 1 && v == "rows") return Add(Cut::kRows, 0);
    if (depth_ == 1 && v == "columns") return Add(Cut::kColumns, 0);
    if (depth_ == 1 && v == "replicate") return Add(Cut::kReplicate, 0);
    return Value(nlohmann::json(v).dump());
  }
  bool binary(binary_t& /*v*/) override { return Value("binary"); }
  bool start_object(std::size_t /*n*/) override {
    if (depth_ == 0) {
      depth_ = 1;
      return true;
    }
    return Value("{...}");
  }
  bool key(string_t& k) override {
    if (rules_.size() >= kMaxCutRules) {
      return Fail(Status::InvalidArgument(path_ + ": a plan holds at most " +
                                          std::to_string(kMaxCutRules) + " patterns"));
    }
    if (!seen_.insert(k).second) {
      return Fail(Status::InvalidArgument(path_ + ": pattern \"" + k +
                                          "\" is given twice (patterns are tried in file order)"));
    }
    if (seen_.size() % 1024 == 0) {
      Status stop = StopRequested();
      if (!stop.ok()) return Fail(stop);
    }
    key_ = k;
    return true;
  }
  bool end_object() override {
    depth_ = 2;  // the plan's object is closed: nothing may follow it
    return true;
  }
  bool start_array(std::size_t /*n*/) override { return Value("[...]"); }
  bool end_array() override { return true; }
  bool parse_error(std::size_t position, const std::string& /*token*/,
                   const nlohmann::detail::exception& /*e*/) override {
    return Fail(Status::InvalidArgument(path_ + ": not JSON at byte " + std::to_string(position) +
                                        ": a plan is one object of pattern: cut"));
  }

  const Status& status() const { return status_; }
  std::vector<CutRule> TakeRules() { return std::move(rules_); }

 private:
  // A value that is no cut: inside the object it names the entry, else the plan is no object.
  bool Value(const std::string& text) {
    if (depth_ != 1) {
      return Fail(Status::InvalidArgument(path_ + ": a plan is one JSON object of pattern: cut"));
    }
    return Fail(Status::InvalidArgument(path_ + ": \"" + key_ + "\": " + text +
                                        " is not \"rows\", \"columns\", \"replicate\" or a "
                                        "device index below " +
                                        std::to_string(devices_)));
  }
  bool Add(Cut cut, uint32_t device) {
    rules_.push_back(CutRule{key_, cut, device});
    return true;
  }
  bool Fail(Status status) {
    if (status_.ok()) status_ = std::move(status);
    return false;
  }

  const std::string& path_;
  const uint32_t devices_;
  int depth_ = 0;  // 0 before the object, 1 inside it, 2 after it
  std::string key_;
  std::unordered_set<std::string> seen_;
  std::vector<CutRule> rules_;
  Status status_;
};

}  // namespace

Result<std::vector<CutRule>> ParseCutRules(const std::string& json_text, const std::string& path,
                                           uint32_t devices) {
  PlanReader reader(path, devices);
  const bool parsed = nlohmann::json::sax_parse(json_text, &reader);
  if (!reader.status().ok()) return reader.status();
  if (!parsed) return Status::InvalidArgument(path + ": a plan is one JSON object of pattern: cut");
  return reader.TakeRules();
}

std::vector<CutRule> ChooseCuts(const TensorDirectory& dir, const std::vector<CutRule>& rules) {
  std::vector<CutRule> cuts;
  cuts.reserve(dir.tensors.size());
  for (const TensorEntry& t : dir.tensors) {
    auto rule = std::find_if(rules.begin(), rules.end(),
                             [&](const CutRule& r) { return GlobMatch(r.pattern, t.name); });
    cuts.push_back(rule != rules.end() ? *rule : CutRule{"", DefaultCut(t.name), 0});
  }
  return cuts;
}

namespace {

// Tensor i seen as rows for a cut among `devices`: its rows and their bytes, the cut that
// applies (a vector is cut along its one dimension; a tensor with fewer rows or column granules
// than devices, or not whole rows, is whole on every device), and how many units it is cut in.
struct TensorCut {
  uint64_t rows = 1;
  uint64_t row_bytes = 0;
  uint64_t granule = 1;  // bytes per column unit
  uint64_t units = 0;    // rows or column granules to share out
  Cut how = Cut::kReplicate;
};

TensorCut SeeAsRows(const TensorEntry& t, Cut asked, uint32_t devices) {
  TensorCut tc;
  uint64_t rows = 1;
  for (size_t d = 0; d + 1 < t.shape.size(); ++d) rows *= t.shape[d];
  const bool whole_rows = rows > 0 && t.nbytes % rows == 0;
  tc.row_bytes = whole_rows ? t.nbytes / rows : t.nbytes;
  tc.rows = whole_rows ? rows : 1;
  tc.granule = ColumnGranule(t);
  tc.how = asked;
  if (tc.rows == 1 && tc.how == Cut::kRows) tc.how = Cut::kColumns;
  if (tc.how == Cut::kRows) {
    tc.units = tc.rows;
  } else if (tc.how == Cut::kColumns) {
    tc.units = tc.row_bytes % tc.granule == 0 ? tc.row_bytes / tc.granule : 0;
  }
  if ((tc.how == Cut::kRows || tc.how == Cut::kColumns) && (tc.units < devices || !whole_rows)) {
    tc.how = Cut::kReplicate;
  }
  return tc;
}

// The parts of tensor i, cut as tc says, appended to regions.
void AppendParts(size_t i, const TensorCut& tc, uint32_t one_device,
                 const std::vector<double>& shares, std::vector<TensorRegion>& regions) {
  const auto devices = static_cast<uint32_t>(shares.size());
  const uint64_t rb = tc.row_bytes;
  if (tc.how == Cut::kOneDevice) {
    regions.push_back({i, rb, 0, tc.rows, 0, rb, nullptr, one_device});
    return;
  }
  if (tc.how == Cut::kReplicate) {
    for (uint32_t d = 0; d < devices; ++d)
      regions.push_back({i, rb, 0, tc.rows, 0, rb, nullptr, d});
    return;
  }
  const std::vector<uint64_t> ends = Boundaries(tc.units, shares);
  uint64_t begin = 0;
  for (uint32_t d = 0; d < devices; ++d) {
    if (ends[d] > begin) {
      if (tc.how == Cut::kRows) {
        regions.push_back({i, rb, begin, ends[d], 0, rb, nullptr, d});
      } else {
        regions.push_back(
            {i, rb, 0, tc.rows, begin * tc.granule, ends[d] * tc.granule, nullptr, d});
      }
    }
    begin = ends[d];
  }
}

}  // namespace

Result<std::vector<TensorRegion>> CutTensors(const TensorDirectory& dir,
                                             const std::vector<CutRule>& cuts,
                                             const std::vector<double>& shares) {
  if (cuts.size() != dir.tensors.size()) {
    return Status::InvalidArgument("cuts are given for " + std::to_string(cuts.size()) +
                                   " tensors; the model has " + std::to_string(dir.tensors.size()));
  }
  if (shares.empty()) return Status::InvalidArgument("a tensor split needs a device");
  for (double s : shares) {
    if (!(s > 0) || !std::isfinite(s)) {
      return Status::InvalidArgument(
          "a device's share of a tensor split must be a positive number");
    }
  }
  const auto devices = static_cast<uint32_t>(shares.size());
  std::vector<TensorRegion> regions;
  for (size_t i = 0; i < dir.tensors.size(); ++i) {
    const TensorEntry& t = dir.tensors[i];
    const CutRule& cut = cuts[i];
    if (cut.cut == Cut::kOneDevice && cut.device >= devices) {
      return Status::InvalidArgument("tensor '" + t.name + "' is placed on device " +
                                     std::to_string(cut.device) + "; there are " +
                                     std::to_string(devices));
    }
    if (t.nbytes == 0) continue;
    AppendParts(i, SeeAsRows(t, cut.cut, devices), cut.device, shares, regions);
  }
  return regions;
}

Result<std::vector<TensorRegion>> PlaceTensorCuts(const PlacementInput& input) {
  const std::vector<double> equal(input.devices, 1.0);
  return CutTensors(*input.dir, ChooseCuts(*input.dir, input.rules),
                    input.shares.empty() ? equal : input.shares);
}

}  // namespace hoist
