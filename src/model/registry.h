#pragma once
// Architecture registry: maps a checkpoint's architecture (HF config.json `model_type`, GGUF
// `general.architecture`) to the model file that builds it.
#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "formats/checkpoint.h"
#include "model/model.h"
#include "model/weights.h"

namespace ft {

/** Builds a model from its parsed config (architecture defaults are applied by the builder). */
using ArchBuilder = std::unique_ptr<Model> (*)(ModelConfig config, WeightLoader& ld, Ops& ops);

struct ArchEntry {
  const char* name;                         // registry name ("qwen3_moe")
  std::vector<std::string> hf_model_types;  // config.json model_type values
  std::vector<std::string> gguf_archs;      // general.architecture values
  ArchBuilder build;
  /** config.json fields the architecture's transformers config class defaults (JSON text; nullptr:
   *  none), applied where a config.json leaves them out, so a terse config reads as transformers
   *  reads it. */
  const char* hf_defaults = nullptr;
};

/** Every supported architecture. */
const std::vector<ArchEntry>& architectures();

/** "llama, mistral, qwen2, ..." for messages. */
std::string supported_architectures();

/** The architecture of `ckpt` and its parsed config. GGUF "llama" files with experts are Mixtral
 *  (llama.cpp stores Mixtral under the llama architecture). Throws ft::Error(kUnsupported)
 *  "unsupported architecture 'X' (supported: ...)", kInvalidFile when the name is missing. */
ModelConfig read_model_config(const Checkpoint& ckpt, const ArchEntry** entry = nullptr);

/** Reads the config, builds the model and validates every weight (name, shape, dtype). Weights are
 *  made resident through `ops`; the checkpoint must outlive the model. `progress`, when set, sees a
 *  phase "weights" (WeightLoader::load_bytes_estimate bytes; what the loader counts). */
std::unique_ptr<Model> load_model(const Checkpoint& ckpt, Ops& ops, ProgressSink* progress = nullptr);

/** load_model for one rank of a tensor-parallel group (dist/tensor_parallel.h): the model holds the
 *  rank's slice of the attention and dense FFN weights (Model::tensor_parallel()) and is run with a
 *  ForwardContext::tp of that group. tp.size 1 is load_model. Throws ft::Error(kUnsupported) for an
 *  architecture (or a part of one) that is not split yet, and what load_model throws. */
std::unique_ptr<Model> load_model(const Checkpoint& ckpt, Ops& ops, const dist::TpShard& tp,
                                  ProgressSink* progress = nullptr);

}  // namespace ft
