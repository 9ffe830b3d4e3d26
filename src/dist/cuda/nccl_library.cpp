#include "dist/cuda/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <vector>

#include <spdlog/spdlog.h>

#include "util/error.h"

namespace ft::dist {
namespace {

struct Loaded {
  NcclLibrary lib;
  std::string error;  // "" when loaded
};

Loaded load() {
  Loaded out;
  const char* env = std::getenv("FT_NCCL_LIBRARY");
  const std::vector<std::string> candidates =
      env && *env ? std::vector<std::string>{env} : std::vector<std::string>{"libnccl.so.2", "libnccl.so"};
  void* handle = nullptr;
  std::string tried;
  for (const std::string& c : candidates) {
    handle = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      out.lib.path = c;
      break;
    }
    const char* e = dlerror();
    tried += (tried.empty() ? "" : "; ") + std::string(e ? e : c + ": dlopen failed");
  }
  if (!handle) {
    out.error = fmt::format("NCCL (libnccl.so.2) not found: {}{}; set FT_NCCL_LIBRARY to its path or install it",
                            tried, env && *env ? " (FT_NCCL_LIBRARY)" : "");
    return out;
  }
#define FT_NCCL_LOAD(name)                                                                                   \
  out.lib.name = reinterpret_cast<decltype(out.lib.name)>(dlsym(handle, #name));                             \
  if (!out.lib.name) {                                                                                       \
    out.error = fmt::format("NCCL at {} lacks {} (NCCL 2.18 or later is needed); set FT_NCCL_LIBRARY to a "  \
                            "newer libnccl.so.2 or install one", out.lib.path, #name);                       \
    dlclose(handle);                                                                                         \
    out.lib = NcclLibrary{};                                                                                 \
    return out;                                                                                              \
  }
  FT_NCCL_FUNCTIONS(FT_NCCL_LOAD)
#undef FT_NCCL_LOAD
  if (out.lib.ncclGetVersion(&out.lib.version) != ncclSuccess) out.lib.version = 0;
  const int v = out.lib.version;
  spdlog::debug("dist: NCCL {}.{}.{} loaded from {}", v / 10000, v / 100 % 100, v % 100, out.lib.path);
  return out;  // the handle stays open for the process
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}

}  // namespace

const NcclLibrary* nccl_library(std::string* why) {
  const Loaded& l = loaded();
  if (!l.error.empty()) {
    if (why) *why = l.error;
    return nullptr;
  }
  return &l.lib;
}

const NcclLibrary& nccl_library_or_throw(const char* what) {
  std::string why;
  const NcclLibrary* lib = nccl_library(&why);
  if (!lib) fail(ErrorCode::kUnsupported, "{}: {}", what, why);
  return *lib;
}

}  // namespace ft::dist
