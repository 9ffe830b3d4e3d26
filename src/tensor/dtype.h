#pragma once
// DType: every element type FreeToken reads. GGUF block types keep their ggml type id as the
// enum value (source: ggml.h `enum ggml_type`, gguf-py `GGMLQuantizationType`); safetensors-only
// types use ids from 1000 up so they never collide with a GGUF id.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ft {

enum class DType : uint32_t {
  // GGUF / ggml ids (0-42). 4, 5, 31-33, 36-38 were removed from ggml and are not types.
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22,
  IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41, Q2_0 = 42,
  // safetensors-only element types
  F8_E4M3 = 1000, F8_E5M2 = 1001, U8 = 1002, BOOL = 1003,
  // FreeToken's own storage forms. EC12 (moe/ec12.h): BF16 coded in 12 bits a value; a Tensor of
  // this type points at a whole coded matrix (header, rows, exception list), so only code that
  // knows the format reads it (the expert banks and the CPU expert executor). Its block figures
  // count the rows alone. Not a name dtype_from_name accepts.
  EC12 = 2000,
  // F8_E4M3_B32 (quant/fp8.h): FP8 checkpoints' weights as stored, rows of blocks of 32 E4M3 codes
  // with one float32 scale each (the checkpoint's tile / channel / tensor scale replicated: lossless).
  F8_E4M3_B32 = 2001,
  F8_E4M3_B16 = 2002,  // the same with blocks of 16, for rows that are not a multiple of 32 long
  // NVFP4_G64 (quant/nvfp4.h): ModelOpt NVFP4 checkpoints' weights as stored, blocks of 64 E2M1 codes
  // with their 4 E4M3 scales and the tensor's float32 global scale (exact, 5 bits a value).
  NVFP4_G64 = 2003,
  NVFP4_G16 = 2004,  // the same with blocks of 16, for rows that are not a multiple of 64 long
};

struct DTypeInfo {
  DType type;
  const char* name;       // "Q4_K", "BF16", ... (GGUF spelling; safetensors spelling for the F8 types)
  int64_t block_size;     // elements per block (1 for plain element types)
  int64_t block_bytes;    // bytes per block
  bool is_float;          // F32/F16/BF16/F64/F8_*: plain floating point
  bool is_quantized;      // a GGUF block type with scales
};

/** Layout of `t`. Throws ft::Error(kInternal) for a value that is not a DType. */
const DTypeInfo& dtype_info(DType t);

/** The DType for a GGUF/ggml type id. Throws ft::Error(kInvalidFile) naming the id for an unknown or removed id. */
DType dtype_from_gguf_id(uint32_t id);

/** The DType for a name such as "Q4_K", "bf16", "F8_E4M3" (case-insensitive); nullopt if unknown. */
std::optional<DType> dtype_from_name(std::string_view name);

inline const char* dtype_name(DType t) { return dtype_info(t).name; }

/** True if `t` has a GGUF type id (can be stored in a GGUF file). */
inline bool dtype_is_gguf(DType t) { return static_cast<uint32_t>(t) < 1000; }

/** Bytes of `n` elements of `t`. Throws ft::Error(kInvalidArgument) if n is not a whole number of blocks
 *  or the size overflows int64. */
int64_t dtype_bytes(DType t, int64_t n);

}  // namespace ft
