// NcclCollective (dist/cuda/nccl_collective.h), the NCCL implementation of dist::Collective.
//  - NcclId's hex form round-trips (every build), and so does a real ncclGetUniqueId (CUDA build with
//    NCCL; needs no GPU).
//  - CudaNccl.*: a 1-rank group on device 0 (every op is a copy: values checked, in place too; split;
//    abort), the refusals (host memory, dtypes, sizes, root), and with >= 2 devices a 2-rank group in
//    this process against the in-process twin within float tolerance (NCCL's sums need not be
//    bit-identical to the twin's rank-order sums), split's ranking by key, and an abort that ends a rank
//    waiting on the GPU; an all_reduce captured into a CUDA graph and replayed (2 ranks where 2
//    devices are visible). Skipped without a CUDA device or without libnccl.so.2 (NCCL is loaded at run
//    time; FT_REQUIRE_GPU=1 makes either a failure; the 2-rank tests skip with fewer than 2 devices
//    either way).
//  - The run-time loader: FT_NCCL_LIBRARY naming a missing file is refused by name, naming one that
//    exists loads it (each in a fresh process; no GPU needed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/device.h"
#include "dist/in_process_collective.h"
#include "dist/nccl_id.h"
#include "tensor/half.h"
#include "util/error.h"

#ifdef FT_HAVE_CUDA
#include <cuda_runtime.h>

#include "dist/cuda/nccl_collective.h"
#endif

namespace ft::dist {
namespace {

template <typename F>
ErrorCode code_of(F&& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  ADD_FAILURE() << "no ft::Error thrown";
  return ErrorCode::kInternal;
}

TEST(NcclId, HexRoundTrip) {
  NcclId id;
  for (size_t i = 0; i < NcclId::kBytes; ++i) id.bytes[i] = static_cast<uint8_t>(i * 37 + 11);
  const std::string hex = id.to_hex();
  ASSERT_EQ(hex.size(), 256u);
  EXPECT_EQ(hex.substr(0, 6), "0b3055");  // 11, 48, 85
  EXPECT_EQ(NcclId::from_hex(hex), id);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  EXPECT_EQ(NcclId::from_hex(upper), id);
  std::string message;
  EXPECT_EQ(code_of([&] { NcclId::from_hex(hex.substr(1)); }, &message), ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("256 hex digits, not 255"), std::string::npos) << message;
  std::string bad = hex;
  bad[7] = 'g';
  EXPECT_EQ(code_of([&] { NcclId::from_hex(bad); }, &message), ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("character 7 is 'g'"), std::string::npos) << message;
}

#ifdef FT_HAVE_CUDA

TEST(NcclUniqueId, RealIdRoundTripsThroughHex) {
  if (!nccl_available()) {
    EXPECT_EQ(code_of([] { nccl_unique_id(); }), ErrorCode::kUnsupported);
    std::string message;
    EXPECT_EQ(code_of([] { make_nccl_group({0}, {nullptr}); }, &message), ErrorCode::kUnsupported);
    EXPECT_NE(message.find(nccl_unavailable_reason()), std::string::npos) << message;
    GTEST_SKIP() << "NCCL is not available: " << nccl_unavailable_reason();
  }
  NcclId id;
  try {
    id = nccl_unique_id();
  } catch (const Error& e) {  // NCCL's bootstrap found no network interface here
    GTEST_SKIP() << "ncclGetUniqueId failed: " << e.what();
  }
  EXPECT_NE(id, NcclId{});
  EXPECT_EQ(NcclId::from_hex(id.to_hex()), id);
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
}

#ifdef FT_HAVE_NCCL  // the rest uses NcclCollective itself, which a CUDA build without NCCL lacks

// The run-time loader (dist/cuda/nccl_library.h), each case in a fresh process (the threadsafe death-test
// style runs this binary again) so that FT_NCCL_LIBRARY is read at the first use. Needs no GPU.

/** In the child: FT_NCCL_LIBRARY names a missing file; exits 0 when NCCL is refused by name. */
[[noreturn]] void load_missing_library() {
  setenv("FT_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
  const std::string why = nccl_unavailable_reason();
  std::string message;
  const bool refused = code_of([] { make_nccl_group({0}, {nullptr}); }, &message) == ErrorCode::kUnsupported;
  const bool ok = !nccl_available() && refused && why.find("NCCL (libnccl.so.2) not found") == 0 &&
                  why.find("/nonexistent/libnccl.so.2") != std::string::npos &&
                  why.find("set FT_NCCL_LIBRARY to its path or install it") != std::string::npos &&
                  message.find("make_nccl_group: NCCL (libnccl.so.2) not found") == 0;
  std::fprintf(stderr, "reason: %s\nmessage: %s\n", why.c_str(), message.c_str());
  std::exit(ok ? 0 : 1);
}

/** In the child: FT_NCCL_LIBRARY names `path`; exits 0 when NCCL loaded from it. */
[[noreturn]] void load_library_at(const std::string& path) {
  setenv("FT_NCCL_LIBRARY", path.c_str(), 1);
  const bool ok = nccl_available() && nccl_unavailable_reason().empty();
  std::fprintf(stderr, "reason: %s\n", nccl_unavailable_reason().c_str());
  std::exit(ok ? 0 : 1);
}

TEST(NcclLibraryDeathTest, AMissingLibraryIsRefusedByName) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(load_missing_library(), ::testing::ExitedWithCode(0), "reason: NCCL \\(libnccl.so.2\\) not found");
}

TEST(NcclLibraryDeathTest, FtNcclLibraryLoadsTheFileNamed) {
  std::string path;
  for (const char* p : {"/usr/local/cuda/lib/libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2",
                        "/usr/lib/x86_64-linux-gnu/libnccl.so.2"})
    if (std::FILE* f = std::fopen(p, "rb")) {
      std::fclose(f);
      path = p;
      break;
    }
  if (path.empty()) GTEST_SKIP() << "no libnccl.so.2 in the usual places on this machine";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(load_library_at(path), ::testing::ExitedWithCode(0), "");
}

bool gpu_required() {
  const char* v = std::getenv("FT_REQUIRE_GPU");
  return v && std::string(v) == "1";
}

/** cudaMalloc'd bytes on one device, freed on that device. */
class DeviceBytes {
 public:
  DeviceBytes(int device, size_t bytes) : device_(device) {
    cudaSetDevice(device);
    if (cudaMalloc(&data_, bytes == 0 ? 1 : bytes) != cudaSuccess) fail(ErrorCode::kInternal, "cudaMalloc failed");
  }
  ~DeviceBytes() {
    cudaSetDevice(device_);
    cudaFree(data_);
  }
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void* data() const { return data_; }

 private:
  int device_;
  void* data_ = nullptr;
};

size_t elem_bytes(DType t) { return t == DType::U8 ? 1 : t == DType::BF16 ? 2 : 4; }

/** Host bytes of `values` in dtype `t` (F32, BF16 rounded, I32 and U8 truncated). */
std::vector<uint8_t> encode(const std::vector<float>& values, DType t) {
  std::vector<uint8_t> out(values.size() * elem_bytes(t));
  for (size_t i = 0; i < values.size(); ++i) {
    if (t == DType::F32) std::memcpy(&out[i * 4], &values[i], 4);
    if (t == DType::BF16) {
      const uint16_t b = f32_to_bf16(values[i]);
      std::memcpy(&out[i * 2], &b, 2);
    }
    if (t == DType::I32) {
      const int32_t v = static_cast<int32_t>(values[i]);
      std::memcpy(&out[i * 4], &v, 4);
    }
    if (t == DType::U8) out[i] = static_cast<uint8_t>(values[i]);
  }
  return out;
}

std::vector<float> decode(const std::vector<uint8_t>& bytes, DType t) {
  std::vector<float> out(bytes.size() / elem_bytes(t));
  for (size_t i = 0; i < out.size(); ++i) {
    if (t == DType::F32) std::memcpy(&out[i], &bytes[i * 4], 4);
    if (t == DType::BF16) {
      uint16_t b;
      std::memcpy(&b, &bytes[i * 2], 2);
      out[i] = bf16_to_f32(b);
    }
  }
  return out;
}

std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

enum class Op { kAllReduce, kAllGather, kReduceScatter, kBroadcast };

const char* op_name(Op op) {
  switch (op) {
    case Op::kAllReduce: return "all_reduce";
    case Op::kAllGather: return "all_gather";
    case Op::kReduceScatter: return "reduce_scatter";
    case Op::kBroadcast: return "broadcast";
  }
  return "?";
}

/** Element counts of send and recv for `op` with blocks of `count` over `n` ranks. */
std::pair<int64_t, int64_t> op_sizes(Op op, int64_t count, int n) {
  switch (op) {
    case Op::kAllGather: return {count, count * n};
    case Op::kReduceScatter: return {count * n, count};
    default: return {count * n, count * n};
  }
}

/** Runs `op` on `c` (broadcast: recv, filled with send first, from root n - 1). */
void call(Collective& c, Op op, const Tensor& send, const Tensor& recv) {
  switch (op) {
    case Op::kAllReduce: c.all_reduce(send, recv); break;
    case Op::kAllGather: c.all_gather(send, recv); break;
    case Op::kReduceScatter: c.reduce_scatter(send, recv); break;
    case Op::kBroadcast: c.broadcast(recv, c.group_size() - 1); break;
  }
}

/** Throws (so run_ranks aborts the group instead of leaving the other ranks waiting) when a CUDA
 *  call of a rank's body fails. */
void cuda_ok(cudaError_t e) {
  if (e != cudaSuccess) fail(ErrorCode::kInternal, "CUDA error: {}", cudaGetErrorString(e));
}

/** One rank's run of `op` on NCCL: uploads `input` (send; also recv for broadcast), calls, waits, and
 *  returns recv's bytes. Fills recv with 0xff first, so an unwritten element shows. */
std::vector<uint8_t> run_on_device(Collective& c, Op op, DType t, const std::vector<uint8_t>& input, int64_t recv_elems) {
  auto& nccl = dynamic_cast<NcclCollective&>(c);
  const size_t recv_bytes = static_cast<size_t>(recv_elems) * elem_bytes(t);
  const int64_t send_elems = static_cast<int64_t>(input.size() / elem_bytes(t));
  DeviceBytes send(nccl.device(), input.size()), recv(nccl.device(), recv_bytes);
  cudaSetDevice(nccl.device());
  // On the rank's stream (a non-blocking one: cudaMemcpy / cudaMemset would not order with it).
  cuda_ok(cudaMemcpyAsync(send.data(), input.data(), input.size(), cudaMemcpyHostToDevice, nccl.stream()));
  if (op == Op::kBroadcast)
    cuda_ok(cudaMemcpyAsync(recv.data(), input.data(), input.size(), cudaMemcpyHostToDevice, nccl.stream()));
  else
    cuda_ok(cudaMemsetAsync(recv.data(), 0xff, recv_bytes, nccl.stream()));
  call(c, op, Tensor(send.data(), t, {send_elems}, Device::kCuda), Tensor(recv.data(), t, {recv_elems}, Device::kCuda));
  nccl.synchronize();
  std::vector<uint8_t> out(recv_bytes);
  cuda_ok(cudaMemcpy(out.data(), recv.data(), recv_bytes, cudaMemcpyDeviceToHost));
  return out;
}

class CudaNccl : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but no CUDA device is visible";
      GTEST_SKIP() << "no CUDA device visible (set FT_REQUIRE_GPU=1 to make this a failure)";
    }
    if (!nccl_available()) {
      if (gpu_required()) FAIL() << "FT_REQUIRE_GPU=1 but NCCL is not available: " << nccl_unavailable_reason();
      GTEST_SKIP() << "NCCL is not available: " << nccl_unavailable_reason();
    }
  }
  void TearDown() override {
    for (size_t d = 0; d < streams_.size(); ++d) {
      cudaSetDevice(static_cast<int>(d));
      cudaStreamDestroy(streams_[d]);
    }
  }

  /** A group over devices 0..n-1, each rank on a new stream of its device. */
  std::vector<std::unique_ptr<Collective>> group(int n) {
    std::vector<int> devices;
    for (int d = 0; d < n; ++d) {
      devices.push_back(d);
      cudaSetDevice(d);
      cudaStream_t s = nullptr;
      EXPECT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
      streams_.push_back(s);
    }
    cudaSetDevice(0);
    return make_nccl_group(devices, streams_);
  }

  std::vector<cudaStream_t> streams_;
};

TEST_F(CudaNccl, OneRankOpsAreCopies) {
  auto ranks = group(1);
  Collective& c = *ranks[0];
  EXPECT_EQ(c.group_size(), 1);
  EXPECT_EQ(c.rank(), 0);
  const std::vector<float> values = random_values(10, 3);
  for (DType t : {DType::F32, DType::BF16}) {
    const std::vector<uint8_t> in = encode(values, t);
    for (Op op : {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter, Op::kBroadcast})
      EXPECT_EQ(run_on_device(c, op, t, in, 10), in) << op_name(op) << " " << dtype_name(t);
  }
  for (DType t : {DType::I32, DType::U8}) {  // broadcast moves bytes of any of its dtypes
    std::vector<float> small(10);
    for (int i = 0; i < 10; ++i) small[i] = static_cast<float>(i * 25);
    const std::vector<uint8_t> in = encode(small, t);
    EXPECT_EQ(run_on_device(c, Op::kBroadcast, t, in, 10), in) << dtype_name(t);
  }
  // In place: send is recv.
  const std::vector<uint8_t> in = encode(values, DType::F32);
  DeviceBytes buf(0, in.size());
  cuda_ok(cudaMemcpyAsync(buf.data(), in.data(), in.size(), cudaMemcpyHostToDevice, streams_[0]));
  const Tensor view(buf.data(), DType::F32, {10}, Device::kCuda);
  c.all_reduce(view, view);
  c.all_gather(view, view);
  c.reduce_scatter(view, view);
  dynamic_cast<NcclCollective&>(c).synchronize();
  std::vector<uint8_t> out(in.size());
  ASSERT_EQ(cudaMemcpy(out.data(), buf.data(), out.size(), cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(out, in);
}

TEST_F(CudaNccl, RefusesHostBuffersOtherDtypesAndBadSizes) {
  auto ranks = group(1);
  Collective& c = *ranks[0];
  DeviceBytes dev(0, 64);
  std::vector<float> host(4);
  const Tensor d4(dev.data(), DType::F32, {4}, Device::kCuda), h4(host.data(), DType::F32, {4});
  std::string m;
  EXPECT_EQ(code_of([&] { c.all_reduce(h4, d4); }, &m), ErrorCode::kInvalidArgument);
  EXPECT_NE(m.find("all_reduce: rank 0's send buffer is in cpu memory"), std::string::npos) << m;
  EXPECT_EQ(code_of([&] { c.all_gather(d4, h4); }, &m), ErrorCode::kInvalidArgument);
  EXPECT_NE(m.find("all_gather: rank 0's recv buffer"), std::string::npos) << m;
  const Tensor f16(dev.data(), DType::F16, {4}, Device::kCuda), i32(dev.data(), DType::I32, {4}, Device::kCuda);
  EXPECT_EQ(code_of([&] { c.all_reduce(f16, f16); }, &m), ErrorCode::kInvalidArgument);
  EXPECT_NE(m.find("F16"), std::string::npos) << m;
  EXPECT_EQ(code_of([&] { c.reduce_scatter(i32, i32); }, &m), ErrorCode::kInvalidArgument);  // sums only floats
  EXPECT_EQ(code_of([&] { c.broadcast(f16, 0); }, &m), ErrorCode::kInvalidArgument);
  const Tensor d3(dev.data(), DType::F32, {3}, Device::kCuda);
  EXPECT_EQ(code_of([&] { c.all_gather(d4, d3); }, &m), ErrorCode::kInvalidArgument);
  EXPECT_NE(m.find("does not fit all_gather over 1 ranks"), std::string::npos) << m;
  const Tensor b4(dev.data(), DType::BF16, {4}, Device::kCuda);
  EXPECT_EQ(code_of([&] { c.all_reduce(d4, b4); }, &m), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { c.broadcast(d4, 1); }, &m), ErrorCode::kInvalidArgument);
  EXPECT_NE(m.find("root 1, outside [0, 1)"), std::string::npos) << m;
  EXPECT_EQ(code_of([&] { make_nccl_group({0, 0}, {nullptr, nullptr}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { make_nccl_group({0}, {}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { make_nccl_group({cuda_device_count()}, {nullptr}); }), ErrorCode::kInvalidArgument);
  EXPECT_EQ(code_of([&] { make_nccl_rank(NcclId{}, 2, 2, 0, nullptr); }), ErrorCode::kInvalidArgument);
}

TEST_F(CudaNccl, OneRankSplitAndAbort) {
  auto ranks = group(1);
  Collective& c = *ranks[0];
  EXPECT_EQ(c.split(-1, 0), nullptr);
  std::unique_ptr<Collective> sub = c.split(5, 0);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->group_size(), 1);
  const std::vector<uint8_t> in = encode(random_values(6, 9), DType::F32);
  EXPECT_EQ(run_on_device(*sub, Op::kAllReduce, DType::F32, in, 6), in);
  c.abort("stop here");
  c.abort("a second reason");  // once is enough; later ones change nothing
  DeviceBytes dev(0, 16);
  const Tensor d4(dev.data(), DType::F32, {4}, Device::kCuda);
  std::string m;
  EXPECT_EQ(code_of([&] { c.all_reduce(d4, d4); }, &m), ErrorCode::kInternal);
  EXPECT_NE(m.find("all_reduce: the collective group was aborted: stop here"), std::string::npos) << m;
  EXPECT_EQ(code_of([&] { c.broadcast(d4, 0); }, &m), ErrorCode::kInternal);
  EXPECT_EQ(run_on_device(*sub, Op::kAllReduce, DType::F32, in, 6), in);  // the split group is its own
}

/** Skips a 2-rank test on fewer than 2 devices. */
#define FT_NEED_TWO_DEVICES() \
  if (cuda_device_count() < 2) GTEST_SKIP() << "needs 2 CUDA devices, " << cuda_device_count() << " visible"

TEST_F(CudaNccl, TwoRanksMatchTheInProcessTwin) {
  FT_NEED_TWO_DEVICES();
  const int n = 2;
  const int64_t count = 1000;  // per block; not a multiple of anything NCCL favours
  auto nccl = group(n);
  auto twin = make_in_process_group(n);
  for (DType t : {DType::F32, DType::BF16}) {
    for (Op op : {Op::kAllReduce, Op::kAllGather, Op::kReduceScatter, Op::kBroadcast}) {
      const auto [send_elems, recv_elems] = op_sizes(op, count, n);
      std::vector<std::vector<uint8_t>> inputs(n), got(n), want(n);
      for (int r = 0; r < n; ++r) inputs[r] = encode(random_values(static_cast<size_t>(send_elems), 100 + r), t);
      run_ranks(nccl, [&](Collective& c) {
        got[c.rank()] = run_on_device(c, op, t, inputs[c.rank()], recv_elems);
      });
      run_ranks(twin, [&](Collective& c) {
        const int r = c.rank();
        std::vector<uint8_t> send = inputs[r];
        want[r].assign(static_cast<size_t>(recv_elems) * elem_bytes(t), 0);
        if (op == Op::kBroadcast) want[r] = send;
        call(c, op, Tensor(send.data(), t, {send_elems}), Tensor(want[r].data(), t, {recv_elems}));
      });
      for (int r = 0; r < n; ++r) {
        const std::vector<float> g = decode(got[r], t), w = decode(want[r], t);
        ASSERT_EQ(g.size(), w.size());
        const float rel = t == DType::F32 ? 1e-6f : 1.0f / 128;  // one rounding of the sum apart at most
        for (size_t i = 0; i < g.size(); ++i)
          ASSERT_NEAR(g[i], w[i], rel * std::fabs(w[i]) + 1e-6f)
              << op_name(op) << " " << dtype_name(t) << " rank " << r << " element " << i;
      }
    }
  }
}

TEST_F(CudaNccl, TwoRankSplitIsRankedByKey) {
  FT_NEED_TWO_DEVICES();
  auto nccl = group(2);
  std::vector<int> sub_rank(2), single_size(2);
  std::vector<std::vector<uint8_t>> gathered(2);
  run_ranks(nccl, [&](Collective& c) {
    const int r = c.rank();
    std::unique_ptr<Collective> reversed = c.split(0, -r);  // rank 1 first
    std::unique_ptr<Collective> single = c.split(r, 0);     // {0}, {1}
    sub_rank[r] = reversed->rank();
    single_size[r] = single->group_size();
    gathered[r] = run_on_device(*reversed, Op::kAllGather, DType::F32, encode({static_cast<float>(r + 1)}, DType::F32), 2);
  });
  EXPECT_EQ(sub_rank, (std::vector<int>{1, 0}));
  EXPECT_EQ(single_size, (std::vector<int>{1, 1}));
  for (int r = 0; r < 2; ++r) EXPECT_EQ(decode(gathered[r], DType::F32), (std::vector<float>{2, 1})) << r;
}

TEST_F(CudaNccl, TwoRankAbortEndsARankWaitingOnTheGpu) {
  FT_NEED_TWO_DEVICES();
  auto nccl = group(2);
  const std::vector<uint8_t> in = encode(random_values(64, 5), DType::F32);
  // Both ranks run one all_reduce first, so the ranks are connected and the second one's host call
  // returns at once; then rank 0 fails and rank 1's second all_reduce waits on the GPU for it.
  std::string m;
  EXPECT_EQ(code_of([&] {
              run_ranks(nccl, [&](Collective& c) {
                run_on_device(c, Op::kAllReduce, DType::F32, in, 64);
                if (c.rank() == 0) fail(ErrorCode::kInvalidArgument, "rank 0 gives up");
                run_on_device(c, Op::kAllReduce, DType::F32, in, 64);
              });
            }, &m),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(m, "rank 0 gives up");
}

/** all_reduce captured into a CUDA graph on every rank's stream (after one eager call, as a graph
 *  runner warms up) and replayed twice with new send values: each replay sums the values of that
 *  moment. 2 ranks with 2 devices, else 1. */
TEST_F(CudaNccl, AllReduceReplaysFromACudaGraph) {
  const int n = cuda_device_count() >= 2 ? 2 : 1;
  auto nccl = group(n);
  const int64_t count = 257;
  std::vector<std::vector<float>> got(static_cast<size_t>(n) * 2);
  run_ranks(nccl, [&](Collective& c) {
    auto& rank = dynamic_cast<NcclCollective&>(c);
    const int r = c.rank();
    const size_t bytes = static_cast<size_t>(count) * 4;
    DeviceBytes send(rank.device(), bytes), recv(rank.device(), bytes);
    const Tensor s(send.data(), DType::F32, {count}, Device::kCuda), v(recv.data(), DType::F32, {count}, Device::kCuda);
    cudaSetDevice(rank.device());
    cuda_ok(cudaMemsetAsync(send.data(), 0, bytes, rank.stream()));
    c.all_reduce(s, v);  // eager warm-up: the ranks connect outside the capture
    rank.synchronize();
    cudaGraph_t graph = nullptr;
    cuda_ok(cudaStreamBeginCapture(rank.stream(), cudaStreamCaptureModeThreadLocal));
    c.all_reduce(s, v);
    cuda_ok(cudaStreamEndCapture(rank.stream(), &graph));
    cudaGraphExec_t exec = nullptr;
    cuda_ok(cudaGraphInstantiate(&exec, graph, 0));
    for (int replay = 0; replay < 2; ++replay) {
      const std::vector<float> in = random_values(static_cast<size_t>(count), static_cast<uint32_t>(10 * replay + r));
      cuda_ok(cudaMemcpyAsync(send.data(), in.data(), bytes, cudaMemcpyHostToDevice, rank.stream()));
      cuda_ok(cudaMemsetAsync(recv.data(), 0xff, bytes, rank.stream()));
      cuda_ok(cudaGraphLaunch(exec, rank.stream()));
      rank.synchronize();
      std::vector<float>& out = got[static_cast<size_t>(2 * r + replay)];
      out.resize(static_cast<size_t>(count));
      cuda_ok(cudaMemcpy(out.data(), recv.data(), bytes, cudaMemcpyDeviceToHost));
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
  });
  for (int replay = 0; replay < 2; ++replay) {
    std::vector<float> want(static_cast<size_t>(count), 0.f);
    for (int r = 0; r < n; ++r) {
      const std::vector<float> in = random_values(static_cast<size_t>(count), static_cast<uint32_t>(10 * replay + r));
      for (size_t i = 0; i < want.size(); ++i) want[i] += in[i];
    }
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(got[static_cast<size_t>(2 * r + replay)][i], want[i], 1e-6f * std::fabs(want[i]) + 1e-6f)
            << "replay " << replay << " rank " << r << " element " << i;
  }
}

#endif  // FT_HAVE_NCCL
#endif  // FT_HAVE_CUDA

}  // namespace
}  // namespace ft::dist
