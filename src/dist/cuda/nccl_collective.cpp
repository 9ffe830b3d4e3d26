#include "dist/cuda/nccl_collective.h"

#include <cuda_runtime.h>
#include <nccl.h>  // types only: the functions come from dist/cuda/nccl_library.h's table

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "dist/cuda/nccl_library.h"
#include "util/error.h"

static_assert(ft::dist::NcclId::kBytes == NCCL_UNIQUE_ID_BYTES, "NcclId must hold an ncclUniqueId");

namespace ft::dist {
namespace {

/** The NCCL loaded at run time; only called once a factory has loaded it (every handle comes from one). */
const NcclLibrary& lib() { return *nccl_library(); }

}  // namespace

/** One rank's communicator in this process. */
struct NcclCollective::Member {
  ncclComm_t comm = nullptr;
  std::mutex busy;    // held while a thread makes an NCCL call on comm (NCCL: one thread at a time)
  bool gone = false;  // comm was aborted (guarded by busy)
};

/** The comms of one group that live in this process: all ranks of make_nccl_group, the one rank of
 *  make_nccl_rank, or this process's ranks of one color of one split. Owns the comms; when the last
 *  handle goes, destroys them together (grouped, so ranks of one process cannot wait on each other). */
struct NcclCollective::Group {
  std::mutex mutex;  // guards reason, members and sub_groups
  std::atomic<bool> aborted{false};
  std::string reason;
  std::vector<std::unique_ptr<Member>> members;
  /** (split number, color) -> the sub-group this process's ranks of that color join. */
  std::map<std::pair<int, int>, std::weak_ptr<Group>> sub_groups;

  Member* add(ncclComm_t comm) {
    std::lock_guard<std::mutex> lock(mutex);
    members.push_back(std::make_unique<Member>());
    members.back()->comm = comm;
    return members.back().get();
  }

  ~Group() {
    std::vector<ncclComm_t> live;
    for (auto& m : members)
      if (!m->gone && m->comm) live.push_back(m->comm);
    if (live.empty()) return;
    if (live.size() > 1) lib().ncclGroupStart();
    for (ncclComm_t c : live) {
      const ncclResult_t r = lib().ncclCommDestroy(c);
      if (r != ncclSuccess) spdlog::warn("dist: ncclCommDestroy failed: {}", lib().ncclGetErrorString(r));
    }
    if (live.size() > 1) lib().ncclGroupEnd();
  }
};

namespace {

/** NCCL_NVLS_ENABLE=0 before any communicator is made (see the header). */
void force_nvls_off() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* v = std::getenv("NCCL_NVLS_ENABLE");
    if (v && std::string(v) != "0")
      spdlog::warn("dist: NCCL_NVLS_ENABLE={} ignored: NVLink multicast stays off (NCCL_NVLS_ENABLE=0)", v);
    setenv("NCCL_NVLS_ENABLE", "0", 1);
  });
}

[[noreturn]] void throw_nccl(const char* op, const char* call, ncclResult_t r, ncclComm_t comm) {
  const char* last = lib().ncclGetLastError(comm);
  fail(ErrorCode::kInternal, "{}: {} failed: {}{}{}", op, call, lib().ncclGetErrorString(r), last && *last ? ": " : "",
       last ? last : "");
}

void check_nccl(const char* op, const char* call, ncclResult_t r, ncclComm_t comm = nullptr) {
  if (r != ncclSuccess) throw_nccl(op, call, r, comm);
}

void check_cuda(const char* op, const char* call, cudaError_t e) {
  if (e != cudaSuccess) fail(ErrorCode::kInternal, "{}: {} failed: {}", op, call, cudaGetErrorString(e));
}

/** Makes `device` current for the scope and restores the previous one. */
class DeviceScope {
 public:
  DeviceScope(const char* op, int device) {
    check_cuda(op, "cudaGetDevice", cudaGetDevice(&previous_));
    if (previous_ != device) check_cuda(op, "cudaSetDevice", cudaSetDevice(device));
    device_ = device;
  }
  ~DeviceScope() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0, device_ = 0;
};

void check_device(int device) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
  if (device < 0 || device >= n)
    fail(ErrorCode::kInvalidArgument, "NCCL rank device {} is not a visible CUDA device ({} visible)", device, n);
}

bool reduces(DType t) { return t == DType::F32 || t == DType::BF16; }

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    default: return ncclUint8;  // U8 (broadcast only)
  }
}

/** Checks one buffer (`which`: "send", "recv" or "") of `op` on `rank`: a dtype the op takes (`bytes_too`:
 *  I32 and U8 as well), device memory, not null. */
void check_buffer(const char* op, int rank, const char* which, const Tensor& t, bool bytes_too) {
  const bool ok = reduces(t.dtype) || (bytes_too && (t.dtype == DType::I32 || t.dtype == DType::U8));
  const std::string buffer = *which ? std::string(which) + " buffer" : "buffer";
  if (!ok)
    fail(ErrorCode::kInvalidArgument, "{}: rank {}'s {} is {}; {} takes F32 and BF16{}", op, rank, buffer, t.str(), op,
         bytes_too ? " (and I32, U8)" : "");
  if (t.device != Device::kCuda)
    fail(ErrorCode::kInvalidArgument, "{}: rank {}'s {} is in {} memory; NCCL needs device memory (cuda)", op, rank,
         buffer, device_name(t.device));
  if (t.data == nullptr && t.numel() > 0) fail(ErrorCode::kInvalidArgument, "{}: rank {}'s {} is null", op, rank, buffer);
}

/** Checks send/recv of a reducing or gathering op: both buffers, equal dtypes, and element counts with
 *  recv * send_mult == send * recv_mult (all_gather: recv = n * send; reduce_scatter: send = n * recv). */
void check_pair(const char* op, int rank, int n, const Tensor& send, const Tensor& recv, int64_t recv_mult,
                int64_t send_mult) {
  check_buffer(op, rank, "send", send, false);
  check_buffer(op, rank, "recv", recv, false);
  if (send.dtype != recv.dtype)
    fail(ErrorCode::kInvalidArgument, "{}: rank {}'s send is {} but its recv is {}", op, rank, dtype_name(send.dtype),
         dtype_name(recv.dtype));
  if (recv.numel() * send_mult != send.numel() * recv_mult)
    fail(ErrorCode::kInvalidArgument,
         "{}: rank {}'s send has {} elements and its recv {}, which does not fit {} over {} ranks", op, rank,
         send.numel(), recv.numel(), op, n);
}

}  // namespace

NcclCollective::NcclCollective(std::shared_ptr<Group> group, Member* member, int device, cudaStream_t stream)
    : group_(std::move(group)), member_(member), device_(device), stream_(stream) {
  check_nccl("NcclCollective", "ncclCommCount", lib().ncclCommCount(member_->comm, &size_), member_->comm);
  check_nccl("NcclCollective", "ncclCommUserRank", lib().ncclCommUserRank(member_->comm, &rank_), member_->comm);
}

NcclCollective::~NcclCollective() = default;  // the Group destroys the comm with its last handle

void NcclCollective::abort_here(const char* op) {
  if (!member_->gone) {
    lib().ncclCommAbort(member_->comm);
    member_->gone = true;
  }
  std::lock_guard<std::mutex> lock(group_->mutex);
  fail(ErrorCode::kInternal, "{}: the collective group was aborted: {}", op, group_->reason);
}

/** Runs `call(comm)` (one NCCL call on this rank's comm) on this handle's device: first the abort and
 *  the asynchronous error state, then the call, then the abort again (an abort() that came while the
 *  call held the comm left the comm to this thread). */
template <typename Call>
void NcclCollective::enqueue(const char* op, const char* call_name, Call&& call) {
  Member& me = *member_;
  {
    std::lock_guard<std::mutex> busy(me.busy);
    if (group_->aborted.load()) abort_here(op);
    ncclResult_t async = ncclSuccess;
    check_nccl(op, "ncclCommGetAsyncError", lib().ncclCommGetAsyncError(me.comm, &async), me.comm);
    if (async != ncclSuccess && async != ncclInProgress) throw_nccl(op, "an earlier NCCL operation", async, me.comm);
    DeviceScope scope(op, device_);
    check_nccl(op, call_name, call(me.comm), me.comm);
  }
  if (group_->aborted.load()) {
    std::lock_guard<std::mutex> busy(me.busy);
    abort_here(op);
  }
}

void NcclCollective::all_reduce(const Tensor& send, const Tensor& recv) {
  check_pair("all_reduce", rank_, size_, send, recv, 1, 1);
  enqueue("all_reduce", "ncclAllReduce", [&](ncclComm_t c) {
    return lib().ncclAllReduce(send.data, recv.data, static_cast<size_t>(send.numel()), nccl_type(send.dtype), ncclSum, c,
                         stream_);
  });
}

void NcclCollective::all_gather(const Tensor& send, const Tensor& recv) {
  check_pair("all_gather", rank_, size_, send, recv, size_, 1);
  enqueue("all_gather", "ncclAllGather", [&](ncclComm_t c) {
    return lib().ncclAllGather(send.data, recv.data, static_cast<size_t>(send.numel()), nccl_type(send.dtype), c, stream_);
  });
}

void NcclCollective::reduce_scatter(const Tensor& send, const Tensor& recv) {
  check_pair("reduce_scatter", rank_, size_, send, recv, 1, size_);
  enqueue("reduce_scatter", "ncclReduceScatter", [&](ncclComm_t c) {
    return lib().ncclReduceScatter(send.data, recv.data, static_cast<size_t>(recv.numel()), nccl_type(send.dtype), ncclSum,
                             c, stream_);
  });
}

void NcclCollective::broadcast(const Tensor& buffer, int root) {
  check_buffer("broadcast", rank_, "", buffer, true);
  if (root < 0 || root >= size_)
    fail(ErrorCode::kInvalidArgument, "broadcast: rank {} names root {}, outside [0, {})", rank_, root, size_);
  enqueue("broadcast", "ncclBroadcast", [&](ncclComm_t c) {
    return lib().ncclBroadcast(buffer.data, buffer.data, static_cast<size_t>(buffer.numel()), nccl_type(buffer.dtype), root,
                         c, stream_);
  });
}

std::unique_ptr<Collective> NcclCollective::split(int color, int key) {
  ncclComm_t child = nullptr;
  try {
    enqueue("split", "ncclCommSplit", [&](ncclComm_t c) {
      return lib().ncclCommSplit(c, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, nullptr);
    });
  } catch (...) {  // aborted after the split was made: the new comm goes too
    if (child) lib().ncclCommAbort(child);
    throw;
  }
  const int number = splits_++;
  if (child == nullptr) return nullptr;
  std::shared_ptr<Group> sub;
  {
    std::lock_guard<std::mutex> lock(group_->mutex);
    std::weak_ptr<Group>& slot = group_->sub_groups[{number, color}];
    sub = slot.lock();
    if (!sub) slot = sub = std::make_shared<Group>();
  }
  Member* member = sub->add(child);
  return std::make_unique<NcclCollective>(std::move(sub), member, device_, stream_);
}

void NcclCollective::abort(const std::string& reason) {
  Group& g = *group_;
  std::lock_guard<std::mutex> lock(g.mutex);
  if (!g.aborted.load()) g.reason = reason;
  g.aborted.store(true);
  // Abort now every comm no thread is using (together: NCCL may need the local ranks to abort at
  // once); a comm in use is aborted by its thread when its call returns (enqueue).
  std::vector<Member*> idle;
  for (auto& m : g.members) {
    if (!m->busy.try_lock()) continue;
    if (m->gone) {
      m->busy.unlock();
      continue;
    }
    idle.push_back(m.get());
  }
  if (idle.size() > 1) lib().ncclGroupStart();
  for (Member* m : idle) lib().ncclCommAbort(m->comm), m->gone = true;
  if (idle.size() > 1) lib().ncclGroupEnd();
  for (Member* m : idle) m->busy.unlock();
}

void NcclCollective::synchronize() {
  Member& me = *member_;
  for (;;) {
    {
      std::lock_guard<std::mutex> busy(me.busy);
      if (group_->aborted.load()) abort_here("synchronize");
      DeviceScope scope("synchronize", device_);
      const cudaError_t e = cudaStreamQuery(stream_);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) check_cuda("synchronize", "cudaStreamQuery", e);
      ncclResult_t async = ncclSuccess;
      check_nccl("synchronize", "ncclCommGetAsyncError", lib().ncclCommGetAsyncError(me.comm, &async), me.comm);
      if (async != ncclSuccess && async != ncclInProgress) throw_nccl("synchronize", "an NCCL operation", async, me.comm);
    }
    std::this_thread::yield();
  }
}

bool nccl_available() { return nccl_library() != nullptr; }

std::string nccl_unavailable_reason() {
  std::string why;
  return nccl_library(&why) ? std::string() : why;
}

NcclId nccl_unique_id() {
  nccl_library_or_throw("nccl_unique_id");
  force_nvls_off();
  ncclUniqueId raw;
  check_nccl("nccl_unique_id", "ncclGetUniqueId", lib().ncclGetUniqueId(&raw));
  NcclId id;
  std::memcpy(id.bytes.data(), raw.internal, NcclId::kBytes);
  return id;
}

std::vector<std::unique_ptr<Collective>> make_nccl_group(std::vector<int> devices, std::vector<cudaStream_t> streams) {
  nccl_library_or_throw("make_nccl_group");
  const int n = static_cast<int>(devices.size());
  if (n < 1) fail(ErrorCode::kInvalidArgument, "make_nccl_group: an NCCL group needs at least 1 device");
  if (streams.size() != devices.size())
    fail(ErrorCode::kInvalidArgument, "make_nccl_group: {} devices but {} streams", devices.size(), streams.size());
  for (int r = 0; r < n; ++r) {
    check_device(devices[r]);
    for (int q = 0; q < r; ++q)
      if (devices[q] == devices[r])
        fail(ErrorCode::kInvalidArgument, "make_nccl_group: device {} is listed for ranks {} and {}; NCCL needs one "
             "device per rank", devices[r], q, r);
  }
  force_nvls_off();
  std::vector<ncclComm_t> comms(static_cast<size_t>(n), nullptr);
  {
    int previous = 0;
    cudaGetDevice(&previous);
    const ncclResult_t r = lib().ncclCommInitAll(comms.data(), n, devices.data());
    cudaSetDevice(previous);
    check_nccl("make_nccl_group", "ncclCommInitAll", r);
  }
  auto group = std::make_shared<NcclCollective::Group>();
  std::vector<std::unique_ptr<Collective>> handles;
  for (int r = 0; r < n; ++r) handles.push_back(std::make_unique<NcclCollective>(group, group->add(comms[r]), devices[r], streams[r]));
  return handles;
}

std::unique_ptr<Collective> make_nccl_rank(const NcclId& id, int rank, int n_ranks, int device, cudaStream_t stream) {
  nccl_library_or_throw("make_nccl_rank");
  if (n_ranks < 1 || rank < 0 || rank >= n_ranks)
    fail(ErrorCode::kInvalidArgument, "make_nccl_rank: rank {} is outside [0, {})", rank, n_ranks);
  check_device(device);
  force_nvls_off();
  ncclUniqueId raw;
  std::memcpy(raw.internal, id.bytes.data(), NcclId::kBytes);
  ncclComm_t comm = nullptr;
  {
    DeviceScope scope("make_nccl_rank", device);
    check_nccl("make_nccl_rank", "ncclCommInitRank", lib().ncclCommInitRank(&comm, n_ranks, raw, rank));
  }
  auto group = std::make_shared<NcclCollective::Group>();
  NcclCollective::Member* member = group->add(comm);
  return std::make_unique<NcclCollective>(std::move(group), member, device, stream);
}

}  // namespace ft::dist
