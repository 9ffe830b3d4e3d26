// hc_post: DeepSeek-V4 hyper-connection expansion, out_k = post_k y + sum_j comb[j, k] stream_j (CPU
// backend; semantics in ops.h, after transformers' DeepseekV4DecoderLayer).
#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft {

void CpuOps::hc_post(const HyperConnParams& p, const Tensor& streams, const Tensor& y, const Tensor& post,
                     const Tensor& comb, Tensor out) {
  const char* op = "hc_post";
  for (const auto& [name, t] : {std::pair<const char*, const Tensor*>{"streams", &streams}, {"y", &y},
                                {"post", &post}, {"comb", &comb}, {"out", &out}})
    cpu::check_dtype(op, name, *t, DType::F32);
  const int64_t n = p.n_streams, T = y.rows(), H = y.cols();
  if (n < 1 || !streams.has_shape({T, n * H}) || !out.has_shape({T, n * H}) || !post.has_shape({T, n}) ||
      !comb.has_shape({T, n * n}))
    fail(ErrorCode::kInvalidArgument, "{}: streams {}, y {}, post {}, comb {}, out {} do not fit {} streams", op,
         streams.str(), y.str(), post.str(), comb.str(), out.str(), n);
  if (out.data == streams.data) fail(ErrorCode::kInvalidArgument, "{}: out must not alias streams", op);
#pragma omp parallel for num_threads(n_threads_) schedule(static) if (T * n * H > 65536)
  for (int64_t t = 0; t < T; ++t) {
    const float* x = streams.ptr<float>() + t * n * H;
    const float* yt = y.ptr<float>() + t * H;
    const float* po = post.ptr<float>() + t * n;
    const float* c = comb.ptr<float>() + t * n * n;
    float* o = out.ptr<float>() + t * n * H;
    for (int64_t k = 0; k < n; ++k)
      for (int64_t d = 0; d < H; ++d) {
        float s = po[k] * yt[d];
        for (int64_t j = 0; j < n; ++j) s += c[j * n + k] * x[j * H + d];
        o[k * H + d] = s;
      }
  }
}

}  // namespace ft
