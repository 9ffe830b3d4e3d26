// The expert banks' fill measures host memory again before each MoE layer (issue 36: "re-checking
// availability while loading"): a planted HostMemoryProbe reports memory shrinking mid-fill, and the
// fill stops with HostMemoryShrunk naming the layer and the bytes still needed, usable now and at
// start; a stable probe changes nothing; a checkpoint that frees each copied layer needs only the
// layers in flight.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <vector>

#include "moe/expert_bank.h"
#include "moe/host_memory.h"
#include "moe_test_util.h"
#include "util/format.h"

namespace ft::testing {
namespace {

constexpr int64_t TiB = int64_t{1} << 40;

/** A probe that answers answers[i] at its i-th call (the last one from then on). */
struct ScriptedHost {
  std::vector<int64_t> answers;
  std::atomic<int> calls{0};
  explicit ScriptedHost(std::vector<int64_t> a) : answers(std::move(a)) {}
  HostMemoryProbe probe() {
    return [this] {
      const size_t i = static_cast<size_t>(calls++);
      return answers[std::min(i, answers.size() - 1)];
    };
  }
};

/** Dense, 6 BF16 experts (layer 1), dense, 8 Q4_K/Q8_0 experts (layer 3), 6 BF16 experts (layer 4). */
SyntheticExperts mixed_model() {
  SyntheticExperts s;
  s.add_dense_layer();
  s.add_layer(6, 64, 96, DType::BF16, DType::BF16, 1);
  s.add_dense_layer();
  s.add_layer(8, 64, 256, DType::Q4_K, DType::Q8_0, 2);
  s.add_layer(6, 64, 96, DType::BF16, DType::BF16, 3);
  return s;
}

int64_t layer_bytes(const ExpertBanks& b, int64_t l) { return b.record_bytes(l) * b.n_expert(l); }

TEST(BankFillRecheck, StableProbeChangesNothing) {
  SyntheticExperts s = mixed_model();
  auto alloc = make_host_allocator();
  ExpertBanks plain(s.banks, *alloc, 1);
  ScriptedHost host({TiB});
  ExpertBanks probed(s.banks, *alloc, 1, {}, false, BankFormat::kStored, nullptr, host.probe());
  EXPECT_EQ(host.calls.load(), 3);  // before the fill, then before MoE layers 3 and 4
  ASSERT_EQ(probed.total_bytes(), plain.total_bytes());
  for (int64_t l : {1, 3, 4})
    EXPECT_EQ(std::memcmp(probed.host_base(l), plain.host_base(l), static_cast<size_t>(layer_bytes(plain, l))), 0)
        << "layer " << l;
  // Just enough before the last layer: its records and kBankFillReserve.
  ScriptedHost exact({TiB, TiB, layer_bytes(plain, 4) + kBankFillReserve});
  EXPECT_NO_THROW(ExpertBanks(s.banks, *alloc, 1, {}, false, BankFormat::kStored, nullptr, exact.probe()));
}

TEST(BankFillRecheck, ShrinkBeforeALayerStopsTheFillNamingTheNumbers) {
  SyntheticExperts s = mixed_model();
  auto alloc = make_host_allocator();
  const ExpertBanks plain(s.banks, *alloc, 1);
  const int64_t last = layer_bytes(plain, 4), need = last + kBankFillReserve;
  ASSERT_EQ(plain.total_bytes(), layer_bytes(plain, 1) + layer_bytes(plain, 3) + last);
  ScriptedHost host({5 * TiB, TiB, need - 1});  // shrinks after MoE layer 3
  std::vector<int64_t> filled;
  try {
    ExpertBanks b(s.banks, *alloc, 1, [&](int64_t l) { filled.push_back(l); }, false, BankFormat::kStored, nullptr,
                  host.probe());
    FAIL() << "filled";
  } catch (const HostMemoryShrunk& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_EQ(e.layer, 4);
    EXPECT_EQ(e.need, need);
    EXPECT_EQ(e.room_now, need - 1);
    EXPECT_EQ(e.room_start, 5 * TiB);
    const std::string m = e.what();
    for (const std::string& part :
         {std::string("host memory shrank while they were filled"), std::string("before layer 4"),
          "they still need " + format_bytes(need) + " (" + format_bytes(last) + " of expert records still to copy",
          format_bytes(need - 1) + " is usable now (" + format_bytes(5 * TiB) + " when the fill started",
          std::string("--host-memory-limit"), std::string("smaller model")})
      EXPECT_NE(m.find(part), std::string::npos) << part << " in: " << m;
  }
  EXPECT_EQ(filled, (std::vector<int64_t>{1, 3}));  // one worker: the stopped layer was not started
}

// A checkpoint that frees each layer once copied (a synthetic model) needs the layers in flight, not
// every layer still to copy.
TEST(BankFillRecheck, ReleasingCheckpointNeedsTheLayersInFlight) {
  SyntheticExperts s;
  for (uint32_t l = 0; l < 5; ++l) s.add_layer(6, 64, 96, DType::BF16, DType::BF16, 10 + l);
  auto alloc = make_host_allocator();
  const ExpertBanks plain(s.banks, *alloc, 1);
  const int64_t layer = layer_bytes(plain, 0);
  const int64_t in_flight = 2 * layer;  // one worker: 2 + 1 / 6 layers
  auto noop = [](int64_t) {};
  // Room for two layers in flight: enough for the releasing fill, not for a mapped one (4 left).
  ScriptedHost freed({TiB, in_flight + kBankFillReserve});
  EXPECT_NO_THROW(ExpertBanks(s.banks, *alloc, 1, noop, true, BankFormat::kStored, nullptr, freed.probe()));
  EXPECT_EQ(freed.calls.load(), 5);
  ScriptedHost mapped({TiB, in_flight + kBankFillReserve});
  try {
    ExpertBanks(s.banks, *alloc, 1, noop, false, BankFormat::kStored, nullptr, mapped.probe());
    FAIL() << "filled";
  } catch (const HostMemoryShrunk& e) {
    EXPECT_EQ(e.layer, 1);
    EXPECT_EQ(e.need, 4 * layer + kBankFillReserve);
  }
  ScriptedHost short_of_it({TiB, in_flight + kBankFillReserve - 1});
  try {
    ExpertBanks(s.banks, *alloc, 1, noop, true, BankFormat::kStored, nullptr, short_of_it.probe());
    FAIL() << "filled";
  } catch (const HostMemoryShrunk& e) {
    EXPECT_EQ(e.layer, 1);
    EXPECT_EQ(e.need, in_flight + kBankFillReserve);
    EXPECT_NE(std::string(e.what()).find("for the layers copied at once"), std::string::npos) << e.what();
  }
  // Before the fill, the probe stands for MemAvailable in the start's check.
  ScriptedHost small({kBankHostReserve});
  try {
    ExpertBanks(s.banks, *alloc, 1, {}, false, BankFormat::kStored, nullptr, small.probe());
    FAIL() << "filled";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    EXPECT_EQ(dynamic_cast<const HostMemoryShrunk*>(&e), nullptr);  // refused before the fill
    EXPECT_EQ(small.calls.load(), 1);
  }
}

}  // namespace
}  // namespace ft::testing
