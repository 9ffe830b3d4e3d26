// Ops: the defaults of Qwen4-Exp's ops for a backend without them: a kUnsupported error naming the op
// and the backend (the CPU backend implements each, backend/cpu/).
#include "backend/ops.h"
#include "util/error.h"

namespace ft {
namespace {

[[noreturn]] void unsupported(const Ops& ops, const char* op) {
  fail(ErrorCode::kUnsupported, "{}: the {} backend has no kernel for this Qwen4-Exp op yet (the CPU backend has)",
       op, ops.name());
}

}  // namespace

void Ops::ngram_hash(const NgramHashParams&, const BatchInfo&, const Tensor&, const Tensor&, const Tensor&,
                     const Tensor&, Tensor, Tensor) {
  unsupported(*this, "ngram_hash");
}
void Ops::ple_gate(const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor) {
  unsupported(*this, "ple_gate");
}
void Ops::stream_weighted_sum(const Tensor&, const Tensor&, Tensor) { unsupported(*this, "stream_weighted_sum"); }
void Ops::attention_qsa(const AttentionParams&, int32_t, const BatchInfo&, const Tensor&, KvLayer, const Tensor&,
                        Tensor) {
  unsupported(*this, "attention_qsa");
}

}  // namespace ft
