#pragma once
// This build's version and backends: `ft --version` and GET /props' build_info. (FT_HAVE_CUDA is
// ft_core's public definition, so every target that links it sees the same value.)
namespace ft {

inline constexpr const char* kVersion = "0.1.0";
#ifdef FT_HAVE_CUDA
inline constexpr const char* kBackends = "cpu, cuda";
#else
inline constexpr const char* kBackends = "cpu";
#endif

}  // namespace ft
