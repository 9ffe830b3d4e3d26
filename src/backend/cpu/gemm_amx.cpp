// gemm_nt_amx_bf16: BF16 x BF16 -> fp32 GEMM blocks on AMX tiles (gemm_amx.h). Tiles: tmm0-3 hold
// the fp32 results of up to 4 blocks of 16 tokens, tmm4 the 16 x 32 BF16 weight tile (A), tmm5-7 the
// packed activation tiles (B). Every call of the tile kernel loads the one tile configuration (every
// tile 16 rows of 64 bytes) and releases the tiles before it returns: while tile data is live, a call
// through the PLT that the dynamic linker resolves lazily saves the whole register state, tiles
// included, on a stack area sized without them (a glibc issue with AMX state; seen here: a segfault on the
// first memcpy after a tile kernel), so no tile state outlives the asm-only kernel.
#include "backend/cpu/gemm_amx.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/simd_level.h"
#include "util/error.h"

namespace ft::cpu {
namespace {

// arch_prctl request and state component (Linux arch/x86/include/uapi/asm/prctl.h, fpu/xstate.h).
constexpr int kArchReqXcompPerm = 0x1023;
constexpr int kXfeatureXtiledata = 18;

/** The 64-byte tile configuration of palette 1 (Intel SDM, LDTILECFG). */
struct TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

/** Tiles 0-7 of 16 rows x 64 bytes. */
const TileConfig kConfig = [] {
  TileConfig c;
  for (int i = 0; i < 8; ++i) c.rows[i] = 16, c.colsb[i] = 64;
  return c;
}();

/** c[b * 256 + r * 16 + t] = sum over the chunks of a's row r (16 rows, lda_bytes apart, 32 BF16
 *  values a chunk) times token t of packed block b (blocks `blk` elements apart), b < NB. */
template <int NB>
__attribute__((target("amx-tile,amx-bf16"))) void tile_rows16(const uint16_t* xp, int64_t blk, const uint16_t* a,
                                                              int64_t lda_bytes, int64_t chunks, float* c) {
  _tile_loadconfig(&kConfig);
  _tile_zero(0);
  if constexpr (NB > 1) _tile_zero(1);
  if constexpr (NB > 2) _tile_zero(2);
  if constexpr (NB > 3) _tile_zero(3);
  for (int64_t kc = 0; kc < chunks; ++kc) {
    const uint16_t* b = xp + kc * 512;
    _tile_loadd(4, a + kc * 32, lda_bytes);
    _tile_loadd(5, b, 64);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (NB > 1) {
      _tile_loadd(6, b + blk, 64);
      _tile_dpbf16ps(1, 4, 6);
    }
    if constexpr (NB > 2) {
      _tile_loadd(7, b + 2 * blk, 64);
      _tile_dpbf16ps(2, 4, 7);
    }
    if constexpr (NB > 3) {
      _tile_loadd(5, b + 3 * blk, 64);
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  _tile_stored(0, c, 64);
  if constexpr (NB > 1) _tile_stored(1, c + 256, 64);
  if constexpr (NB > 2) _tile_stored(2, c + 512, 64);
  if constexpr (NB > 3) _tile_stored(3, c + 768, 64);
  _tile_release();
  // The tile instructions are asm statements the compiler sees no memory effect of: the caller's reads
  // of c must not move above the stores.
  asm volatile("" ::: "memory");
}

using RowsFn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, float*);
const RowsFn kRows[4] = {tile_rows16<1>, tile_rows16<2>, tile_rows16<3>, tile_rows16<4>};

/** CPUID.(EAX=7,ECX=0):EDX bits 22 (AMX-BF16) and 24 (AMX-TILE). */
bool cpuid_amx_bf16() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return ((d >> 22) & 1) && ((d >> 24) & 1);
}

}  // namespace

bool cpu_reports_amx_bf16() {
  static const bool yes = [] {
    const char* env = std::getenv("FT_CPU_AMX");
    if (env && std::strcmp(env, "off") == 0) return false;
    return simd_level_id() == SimdLevel::kAvx512 && cpuid_amx_bf16();
  }();
  return yes;
}

bool has_amx_bf16() {
  static const bool yes =
      cpu_reports_amx_bf16() && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return yes;
}

void amx_pack_bf16(const uint16_t* x, int64_t ldx, int64_t tokens, int64_t n, uint16_t* xp, const int32_t* row) {
  if (n % 32 != 0) fail(ErrorCode::kInvalidArgument, "amx_pack_bf16: {} values a row is not a multiple of 32", n);
  const int64_t chunks = n / 32, blocks = (tokens + 15) / 16;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t kc = 0; kc < chunks; ++kc) {
      // One tile as 16 x 16 pairs (32-bit units): pair row p, column t holds x[16b + t, 32kc + 2p .. +1].
      uint32_t* tile = reinterpret_cast<uint32_t*>(xp + (b * chunks + kc) * 512);
      for (int64_t t = 0; t < 16; ++t) {
        const int64_t token = b * 16 + t;
        if (token >= tokens) {
          for (int p = 0; p < 16; ++p) tile[p * 16 + t] = 0;
          continue;
        }
        uint32_t src[16];
        std::memcpy(src, x + (row ? row[token] : token) * ldx + kc * 32, sizeof(src));
        for (int p = 0; p < 16; ++p) tile[p * 16 + t] = src[p];
      }
    }
}

void gemm_nt_amx_bf16(const uint16_t* xp, int64_t tokens, const uint16_t* w, int64_t ldw, int64_t rows, int64_t n,
                      float* y, int64_t ldy) {
  if (!has_amx_bf16()) fail(ErrorCode::kUnsupported, "gemm_nt_amx_bf16: this CPU (or process) has no AMX-BF16");
  if (n % 32 != 0) fail(ErrorCode::kInvalidArgument, "gemm_nt_amx_bf16: {} values a row is not a multiple of 32", n);
  if (rows <= 0 || tokens <= 0) return;
  const int64_t chunks = n / 32, blk = chunks * 512, blocks = (tokens + 15) / 16;
  thread_local std::vector<uint16_t> pad;  // a last tile of fewer than 16 rows, zero-filled to 16
  alignas(64) float c[4 * 256];
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const int64_t nr = std::min<int64_t>(16, rows - r0);
    const uint16_t* a = w + r0 * ldw;
    int64_t lda = ldw;
    if (nr < 16) {
      pad.assign(static_cast<size_t>(16 * n), 0);
      for (int64_t r = 0; r < nr; ++r) std::memcpy(pad.data() + r * n, a + r * ldw, static_cast<size_t>(n) * 2);
      asm volatile("" ::: "memory");  // the copy lands before the tile loads read it
      a = pad.data(), lda = n;
    }
    for (int64_t b0 = 0; b0 < blocks; b0 += 4) {
      const int64_t nb = std::min<int64_t>(4, blocks - b0);
      kRows[nb - 1](xp + b0 * blk, blk, a, lda * 2, chunks, c);
      for (int64_t b = 0; b < nb; ++b) {
        const int64_t t0 = (b0 + b) * 16, nt = std::min<int64_t>(16, tokens - t0);
        for (int64_t t = 0; t < nt; ++t)
          for (int64_t r = 0; r < nr; ++r) y[(t0 + t) * ldy + r0 + r] = c[b * 256 + r * 16 + t];
      }
    }
  }
}

}  // namespace ft::cpu
