// Usable host memory for the expert banks (issue 36): MemAvailable, the cgroup v2 and v1 limits of
// the process read from planted /proc and /sys files, RLIMIT_MEMLOCK when the banks are pinned, less
// the margin.
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "../test_util.h"
#include "moe/host_memory.h"

namespace ft::testing {
namespace {

constexpr int64_t GiB = int64_t{1} << 30;

/** A planted root under scratch space, removed at the end. */
struct FakeRoot {
  std::filesystem::path dir;
  explicit FakeRoot(const std::string& name) : dir(scratch_path(name)) { std::filesystem::remove_all(dir); }
  ~FakeRoot() { std::filesystem::remove_all(dir); }
  void put(const std::string& rel, const std::string& text) const {
    const std::filesystem::path p = dir / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
  }
  std::string root() const { return dir.string(); }
};

const char* kMeminfo = "MemTotal:       131072000 kB\nMemFree:         1000000 kB\nMemAvailable:   67108864 kB\n";

TEST(HostMemoryLimits, CgroupV2TightestAncestor) {
  FakeRoot r("hostmem_v2");
  r.put("proc/meminfo", kMeminfo);
  r.put("proc/self/cgroup", "0::/user.slice/job\n");
  r.put("sys/fs/cgroup/memory.max", "max\n");  // the root: no limit
  r.put("sys/fs/cgroup/user.slice/memory.max", std::to_string(40 * GiB) + "\n");
  r.put("sys/fs/cgroup/user.slice/job/memory.max", std::to_string(48 * GiB) + "\n");
  r.put("sys/fs/cgroup/user.slice/job/memory.current", std::to_string(10 * GiB) + "\n");
  const HostMemoryLimits m = read_host_memory_limits(r.root());
  EXPECT_EQ(m.mem_available, 64 * GiB);
  EXPECT_EQ(m.cgroup_limit, 40 * GiB);  // the parent's is tighter
  EXPECT_EQ(m.cgroup_usage, 10 * GiB);
  EXPECT_EQ(m.memlock, -1);
  EXPECT_EQ(usable_host_memory(m, false), 30 * GiB - kHostMemoryMargin);  // 40 - 10 < 64
  EXPECT_EQ(usable_host_memory(m, false, 0), 30 * GiB);
}

TEST(HostMemoryLimits, CgroupV2UnlimitedAndNamespaced) {
  FakeRoot r("hostmem_v2ns");
  r.put("proc/meminfo", kMeminfo);
  // A container: /proc/self/cgroup names a path its mount does not have; the mount's root is read.
  r.put("proc/self/cgroup", "0::/../host/path\n");
  r.put("sys/fs/cgroup/memory.max", std::to_string(8 * GiB));
  r.put("sys/fs/cgroup/memory.current", std::to_string(3 * GiB));
  HostMemoryLimits m = read_host_memory_limits(r.root());
  EXPECT_EQ(m.cgroup_limit, 8 * GiB);
  EXPECT_EQ(m.cgroup_usage, 3 * GiB);
  EXPECT_EQ(usable_host_memory(m, false), 4 * GiB);
  r.put("sys/fs/cgroup/memory.max", "max\n");
  m = read_host_memory_limits(r.root());
  EXPECT_EQ(m.cgroup_limit, -1);
  EXPECT_EQ(usable_host_memory(m, false), 63 * GiB);  // MemAvailable less the margin
}

TEST(HostMemoryLimits, CgroupV1) {
  FakeRoot r("hostmem_v1");
  r.put("proc/meminfo", kMeminfo);
  r.put("proc/self/cgroup", "12:cpu,cpuacct:/docker/abc\n11:memory:/docker/abc\n0::/\n");
  r.put("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");  // v1's "no limit"
  r.put("sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", std::to_string(16 * GiB));
  r.put("sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", std::to_string(2 * GiB));
  const HostMemoryLimits m = read_host_memory_limits(r.root());
  EXPECT_EQ(m.cgroup_limit, 16 * GiB);
  EXPECT_EQ(m.cgroup_usage, 2 * GiB);
  EXPECT_EQ(usable_host_memory(m, false), 13 * GiB);
}

// The cgroup's inactive page cache (a mapped checkpoint read by the fill) is reclaimed before the
// OOM killer acts: the room is the limit less the working set, and host_memory_room() reads it all.
TEST(HostMemoryLimits, InactivePageCacheIsRoom) {
  FakeRoot r("hostmem_stat");
  r.put("proc/meminfo", kMeminfo);
  r.put("proc/self/cgroup", "0::/job\n");
  r.put("sys/fs/cgroup/job/memory.max", std::to_string(40 * GiB));
  r.put("sys/fs/cgroup/job/memory.current", std::to_string(30 * GiB));
  r.put("sys/fs/cgroup/job/memory.stat",
        "anon 10737418240\nfile 21474836480\nactive_file 4294967296\ninactive_file " + std::to_string(16 * GiB) + "\n");
  HostMemoryLimits m = read_host_memory_limits(r.root());
  EXPECT_EQ(m.cgroup_inactive_file, 16 * GiB);
  EXPECT_EQ(usable_host_memory(m, false, 0), 26 * GiB);  // 40 - (30 - 16)
  EXPECT_EQ(host_memory_room(r.root()), 26 * GiB);
  EXPECT_NE(describe_host_memory(m, false, 25 * GiB).find("16.00 GiB of it inactive page cache"), std::string::npos);
  // cgroup v1 names it total_inactive_file.
  FakeRoot v1("hostmem_stat_v1");
  v1.put("proc/meminfo", kMeminfo);
  v1.put("proc/self/cgroup", "11:memory:/job\n");
  v1.put("sys/fs/cgroup/memory/job/memory.limit_in_bytes", std::to_string(16 * GiB));
  v1.put("sys/fs/cgroup/memory/job/memory.usage_in_bytes", std::to_string(12 * GiB));
  v1.put("sys/fs/cgroup/memory/job/memory.stat", "cache 1\ninactive_file 7\ntotal_inactive_file " + std::to_string(4 * GiB) + "\n");
  m = read_host_memory_limits(v1.root());
  EXPECT_EQ(m.cgroup_inactive_file, 4 * GiB);
  EXPECT_EQ(host_memory_room(v1.root()), 8 * GiB);  // 16 - (12 - 4)
}

TEST(HostMemoryLimits, MemlockBoundsPinnedBanksOnly) {
  HostMemoryLimits m;
  m.mem_available = 64 * GiB;
  m.memlock = 8 * GiB;
  EXPECT_EQ(usable_host_memory(m, true), 7 * GiB);
  EXPECT_EQ(usable_host_memory(m, false), 63 * GiB);
  m.mem_available = GiB / 2;  // less than the margin: nothing usable
  EXPECT_EQ(usable_host_memory(m, false), 0);
  EXPECT_NE(describe_host_memory(m, true, 0).find("RLIMIT_MEMLOCK 8.00 GiB"), std::string::npos);
}

TEST(HostMemoryLimits, NothingReadableMeansUnbounded) {
  FakeRoot r("hostmem_none");
  std::filesystem::create_directories(r.dir);
  const HostMemoryLimits m = read_host_memory_limits(r.root());
  EXPECT_EQ(m.mem_available, -1);
  EXPECT_EQ(m.cgroup_limit, -1);
  EXPECT_EQ(usable_host_memory(m, true), -1);
  EXPECT_EQ(host_memory_room(r.root()), -1);
  // The real system: MemAvailable is readable on Linux, and memlock_limit() does not throw.
  EXPECT_GT(read_host_memory_limits().mem_available, 0);
  (void)memlock_limit();
}

}  // namespace
}  // namespace ft::testing
