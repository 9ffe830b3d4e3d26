// `ft run`'s stderr while the model loads (issue 41): not a terminal here, so plain lines, never \r;
// the final line has the bytes read. FT_PROGRESS_MIN_BYTES=0 shows phases as small as this fixture's.
#include <gtest/gtest.h>

#include "cli/run_ft.h"
#include "formats/checkpoint.h"
#include "util/format.h"

namespace ft {
namespace {

std::string stories_path() { return ::ft::testing::shared_dir() + "/data/models/stories260K.gguf"; }

std::string run_args() {
  return "run --model " + quote(stories_path()) + " --threads 1 --prompt-ids 1,403 --max-tokens 1";
}

TEST(LoadProgress, FinalLineOnStderrWhenNotATerminal) {
  int64_t bytes = 0;
  for (const TensorInfo& t : open_checkpoint(stories_path())->tensors()) bytes += t.bytes;
  Result r = run_ft(run_args(), "FT_PROGRESS_MIN_BYTES=0");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string line = "weights: " + format_bytes(bytes) + " in ";
  EXPECT_NE(r.err.find(line), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("weights:"), std::string::npos) << r.out;  // stdout carries the text only
}

TEST(LoadProgress, QuietForSmallModelsAndAboveInfo) {
  Result small = run_ft(run_args());  // under the 64 MiB default
  ASSERT_EQ(small.code, 0) << small.err;
  EXPECT_EQ(small.err.find("weights:"), std::string::npos) << small.err;
  Result warn = run_ft("--log-level warn " + run_args(), "FT_PROGRESS_MIN_BYTES=0");
  ASSERT_EQ(warn.code, 0) << warn.err;
  EXPECT_EQ(warn.err.find("weights:"), std::string::npos) << warn.err;
  Result bad = run_ft(run_args(), "FT_PROGRESS_MIN_BYTES=lots");
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_NE(bad.err.find("FT_PROGRESS_MIN_BYTES=lots"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace ft
