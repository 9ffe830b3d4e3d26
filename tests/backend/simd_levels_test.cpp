// Every op test, and the int8 activation form's (Q8Rows), again on the AVX2 and scalar code paths:
// this binary re-runs its own tests in a child process with FT_CPU_SIMD capping the instruction set
// (the level is chosen once at start).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "backend/cpu/simd.h"

namespace {

TEST(SimdLevels, OpTestsPassOnEveryPath) {
  if (std::getenv("FT_CPU_SIMD")) GTEST_SKIP() << "child run";
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  for (const char* level : {"avx2", "scalar"}) {
    const std::string cmd = std::string("FT_CPU_SIMD=") + level + " " + self +
                            " --gtest_filter='Backends/*/cpu:Q8Rows.*' --gtest_brief=1 > /dev/null 2>&1";
    EXPECT_EQ(std::system(cmd.c_str()), 0) << "op tests fail with FT_CPU_SIMD=" << level << " (" << cmd << ")";
  }
}

TEST(SimdLevels, CapIsHonoured) {
  const char* cap = std::getenv("FT_CPU_SIMD");
  if (!cap) GTEST_SKIP() << "parent run";
  EXPECT_STREQ(ft::cpu::simd_level(), cap);
}

}  // namespace
