// Codebooks of the I-quants (format constants; see iq_grids.h), unpacked at compile time from
// the compact source form in iq_grid_data.h (ggml-common.h's tables, as gguf-py stores them).
#include "quant/iq_grids.h"

#include "quant/iq_grid_data.h"

namespace ft::quant {
using iq_data::kIq1sHex, iq_data::kIq2sHex, iq_data::kIq2xsHex, iq_data::kIq2xxsHex, iq_data::kIq3sHex,
    iq_data::kIq3xxsHex, iq_data::kMap2, iq_data::kMapIq1s, iq_data::kMapIq3s, iq_data::kMapIq3xxs,
    iq_data::make_ksigns, iq_data::unpack_grid;

constexpr std::array<std::array<uint8_t, 8>, 256> iq2xxs_grid = unpack_grid<uint8_t, 256, 8>(kIq2xxsHex, kMap2);
constexpr std::array<std::array<uint8_t, 8>, 512> iq2xs_grid = unpack_grid<uint8_t, 512, 8>(kIq2xsHex, kMap2);
constexpr std::array<std::array<uint8_t, 8>, 1024> iq2s_grid = unpack_grid<uint8_t, 1024, 8>(kIq2sHex, kMap2);
constexpr std::array<std::array<uint8_t, 4>, 256> iq3xxs_grid =
    unpack_grid<uint8_t, 256, 4>(kIq3xxsHex, kMapIq3xxs);
constexpr std::array<std::array<uint8_t, 4>, 512> iq3s_grid = unpack_grid<uint8_t, 512, 4>(kIq3sHex, kMapIq3s);
constexpr std::array<std::array<int8_t, 8>, 2048> iq1s_grid = unpack_grid<int8_t, 2048, 8>(kIq1sHex, kMapIq1s);

constexpr std::array<uint8_t, 128> ksigns_iq2xs = make_ksigns();
constexpr std::array<int8_t, 16> kvalues_iq4nl = {-127, -104, -83, -65, -49, -35, -22, -10,
                                                  1,    13,   25,  38,  53,  69,  89,  113};
constexpr std::array<int8_t, 16> kvalues_mxfp4 = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

}  // namespace ft::quant
