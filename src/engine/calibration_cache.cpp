// CalibrationCache: see calibration_cache.h.
#include "engine/calibration_cache.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "util/log.h"

namespace ft {

namespace {

constexpr int kVersion = 1;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string();
}

}  // namespace

std::string format_timings(const FetchCalibration& c) {
  std::string s;
  for (const auto& [name, ms] : c.ms_per_step) s += fmt::format("{}{}: {:.2f}", s.empty() ? "" : ", ", name, ms);
  return s;
}

std::string host_cpu_description() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, name = "unknown CPU";
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      if (const size_t colon = line.find(':'); colon != std::string::npos && colon + 2 <= line.size())
        name = line.substr(colon + 2);
      break;
    }
  return fmt::format("{} x {}", name, std::thread::hardware_concurrency());
}

std::string default_cache_dir() {
  if (std::string d = env("FT_CACHE_DIR"); !d.empty()) return d;
  if (std::string d = env("XDG_CACHE_HOME"); !d.empty()) return d + "/freetoken";
  if (std::string d = env("HOME"); !d.empty()) return d + "/.cache/freetoken";
  return {};
}

CalibrationCache::CalibrationCache(std::string dir, std::string key) : dir_(std::move(dir)), key_(std::move(key)) {
  file_ = fmt::format("{}/moe-calibration-{:016x}.json", dir_, XXH3_64bits(key_.data(), key_.size()));
}

std::optional<FetchCalibration> CalibrationCache::load() const {
  std::ifstream in(file_, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  try {
    const nlohmann::json j = nlohmann::json::parse(text.str());
    if (!j.is_object() || j.value("version", 0) != kVersion) {
      spdlog::warn("moe: ignoring the calibration file {}: not a version {} calibration", file_, kVersion);
      return std::nullopt;
    }
    if (j.at("key").get<std::string>() != key_) {
      spdlog::warn("moe: ignoring the calibration file {}: it holds another machine, model or plan", file_);
      return std::nullopt;
    }
    FetchCalibration c;
    c.choice = j.at("choice").get<std::string>();
    c.measured_at = j.value("measured_at", std::string());
    for (const nlohmann::json& e : j.at("ms_per_step")) c.ms_per_step.emplace_back(e.at(0).get<std::string>(), e.at(1).get<double>());
    if (c.choice.empty()) throw std::runtime_error("an empty choice");
    return c;
  } catch (const std::exception& e) {
    spdlog::warn("moe: ignoring the calibration file {}: {}", file_, e.what());
    return std::nullopt;
  }
}

bool CalibrationCache::store(const FetchCalibration& c) const {
  nlohmann::json j;
  j["version"] = kVersion;
  j["key"] = key_;
  j["choice"] = c.choice;
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& [name, ms] : c.ms_per_step) steps.push_back({name, ms});
  j["ms_per_step"] = steps;
  j["measured_at"] = c.measured_at;
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  const std::string tmp = fmt::format("{}.{}.tmp", file_, ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << j.dump(1) << "\n";
    if (!out.flush()) {
      std::filesystem::remove(tmp, ec);
      spdlog::warn("moe: could not write the calibration file {} (folder {}{}); the next start calibrates again", file_,
                   dir_, ec ? ": " + ec.message() : std::string());
      return false;
    }
  }
  std::filesystem::rename(tmp, file_, ec);
  if (ec) {
    const std::string why = ec.message();
    std::filesystem::remove(tmp, ec);
    spdlog::warn("moe: could not write the calibration file {}: {}", file_, why);
    return false;
  }
  return true;
}

}  // namespace ft
