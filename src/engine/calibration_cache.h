#pragma once
// The start-up calibration's result kept on disk (issue 37: "cached per machine and model in a small
// file; --moe-calibrate reruns it"): the hybrid/offload split the engine timed fastest, with every
// candidate's time, keyed by what the timing depends on (the machine, the model's tensors, the plan).
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ft {

/** One calibration: the candidate chosen and each candidate's decode step in milliseconds. */
struct FetchCalibration {
  std::string choice;                                       // MoeRuntime::FetchCandidate::name ("cpu 1", "offload")
  std::vector<std::pair<std::string, double>> ms_per_step;  // in the order timed
  std::string measured_at;                                  // UTC, ISO 8601 ("2026-12-06T08:40:00Z")
};

/** "name: ms, name: ms" (two decimals), as the start-up log prints the timings. */
std::string format_timings(const FetchCalibration& c);

/** The cache folder when none is given: $FT_CACHE_DIR, else $XDG_CACHE_HOME/freetoken, else
 *  $HOME/.cache/freetoken; "" when none of them is set. */
std::string default_cache_dir();

/** This host's CPU for a calibration key: /proc/cpuinfo's first "model name" and the logical CPUs
 *  ("AMD EPYC 9654 96-Core Processor x 32"); "unknown CPU x N" where /proc/cpuinfo has no name. */
std::string host_cpu_description();

/** The calibration file of one key: DIR/moe-calibration-<16 hex digits of XXH3-64 of the key>.json,
 *  a JSON object {"version": 1, "key": KEY, "choice": ..., "ms_per_step": [[name, ms], ...],
 *  "measured_at": ...}. Never throws: a file that cannot be read back is reported and ignored. */
class CalibrationCache {
 public:
  CalibrationCache(std::string dir, std::string key);

  const std::string& file() const { return file_; }

  /** The stored calibration of this key; nullopt when there is no file, or (with a warning naming the
   *  file and the reason) when it is not valid JSON of this version or holds another key (a hash
   *  collision, or a hand-edited file). */
  std::optional<FetchCalibration> load() const;

  /** Writes `c` (the folder made when missing), replacing the file atomically (a temporary file and a
   *  rename). Returns false, with a warning saying why, when it cannot. */
  bool store(const FetchCalibration& c) const;

 private:
  std::string dir_, key_, file_;
};

}  // namespace ft
