// The GPU <-> CPU exchange protocol (moe/host_exchange.h) with its CPU twin: the device side
// (HostExchangeDevice) runs on a second host thread, as the GPU's kernels would, against the real
// dispatcher. Sequence numbers, request fields, results written and added in F32 and BF16, many
// requests with new inputs, handler failures and timeouts that surface in check() without a hang.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "moe/host_exchange.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft::testing {
namespace {

constexpr int64_t kMaxT = 4, kH = 48;
constexpr int32_t kK = 3;

/** The handler's function: out[t, h] = 2 x[t, h] + sum_j w[t, j] * ids[t, j] (ids < 0 skipped). */
float expected(const std::vector<float>& x, const std::vector<int32_t>& ids, const std::vector<float>& w, int64_t t,
               int64_t h, int64_t H, int64_t k) {
  float s = 2.0f * x[static_cast<size_t>(t * H + h)];
  for (int64_t j = 0; j < k; ++j) {
    const int32_t e = ids[static_cast<size_t>(t * k + j)];
    if (e >= 0) s += w[static_cast<size_t>(t * k + j)] * static_cast<float>(e);
  }
  return s;
}

void serve(const ExchangeRequest& r) {
  const int64_t T = r.x.rows(), H = r.x.cols(), k = r.ids.cols();
  const auto* x = static_cast<const float*>(r.x.data);
  const auto* ids = static_cast<const int32_t*>(r.ids.data);
  const auto* w = static_cast<const float*>(r.weights.data);
  auto* out = static_cast<float*>(r.out.data);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) {
      float s = 2.0f * x[t * H + h];
      for (int64_t j = 0; j < k; ++j)
        if (ids[t * k + j] >= 0) s += w[t * k + j] * static_cast<float>(ids[t * k + j]);
      out[t * H + h] = s;
    }
}

/** dev.check() throws ft::Error(kInternal) whose message holds `says`; `what` names the failure. */
void expect_check_reports(ExchangeDevice& dev, const std::string& says, const char* what) {
  try {
    dev.check();
    ADD_FAILURE() << "check() did not report " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInternal) << what;
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

class HostExchange : public ::testing::TestWithParam<int> {  // the dispatcher's spin_us
 protected:
  std::unique_ptr<HostAllocator> alloc_ = make_host_allocator();
  ExchangeBuffers buf_{*alloc_, kMaxT, kH, kK};
};

TEST_P(HostExchange, DeviceSideOnAnotherThreadGetsEveryResult) {
  std::vector<int32_t> layers;
  std::vector<uint64_t> seqs;
  ExchangeDispatcher disp(
      buf_,
      [&](const ExchangeRequest& r) {
        layers.push_back(r.layer);
        seqs.push_back(r.seq);
        serve(r);
      },
      GetParam());
  HostExchangeDevice dev(buf_, disp);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  std::atomic<int> bad{0};
  constexpr int kRequests = 200;
  std::thread device([&] {
    for (int i = 0; i < kRequests; ++i) {
      const int64_t T = 1 + i % kMaxT, H = kH - (i % 2) * 16;  // any shape within the buffers
      const bool accumulate = i % 3 == 0, bf16 = i % 4 == 1;
      std::vector<float> x(static_cast<size_t>(T * H)), w(static_cast<size_t>(T * kK)), prev(x.size());
      std::vector<int32_t> ids(w.size());
      for (float& f : x) f = u(rng);
      for (float& f : w) f = u(rng);
      for (float& f : prev) f = u(rng);
      for (int32_t& e : ids) e = static_cast<int32_t>(rng() % 9) - 1;  // -1: not the CPU's
      dev.post(i % 5, Tensor(x.data(), DType::F32, {T, H}), Tensor(ids.data(), DType::I32, {T, kK}),
               Tensor(w.data(), DType::F32, {T, kK}));
      std::vector<uint16_t> out16(x.size());
      for (size_t j = 0; j < prev.size(); ++j) prev[j] = bf16 ? bf16_to_f32(f32_to_bf16(prev[j])) : prev[j];
      for (size_t j = 0; j < prev.size(); ++j) out16[j] = f32_to_bf16(prev[j]);
      std::vector<float> out32 = prev;
      if (bf16)
        dev.collect(Tensor(out16.data(), DType::BF16, {T, H}), accumulate);
      else
        dev.collect(Tensor(out32.data(), DType::F32, {T, H}), accumulate);
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const size_t j = static_cast<size_t>(t * H + h);
          const float part = expected(x, ids, w, t, h, H, kK), want = (accumulate ? prev[j] : 0.0f) + part;
          const bool ok = bf16 ? out16[j] == f32_to_bf16(want) : out32[j] == want;
          if (!ok) ++bad;
        }
    }
  });
  device.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_NO_THROW(dev.check());
  ASSERT_EQ(static_cast<int>(seqs.size()), kRequests);
  EXPECT_EQ(disp.served(), kRequests);
  for (int i = 0; i < kRequests; ++i) {
    EXPECT_EQ(seqs[static_cast<size_t>(i)], static_cast<uint64_t>(i + 1));  // every request once, in order
    EXPECT_EQ(layers[static_cast<size_t>(i)], i % 5);
  }
}

INSTANTIATE_TEST_SUITE_P(Spin, HostExchange, ::testing::Values(0, 2000));

TEST(HostExchangeErrors, AHandlerThatThrowsIsReportedOnceAndTheNextRequestIsServed) {
  auto alloc = make_host_allocator();
  ExchangeBuffers buf(*alloc, kMaxT, kH, kK);
  int calls = 0;
  ExchangeDispatcher disp(
      buf,
      [&](const ExchangeRequest& r) {
        if (++calls == 1) fail(ErrorCode::kInvalidArgument, "expert 99 is not in the bank (test)");
        serve(r);
      },
      0);
  HostExchangeDevice dev(buf, disp);
  std::vector<float> x(kH, 1.0f), w(kK, 1.0f), out(kH, 0.0f);
  std::vector<int32_t> ids = {0, 1, 2};
  auto round = [&] {
    dev.post(0, Tensor(x.data(), DType::F32, {1, kH}), Tensor(ids.data(), DType::I32, {1, kK}),
             Tensor(w.data(), DType::F32, {1, kK}));
    dev.collect(Tensor(out.data(), DType::F32, {1, kH}), false);  // returns: the request is marked done
  };
  round();
  expect_check_reports(dev, "expert 99 is not in the bank", "the failure");
  EXPECT_NO_THROW(dev.check());  // reported once
  round();
  EXPECT_NO_THROW(dev.check());
  EXPECT_EQ(out[0], 2.0f + 0 + 1 + 2);
}

TEST(HostExchangeErrors, ASlowOrStuckDispatcherTimesOutInsteadOfHanging) {
  auto alloc = make_host_allocator();
  ExchangeBuffers buf(*alloc, kMaxT, kH, kK);
  std::atomic<bool> release{false};
  ExchangeDispatcher disp(
      buf,
      [&](const ExchangeRequest& r) {
        while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        serve(r);
      },
      0);
  HostExchangeDevice dev(buf, disp);
  dev.ack_timeout_s = 5.0, dev.done_timeout_s = 0.1;
  std::vector<float> x(kH, 1.0f), w(kK, 1.0f), out(kH, -7.0f);
  std::vector<int32_t> ids = {0, 1, 2};
  auto post = [&] {
    dev.post(1, Tensor(x.data(), DType::F32, {1, kH}), Tensor(ids.data(), DType::I32, {1, kK}),
             Tensor(w.data(), DType::F32, {1, kK}));
  };
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  /** Waits (up to 5 s) until the control block's field reaches v. */
  auto await = [&](uint64_t& field, uint64_t v) {
    const auto t = std::chrono::steady_clock::now();
    while (std::atomic_ref<uint64_t>(field).load() < v && seconds_since(t) < 5.0)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  // Started but not finished in time: collect returns after the done limit, out is left as it
  // was, check() says so.
  post();
  auto t0 = std::chrono::steady_clock::now();
  dev.collect(Tensor(out.data(), DType::F32, {1, kH}), true);
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_EQ(out[0], -7.0f);
  await(buf.host.ctrl->ack_seq, 1);  // on a loaded machine the dispatcher may take it only now
  expect_check_reports(dev, "started: yes", "the timeout");
  // The dispatcher is still busy with it: the next wait gives up at once, not after the 5 s ack
  // limit, and the request was never started.
  post();
  t0 = std::chrono::steady_clock::now();
  dev.collect(Tensor(out.data(), DType::F32, {1, kH}), true);
  EXPECT_LT(seconds_since(t0), 3.0);
  expect_check_reports(dev, "started: no", "the second timeout");
  EXPECT_NO_THROW(dev.check());
  // Once the dispatcher is free again and has caught up, requests are served.
  release = true;
  await(buf.host.ctrl->done_seq, 2);
  dev.ack_timeout_s = dev.done_timeout_s = 10.0;
  post();
  dev.collect(Tensor(out.data(), DType::F32, {1, kH}), false);
  EXPECT_NO_THROW(dev.check());
  EXPECT_EQ(out[0], 2.0f + 0 + 1 + 2);
}

TEST(HostExchangeErrors, PostRejectsShapesOverTheBuffers) {
  auto alloc = make_host_allocator();
  ExchangeBuffers buf(*alloc, kMaxT, kH, kK);
  ExchangeDispatcher disp(buf, serve, 0);
  HostExchangeDevice dev(buf, disp);
  std::vector<float> x((kMaxT + 1) * (kH + 1)), w((kMaxT + 1) * (kK + 1));
  std::vector<int32_t> ids(w.size());
  auto post = [&](int64_t T, int64_t H, int64_t k) {
    dev.post(0, Tensor(x.data(), DType::F32, {T, H}), Tensor(ids.data(), DType::I32, {T, k}),
             Tensor(w.data(), DType::F32, {T, k}));
  };
  EXPECT_THROW(post(kMaxT + 1, kH, kK), Error);
  EXPECT_THROW(post(1, kH + 1, kK), Error);
  EXPECT_THROW(post(1, kH, kK + 1), Error);
  EXPECT_THROW(post(1, 0, kK), Error);
  for (DType dt : {DType::F16, DType::I32})  // the CPU executor reads F32 or BF16
    EXPECT_THROW(dev.post(0, Tensor(x.data(), dt, {1, kH}), Tensor(ids.data(), DType::I32, {1, kK}),
                          Tensor(w.data(), DType::F32, {1, kK})),
                 Error);
  EXPECT_THROW(dev.post(0, Tensor(x.data(), DType::F32, {1, kH}), Tensor(ids.data(), DType::I32, {2, kK}),
                        Tensor(w.data(), DType::F32, {1, kK})),
               Error);
  EXPECT_THROW(dev.collect(Tensor(x.data(), DType::F32, {1, kH}), false), Error);  // nothing posted
  EXPECT_THROW(ExchangeBuffers(*alloc, 0, kH, kK), Error);
  EXPECT_THROW(ExchangeDispatcher(buf, serve, -1), Error);
}

}  // namespace
}  // namespace ft::testing
