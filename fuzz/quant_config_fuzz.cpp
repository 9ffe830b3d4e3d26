// libFuzzer harness: config.json's quantization_config (formats/quant_config). Input: config.json
// text. It goes through parse_quant_config; refusals (ft::Error) are the expected outcome of bad
// input, any other exception, a crash, a leak or UB fails. Invariants checked on a config that
// parses: an FP8 config names its scale tensor and, for block scales, a positive tile at most as
// wide as a multiple of 32 (what F8_E4M3_B32 repacks); no quantization converts nothing; converts()
// answers for a few module names (the patterns compiled at parse time also compile there). Built and
// run by `make fuzz`.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "formats/quant_config.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) return 0;
  try {
    const ft::QuantConfig c = ft::parse_quant_config(j, "config.json");
    switch (c.method) {
      case ft::QuantMethod::kNone:
        if (c.converts("model.layers.0.self_attn.q_proj") || !c.not_converted.empty()) std::abort();
        break;
      case ft::QuantMethod::kFp8:
        if (c.scale_suffix != "weight_scale_inv" && c.scale_suffix != "weight_scale") std::abort();
        if (c.fp8_scales == ft::Fp8Scales::kBlock &&
            (c.block_rows < 1 || c.block_cols < 1 || c.block_cols % 32 != 0))
          std::abort();
        break;
      case ft::QuantMethod::kMxfp4: break;
    }
    for (const char* m : {"lm_head", "model.layers.0.mlp.gate", "model.layers.12.mlp.experts.3.down_proj",
                          "model.layers.1.self_attn.o_proj"})
      (void)c.converts(m);
  } catch (const ft::Error&) {
  }
  return 0;
}
