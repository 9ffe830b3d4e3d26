// ExpertBanks: one record per (layer, expert) holding the stored bytes of gate/up/down, aligned
// views, mixed layouts across layers, dense layers, errors for inconsistent experts.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>

#include "moe/ec12.h"
#include "moe/expert_bank.h"
#include "moe/host_memory.h"
#include "moe_test_util.h"
#include "util/error.h"
#include "util/progress.h"

namespace ft::testing {
namespace {

SyntheticExperts mixed_model() {
  SyntheticExperts s;
  s.add_dense_layer();
  s.add_layer(6, 64, 96, DType::BF16, DType::BF16, 1);
  s.add_dense_layer();
  s.add_layer(8, 64, 256, DType::Q4_K, DType::Q8_0, 2);  // K-quants need 256-element rows
  s.add_layer(6, 64, 96, DType::BF16, DType::BF16, 3);
  return s;
}

TEST(ExpertBanks, RecordsHoldTheStoredBytes) {
  SyntheticExperts s = mixed_model();
  auto alloc = make_host_allocator();
  ExpertBanks banks(s.banks, *alloc, 3);
  EXPECT_EQ(banks.n_layers(), 5);
  EXPECT_EQ(banks.n_moe_layers(), 3);
  EXPECT_EQ(banks.max_experts(), 8);
  EXPECT_EQ(banks.n_expert(0), 0);
  EXPECT_EQ(banks.n_expert(3), 8);
  EXPECT_EQ(banks.host_base(2), nullptr);
  EXPECT_EQ(banks.device_base(1), nullptr);  // host allocator: nothing pinned
  int64_t total = 0, max_bytes = 0;
  for (int64_t l : {1, 3, 4}) {
    const ExpertLayout& lay = banks.layout(l);
    const ExpertBank& src = s.banks[static_cast<size_t>(l)];
    EXPECT_EQ(lay.gate_type, src.gate[0].dtype);
    EXPECT_EQ(lay.down_type, src.down[0].dtype);
    EXPECT_EQ(lay.bytes % kExpertAlign, 0);
    EXPECT_GE(lay.up_offset, src.gate[0].bytes());
    EXPECT_GE(lay.down_offset, lay.up_offset + src.up[0].bytes());
    EXPECT_GE(lay.bytes, lay.down_offset + src.down[0].bytes());
    const ExpertBank& view = banks.bank(l);
    ASSERT_EQ(view.n_expert(), src.n_expert());
    for (int32_t e = 0; e < src.n_expert(); ++e) {
      const uint8_t* r = banks.record(l, e);
      EXPECT_EQ(r, banks.host_base(l) + e * lay.bytes);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(r) % kExpertAlign, 0u);
      const Tensor* want[3] = {&src.gate[e], &src.up[e], &src.down[e]};
      const Tensor* got[3] = {&view.gate[e], &view.up[e], &view.down[e]};
      for (int j = 0; j < 3; ++j) {
        EXPECT_EQ(got[j]->dtype, want[j]->dtype);
        EXPECT_TRUE(got[j]->has_shape({want[j]->dim(0), want[j]->dim(1)}));
        EXPECT_GE(got[j]->bytes_ptr(), r);
        EXPECT_LE(got[j]->bytes_ptr() + got[j]->bytes(), r + lay.bytes);
        EXPECT_EQ(std::memcmp(got[j]->data, want[j]->data, static_cast<size_t>(want[j]->bytes())), 0)
            << "layer " << l << " expert " << e << " part " << j;
      }
    }
    total += lay.bytes * src.n_expert();
    max_bytes = std::max(max_bytes, lay.bytes);
  }
  EXPECT_EQ(banks.total_bytes(), total);
  EXPECT_EQ(banks.slot_bytes(), max_bytes);
  EXPECT_NE(banks.layout(1), banks.layout(3));
  EXPECT_EQ(banks.layout(1), banks.layout(4));
  EXPECT_THROW(banks.layout(0), Error);
  EXPECT_THROW(banks.record(1, 6), Error);
  EXPECT_THROW(banks.record(5, 0), Error);
}

TEST(ExpertBanks, FillDoesNotDependOnThreads) {
  SyntheticExperts s = mixed_model();
  auto alloc = make_host_allocator();
  ExpertBanks a(s.banks, *alloc, 1), b(s.banks, *alloc, 4);
  for (int64_t l : {1, 3, 4})
    EXPECT_EQ(std::memcmp(a.host_base(l), b.host_base(l), static_cast<size_t>(a.layout(l).bytes * a.n_expert(l))), 0);
}

/** BF16 layers whose dimensions EC12 takes, with exceptions, and a dense layer. */
SyntheticExperts bf16_model() {
  SyntheticExperts s;
  s.add_layer(5, 64, 128, DType::BF16, DType::BF16, 11);
  s.add_dense_layer();
  s.add_layer(3, 192, 64, DType::BF16, DType::BF16, 12);
  s.add_ec12_exceptions(0, 9, 1);
  s.add_ec12_exceptions(2, 4, 2);
  return s;
}

TEST(ExpertBanks, Ec12RecordsDecodeToTheStoredBytes) {
  SyntheticExperts s = bf16_model();
  ASSERT_TRUE(ec12_bankable(s.banks));
  auto alloc = make_host_allocator();
  ExpertBanks stored(s.banks, *alloc, 2), banks(s.banks, *alloc, 3, {}, false, BankFormat::kEc12);
  EXPECT_EQ(stored.format(), BankFormat::kStored);
  EXPECT_EQ(banks.format(), BankFormat::kEc12);
  EXPECT_EQ(banks.slot_bytes(), stored.slot_bytes());
  int64_t total = 0;
  for (int64_t l : {0, 2}) {
    const ExpertLayout &lay = banks.layout(l), &rec = banks.record_layout(l);
    EXPECT_EQ(lay, stored.layout(l));  // the slots hold BF16 as before
    EXPECT_EQ(stored.record_layout(l), stored.layout(l));
    EXPECT_EQ(rec.gate_type, DType::EC12);
    EXPECT_EQ(rec.down_type, DType::EC12);
    EXPECT_EQ(rec.bytes % kExpertAlign, 0);
    EXPECT_EQ(banks.record_bytes(l), rec.bytes);
    EXPECT_LT(rec.bytes, lay.bytes * 9 / 10) << "layer " << l;  // 12 bits a value plus the side tables
    total += rec.bytes * banks.n_expert(l);
    const ExpertBank& src = s.banks[static_cast<size_t>(l)];
    const ExpertBank& view = banks.bank(l);
    std::vector<uint8_t> slot(static_cast<size_t>(lay.bytes), 0xee), want(slot.size());
    for (int32_t e = 0; e < src.n_expert(); ++e) {
      EXPECT_EQ(banks.record(l, e), banks.host_base(l) + e * rec.bytes);
      banks.copy_record(l, e, slot.data());
      stored.copy_record(l, e, want.data());
      EXPECT_EQ(std::memcmp(want.data(), stored.record(l, e), want.size()), 0);
      ASSERT_EQ(std::memcmp(slot.data(), want.data(), slot.size()), 0) << "layer " << l << " expert " << e;
      const Tensor* got[3] = {&view.gate[e], &view.up[e], &view.down[e]};
      const Tensor* orig[3] = {&src.gate[e], &src.up[e], &src.down[e]};
      for (int j = 0; j < 3; ++j) {  // the host views are the coded matrices
        EXPECT_EQ(got[j]->dtype, DType::EC12);
        EXPECT_TRUE(got[j]->has_shape({orig[j]->dim(0), orig[j]->dim(1)}));
        std::vector<uint16_t> rows(static_cast<size_t>(orig[j]->numel()));
        ec12::decode_rows(got[j]->bytes_ptr(), orig[j]->dim(0), orig[j]->dim(1), 0, orig[j]->dim(0), rows.data());
        EXPECT_EQ(std::memcmp(rows.data(), orig[j]->data, rows.size() * 2), 0);
      }
    }
  }
  EXPECT_EQ(banks.total_bytes(), total);
  EXPECT_LT(banks.total_bytes(), stored.total_bytes());
  ExpertBanks again(s.banks, *alloc, 1, {}, false, BankFormat::kEc12);  // the fill does not depend on threads
  for (int64_t l : {0, 2})
    EXPECT_EQ(std::memcmp(again.host_base(l), banks.host_base(l), static_cast<size_t>(banks.record_bytes(l) * 3)), 0);
}

TEST(ExpertBanks, Ec12NeedsBf16ExpertsInWholeGroups) {
  SyntheticExperts mixed = mixed_model();  // a Q4_K layer
  EXPECT_FALSE(ec12_bankable(mixed.banks));
  auto alloc = make_host_allocator();
  EXPECT_THROW(ExpertBanks(mixed.banks, *alloc, 1, {}, false, BankFormat::kEc12), Error);
  SyntheticExperts odd;
  odd.add_layer(2, 32, 64, DType::BF16, DType::BF16, 1);  // down rows of 32 values: half a group
  EXPECT_FALSE(ec12_bankable(odd.banks));
  SyntheticExperts dense;
  dense.add_dense_layer();
  EXPECT_FALSE(ec12_bankable(dense.banks));
  EXPECT_TRUE(ec12_bankable(bf16_model().banks));
}

/** Sums what a fill reports, per phase. */
struct SumSink : ProgressSink {
  void begin(const std::string& phase, int64_t total_bytes) override { phases.push_back({phase, total_bytes, 0, false}); }
  void add(int64_t bytes) override { added += bytes; }
  void finish(bool completed) override {
    phases.back().added = added.exchange(0);
    phases.back().completed = completed;
  }
  struct Phase {
    std::string name;
    int64_t total, added;
    bool completed;
  };
  std::vector<Phase> phases;
  std::atomic<int64_t> added{0};
};

TEST(ExpertBanks, FillReportsTheExpertsBytes) {
  int64_t stored_bytes = 0;
  SyntheticExperts s = bf16_model();
  for (const ExpertBank& b : s.banks)
    for (const std::vector<Tensor>* v : {&b.gate, &b.up, &b.down})
      for (const Tensor& t : *v) stored_bytes += t.bytes();
  auto alloc = make_host_allocator();
  SumSink sink;
  ExpertBanks stored(s.banks, *alloc, 3, {}, false, BankFormat::kStored, &sink);
  ExpertBanks ec12(s.banks, *alloc, 3, {}, false, BankFormat::kEc12, &sink);  // two passes, half each
  ASSERT_EQ(sink.phases.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(sink.phases[i].name, "expert banks");
    EXPECT_EQ(sink.phases[i].total, stored_bytes);
    EXPECT_EQ(sink.phases[i].added, stored_bytes);
    EXPECT_TRUE(sink.phases[i].completed);
  }
  SyntheticExperts mixed = mixed_model();  // not EC12-bankable: refused before the phase starts
  EXPECT_THROW(ExpertBanks(mixed.banks, *alloc, 1, {}, false, BankFormat::kEc12, &sink), Error);
  EXPECT_EQ(sink.phases.size(), 2u);
}

TEST(ExpertBanks, InconsistentExpertsAreRejected) {
  SyntheticExperts s;
  s.add_layer(3, 32, 64, DType::BF16, DType::BF16, 1);
  auto alloc = make_host_allocator();
  {
    HostExpertBanks bad = s.banks;
    std::mt19937 rng(1);
    bad[0].up[2] = s.make(DType::F16, 32, 64, rng);  // dtype differs from expert 0
    EXPECT_THROW(ExpertBanks(bad, *alloc), Error);
  }
  {
    HostExpertBanks bad = s.banks;
    std::mt19937 rng(1);
    bad[0].down[1] = s.make(DType::BF16, 32, 64, rng);  // down must be [H, F] = [64, 32]
    try {
      ExpertBanks b(bad, *alloc);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expert 1"), std::string::npos) << e.what();
    }
  }
  {
    HostExpertBanks bad = s.banks;
    bad[0].down.pop_back();
    EXPECT_THROW(ExpertBanks(bad, *alloc), Error);
  }
}

// Banks that cannot be filled are refused before any memory is touched, with the numbers and what
// would fit; a checkpoint that frees its pages as layers fill needs only the layers in flight.
TEST(ExpertBanks, HostMemoryCheckSaysWhatWouldFit) {
  constexpr int64_t GiB = int64_t{1} << 30;
  EXPECT_NO_THROW(check_bank_host_memory(100 * GiB, 2 * GiB, false, 104 * GiB));
  EXPECT_NO_THROW(check_bank_host_memory(100 * GiB, 2 * GiB, true, 4 * GiB));   // synthetic: in flight only
  EXPECT_NO_THROW(check_bank_host_memory(500 * GiB, 2 * GiB, false, -1));       // MemAvailable unknown
  // The session-5 case: 123 GiB of synthetic q4_k weights on a 128 GiB host, ~1.5 GiB left.
  try {
    check_bank_host_memory(120 * GiB, 5 * GiB / 2, true, 3 * GiB / 2);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
    const std::string m = e.what();
    EXPECT_NE(m.find("needs 3.50 GiB of free host memory"), std::string::npos) << m;  // 2.5 in flight + 1 reserve
    EXPECT_NE(m.find("1.50 GiB is available (MemAvailable, the cgroup's room)"), std::string::npos) << m;
    EXPECT_NE(m.find("--dummy-layers"), std::string::npos) << m;
  }
  try {
    check_bank_host_memory(100 * GiB, 2 * GiB, false, 50 * GiB);  // a mapped GGUF: every bank byte is new
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 49.00 GiB would fit"), std::string::npos) << e.what();
  }
  EXPECT_GT(host_memory_available(), 0);  // Linux: /proc/meminfo
}

}  // namespace
}  // namespace ft::testing
