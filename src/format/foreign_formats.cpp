#include "format/foreign_formats.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "io/http_storage.h"
#include "io/hub.h"

namespace hoist {
namespace {

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.ends_with(suffix);
}

bool StartsWith(const unsigned char* head, size_t n, std::string_view magic) {
  return n >= magic.size() && std::memcmp(head, magic.data(), magic.size()) == 0;
}

std::string ConvertPyTorch(const std::string& path) {
  return "convert it to safetensors first, e.g. python3 -c \"import torch, hoist.safetensors.torch "
         "as "
         "st; st.save_file(torch.load('" +
         path + "', weights_only=True), 'model.safetensors')\"";
}

// SCHEME:// as RFC 3986 spells a scheme: a letter, then letters, digits, '+', '.' and '-'.
bool HasUrlScheme(std::string_view name) {
  auto letter = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  const size_t end = name.find("://");
  if (end == std::string_view::npos || end == 0 || !letter(name[0])) return false;
  const std::string_view scheme = name.substr(0, end);
  return std::all_of(scheme.begin(), scheme.end(), [&](char c) {
    return letter(c) || (c >= '0' && c <= '9') || c == '+' || c == '.' || c == '-';
  });
}

}  // namespace

ForeignFormat DescribeForeignFile(const unsigned char* head, size_t n, const std::string& path) {
  if (n > 8 && head[8] == '{') return {};  // a safetensors header's start
  if (StartsWith(head, n, "PK\x03\x04")) {
    return {"a zip archive, as PyTorch's torch.save writes (.bin, .pt, .pth)",
            ConvertPyTorch(path)};
  }
  if (n >= 2 && head[0] == 0x80 && head[1] >= 2 && head[1] <= 5) {
    return {"a Python pickle, as PyTorch's torch.save wrote before 1.6", ConvertPyTorch(path)};
  }
  for (const char* magic : {"lmgg", "fmgg", "tjgg", "algg"}) {
    if (StartsWith(head, n, magic)) {
      return {"a legacy GGML file (ggml, ggmf or ggjt: before GGUF)",
              "convert it with llama.cpp's convert_llama_ggml_to_gguf.py"};
    }
  }
  if (StartsWith(head, n, "\x89HDF\r\n\x1a\n")) {
    return {"an HDF5 file (Keras .h5)", "save the weights as safetensors first"};
  }
  if (StartsWith(head, n, "\x93NUMPY")) {
    return {"a NumPy .npy array", "save the arrays with safetensors.numpy.save_file first"};
  }
  size_t first = 0;
  while (first < n && (head[first] == ' ' || head[first] == '\n' || head[first] == '\r' ||
                       head[first] == '\t')) {
    ++first;
  }
  if (first < n && head[first] == '{') {
    return {"JSON text (a shard index is read as one only when its name ends in .index.json)",
            "name it MODEL.safetensors.index.json, with its shards beside it"};
  }
  if (EndsWith(path, ".onnx")) {
    return {"an ONNX model", "export the weights to safetensors first"};
  }
  return {};
}

std::string DescribeForeignDirectory(const std::vector<std::string>& files) {
  auto has = [&](std::string_view suffix) {
    return std::any_of(files.begin(), files.end(),
                       [&](const std::string& f) { return EndsWith(f, suffix); });
  };
  if (has(".bin") || has(".pt") || has(".pth") || has(".ckpt")) {
    return "it holds PyTorch checkpoints (.bin, .pt, .pth, .ckpt); convert them to safetensors "
           "first (transformers: from_pretrained(dir).save_pretrained(out, "
           "safe_serialization=True))";
  }
  if (has(".onnx")) return "it holds ONNX models; export the weights to safetensors first";
  if (has(".h5") || has(".keras")) {
    return "it holds Keras files; save the weights as safetensors first";
  }
  return {};
}

std::string DescribeMissingModel(Storage& storage, const std::string& name) {
  if (IsRemoteName(name)) return {};  // the source's own error says what happened
  if (HasUrlScheme(name)) {
    std::string schemes;
    const std::vector<std::string_view>& all = RemoteSchemes();
    for (size_t i = 0; i < all.size(); ++i) {
      schemes += (i == 0 ? "" : i + 1 == all.size() ? " and " : ", ") + std::string(all[i]);
    }
    return "it is a URL hoist does not read (it reads local files, " + schemes +
           "); download the model first and give hoist the local path";
  }
  if (!IsHubRepoId(name)) return {};
  if (const std::string snapshot = CachedSnapshot(storage, name, "main"); !snapshot.empty()) {
    return "it looks like a Hugging Face repo id, and the Hugging Face cache holds it: name it "
           "hf://" +
           name + " (or give hoist " + snapshot + ")";
  }
  return "it looks like a Hugging Face repo id: name it hf://" + name +
         " (hoist reads it from the Hugging Face cache, else from the hub)";
}

}  // namespace hoist
