#include "model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "util/error.h"

namespace ft {
namespace {

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

}  // namespace

RopeTable rope_table(const ModelConfig& c, const std::vector<float>& freq_factors) {
  const int64_t dim = c.n_rot, half = dim / 2;
  const double base = c.rope_theta;
  const RopeScaling& s = c.rope_scaling;
  RopeTable out;
  std::vector<double> inv(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv[i] = 1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));

  if (s.type == "default") {
  } else if (s.type == "linear") {
    for (double& f : inv) f /= s.factor;
  } else if (s.type == "llama3") {
    const double old_ctx = static_cast<double>(s.original_max_position);
    const double low_wl = old_ctx / s.low_freq_factor, high_wl = old_ctx / s.high_freq_factor;
    for (double& f : inv) {
      const double wl = 2.0 * std::numbers::pi / f;
      if (wl > low_wl) {
        f = f / s.factor;
      } else if (wl >= high_wl) {
        const double smooth = (old_ctx / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1.0 - smooth) * f / s.factor + smooth * f;
      }
    }
  } else if (s.type == "yarn") {
    const double max_pos = static_cast<double>(s.original_max_position > 0 ? s.original_max_position : c.n_ctx_train);
    auto corr_dim = [&](double rot) {
      return static_cast<double>(dim) * std::log(max_pos / (rot * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
    };
    double lo = corr_dim(s.beta_fast), hi = corr_dim(s.beta_slow);
    if (s.truncate) {
      lo = std::floor(lo);
      hi = std::ceil(hi);
    }
    lo = std::max(lo, 0.0);
    hi = std::min(hi, static_cast<double>(dim - 1));
    if (lo == hi) hi += 0.001;
    for (int64_t i = 0; i < half; ++i) {
      const double ramp = std::clamp((static_cast<double>(i) - lo) / (hi - lo), 0.0, 1.0);
      const double extrap = 1.0 - ramp;  // weight of the unscaled frequency
      inv[i] = inv[i] / s.factor * (1.0 - extrap) + inv[i] * extrap;
    }
    double af = s.attention_factor;
    if (af <= 0.0)
      af = s.mscale > 0.0 && s.mscale_all_dim > 0.0
               ? yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim)
               : yarn_mscale(s.factor, 1.0);
    out.attn_factor = static_cast<float>(af);
  } else {
    fail(ErrorCode::kUnsupported, "{}: RoPE scaling type '{}' is not supported (default, linear, llama3, yarn)", c.arch,
         s.type);
  }
  if (!freq_factors.empty()) {
    if (static_cast<int64_t>(freq_factors.size()) != half)
      fail(ErrorCode::kInvalidFile, "rope_freqs.weight has {} entries, expected n_rot/2 = {}", freq_factors.size(), half);
    for (int64_t i = 0; i < half; ++i) inv[i] /= freq_factors[static_cast<size_t>(i)];
  }
  out.inv_freq.assign(inv.begin(), inv.end());
  return out;
}

}  // namespace ft
