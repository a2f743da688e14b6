// What the executor did, as text (pipeline/executor_state.h's to_text, pipeline/execute.h's trace_text).
#include "pipeline/execute.h"

#include <string>
#include <vector>

std::string to_text(const ExecutedStep& step) {
  const auto named = [](ActionKind kind, int microbatch, int chunk) {
    return to_text(Action{kind, microbatch, 0}) + "@c" + std::to_string(chunk);
  };
  if (step.compute) {
    std::string text = named(step.kind, step.microbatch, step.chunk);
    if (step.slot >= 0) text += " slot " + std::to_string(step.slot);
    if (step.weight_inputs >= 0) text += " w " + std::to_string(step.weight_inputs);
    if (step.output_buffer >= 0) text += " output " + std::to_string(step.output_buffer);
    if (step.recomputed) text += " (recomputed)";
    return text;
  }
  std::string text;
  for (const ExecutedMessage& m : step.messages) {
    const bool outgoing = m.kind == ActionKind::send_forward || m.kind == ActionKind::send_backward;
    text += (text.empty() ? "" : " + ") + named(m.kind, m.microbatch, m.chunk) + (outgoing ? "->" : "<-") +
            std::to_string(m.peer) + " buffer " + std::to_string(m.buffer);
  }
  return text;
}

std::string trace_text(const std::vector<ExecutedStep>& trace) {
  std::string text;
  for (const ExecutedStep& step : trace) text += (text.empty() ? "" : "; ") + to_text(step);
  return text;
}
