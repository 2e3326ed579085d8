#include "io/measured_table.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "io/error.hpp"
#include "io/files.hpp"
#include "io/text_format.hpp"

namespace tpsim {
namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r");
  return s.substr(a, b - a + 1);
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string cur;
  for (char c : text) {
    if (c == '\n') {
      lines.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  return lines;
}

// "| a | b |" -> {"a", "b"}
std::vector<std::string> md_cells(const std::string& line) {
  std::string s = trim(line);
  if (!s.empty() && s.front() == '|') s.erase(0, 1);
  if (!s.empty() && s.back() == '|') s.pop_back();
  std::vector<std::string> cells;
  std::string cur;
  for (char c : s) {
    if (c == '|') {
      cells.push_back(trim(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  cells.push_back(trim(cur));
  return cells;
}

bool is_md_separator(const std::vector<std::string>& cells) {
  if (cells.empty()) return false;
  for (const auto& c : cells) {
    if (c.empty()) return false;
    for (char ch : c)
      if (ch != '-' && ch != ':') return false;
  }
  return true;
}

// RFC 4180 fields of one CSV record (no embedded newlines: llm-foundry's values have none).
std::vector<std::string> csv_cells(const std::string& line, const std::string& where) {
  std::vector<std::string> cells;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.push_back(trim(cur));
      cur.clear();
    } else if (c != '\r') {
      cur += c;
    }
  }
  if (quoted) throw Error(where + ": unterminated quoted field");
  cells.push_back(trim(cur));
  return cells;
}

const char* const kRequired[] = {"Model", "SeqLen (T)", "# GPUs", "GPU", "MicroBatchSize", "GlobalBatchSize",
                                 "Throughput (T/s)", "Precision", "MP Mode", "Sharding Strategy",
                                 "Activation Checkpointing"};

class RowParser {
 public:
  RowParser(const std::vector<std::string>& header, const std::string& origin, int header_line)
      : origin_(origin), header_(header) {
    const std::string at = origin + ":" + std::to_string(header_line);
    for (size_t i = 0; i < header.size(); ++i) {
      if (header[i].empty()) continue;
      if (!index_.emplace(header[i], i).second)
        throw Error(at + ": column '" + header[i] + "' appears twice in the header");
    }
    for (const char* r : kRequired)
      if (!index_.count(r)) throw Error(at + ": required column '" + std::string(r) + "' is missing");
  }

  MeasuredRow parse(const std::vector<std::string>& cells, int line) const {
    MeasuredRow r;
    r.origin = origin_;
    r.line = line;
    for (size_t i = 0; i < header_.size() && i < cells.size(); ++i) r.cells.emplace_back(header_[i], cells[i]);
    const std::string at = origin_ + ":" + std::to_string(line);
    r.model = text(cells, "Model", at);
    r.seq_len = positive_int(cells, "SeqLen (T)", at);
    r.n_gpus = positive_int(cells, "# GPUs", at);
    r.gpu = text(cells, "GPU", at);
    r.micro_batch = positive_int(cells, "MicroBatchSize", at);
    r.global_batch = positive_int(cells, "GlobalBatchSize", at);
    if (has("GradAccum")) r.grad_accum = positive_int(cells, "GradAccum", at);
    r.tokens_per_s = number(cells, "Throughput (T/s)", at);
    if (!(r.tokens_per_s > 0)) throw Error(at + ": 'Throughput (T/s)' must be positive");
    const std::string prec = text(cells, "Precision", at);
    const auto p = parse_precision(prec);
    if (!p) throw Error(at + ": unknown Precision '" + prec + "' (amp_bf16, amp_fp16, amp_fp8, bf16, fp32)");
    r.precision = *p;
    const std::string mp = text(cells, "MP Mode", at);
    const auto m = parse_mp_mode(mp);
    if (!m) throw Error(at + ": unknown MP Mode '" + mp + "' (DEFAULT, PURE, FULL)");
    r.mp_mode = *m;
    const std::string sh = text(cells, "Sharding Strategy", at);
    const auto s = parse_sharding(sh);
    if (!s) throw Error(at + ": unknown Sharding Strategy '" + sh + "' (FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD)");
    r.sharding = *s;
    r.checkpointing = checkpointing(cells, "Activation Checkpointing", at);
    if (has("Activation CPUOffload")) r.activation_cpu_offload = boolean(cells, "Activation CPUOffload", at);
    if (has("MFU")) r.mfu_percent = number(cells, "MFU", at);
    if (has("HFU")) r.hfu_percent = number(cells, "HFU", at);
    if (has("Model TFLOP")) r.model_tflop = number(cells, "Model TFLOP", at);
    if (has("NumParams")) r.num_params = positive_int(cells, "NumParams", at);
    return r;
  }

 private:
  bool has(const std::string& col) const { return index_.count(col) > 0; }

  const std::string& cell(const std::vector<std::string>& cells, const std::string& col, const std::string& at) const {
    const size_t i = index_.at(col);
    if (i >= cells.size()) throw Error(at + ": no cell for column '" + col + "'");
    return cells[i];
  }

  std::string text(const std::vector<std::string>& cells, const std::string& col, const std::string& at) const {
    const std::string& s = cell(cells, col, at);
    if (s.empty()) throw Error(at + ": column '" + col + "' is empty");
    return s;
  }

  double number(const std::vector<std::string>& cells, const std::string& col, const std::string& at) const {
    const std::string s = text(cells, col, at);
    const std::optional<double> v = parse_number(s);
    if (!v) throw Error(at + ": column '" + col + "' must be a number, got '" + s + "'");
    if (!std::isfinite(*v)) throw Error(at + ": column '" + col + "' must be finite, got '" + s + "'");
    if (*v < 0) throw Error(at + ": column '" + col + "' must not be negative, got '" + s + "'");
    return *v;
  }

  int64_t positive_int(const std::vector<std::string>& cells, const std::string& col, const std::string& at) const {
    const std::string s = text(cells, col, at);
    const std::optional<int64_t> v = parse_integer(s);
    if (!v) throw Error(at + ": column '" + col + "' must be a whole number, got '" + s + "'");
    if (*v <= 0) throw Error(at + ": column '" + col + "' must be positive, got '" + s + "'");
    return *v;
  }

  bool boolean(const std::vector<std::string>& cells, const std::string& col, const std::string& at) const {
    std::string s = text(cells, col, at);
    std::transform(s.begin(), s.end(), s.begin(), ::tolower);
    if (s == "true" || s == "1" || s == "yes") return true;
    if (s == "false" || s == "0" || s == "no") return false;
    throw Error(at + ": column '" + col + "' must be True or False, got '" + cell(cells, col, at) + "'");
  }

  // llm-foundry writes a boolean (True: each block checkpointed whole); tpsim's own rows may say
  // which kind.
  Checkpointing checkpointing(const std::vector<std::string>& cells, const std::string& col, const std::string& at) const {
    std::string s = text(cells, col, at);
    std::transform(s.begin(), s.end(), s.begin(), ::tolower);
    if (s == "true" || s == "1" || s == "yes") return Checkpointing::kFull;
    if (s == "false" || s == "0" || s == "no") return Checkpointing::kNone;
    if (const auto c = parse_checkpointing(s)) return *c;
    throw Error(at + ": column '" + col + "' must be True or False (or none, selective or full), got '" +
                cell(cells, col, at) + "'");
  }

  std::string origin_;
  std::vector<std::string> header_;
  std::map<std::string, size_t> index_;
};

// One header and the rows under it.
struct Section {
  std::vector<std::string> header;
  int header_line = 0;
  std::vector<std::pair<int, std::vector<std::string>>> rows;
};

// Repairs rows with one cell too many when the header lacks Model TFLOP (inserted after HFU),
// else rejects the row.
void align(Section& sec, const std::string& origin, std::vector<std::string>& warnings) {
  const auto has = [&](const char* c) { return std::find(sec.header.begin(), sec.header.end(), c) != sec.header.end(); };
  bool repaired = false;
  for (auto& [line, cells] : sec.rows) {
    if (cells.size() == sec.header.size()) continue;
    const std::string at = origin + ":" + std::to_string(line);
    if (cells.size() == sec.header.size() + 1 && !has("Model TFLOP") && has("HFU")) {
      if (!repaired) {
        const auto hfu = std::find(sec.header.begin(), sec.header.end(), "HFU");
        sec.header.insert(hfu + 1, "Model TFLOP");
        repaired = true;
        warnings.push_back(origin + ":" + std::to_string(sec.header_line) + ": header has " +
                           std::to_string(sec.header.size() - 1) + " columns but rows have " +
                           std::to_string(cells.size()) + "; reading the missing 'Model TFLOP' column after 'HFU'");
      }
      continue;
    }
    throw Error(at + ": row has " + std::to_string(cells.size()) + " cells but the header has " +
                std::to_string(sec.header.size()) + " columns");
  }
  if (repaired)
    for (auto& [line, cells] : sec.rows)
      if (cells.size() + 1 == sec.header.size())
        throw Error(origin + ":" + std::to_string(line) + ": row has " + std::to_string(cells.size()) +
                    " cells, other rows of this table have " + std::to_string(sec.header.size()));
}

}  // namespace

MeasuredTable parse_measured_table(const std::string& text, const std::string& origin) {
  if (text.find('\0') != std::string::npos) throw Error(origin + ": binary content, expected a table");
  const std::vector<std::string> lines = split_lines(text);
  std::vector<Section> sections;
  bool markdown = false;
  for (const auto& l : lines)
    if (!trim(l).empty()) {
      markdown = trim(l).front() == '|';
      break;
    }

  if (markdown) {
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string t = trim(lines[i]);
      if (t.empty() || t.front() != '|') continue;
      const auto cells = md_cells(t);
      if (is_md_separator(cells)) continue;
      const bool is_header = i + 1 < lines.size() && !trim(lines[i + 1]).empty() && trim(lines[i + 1]).front() == '|' &&
                             is_md_separator(md_cells(trim(lines[i + 1])));
      if (is_header) {
        sections.push_back({cells, static_cast<int>(i + 1), {}});
      } else {
        if (sections.empty()) throw Error(origin + ":" + std::to_string(i + 1) + ": table row before any header");
        sections.back().rows.push_back({static_cast<int>(i + 1), cells});
      }
    }
  } else {
    Section sec;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (trim(lines[i]).empty()) continue;
      const std::string at = origin + ":" + std::to_string(i + 1);
      auto cells = csv_cells(lines[i], at);
      if (sec.header.empty()) {
        sec.header = cells;
        sec.header_line = static_cast<int>(i + 1);
      } else {
        sec.rows.push_back({static_cast<int>(i + 1), cells});
      }
    }
    if (!sec.header.empty()) sections.push_back(sec);
  }
  if (sections.empty()) throw Error(origin + ": no table found (expected an llm-foundry results.md or results.csv)");

  MeasuredTable table;
  table.origin = origin;
  for (auto& sec : sections) {
    align(sec, origin, table.warnings);
    const RowParser parser(sec.header, origin, sec.header_line);
    for (const auto& [line, cells] : sec.rows) table.rows.push_back(parser.parse(cells, line));
    if (table.header.empty()) table.header = sec.header;
  }
  if (table.rows.empty()) throw Error(origin + ": the table has a header but no rows");
  return table;
}

MeasuredTable read_measured_table(const std::filesystem::path& path) {
  return parse_measured_table(read_text_file(path, "table"), path.string());
}

Cell checkpointing_cell(Checkpointing c) {
  if (c == Checkpointing::kSelective) return Cell::str(std::string(to_string(c)));
  return Cell::flag(c == Checkpointing::kFull);
}

}  // namespace tpsim
