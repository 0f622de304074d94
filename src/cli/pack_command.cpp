#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "base/platform.h"
#include "base/units.h"
#include "cli/commands.h"
#include "cli/exit_codes.h"
#include "format/model.h"
#include "format/packed.h"
#include "io/http_storage.h"

namespace hoist::cli {
namespace {

// Every tensor of `packed` decodes to the bytes of the same tensor of `original`.
Status CheckRoundTrip(const TensorDirectory& original, const std::string& packed_path) {
  HOIST_ASSIGN_OR_RETURN(const TensorDirectory packed, ReadModelDirectory(packed_path));
  if (packed.tensors.size() != original.tensors.size()) {
    return Status(Code::kVerifyMismatch,
                  packed_path + " holds " + std::to_string(packed.tensors.size()) +
                      " tensors, the original " + std::to_string(original.tensors.size()));
  }
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<File> decoded,
                         packed.source().Open(packed.files[0].path, {}));
  std::vector<std::unique_ptr<File>> files(original.files.size());
  std::vector<unsigned char> want;
  std::vector<unsigned char> got;
  for (size_t i = 0; i < original.tensors.size(); ++i) {
    const TensorEntry& o = original.tensors[i];
    const TensorEntry& p = packed.tensors[i];
    if (o.name != p.name || o.dtype != p.dtype || o.shape != p.shape || o.nbytes != p.nbytes) {
      return Status(Code::kVerifyMismatch, packed_path + ": tensor " + std::to_string(i) + " is " +
                                               p.name + " " + p.dtype + ", the original's " +
                                               o.name + " " + o.dtype);
    }
    if (!files[o.file]) {
      HOIST_ASSIGN_OR_RETURN(files[o.file],
                             original.source().Open(original.files[o.file].path, {}));
    }
    for (uint64_t done = 0; done < o.nbytes;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(o.nbytes - done, 64u << 20));
      want.resize(n);
      got.resize(n);
      HOIST_RETURN_IF_ERROR(files[o.file]->ReadExact(o.offset + done, want.data(), n));
      HOIST_RETURN_IF_ERROR(decoded->ReadExact(p.offset + done, got.data(), n));
      if (std::memcmp(want.data(), got.data(), n) != 0) {
        size_t at = 0;
        while (want[at] == got[at]) ++at;
        return Status(Code::kVerifyMismatch, packed_path + ": tensor " + o.name +
                                                 " decodes differently from the original at "
                                                 "byte " +
                                                 std::to_string(done + at) + " of the tensor");
      }
      done += n;
    }
  }
  return Status::Ok();
}

}  // namespace

Runner RegisterPack(CLI::App& app) {
  struct Options {
    std::string model;
    std::string out;
    bool check = false;
    int threads = 0;
  };
  auto options = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand(
      "pack",
      "Write a lossless packed copy of a model: float exponents entropy-coded, the rest as it "
      "is; hoist loads it as the original (docs/FORMATS.md, hoist-packed)");
  cmd->add_option("MODEL", options->model, "a model file, index, directory or first GGUF split")
      ->required();
  cmd->add_option("-o,--output", options->out, "the packed file to write (.hoistpack)")->required();
  cmd->add_flag("--check", options->check,
                "read the packed file back and compare every tensor with the original, byte "
                "for byte, before saying it is done");
  cmd->add_option("--threads", options->threads, "encoder threads (default: one per CPU)")
      ->check(CLI::Range(0, 1024));
  return [options]() -> int {
    auto original = ReadModelDirectory(options->model);
    if (!original.ok()) return ReportFailure(original.status());
    if (original->format == kPackedFormat) {
      return ReportFailure(
          Status::InvalidArgument(RedactUrl(options->model) + " is packed already"));
    }
    const auto start = std::chrono::steady_clock::now();
    const int threads = options->threads > 0 ? options->threads : CpuCount();
    auto report = WritePacked(*original, options->out, threads);
    if (!report.ok()) return ReportFailure(report.status());
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    size_t coded = 0;
    for (const PackReport::Tensor& t : report->tensors) coded += t.coded ? 1 : 0;
    std::printf("packed %zu tensors (%zu coded, %zu as they are): %s -> %s (%.1f%%) in %.1f s\n",
                report->tensors.size(), coded, report->tensors.size() - coded,
                FormatBytes(report->bytes).c_str(), FormatBytes(report->stored).c_str(),
                report->bytes > 0 ? 100.0 * static_cast<double>(report->stored) /
                                        static_cast<double>(report->bytes)
                                  : 100.0,
                seconds);
    if (coded == 0) {
      std::printf(
          "no tensor got smaller coded: packing codes the exponents of BF16, F16 and F32 "
          "weights, which gains where they cluster (trained weights); these are stored as they "
          "are, and the packed copy saves nothing\n");
    }
    std::printf("wrote %s\n", options->out.c_str());
    if (options->check) {
      if (Status checked = CheckRoundTrip(*original, options->out); !checked.ok()) {
        return ReportFailure(checked);
      }
      std::printf("check: every tensor of %s decodes to %s's bytes\n", options->out.c_str(),
                  RedactUrl(options->model).c_str());
    }
    return kExitOk;
  };
}

}  // namespace hoist::cli
