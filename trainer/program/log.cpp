// The per-step line and the JSON lines log (trainer/program/log.h).
#include "trainer/program/log.h"

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace {

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

// 412 -> "412", 9912 -> "9.9k", 1.25e6 -> "1.2M".
std::string short_count(double value) {
  if (value >= 1e6) return format("%.1fM", value / 1e6);
  if (value >= 1e3) return format("%.1fk", value / 1e3);
  return format("%.0f", value);
}

}  // namespace

std::string format_step_line(const StepRecord& r) {
  std::string line = "step " + std::to_string(r.step) + "/" + std::to_string(r.steps);
  line += " | loss " + format("%.4f", r.loss);
  if (r.has_val_loss) line += " | val " + format("%.4f", r.val_loss);
  line += " | lr " + format("%.1e", r.lr);
  if (r.has_norm) line += " | norm " + format("%.2f", r.grad_norm);
  line += " | " + format("%.0f", r.ms) + " ms";
  line += " | " + short_count(r.tokens_per_s) + " tok/s";
  if (r.seq_len > 0) line += " | T " + std::to_string(r.seq_len) + " | padding " + format("%.1f%%", 100 * r.padding);
  if (!r.skipped.empty()) line += " | skipped: " + r.skipped;
  return line;
}

std::string format_stages_line(const std::vector<StageRecord>& stages) {
  std::string line = "stages";
  for (const StageRecord& s : stages) {
    line += " | " + std::to_string(s.stage) + ": idle " + format("%.0f%%", 100 * s.idle);
    line += " act " + short_count(s.activation_bytes) + "B dev " + short_count(s.device_bytes) + "B";
  }
  return line;
}

std::string format_step_json(const StepRecord& r) {
  std::string json = "{\"step\": " + std::to_string(r.step);
  json += ", \"loss\": " + format("%.17g", r.loss);
  if (r.has_val_loss) json += ", \"val_loss\": " + format("%.17g", r.val_loss);
  json += ", \"lr\": " + format("%.17g", r.lr);
  if (r.has_norm) json += ", \"grad_norm\": " + format("%.17g", r.grad_norm);
  json += ", \"ms\": " + format("%.3f", r.ms);
  json += ", \"tokens_per_s\": " + format("%.1f", r.tokens_per_s);
  if (r.seq_len > 0) {
    json += ", \"seq_len\": " + std::to_string(r.seq_len);
    json += ", \"padding\": " + format("%.6f", r.padding);
  }
  if (!r.stages.empty()) {
    json += ", \"stages\": [";
    for (size_t i = 0; i < r.stages.size(); ++i) {
      const StageRecord& s = r.stages[i];
      json += std::string(i ? ", " : "") + "{\"stage\": " + std::to_string(s.stage);
      json += ", \"idle\": " + format("%.4f", s.idle);
      json += ", \"activation_bytes\": " + format("%.0f", s.activation_bytes);
      json += ", \"device_bytes\": " + format("%.0f", s.device_bytes) + "}";
    }
    json += "]";
  }
  if (!r.skipped.empty()) json += ", \"skipped\": \"" + r.skipped + "\"";  // our own text: no quotes to escape
  return json + "}";
}

StepLog::StepLog(const std::string& path, bool append) {
  file_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (file_ == nullptr) throw std::runtime_error(path + ": cannot open the log: " + std::strerror(errno));
}

StepLog::~StepLog() { std::fclose(file_); }

void StepLog::write(const StepRecord& record) {
  std::fprintf(file_, "%s\n", format_step_json(record).c_str());
  std::fflush(file_);
}
