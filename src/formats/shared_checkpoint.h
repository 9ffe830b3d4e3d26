#pragma once
// share_checkpoint: one checkpoint read by several engines at once (the ranks of a RankGroup, issue 43),
// so a model held in anonymous memory (a synthetic checkpoint, tools/synthetic_checkpoint.h) is made
// once, not once a rank. Each view forwards format, path, tensors and metadata to the one checkpoint;
// its release() marks the whole pages inside the range as done for that view, and a page goes back
// to the OS (the shared checkpoint's own release) only once every view released it. A rank that fills
// its expert banks thus never frees bytes another rank has still to copy; a rank that will never read
// some experts (--expert-parallel: another rank owns them) releases them when it drops them.
#include <memory>
#include <vector>

#include "formats/checkpoint.h"

namespace ft {

/** `n` views of `ckpt` (n in [1, 8]); the checkpoint lives until the last view goes. The views may
 *  be used on different threads at once (release() is thread-safe; the rest is read-only).
 *  releases_memory() is ckpt's; release() of a range that reaches outside the tensors' memory
 *  releases nothing there. Throws ft::Error(kInvalidArgument) for a null checkpoint or n out of range. */
std::vector<std::unique_ptr<Checkpoint>> share_checkpoint(std::unique_ptr<Checkpoint> ckpt, int n);

}  // namespace ft
