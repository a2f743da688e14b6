// PyTorch's schedule CSV (pipeline/pytorch_csv.h): reading it into a compute grid, writing one.
#include "pipeline/pytorch_csv.h"

#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

namespace {

// PyTorch's compute types and our kinds, both ways.
const std::pair<const char*, ActionKind> kComputeTypes[] = {{"F", ActionKind::forward},
                                                            {"B", ActionKind::backward},
                                                            {"I", ActionKind::backward_input},
                                                            {"W", ActionKind::backward_weight}};
// The types of PyTorch's compute_comms form, which a compute-only file does not hold.
const std::set<std::string> kCommunicationTypes = {"SEND_F", "RECV_F", "SEND_B",     "RECV_B",
                                                   "UNSHARD", "RESHARD", "REDUCE_GRAD"};
// A stage or microbatch index with more digits is out of range for any run (and for an int).
constexpr size_t kMaxDigits = 6;

std::string trimmed(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\r") - begin + 1);
}

// One compute action as the file has it, before the placement turns its stage into a chunk.
struct CsvAction {
  int virtual_stage;
  ActionKind kind;
  int microbatch;
  int row, column;  // 1-based, for the errors
  std::string text;
  bool overlapped = false;  // the second action of a pair
};

[[noreturn]] void fail_at(int row, int column, const std::string& problem) {
  throw std::runtime_error("row " + std::to_string(row) + " column " + std::to_string(column) + ": " + problem);
}

// The digits of text from at on, as a number (-1 when there are none); at moves past them.
int read_index(const std::string& text, size_t& at, int row, int column, const std::string& what) {
  const size_t begin = at;
  while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at]))) at++;
  if (at == begin) return -1;
  if (at - begin > kMaxDigits) fail_at(row, column, "'" + text + "': the " + what + " index is out of range");
  return std::stoi(text.substr(begin, at - begin));
}

// One action text, "2F0" (PyTorch's [stage][type][microbatch]).
CsvAction parse_action_text(const std::string& text, int row, int column) {
  const std::string not_compute =
      "'" + text + "' is not a PyTorch compute action [stage][F|B|I|W][microbatch], e.g. 2F0";
  size_t at = 0;
  const int stage = read_index(text, at, row, column, "stage");
  const size_t type_begin = at;
  while (at < text.size() && (std::isupper(static_cast<unsigned char>(text[at])) || text[at] == '_')) at++;
  const std::string type = text.substr(type_begin, at - type_begin);
  const int microbatch = read_index(text, at, row, column, "microbatch");
  if (stage < 0 || at != text.size()) fail_at(row, column, not_compute);
  if (kCommunicationTypes.count(type))
    fail_at(row, column, "'" + text + "' is PyTorch's " + type +
                             ": the compute-only CSV lists F, B, I and W (the transfers are added here)");
  const auto* found = std::find_if(std::begin(kComputeTypes), std::end(kComputeTypes),
                                   [&](const auto& entry) { return type == entry.first; });
  if (found == std::end(kComputeTypes)) fail_at(row, column, not_compute);
  if (microbatch < 0) fail_at(row, column, "'" + text + "' has no microbatch index (e.g. " + text + "0)");
  return {stage, found->second, microbatch, row, column, text};
}

// A cell's actions: none (empty, PyTorch's None), one, or an overlapped pair's two, the second
// marked overlapped.
std::vector<CsvAction> parse_cell(std::string cell, int row, int column) {
  cell = trimmed(cell);
  if (cell.size() >= 2 && cell.front() == '"' && cell.back() == '"') cell = trimmed(cell.substr(1, cell.size() - 2));
  if (cell.empty()) return {};
  if (cell.front() != '(') return {parse_action_text(cell, row, column)};
  const size_t close = cell.find(')');
  if (close == std::string::npos || cell.substr(close + 1) != "OVERLAP_F_B")
    fail_at(row, column, "'" + cell + "' is not an overlapped pair (aFx;bBy)OVERLAP_F_B");
  std::vector<CsvAction> actions;
  std::istringstream parts(cell.substr(1, close - 1));
  for (std::string part; std::getline(parts, part, ';');)
    actions.push_back(parse_action_text(trimmed(part), row, column));
  if (actions.size() != 2) fail_at(row, column, "'" + cell + "' is not a pair of two actions (aFx;bBy)OVERLAP_F_B");
  actions[1].overlapped = true;
  return actions;
}

// Whether the placement puts the virtual stage on rank r of p (pipeline/schedule.h).
bool places(PlacementKind kind, int virtual_stage, int r, int p) {
  if (kind == PlacementKind::ring) return virtual_stage % p == r;
  return virtual_stage == r || virtual_stage == 2 * p - 1 - r;
}

// The first placement that puts every action's stage on its row's rank (the ring before the v,
// the v first when a row holds an overlapped pair, which only the v runs: they coincide at p = 1).
PlacementKind placement_of_rows(const std::vector<std::vector<CsvAction>>& rows) {
  const int p = int(rows.size());
  std::vector<PlacementKind> fitting = {PlacementKind::ring, PlacementKind::v_shape};
  for (int r = 0; r < p; r++)
    for (const CsvAction& a : rows[r]) {
      std::erase_if(fitting, [&](PlacementKind kind) { return !places(kind, a.virtual_stage, r, p); });
      if (fitting.empty())
        fail_at(a.row, a.column,
                "'" + a.text + "' runs stage " + std::to_string(a.virtual_stage) + " on rank " + std::to_string(r) +
                    ", which fits neither placement with the actions before it: the ring puts stages " +
                    std::to_string(r) + ", " + std::to_string(r + p) + ", " + std::to_string(r + 2 * p) +
                    ", ... on rank " + std::to_string(r) + ", the v stages " + std::to_string(r) + " and " +
                    std::to_string(2 * p - 1 - r));
    }
  const bool pairs = std::any_of(rows.begin(), rows.end(), [](const std::vector<CsvAction>& row) {
    return std::any_of(row.begin(), row.end(), [](const CsvAction& a) { return a.overlapped; });
  });
  return pairs && fitting.back() == PlacementKind::v_shape ? fitting.back() : fitting.front();
}

// Every stage below the highest the file runs must be run somewhere: else the highest ones are out
// of range, and the first action running one above the gap is named.
void check_stages_contiguous(const std::vector<std::vector<CsvAction>>& rows) {
  std::set<int> used;
  for (const std::vector<CsvAction>& row : rows)
    for (const CsvAction& a : row) used.insert(a.virtual_stage);
  int gap = 0;
  while (used.count(gap)) gap++;
  for (const std::vector<CsvAction>& row : rows)
    for (const CsvAction& a : row)
      if (a.virtual_stage > gap)
        fail_at(a.row, a.column,
                "'" + a.text + "': stage " + std::to_string(a.virtual_stage) + " is out of range: no action runs stage " +
                    std::to_string(gap) + (gap > 0 ? ", so the stages are 0 to " + std::to_string(gap - 1) : ""));
}

}  // namespace

bool is_pytorch_csv(const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const std::string content = trimmed(line.substr(0, line.find('#')));
    if (content.empty()) continue;
    return content.rfind("placement", 0) != 0 && content.rfind("stage", 0) != 0;
  }
  return false;
}

ScheduleGrid parse_pytorch_csv(const std::string& text) {
  std::vector<std::vector<CsvAction>> rows;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const int row = int(rows.size()) + 1;
    std::vector<CsvAction> actions;
    std::istringstream cells(line);
    int column = 0;
    for (std::string cell; std::getline(cells, cell, ',');)
      for (const CsvAction& a : parse_cell(cell, row, ++column)) actions.push_back(a);
    if (actions.empty())
      fail_at(row, 1, "no action: each row lists one rank's compute actions, one row per rank in rank order");
    rows.push_back(actions);
  }
  if (rows.empty()) throw std::runtime_error("the CSV has no rows (one per rank)");
  const PlacementKind placement = placement_of_rows(rows);
  check_stages_contiguous(rows);
  const int p = int(rows.size());
  ScheduleGrid grid{placement, std::vector<std::vector<Action>>(p)};
  for (int r = 0; r < p; r++)
    for (const CsvAction& a : rows[r]) {
      const int chunk = placement == PlacementKind::ring ? a.virtual_stage / p : (a.virtual_stage == r ? 0 : 1);
      const Action action{a.kind, a.microbatch, chunk, a.overlapped};
      const std::string problem = a.overlapped ? pair_problem(grid.stages[r].back(), action, placement) : "";
      if (!problem.empty()) fail_at(a.row, a.column, problem);
      grid.stages[r].push_back(action);
    }
  return grid;
}

std::string pytorch_csv_text(const PipelineSchedule& schedule) {
  std::string text;
  for (int s = 0; s < int(schedule.stages.size()); s++) {
    std::string row;
    for (const Action& a : compute_actions(schedule.stages[s])) {
      const auto* type = std::find_if(std::begin(kComputeTypes), std::end(kComputeTypes),
                                      [&](const auto& entry) { return a.kind == entry.second; });
      const std::string text = std::to_string(schedule.placement.virtual_stage(s, a.chunk)) + type->first +
                               std::to_string(a.microbatch);
      if (a.overlapped) {  // the pair's first action is the row's last cell: "(0F7;7B3)OVERLAP_F_B"
        row.insert(row.rfind(',') == std::string::npos ? 0 : row.rfind(',') + 1, "(");
        row += ";" + text + ")OVERLAP_F_B";
      } else {
        row += (row.empty() ? "" : ",") + text;
      }
    }
    text += row + "\r\n";
  }
  return text;
}
