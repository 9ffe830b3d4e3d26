#pragma once
// Codebooks of ggml's I-quants and FP4 types: format constants that every reader of these
// types must share. Names follow ggml-common.h (iq2xxs_grid, ..., ksigns_iq2xs, kvalues_iq4nl,
// kvalues_mxfp4). A grid row holds the per-element magnitudes of one codebook entry, i.e. the
// bytes of ggml's uint64/uint32 table entry in little-endian order.
#include <array>
#include <cstdint>

namespace ft::quant {

extern const std::array<std::array<uint8_t, 8>, 256> iq2xxs_grid;  // values 0x08, 0x19, 0x2b
extern const std::array<std::array<uint8_t, 8>, 512> iq2xs_grid;   // values 0x08, 0x19, 0x2b
extern const std::array<std::array<uint8_t, 8>, 1024> iq2s_grid;   // values 0x08, 0x19, 0x2b
extern const std::array<std::array<uint8_t, 4>, 256> iq3xxs_grid;  // values 4, 12, ..., 52, 62
extern const std::array<std::array<uint8_t, 4>, 512> iq3s_grid;    // values 1, 3, ..., 15
extern const std::array<std::array<int8_t, 8>, 2048> iq1s_grid;    // values -1, 0, 1

/** ksigns_iq2xs[i]: the 7 sign bits i plus an 8th bit that makes the number of set bits even. */
extern const std::array<uint8_t, 128> ksigns_iq2xs;
/** Non-linear 4-bit levels of IQ4_NL / IQ4_XS. */
extern const std::array<int8_t, 16> kvalues_iq4nl;
/** E2M1 values times two (the scale decoders halve), for MXFP4 / NVFP4. */
extern const std::array<int8_t, 16> kvalues_mxfp4;

/** Offset added to IQ1_S / IQ1_M grid values (ggml IQ1S_DELTA). */
inline constexpr float kIq1sDelta = 0.125f;

}  // namespace ft::quant
