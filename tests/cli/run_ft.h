#pragma once
// Runs the `ft` binary (FT_BINARY) as a user would, through popen, for the CLI tests.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "test_util.h"

namespace ft {

struct Result {
  int code = -1;
  std::string out, err;
};

inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Runs `ft <args>` with `env` ("NAME=value ...", the shell's syntax) added to its environment; stdout
// through the pipe, stderr through a temp file.
inline Result run_ft(const std::string& args, const std::string& env = "") {
  static int counter = 0;
  std::string err_path = (std::filesystem::temp_directory_path() / ("ft_cli_err_" + std::to_string(::getpid()) + "_" +
                                                      std::to_string(counter++)))
                             .string();
  std::string cmd = (env.empty() ? "" : env + " ") + quote(FT_BINARY) + " " + args + " 2>" + quote(err_path);
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.out.append(buf, n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.err = ::ft::testing::read_file(err_path);
  std::filesystem::remove(err_path);
  return r;
}

}  // namespace ft
