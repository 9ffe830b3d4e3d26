// CpuExpertExecutor against the CPU backend's moe_experts on the same inputs: bit-identical for
// plain and GGUF weight types, batch sizes, skipped pairs, accumulation, BF16 activations, any
// thread count and gpt-oss's clamped SwiGLU with biases; argument errors.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <chrono>
#include <cstring>
#include <thread>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/gemm_amx.h"
#include "backend/cpu/q8_rows.h"
#include "backend/cpu/simd.h"
#include "moe/cpu_expert_executor.h"
#include "moe/expert_bank.h"
#include "moe/host_memory.h"
#include "moe_test_util.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft::testing {
namespace {

struct Case {
  DType gate_up, down;
  int64_t F, H;
};

TEST(CpuExpertExecutor, EqualsCpuBackendBitForBit) {
  const Case cases[] = {
      {DType::BF16, DType::BF16, 48, 64},
      {DType::F32, DType::F16, 40, 72},    // F32 read in place, odd lengths for the SIMD tails
      {DType::Q8_0, DType::Q8_0, 64, 96},
      {DType::Q4_K, DType::Q8_0, 64, 256},
      {DType::Q4_0, DType::BF16, 96, 64},
  };
  CpuOps ops(1);
  CpuExpertExecutor one(1), three(3);
  uint32_t seed = 10;
  for (const Case& c : cases) {
    const int32_t E = 7;
    SyntheticExperts s;
    s.add_layer(E, c.F, c.H, c.gate_up, c.down, seed++);
    const ExpertBank& bank = s.banks[0];
    for (int64_t T : {1, 5, 40}) {
      const int32_t k = 3;
      std::mt19937 rng(seed++);
      std::vector<int32_t> ids = random_routes(T, k, E, 0.5, rng);
      for (size_t i = 0; i < ids.size(); i += 4) ids[i] = -1;  // pairs the GPU computes
      std::vector<float> w = random_floats(ids.size(), seed++, 0.0f, 1.0f);
      std::vector<float> x = random_floats(static_cast<size_t>(T * c.H), seed++);
      std::vector<float> base = random_floats(static_cast<size_t>(T * c.H), seed++);
      Tensor tx(x.data(), DType::F32, {T, c.H}), ti(ids.data(), DType::I32, {T, k}), tw(w.data(), DType::F32, {T, k});
      for (bool acc : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(c.gate_up) << "/" << dtype_name(c.down) << " T " << T
                                          << " accumulate " << acc);
        std::vector<float> want = base, got1 = base, got3 = base;
        ops.moe_experts({acc}, tx, ti, tw, bank, Tensor(want.data(), DType::F32, {T, c.H}));
        one.run({acc}, tx, ti, tw, bank, Tensor(got1.data(), DType::F32, {T, c.H}));
        three.run({acc}, tx, ti, tw, bank, Tensor(got3.data(), DType::F32, {T, c.H}));
        EXPECT_EQ(std::memcmp(got1.data(), want.data(), want.size() * 4), 0);
        EXPECT_EQ(std::memcmp(got3.data(), want.data(), want.size() * 4), 0);
        double norm = 0;
        for (float v : want) norm += std::fabs(v);
        EXPECT_GT(norm, 0.0);
      }
      // BF16 activations (the GPU's dtype) equal F32 activations holding the same values.
      std::vector<uint16_t> xb(x.size());
      std::vector<float> xr(x.size());
      for (size_t i = 0; i < x.size(); ++i) xb[i] = f32_to_bf16(x[i]), xr[i] = bf16_to_f32(xb[i]);
      std::vector<float> want(x.size()), got(x.size());
      ops.moe_experts({}, Tensor(xr.data(), DType::F32, {T, c.H}), ti, tw, bank, Tensor(want.data(), DType::F32, {T, c.H}));
      three.run({}, Tensor(xb.data(), DType::BF16, {T, c.H}), ti, tw, bank, Tensor(got.data(), DType::F32, {T, c.H}));
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << "bf16 x, T " << T;
    }
  }
  EXPECT_GT(three.experts_computed(), 0);
  EXPECT_GT(three.pairs_computed(), three.experts_computed());
}

// gpt-oss's experts: clamped SwiGLU and per-expert biases, bit-identical to the CPU backend (as
// its header promises), directly, through ExpertBanks' host views (which carry the host bank's GLU
// and biases) and through ResidentExperts.
TEST(CpuExpertExecutor, ClampedSwigluWithBiasesEqualsCpuBackendBitForBit) {
  const Case cases[] = {{DType::BF16, DType::BF16, 48, 64}, {DType::Q8_0, DType::Q8_0, 64, 96},
                        {DType::Q4_K, DType::Q8_0, 64, 256}};
  CpuOps ops(1);
  CpuExpertExecutor one(1), three(3);
  auto alloc = make_host_allocator();
  uint32_t seed = 300;
  for (const Case& c : cases) {
    const int32_t E = 6, k = 2;
    SyntheticExperts s;
    s.add_layer(E, c.F, c.H, c.gate_up, c.down, seed++);
    ExpertBank& bank = s.banks[0];
    // Large biases and a small limit, so that both clamps bite.
    std::vector<float> gb = random_floats(static_cast<size_t>(E * c.F), seed++, -2.0f, 2.0f),
                       ub = random_floats(gb.size(), seed++, -2.0f, 2.0f),
                       db = random_floats(static_cast<size_t>(E * c.H), seed++);
    bank.glu = ExpertGlu::kSwigluOai, bank.glu_alpha = 1.702f, bank.glu_limit = 1.25f;
    bank.gate_bias = Tensor(gb.data(), DType::F32, {E, c.F});
    bank.up_bias = Tensor(ub.data(), DType::F32, {E, c.F});
    bank.down_bias = Tensor(db.data(), DType::F32, {E, c.H});
    ExpertBanks banks(s.banks, *alloc, 2);
    const ExpertBank& views = banks.bank(0);
    EXPECT_EQ(views.glu, ExpertGlu::kSwigluOai);
    EXPECT_EQ(views.glu_limit, 1.25f);
    EXPECT_EQ(views.up_bias.data, bank.up_bias.data);
    ResidentExperts resident(ops, s.banks);
    for (int64_t T : {1, 5, 40}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(c.gate_up) << "/" << dtype_name(c.down) << " T " << T);
      std::mt19937 rng(seed++);
      std::vector<int32_t> ids = random_routes(T, k, E, 0.5, rng);
      if (T > 1) ids[1] = -1;  // a pair the GPU computes
      std::vector<float> w = random_floats(ids.size(), seed++, 0.0f, 1.0f);
      std::vector<float> x = random_floats(static_cast<size_t>(T * c.H), seed++);
      Tensor tx(x.data(), DType::F32, {T, c.H}), ti(ids.data(), DType::I32, {T, k}), tw(w.data(), DType::F32, {T, k});
      std::vector<float> want(x.size()), got1(x.size()), got3(x.size()), got_banks(x.size()), got_res(x.size());
      ops.moe_experts({}, tx, ti, tw, bank, Tensor(want.data(), DType::F32, {T, c.H}));
      one.run({}, tx, ti, tw, bank, Tensor(got1.data(), DType::F32, {T, c.H}));
      three.run({}, tx, ti, tw, bank, Tensor(got3.data(), DType::F32, {T, c.H}));
      three.run({}, tx, ti, tw, views, Tensor(got_banks.data(), DType::F32, {T, c.H}));
      resident.compute(0, tx, ti, tw, Tensor(got_res.data(), DType::F32, {T, c.H}));
      EXPECT_EQ(std::memcmp(got1.data(), want.data(), want.size() * 4), 0);
      EXPECT_EQ(std::memcmp(got3.data(), want.data(), want.size() * 4), 0);
      EXPECT_EQ(std::memcmp(got_banks.data(), want.data(), want.size() * 4), 0);
      EXPECT_EQ(std::memcmp(got_res.data(), want.data(), want.size() * 4), 0);
      // The GLU and the biases took effect: plain SwiGLU without biases gives other values.
      ExpertBank plain = bank;
      plain.glu = ExpertGlu::kSwiglu, plain.gate_bias = plain.up_bias = plain.down_bias = Tensor();
      std::vector<float> other(x.size());
      ops.moe_experts({}, tx, ti, tw, plain, Tensor(other.data(), DType::F32, {T, c.H}));
      EXPECT_NE(std::memcmp(other.data(), want.data(), want.size() * 4), 0);
    }
  }
}

// EC12 banks (moe/ec12.h) decode to the BF16 they code: the executor's result is the BF16 bank's,
// bit for bit, on the fused single-input path and on decoded tiles (several inputs per expert).
TEST(CpuExpertExecutor, Ec12BankEqualsItsBf16Bank) {
  const int32_t E = 6, k = 2;
  const int64_t F = 192, H = 128;
  SyntheticExperts s;
  s.add_layer(E, F, H, DType::BF16, DType::BF16, 21);
  s.add_ec12_exceptions(0, 12, 3);
  auto alloc = make_host_allocator();
  ExpertBanks banks(s.banks, *alloc, 2, {}, false, BankFormat::kEc12);
  ASSERT_EQ(banks.bank(0).gate[0].dtype, DType::EC12);
  CpuExpertExecutor ex(3);
  for (int64_t T : {1, 2, 9}) {
    std::mt19937 rng(static_cast<uint32_t>(T));
    std::vector<int32_t> ids = random_routes(T, k, E, 0.0, rng);
    std::vector<float> w = random_floats(ids.size(), 5, 0.0f, 1.0f), x = random_floats(static_cast<size_t>(T * H), 6);
    Tensor tx(x.data(), DType::F32, {T, H}), ti(ids.data(), DType::I32, {T, k}), tw(w.data(), DType::F32, {T, k});
    std::vector<float> want(x.size()), got(x.size());
    ex.run({}, tx, ti, tw, s.banks[0], Tensor(want.data(), DType::F32, {T, H}));
    ex.run({}, tx, ti, tw, banks.bank(0), Tensor(got.data(), DType::F32, {T, H}));
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << "T " << T;
    double norm = 0;
    for (float v : want) norm += std::fabs(v);
    EXPECT_GT(norm, 0.0);
  }
}

TEST(CpuExpertExecutor, AnExpertThatFailsThrowsAndTheNextCallRuns) {
  // Gate/up and down run as one job: a down task waits for its expert's gate/up tasks. When those
  // fail (weights of a type nothing decodes), the waiting down tasks must still be released (the
  // job ends, never hangs), the error surfaces, and the executor works on the next call.
  const int64_t F = 128, H = 256, k = 4;
  SyntheticExperts s;
  s.add_layer(4, F, H, DType::BF16, DType::BF16, 7);
  ExpertBank bad = s.banks[0];
  std::vector<uint8_t> junk(static_cast<size_t>(F * H * 2));
  bad.gate[3] = Tensor(junk.data(), DType::Q8_K, {F, H});  // no decoder
  std::vector<int32_t> ids = {0, 1, 2, 3};
  std::vector<float> w = {0.1f, 0.2f, 0.3f, 0.4f}, x = random_floats(H, 8), want(H), got(H);
  Tensor tx(x.data(), DType::F32, {1, H}), ti(ids.data(), DType::I32, {1, k}), tw(w.data(), DType::F32, {1, k});
  CpuExpertExecutor ex(4);
  for (int i = 0; i < 20; ++i) EXPECT_THROW(ex.run({}, tx, ti, tw, bad, Tensor(got.data(), DType::F32, {1, H})), Error);
  CpuOps(1).moe_experts({}, tx, ti, tw, s.banks[0], Tensor(want.data(), DType::F32, {1, H}));
  ex.run({}, tx, ti, tw, s.banks[0], Tensor(got.data(), DType::F32, {1, H}));
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
}

TEST(CpuExpertExecutor, Int8ActivationsStayWithin2e4OfTheCpuBackend) {
  // --moe-cpu-int8: Q4_K rows meet int8 forms of x and h (cpu::dot_rows_q8). Against the fp32 CPU
  // backend: within 2e-4 (relative L2), never bit-identical where the int8 path ran (it did run);
  // the same bits at any thread count and for a token alone or in a batch (experts with several
  // inputs take the same path); Q4_K beside other types; a failing expert releases its down tasks.
  if (!cpu::has_q8_dot(DType::Q4_K)) GTEST_SKIP() << "no AVX-512 VNNI on this machine";
  const int64_t F = 512, H = 768;
  SyntheticExperts s;
  s.add_layer(8, F, H, DType::Q4_K, DType::Q4_K, 21);
  CpuOps ops(1);
  CpuExpertExecutor one(1, 0, true), three(3, 0, true);
  EXPECT_TRUE(three.int8_activations());
  EXPECT_FALSE(CpuExpertExecutor(1).int8_activations());
  std::vector<float> alone;  // token 0 of the T = 1 run
  for (int64_t T : {1, 6, 70}) {  // 6 tokens: some experts take several inputs; 70: x quantized on the pool
    SCOPED_TRACE(T);
    const int64_t k = 3;
    std::mt19937 rng(static_cast<uint32_t>(T));
    std::vector<int32_t> ids = random_routes(T, k, 8, 0.0, rng);
    std::vector<float> w = random_floats(ids.size(), 22, 0.0f, 1.0f), x = random_floats(T * H, 23);
    std::vector<float> want(T * H), got1(T * H), got3(T * H);
    Tensor tx(x.data(), DType::F32, {T, H}), ti(ids.data(), DType::I32, {T, k}), tw(w.data(), DType::F32, {T, k});
    ops.moe_experts({}, tx, ti, tw, s.banks[0], Tensor(want.data(), DType::F32, {T, H}));
    one.run({}, tx, ti, tw, s.banks[0], Tensor(got1.data(), DType::F32, {T, H}));
    three.run({}, tx, ti, tw, s.banks[0], Tensor(got3.data(), DType::F32, {T, H}));
    EXPECT_EQ(std::memcmp(got1.data(), got3.data(), got1.size() * 4), 0);
    EXPECT_NE(std::memcmp(got1.data(), want.data(), want.size() * 4), 0) << "the int8 path did not run";
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) num += std::pow(got1[i] - want[i], 2), den += std::pow(want[i], 2);
    EXPECT_LT(std::sqrt(num / den), 2e-4);  // 6.3e-5 and 1.8e-5 here
    EXPECT_GT(den, 0);
    if (T == 1) alone = got1;
    else {  // token 0 again (same x row and routes), now beside 5 others: the same bits
      std::vector<float> x0(x.begin(), x.begin() + H);
      std::vector<int32_t> id0(ids.begin(), ids.begin() + k);
      std::vector<float> w0(w.begin(), w.begin() + k), solo(H);
      three.run({}, Tensor(x0.data(), DType::F32, {1, H}), Tensor(id0.data(), DType::I32, {1, k}),
                Tensor(w0.data(), DType::F32, {1, k}), s.banks[0], Tensor(solo.data(), DType::F32, {1, H}));
      EXPECT_EQ(std::memcmp(solo.data(), got1.data(), H * 4), 0) << "token 0 alone differs from token 0 in the batch";
    }
  }
  EXPECT_EQ(alone.size(), static_cast<size_t>(H));
  for (auto [gu, dn] : {std::pair{DType::Q4_K, DType::Q8_0}, std::pair{DType::BF16, DType::Q4_K},
                        std::pair{DType::Q4_K, DType::Q6_K}}) {  // the last: a Q4_K_M file's layers
    SCOPED_TRACE(std::string(dtype_name(gu)) + "/" + dtype_name(dn));
    SyntheticExperts m;
    m.add_layer(4, F, H, gu, dn, 31);
    std::vector<int32_t> ids = {0, 1, 2, 3, 1, 2};
    std::vector<float> w = {0.3f, 0.2f, 0.1f, 0.4f, 0.5f, 0.6f}, x = random_floats(2 * H, 32), want(2 * H), got(2 * H);
    Tensor tx(x.data(), DType::F32, {2, H}), ti(ids.data(), DType::I32, {2, 3}), tw(w.data(), DType::F32, {2, 3});
    ops.moe_experts({}, tx, ti, tw, m.banks[0], Tensor(want.data(), DType::F32, {2, H}));
    three.run({}, tx, ti, tw, m.banks[0], Tensor(got.data(), DType::F32, {2, H}));
    double num = 0, den = 0;
    for (size_t i = 0; i < want.size(); ++i) num += std::pow(got[i] - want[i], 2), den += std::pow(want[i], 2);
    EXPECT_LT(std::sqrt(num / den), 2e-4);
    EXPECT_GT(den, 0);
  }
  // A failing expert (no decoder for its gate) still releases the down tasks waiting on its h.
  ExpertBank bad = s.banks[0];
  std::vector<uint8_t> junk(static_cast<size_t>(F * H * 2));
  bad.gate[2] = Tensor(junk.data(), DType::Q8_K, {F, H});
  std::vector<int32_t> ids = {0, 1, 2, 3};
  std::vector<float> w = {0.1f, 0.2f, 0.3f, 0.4f}, x = random_floats(H, 8), got(H);
  Tensor tx(x.data(), DType::F32, {1, H}), ti(ids.data(), DType::I32, {1, 4}), tw(w.data(), DType::F32, {1, 4});
  for (int i = 0; i < 10; ++i) EXPECT_THROW(three.run({}, tx, ti, tw, bad, Tensor(got.data(), DType::F32, {1, H})), Error);
  std::vector<float> again(H);
  three.run({}, tx, ti, tw, s.banks[0], Tensor(got.data(), DType::F32, {1, H}));
  one.run({}, tx, ti, tw, s.banks[0], Tensor(again.data(), DType::F32, {1, H}));
  EXPECT_EQ(std::memcmp(got.data(), again.data(), got.size() * 4), 0);
}

TEST(CpuExpertExecutor, Bf16ActivationsStayWithinBf16ToleranceOfTheCpuBackend) {
  // bf16 activations: BF16 (and EC12) rows meet BF16 forms of x and h (cpu::gemm_nt_bf16). Against
  // the fp32 CPU backend: within 1e-2 relative L2 (bf16 tolerance) and never bit-identical
  // (the path ran); the same bits at any thread count, for a token alone or in a batch (batch sizes
  // 1, 3, 16, 33), for BF16 x holding the same values, and for the EC12 bank of the same weights.
  // A gate/up or down of another type stays fp32.
  if (!cpu::has_bf16_dot()) GTEST_SKIP() << "no AVX-512 BF16 on this machine";
  const int32_t E = 8;
  const int64_t F = 96, H = 200, k = 3;  // H, F: not multiples of 32 (the kernel's tails)
  SyntheticExperts s;
  s.add_layer(E, F, H, DType::BF16, DType::BF16, 41);
  CpuOps ops(1);
  CpuExpertExecutor one(1, 0, false, true), three(3, 0, false, true);
  EXPECT_TRUE(three.bf16_activations());
  EXPECT_FALSE(CpuExpertExecutor(1).bf16_activations());
  auto rel = [](const std::vector<float>& a, const std::vector<float>& b) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) num += std::pow(a[i] - b[i], 2), den += std::pow(b[i], 2);
    EXPECT_GT(den, 0);
    return std::sqrt(num / den);
  };
  for (int64_t T : {1, 3, 16, 33}) {
    SCOPED_TRACE(T);
    std::mt19937 rng(static_cast<uint32_t>(T) + 100);
    std::vector<int32_t> ids = random_routes(T, k, E, 0.0, rng);
    std::vector<float> w = random_floats(ids.size(), 42, 0.0f, 1.0f), x = random_floats(T * H, 43);
    std::vector<float> want(T * H), got1(T * H), got3(T * H), got_b(T * H);
    Tensor tx(x.data(), DType::F32, {T, H}), ti(ids.data(), DType::I32, {T, k}), tw(w.data(), DType::F32, {T, k});
    ops.moe_experts({}, tx, ti, tw, s.banks[0], Tensor(want.data(), DType::F32, {T, H}));
    one.run({}, tx, ti, tw, s.banks[0], Tensor(got1.data(), DType::F32, {T, H}));
    three.run({}, tx, ti, tw, s.banks[0], Tensor(got3.data(), DType::F32, {T, H}));
    EXPECT_EQ(std::memcmp(got1.data(), got3.data(), got1.size() * 4), 0);
    EXPECT_NE(std::memcmp(got1.data(), want.data(), want.size() * 4), 0) << "the bf16 path did not run";
    EXPECT_LT(rel(got1, want), 1e-2);  // 2.6e-3 at T 33 on the development machine
    // BF16 x with x's bf16 values: the same bits (the executor rounds F32 x to them).
    std::vector<uint16_t> xb(x.size());
    cpu::to_bf16(x.data(), xb.data(), static_cast<int64_t>(x.size()));
    three.run({}, Tensor(xb.data(), DType::BF16, {T, H}), ti, tw, s.banks[0], Tensor(got_b.data(), DType::F32, {T, H}));
    EXPECT_EQ(std::memcmp(got_b.data(), got3.data(), got3.size() * 4), 0) << "BF16 x";
    // The last token alone: the bits it has in the batch (AVX-512 blocks for every input count; on
    // AMX an expert with 4 inputs or more runs on tiles: AmxTilesForExpertsWithSeveralInputs... below).
    if (three.amx()) continue;
    std::vector<float> xl(x.end() - H, x.end()), wl(w.end() - k, w.end()), solo(H);
    std::vector<int32_t> il(ids.end() - k, ids.end());
    three.run({}, Tensor(xl.data(), DType::F32, {1, H}), Tensor(il.data(), DType::I32, {1, k}),
              Tensor(wl.data(), DType::F32, {1, k}), s.banks[0], Tensor(solo.data(), DType::F32, {1, H}));
    EXPECT_EQ(std::memcmp(solo.data(), got3.data() + (T - 1) * H, H * 4), 0) << "a token alone differs from it in the batch";
  }
  // An EC12 bank (dimensions multiples of 64) gives its BF16 bank's bits.
  {
    SyntheticExperts b;
    b.add_layer(4, 128, 192, DType::BF16, DType::BF16, 44);
    auto alloc = make_host_allocator();
    ExpertBanks banks(b.banks, *alloc, 2, {}, false, BankFormat::kEc12);
    ASSERT_EQ(banks.bank(0).gate[0].dtype, DType::EC12);
    for (int64_t T : {1, 16}) {
      std::mt19937 rng(static_cast<uint32_t>(T) + 200);
      std::vector<int32_t> ids = random_routes(T, 2, 4, 0.0, rng);
      std::vector<float> w = random_floats(ids.size(), 45, 0.0f, 1.0f), x = random_floats(T * 192, 46);
      std::vector<float> want(x.size()), got(x.size());
      Tensor tx(x.data(), DType::F32, {T, 192}), ti(ids.data(), DType::I32, {T, 2}), tw(w.data(), DType::F32, {T, 2});
      three.run({}, tx, ti, tw, b.banks[0], Tensor(want.data(), DType::F32, {T, 192}));
      three.run({}, tx, ti, tw, banks.bank(0), Tensor(got.data(), DType::F32, {T, 192}));
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << "EC12, T " << T;
      double norm = 0;
      for (float v : want) norm += std::fabs(v);
      EXPECT_GT(norm, 0.0);
    }
  }
  // Mixed banks: BF16 gate/up with a Q8_0 down (down stays fp32), Q8_0 gate/up with a BF16 down.
  for (auto [gu, dn] : {std::pair{DType::BF16, DType::Q8_0}, std::pair{DType::Q8_0, DType::BF16}}) {
    SCOPED_TRACE(std::string(dtype_name(gu)) + "/" + dtype_name(dn));
    SyntheticExperts m;
    m.add_layer(4, 64, 128, gu, dn, 51);
    std::vector<int32_t> ids = {0, 1, 2, 3, 1, 2, 0, 1, 3};
    std::vector<float> w = random_floats(ids.size(), 52, 0.0f, 1.0f), x = random_floats(3 * 128, 53);
    std::vector<float> want(x.size()), got(x.size());
    Tensor tx(x.data(), DType::F32, {3, 128}), ti(ids.data(), DType::I32, {3, 3}), tw(w.data(), DType::F32, {3, 3});
    ops.moe_experts({}, tx, ti, tw, m.banks[0], Tensor(want.data(), DType::F32, {3, 128}));
    three.run({}, tx, ti, tw, m.banks[0], Tensor(got.data(), DType::F32, {3, 128}));
    EXPECT_NE(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
    EXPECT_LT(rel(got, want), 1e-2);
  }
}

TEST(CpuExpertExecutor, AmxTilesForExpertsWithSeveralInputsStayWithinBf16Tolerance) {
  // On a CPU with AMX-BF16 (the GPU hosts' Xeons; skipped elsewhere) bf16 activations run the blocks
  // of an expert with 4 inputs or more as AMX tiles: within bf16 tolerance of the fp32 CPU backend,
  // the same bits at any thread count, for the EC12 bank of the same weights, and for a token in any
  // batch whose experts all have 4 inputs or more; a token whose experts have fewer (AVX-512 blocks)
  // gets other last bits, within fp32 rounding of the AMX result.
  if (!cpu::has_amx_bf16() || !cpu::has_bf16_dot()) GTEST_SKIP() << "no AMX-BF16 on this machine";
  const int32_t E = 8;
  const int64_t F = 128, H = 256, k = 4;
  SyntheticExperts s;
  s.add_layer(E, F, H, DType::BF16, DType::BF16, 61);
  CpuOps ops(1);
  CpuExpertExecutor one(1, 0, false, true), three(3, 0, false, true);
  EXPECT_TRUE(three.amx());
  EXPECT_FALSE(CpuExpertExecutor(1).amx());
  auto alloc = make_host_allocator();
  ExpertBanks ec12(s.banks, *alloc, 2, {}, false, BankFormat::kEc12);
  ASSERT_EQ(ec12.bank(0).gate[0].dtype, DType::EC12);
  // Every token routes to experts 0-3 (in a token's own order): each expert has all T inputs.
  const int64_t T = 70;
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < k; ++j) ids[static_cast<size_t>(t * k + j)] = static_cast<int32_t>((t + j) % 4);
  std::vector<float> w = random_floats(ids.size(), 62, 0.0f, 1.0f), x = random_floats(T * H, 63);
  auto run = [&](CpuExpertExecutor& ex, int64_t t0, int64_t n, const ExpertBank& bank) {
    std::vector<float> y(static_cast<size_t>(n * H));
    ex.run({}, Tensor(x.data() + t0 * H, DType::F32, {n, H}), Tensor(ids.data() + t0 * k, DType::I32, {n, k}),
           Tensor(w.data() + t0 * k, DType::F32, {n, k}), bank, Tensor(y.data(), DType::F32, {n, H}));
    return y;
  };
  std::vector<float> want(static_cast<size_t>(T * H));
  ops.moe_experts({}, Tensor(x.data(), DType::F32, {T, H}), Tensor(ids.data(), DType::I32, {T, k}),
                  Tensor(w.data(), DType::F32, {T, k}), s.banks[0], Tensor(want.data(), DType::F32, {T, H}));
  const std::vector<float> got1 = run(one, 0, T, s.banks[0]), got3 = run(three, 0, T, s.banks[0]);
  EXPECT_EQ(std::memcmp(got1.data(), got3.data(), got1.size() * 4), 0) << "thread count";
  EXPECT_EQ(got3, run(three, 0, T, ec12.bank(0))) << "EC12";
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) num += std::pow(got1[i] - want[i], 2), den += std::pow(want[i], 2);
  ASSERT_GT(den, 0);
  EXPECT_LT(std::sqrt(num / den), 1e-2);
  // Tokens from 20 as batches of 16, 20 and 40 (every expert that many inputs: 1, 2 and 3 blocks of
  // 16 tokens per weight tile, so each of tile_rows16<1..3> runs; the batch of 70 ran 4 + 1): their
  // bits in the batch of 70.
  for (int64_t n : {16, 20, 40}) {
    const std::vector<float> part = run(three, 20, n, s.banks[0]);
    EXPECT_EQ(std::memcmp(part.data(), got3.data() + 20 * H, part.size() * 4), 0) << "a sub-batch of " << n << " differs";
  }
  // Tokens 0-2 (experts with 3 inputs: AVX-512 blocks): other last bits, within fp32 rounding.
  const std::vector<float> avx = run(three, 0, 3, s.banks[0]);
  EXPECT_NE(std::memcmp(avx.data(), got3.data(), avx.size() * 4), 0) << "the AMX path did not run";
  for (int64_t t = 0; t < 3; ++t) {
    float scale = 0;  // the token's largest output: the sums' rounding is relative to their magnitude
    for (int64_t i = 0; i < H; ++i) scale = std::max(scale, std::fabs(got3[static_cast<size_t>(t * H + i)]));
    ASSERT_GT(scale, 0.0f);
    for (int64_t i = 0; i < H; ++i)
      EXPECT_NEAR(avx[static_cast<size_t>(t * H + i)], got3[static_cast<size_t>(t * H + i)], 1e-4 * scale) << t << ", " << i;
  }
}

TEST(CpuExpertExecutor, PartialSumsAddUpToTheWhole) {
  // GPU part (some slots) + CPU part (the others, accumulated) = all slots, up to rounding.
  SyntheticExperts s;
  s.add_layer(8, 32, 64, DType::BF16, DType::BF16, 3);
  const int64_t T = 6, k = 4, H = 64;
  std::mt19937 rng(4);
  std::vector<int32_t> ids = random_routes(T, k, 8, 0.0, rng), gpu = ids, cpu = ids;
  for (size_t i = 0; i < ids.size(); ++i) (i % 3 == 0 ? gpu : cpu)[i] = -1;
  std::vector<float> w = random_floats(ids.size(), 5, 0, 1), x = random_floats(T * H, 6);
  std::vector<float> whole(T * H), part(T * H);
  CpuOps ops(1);
  CpuExpertExecutor ex(2);
  Tensor tx(x.data(), DType::F32, {T, H}), tw(w.data(), DType::F32, {T, k});
  ops.moe_experts({}, tx, Tensor(ids.data(), DType::I32, {T, k}), tw, s.banks[0], Tensor(whole.data(), DType::F32, {T, H}));
  ops.moe_experts({}, tx, Tensor(gpu.data(), DType::I32, {T, k}), tw, s.banks[0], Tensor(part.data(), DType::F32, {T, H}));
  ex.run({true}, tx, Tensor(cpu.data(), DType::I32, {T, k}), tw, s.banks[0], Tensor(part.data(), DType::F32, {T, H}));
  double num = 0, den = 0;
  for (size_t i = 0; i < whole.size(); ++i) num += std::pow(part[i] - whole[i], 2), den += std::pow(whole[i], 2);
  EXPECT_LT(std::sqrt(num / den), 1e-6);
  EXPECT_GT(den, 0);
}

TEST(CpuExpertExecutor, RejectsBadArguments) {
  SyntheticExperts s;
  s.add_layer(4, 32, 64, DType::BF16, DType::BF16, 3);
  CpuExpertExecutor ex(1);
  std::vector<float> x(2 * 64), out(2 * 64), w(4, 0.5f);
  std::vector<int32_t> ids = {0, 1, 2, 4};  // 4 is outside the bank
  Tensor tx(x.data(), DType::F32, {2, 64}), to(out.data(), DType::F32, {2, 64}), tw(w.data(), DType::F32, {2, 2});
  EXPECT_THROW(ex.run({}, tx, Tensor(ids.data(), DType::I32, {2, 2}), tw, s.banks[0], to), Error);
  ids[3] = 3;
  EXPECT_NO_THROW(ex.run({}, tx, Tensor(ids.data(), DType::I32, {2, 2}), tw, s.banks[0], to));
  EXPECT_THROW(ex.run({}, tx, Tensor(ids.data(), DType::I32, {1, 2}), tw, s.banks[0], to), Error);
  EXPECT_THROW(ex.run({}, tx, Tensor(ids.data(), DType::F32, {2, 2}), tw, s.banks[0], to), Error);
  EXPECT_THROW(ex.run({}, tx, Tensor(ids.data(), DType::I32, {2, 2}), tw, s.banks[0], tx), Error);  // alias
  std::vector<float> x32(2 * 32);
  EXPECT_THROW(ex.run({}, Tensor(x32.data(), DType::F32, {2, 32}), Tensor(ids.data(), DType::I32, {2, 2}), tw,
                      s.banks[0], Tensor(out.data(), DType::F32, {2, 32})),
               Error);  // H does not match the experts
}

}  // namespace
}  // namespace ft::testing
