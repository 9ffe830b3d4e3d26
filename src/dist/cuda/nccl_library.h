#pragma once
// NCCL loaded at run time (issue 43): dlopen("libnccl.so.2"), then "libnccl.so" (FT_NCCL_LIBRARY, when
// set, names the one file to load instead), on first use, and dlsym of the functions NcclCollective
// calls into one table. The build compiles against nccl.h for its types only, so neither `ft` nor a
// test binary has libnccl among its NEEDED libraries: a machine without NCCL runs everything but the
// multi-GPU rank group (vLLM's pynccl loads NCCL the same way). CUDA build with nccl.h only.
#include <nccl.h>

#include <string>

namespace ft::dist {

// The NCCL functions the table holds (each member has the function's own name and type).
#define FT_NCCL_FUNCTIONS(X)                                                                               \
  X(ncclGetVersion) X(ncclGetErrorString) X(ncclGetLastError) X(ncclGetUniqueId) X(ncclCommInitAll)       \
  X(ncclCommInitRank) X(ncclCommDestroy) X(ncclCommAbort) X(ncclCommCount) X(ncclCommUserRank)            \
  X(ncclCommGetAsyncError) X(ncclCommSplit) X(ncclGroupStart) X(ncclGroupEnd) X(ncclAllReduce)            \
  X(ncclAllGather) X(ncclReduceScatter) X(ncclBroadcast)

/** The loaded library's functions, its file and version (NCCL_VERSION_CODE form, e.g. 22809). */
struct NcclLibrary {
#define FT_NCCL_MEMBER(name) decltype(&::name) name = nullptr;
  FT_NCCL_FUNCTIONS(FT_NCCL_MEMBER)
#undef FT_NCCL_MEMBER
  std::string path;
  int version = 0;
};

/** The library, loaded on the first call (thread-safe; tried once per process). Returns nullptr when it
 *  could not be loaded, and then sets *why (if given) to "NCCL (libnccl.so.2) not found: <dlerror>; set
 *  FT_NCCL_LIBRARY to its path or install it" or "<path> lacks <symbol> (NCCL 2.18 or later is needed)". */
const NcclLibrary* nccl_library(std::string* why = nullptr);

/** nccl_library(), or throws ft::Error(kUnsupported) "<what>: <why>". */
const NcclLibrary& nccl_library_or_throw(const char* what);

}  // namespace ft::dist
