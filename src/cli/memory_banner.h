#pragma once
// The memory plan as `ft` shows it at start: `ft serve`'s banner prints it on stdout, `ft run` logs it
// (stderr, info level), so both say how large the KV cache is, in tokens and bytes, and its dtype.
#include <string>

#include "engine/engine.h"

namespace ft::cli {

/** The plan of `engine` (Engine::memory_plan()) in two parts: one line "  memory    weights W (mapped);
 *  KV T tokens = P pages x S (B); device NAME, THREADS" (`threads`: --threads, 0 = all), then
 *  memory_table's rows (engine/memory_plan.h: the KV cache row names tokens, bytes a token and
 *  dtype), the device column named "GPU" on CUDA, else "device". Ends with '\n'. */
std::string memory_banner(Engine& engine, int threads);

}  // namespace ft::cli
