#pragma once
// Entry point to the NCCL collective that compiles in every build: code outside dist/cuda and
// backend/cuda (the engine's rank group, tests) makes an NCCL group through this header and never
// includes CUDA or NCCL headers (dist/cuda/nccl_collective.h is the CUDA-side form). NCCL itself is
// loaded at run time (dist/cuda/nccl_library.h): a machine without libnccl.so.2 runs everything else.
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "dist/collective.h"

namespace ft::dist {

/** Whether NCCL can be used: a CUDA build with nccl.h whose libnccl.so.2 (or FT_NCCL_LIBRARY) loaded.
 *  The first call tries to load it. False in a build without CUDA. */
bool nccl_available();

/** "" when nccl_available(), else why not (the library not found, a symbol missing, no CUDA or no
 *  nccl.h in this build). */
std::string nccl_unavailable_reason();

/** ops.size() NCCL ranks in this process: rank r runs on ops[r]'s CUDA device and enqueues on ops[r]'s
 *  stream, so the collectives are ordered with that backend's kernels and can be captured with them into
 *  a CUDA graph. Each handle is then driven by its own thread (see make_nccl_group in
 *  dist/cuda/nccl_collective.h); the Ops must outlive the handles. Throws ft::Error(kInvalidArgument)
 *  for no ops, a null or non-CUDA Ops, or two on one device; kUnsupported when NCCL is not available
 *  ("NCCL (libnccl.so.2) not found: ...; set FT_NCCL_LIBRARY to its path or install it") or in a build
 *  without CUDA; kInternal when NCCL fails. */
std::vector<std::unique_ptr<Collective>> make_nccl_group_on(const std::vector<Ops*>& ops);

}  // namespace ft::dist
