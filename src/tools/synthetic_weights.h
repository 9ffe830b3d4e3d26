#pragma once
// Random tensor contents for synthetic (dummy-weight) models: a fast seeded PRNG and generators
// that fill float tensors with uniform values, or GGUF block tensors with valid random blocks
// directly (random code bytes, then the block's scale fields set to a value calibrated so the
// dequantized elements have the requested RMS). No quantizer runs, so a 60 GB model fills in
// seconds on a few cores. Block layouts: quant/blocks.h (ggml-common.h). FP8 / NVFP4 blocks
// (quant/fp8.h, quant/nvfp4.h) get the codes a checkpoint's quantizer writes for uniform weights (E4M3 of
// uniform values over +-448, E2M1 of uniform values over +-6 with E4M3 block scales in [336, 448]) and a
// float32 scale (FP8: the block's d; NVFP4: the global g) calibrated the same way.
#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace ft {

/** xoshiro256** (Blackman & Vigna, 2018) seeded through splitmix64: same seed, same stream. */
class SynthRng {
 public:
  explicit SynthRng(uint64_t seed);
  uint64_t next();
  /** Uniform in [0, 1) with 24 random bits. */
  float uniform() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }

 private:
  uint64_t s_[4];
};

/** splitmix64 of `a` combined with `b`: a well-mixed seed for sub-streams (tensor, chunk, layer). */
uint64_t mix_seed(uint64_t a, uint64_t b);

/** True if synthetic weights can be generated in `t`: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1,
 *  Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, and the FP8 / NVFP4 checkpoints' stored
 *  forms F8_E4M3_B32, F8_E4M3_B16, NVFP4_G64, NVFP4_G16. */
bool synthetic_type_supported(DType t);
/** The name a user gives `t` (--weight-type, bench's output): "fp8" for the FP8 checkpoints' stored forms
 *  (F8_E4M3_B32 / _B16), "nvfp4" for ModelOpt NVFP4's (NVFP4_G64 / _G16), else dtype_name (GGUF's own
 *  NVFP4 type stays "NVFP4"). */
const char* user_type_name(DType t);
/** "F32, F16, BF16, Q4_0, ..., fp8 (...) and nvfp4 (...)" for messages: the names --weight-type
 *  documents (user_type_name), not the stored forms' internal names. */
std::string synthetic_type_names();

/** Fills `n` elements (a whole number of blocks of `t`) at `dst` with random values of RMS about
 *  `rms` and mean about 0, from the stream of `seed` (same arguments, same bytes). Float types get
 *  uniform values in [-sqrt(3) rms, sqrt(3) rms]; block types get random code bytes with every
 *  block's scale (and min) set from a per-type calibration. Throws ft::Error(kUnsupported) for a
 *  type synthetic_type_supported rejects, kInvalidArgument for n not a whole number of blocks. */
void fill_random(DType t, void* dst, int64_t n, float rms, uint64_t seed);

}  // namespace ft
