#include "moe/host_memory.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <climits>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>

#include <fmt/format.h>

#include "util/error.h"
#include "util/format.h"

namespace ft {

namespace {

int64_t mem_available_at(const std::string& path) {
  std::ifstream f(path);
  std::string key, unit;
  int64_t kb = 0;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return -1;
}

/** The first word of a cgroup file as bytes; -1 for "max", a missing file or junk. */
int64_t read_cgroup_value(const std::filesystem::path& p) {
  std::ifstream f(p);
  std::string w;
  if (!(f >> w) || w.empty() || w.find_first_not_of("0123456789") != std::string::npos || w.size() > 19) return -1;
  const int64_t v = std::stoll(w);
  return v >= (int64_t{1} << 60) ? -1 : v;  // v1 writes "no limit" as a page-rounded INT64_MAX
}

/** The value of `key` in a memory.stat file ("key bytes" lines), -1 when missing. */
int64_t read_stat_value(const std::filesystem::path& p, const char* key) {
  std::ifstream f(p);
  std::string k;
  int64_t v = 0;
  while (f >> k >> v)
    if (k == key) return v;
  return -1;
}

/** The tightest limit of the cgroup at `rel` under `mount` and its ancestors, its usage and the
 *  inactive page cache in it (memory.stat's `inactive_key`). */
void read_cgroup_dir(const std::filesystem::path& mount, const std::string& rel, const char* limit_file,
                     const char* usage_file, const char* inactive_key, HostMemoryLimits& m) {
  std::error_code ec;
  std::vector<std::filesystem::path> dirs{mount};  // the mount's root, then down the path
  for (const auto& part : std::filesystem::path(rel).relative_path()) {
    if (part.empty() || part == "." || part == "..") continue;
    dirs.push_back(dirs.back() / part);
  }
  if (!std::filesystem::is_directory(dirs.back(), ec)) dirs.resize(1);  // a container's cgroup namespace
  m.cgroup_usage = read_cgroup_value(dirs.back() / usage_file);
  m.cgroup_inactive_file = read_stat_value(dirs.back() / "memory.stat", inactive_key);
  for (const auto& d : dirs) {
    const int64_t lim = read_cgroup_value(d / limit_file);
    if (lim >= 0) m.cgroup_limit = m.cgroup_limit < 0 ? lim : std::min(m.cgroup_limit, lim);
  }
}

}  // namespace

int64_t host_memory_available() { return mem_available_at("/proc/meminfo"); }

HostMemoryLimits read_host_memory_limits(const std::string& root) {
  const std::filesystem::path r(root);
  HostMemoryLimits m;
  m.mem_available = mem_available_at((r / "proc/meminfo").string());
  std::ifstream f(r / "proc/self/cgroup");
  std::string line, v2, v1;
  bool has_v2 = false, has_v1 = false;
  while (std::getline(f, line)) {  // "ID:controllers:path"
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string id = line.substr(0, a), ctl = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (id == "0" && ctl.empty()) has_v2 = true, v2 = path;
    std::string c;
    for (std::istringstream cs(ctl); std::getline(cs, c, ',');)
      if (c == "memory") has_v1 = true, v1 = path;
  }
  if (has_v1)
    read_cgroup_dir(r / "sys/fs/cgroup/memory", v1, "memory.limit_in_bytes", "memory.usage_in_bytes",
                    "total_inactive_file", m);
  else if (has_v2)
    read_cgroup_dir(r / "sys/fs/cgroup", v2, "memory.max", "memory.current", "inactive_file", m);
  return m;
}

int64_t memlock_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return -1;
  return static_cast<int64_t>(std::min<rlim_t>(rl.rlim_cur, static_cast<rlim_t>(INT64_MAX)));
}

int64_t usable_host_memory(const HostMemoryLimits& m, bool pinned, int64_t margin) {
  int64_t u = -1;
  auto bound = [&](int64_t v) {
    if (v >= 0) u = u < 0 ? v : std::min(u, v);
  };
  bound(m.mem_available);
  const int64_t working_set =
      std::max<int64_t>(std::max<int64_t>(m.cgroup_usage, 0) - std::max<int64_t>(m.cgroup_inactive_file, 0), 0);
  if (m.cgroup_limit >= 0) bound(std::max<int64_t>(m.cgroup_limit - working_set, 0));
  if (pinned) bound(m.memlock);
  return u < 0 ? -1 : std::max<int64_t>(u - margin, 0);
}

std::string describe_host_memory(const HostMemoryLimits& m, bool pinned, int64_t usable) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (m.mem_available >= 0) add(fmt::format("MemAvailable {}", format_bytes(m.mem_available)));
  if (m.cgroup_limit >= 0)
    add(fmt::format("cgroup limit {} ({} used{})", format_bytes(m.cgroup_limit),
                    format_bytes(std::max<int64_t>(m.cgroup_usage, 0)),
                    m.cgroup_inactive_file > 0
                        ? fmt::format(", {} of it inactive page cache", format_bytes(m.cgroup_inactive_file))
                        : std::string()));
  if (pinned && m.memlock >= 0) add(fmt::format("RLIMIT_MEMLOCK {}", format_bytes(m.memlock)));
  if (s.empty()) return "host memory: no bound known";
  return fmt::format("host memory: {}; usable for expert banks {} ({} margin)", s,
                     usable >= 0 ? format_bytes(usable) : "unbounded", format_bytes(kHostMemoryMargin));
}

void check_bank_host_memory(int64_t bank_bytes, int64_t in_flight_bytes, bool source_released, int64_t available) {
  if (available < 0 || bank_bytes <= 0) return;
  const char* help =
      "Use a smaller weight type, fewer layers (--dummy-layers for a synthetic model), --moe-strategy fused with a "
      "--gpu-memory-limit that holds every expert, or a machine with more RAM";
  if (source_released) {
    const int64_t need = in_flight_bytes + kBankHostReserve;
    if (need > available)
      fail(ErrorCode::kOutOfMemory,
           "expert banks: filling {} of routed experts from a checkpoint that frees each layer once it is copied "
           "needs {} of free host memory ({} for the layers copied at once, {} reserve), but {} is available "
           "(MemAvailable, the cgroup's room). {}",
           format_bytes(bank_bytes), format_bytes(need), format_bytes(in_flight_bytes),
           format_bytes(kBankHostReserve), format_bytes(available), help);
    return;
  }
  const int64_t need = bank_bytes + kBankHostReserve;
  if (need > available)
    fail(ErrorCode::kOutOfMemory,
         "expert banks need {} of host memory ({} of routed experts, {} reserve), but {} is available (MemAvailable, "
         "the cgroup's room): banks of at most {} would fit. {}",
         format_bytes(need), format_bytes(bank_bytes), format_bytes(kBankHostReserve), format_bytes(available),
         format_bytes(std::max<int64_t>(0, available - kBankHostReserve)), help);
}

int64_t host_memory_room(const std::string& root) {
  return usable_host_memory(read_host_memory_limits(root), /*pinned=*/false, /*margin=*/0);
}

HostMemoryShrunk host_memory_shrunk(int64_t layer, int64_t need, int64_t still_to_copy, bool source_released,
                                    int64_t room_now, int64_t room_start) {
  const std::string what =
      source_released
          ? fmt::format("{} for the layers copied at once from a checkpoint that frees each layer once it is copied",
                        format_bytes(still_to_copy))
          : fmt::format("{} of expert records still to copy", format_bytes(still_to_copy));
  return HostMemoryShrunk(
      fmt::format("expert banks: host memory shrank while they were filled: before layer {} they still need {} ({}, "
                  "{} reserve), but {} is usable now ({} when the fill started; MemAvailable and the cgroup's room), "
                  "so another process took host memory. The fill stopped and its banks were freed rather than risk "
                  "the kernel's OOM killer. Free host memory, give --host-memory-limit below what stays free so "
                  "that more layers' experts are placed in device memory from the start, or use a smaller model or "
                  "weight type",
                  layer, format_bytes(need), what, format_bytes(need - still_to_copy),
                  format_bytes(std::max<int64_t>(room_now, 0)), room_start >= 0 ? format_bytes(room_start) : "not known"),
      layer, need, room_now, room_start);
}

std::unique_ptr<HostAllocator> make_bank_allocator(Ops& ops) { return ops.host_allocator(); }

}  // namespace ft
