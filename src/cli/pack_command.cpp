#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
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

// Compares `bytes` of `a` at a_offset with `b` at b_offset, 64 MiB at a time: the first byte
// that differs, or nullopt.
Result<std::optional<uint64_t>> FirstDifference(File& a, uint64_t a_offset, File& b,
                                                uint64_t b_offset, uint64_t bytes) {
  std::vector<unsigned char> in_a;
  std::vector<unsigned char> in_b;
  for (uint64_t done = 0; done < bytes;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(bytes - done, 64u << 20));
    in_a.resize(n);
    in_b.resize(n);
    HOIST_RETURN_IF_ERROR(a.ReadExact(a_offset + done, in_a.data(), n));
    HOIST_RETURN_IF_ERROR(b.ReadExact(b_offset + done, in_b.data(), n));
    if (std::memcmp(in_a.data(), in_b.data(), n) != 0) {
      size_t at = 0;
      while (in_a[at] == in_b[at]) ++at;
      return std::optional<uint64_t>(done + at);
    }
    done += n;
  }
  return std::optional<uint64_t>();
}

// Every tensor of `packed` (the file at packed_read, named packed_path) decodes to the bytes
// of the same tensor of `original`, as it was parsed.
Status CheckRoundTrip(const TensorDirectory& original, const std::string& packed_read,
                      const std::string& packed_path) {
  HOIST_ASSIGN_OR_RETURN(const TensorDirectory packed, ReadModelDirectory(packed_read));
  if (packed.tensors.size() != original.tensors.size()) {
    return Status(Code::kVerifyMismatch,
                  packed_path + " holds " + std::to_string(packed.tensors.size()) +
                      " tensors, the original " + std::to_string(original.tensors.size()));
  }
  HOIST_ASSIGN_OR_RETURN(std::unique_ptr<File> decoded, packed.OpenAsParsed(0));
  std::vector<std::unique_ptr<File>> files(original.files.size());
  for (size_t i = 0; i < original.tensors.size(); ++i) {
    const TensorEntry& o = original.tensors[i];
    const TensorEntry& p = packed.tensors[i];
    if (o.name != p.name || o.dtype != p.dtype || o.shape != p.shape || o.nbytes != p.nbytes) {
      return Status(Code::kVerifyMismatch, packed_path + ": tensor " + std::to_string(i) + " is " +
                                               p.name + " " + p.dtype + ", the original's " +
                                               o.name + " " + o.dtype);
    }
    if (!files[o.file]) {
      HOIST_ASSIGN_OR_RETURN(files[o.file], original.OpenAsParsed(o.file));
    }
    HOIST_ASSIGN_OR_RETURN(const std::optional<uint64_t> differs,
                           FirstDifference(*files[o.file], o.offset, *decoded, p.offset, o.nbytes));
    if (differs) {
      return Status(Code::kVerifyMismatch, packed_path + ": tensor " + o.name +
                                               " decodes differently from the original at byte " +
                                               std::to_string(*differs) + " of the tensor");
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
  cmd->add_option("MODEL", options->model,
                  "a model file, index, directory or first GGUF split; or a URL, s3://, gs://, "
                  "az:// or hf:// name")
      ->required();
  cmd->add_option("-o,--output", options->out, "the packed file to write (.hoistpack)")->required();
  cmd->add_flag("--check", options->check,
                "read the packed file back and compare every tensor with the original's bytes "
                "as they were when it was opened, before the file takes its name (a failed "
                "check leaves no file)");
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
    // The check reads the file before it takes its name: a pack that fails it leaves none.
    auto check = [&](const std::string& written) {
      return CheckRoundTrip(*original, written, options->out);
    };
    auto report =
        WritePacked(*original, options->out, threads,
                    options->check ? std::function<Status(const std::string&)>(check) : nullptr);
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
      std::printf("check: every tensor of %s decodes to %s's bytes\n", options->out.c_str(),
                  RedactUrl(options->model).c_str());
    }
    return kExitOk;
  };
}

}  // namespace hoist::cli
