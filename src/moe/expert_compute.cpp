#include "moe/expert_compute.h"

#include "util/error.h"
#include "util/progress.h"

namespace ft {

ResidentExperts::ResidentExperts(Ops& ops, const HostExpertBanks& host, ProgressSink* progress) : ops_(ops) {
  int64_t total = 0;
  for (const ExpertBank& hb : host)
    for (const std::vector<Tensor>* v : {&hb.gate, &hb.up, &hb.down})
      for (const Tensor& t : *v) total += t.bytes();
  ProgressPhase phase(progress, "experts", total);
  for (const ExpertBank& hb : host) {
    ExpertBank b;
    auto resident = [&](const Tensor& t) {
      if (t.empty()) return Tensor();
      Buffer storage;
      Tensor r = ops.make_resident(t, storage);
      if (!storage.empty()) storage_.push_back(std::move(storage));
      return r;
    };
    auto matrix = [&](const Tensor& t) {
      Tensor r = resident(t);
      phase.add(t.bytes());
      return r;
    };
    for (auto [src, dst] : {std::pair{&hb.gate, &b.gate}, std::pair{&hb.up, &b.up}, std::pair{&hb.down, &b.down}})
      for (const Tensor& t : *src) dst->push_back(matrix(t));
    b.glu = hb.glu, b.glu_alpha = hb.glu_alpha, b.glu_limit = hb.glu_limit;
    b.gate_bias = resident(hb.gate_bias), b.up_bias = resident(hb.up_bias), b.down_bias = resident(hb.down_bias);
    banks_.push_back(std::move(b));
  }
  phase.finish();
}

void ResidentExperts::compute(int64_t layer, const Tensor& x, const Tensor& ids, const Tensor& weights, Tensor out,
                              const ActQ8* x_q8) {
  if (layer < 0 || layer >= static_cast<int64_t>(banks_.size()) || banks_[static_cast<size_t>(layer)].n_expert() == 0)
    fail(ErrorCode::kInvalidArgument, "expert compute: layer {} has no routed experts", layer);
  ops_.moe_experts({}, x, ids, weights, banks_[static_cast<size_t>(layer)], out, x_q8);
}

}  // namespace ft
