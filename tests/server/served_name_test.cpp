// default_served_name: the name `ft serve` gives a checkpoint without --served-model-name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "server/context.h"

namespace ft::server {
namespace {

TEST(ServedName, FileStemFolderNameAndTrailingSlashes) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ft_served_name_" + std::to_string(::getpid()));
  fs::create_directories(dir / "Qwen3-0.6B" / "sub");
  std::ofstream(dir / "model.gguf") << "x";
  const std::string d = dir.string();
  EXPECT_EQ(default_served_name(d + "/model.gguf"), "model");
  EXPECT_EQ(default_served_name(d + "/Qwen3-0.6B"), "Qwen3-0.6B");  // a folder keeps its dot
  EXPECT_EQ(default_served_name(d + "/Qwen3-0.6B/"), "Qwen3-0.6B");  // as shell completion writes it
  EXPECT_EQ(default_served_name(d + "/Qwen3-0.6B//"), "Qwen3-0.6B");
  EXPECT_EQ(default_served_name(d + "/Qwen3-0.6B/."), "Qwen3-0.6B");
  EXPECT_EQ(default_served_name(d + "/Qwen3-0.6B/sub/.."), "Qwen3-0.6B");
  EXPECT_EQ(default_served_name("missing/dir/weights.safetensors"), "weights");  // not there: a file's stem
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ft::server
