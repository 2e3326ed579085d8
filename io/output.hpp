// Tables for people and programs: markdown (llm-foundry's results.md style), CSV and JSON.
// Every command prints through this, so `--format md|csv|json` and `-o FILE` mean the same
// everywhere. A non-finite number is a bug and is refused here rather than printed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tpsim {

enum class Format { kMarkdown, kCsv, kJson };
Format parse_format(const std::string& s);  // "md", "csv", "json"; Error otherwise

struct Cell {
  enum class Kind { kEmpty, kText, kNumber, kInteger, kBool } kind = Kind::kEmpty;
  std::string text;
  double number = 0;
  int decimals = 0;
  int64_t integer = 0;
  bool boolean = false;

  static Cell empty() { return {}; }
  static Cell str(std::string s);
  static Cell num(double v, int decimals);
  static Cell integer_value(int64_t v);
  static Cell flag(bool b);   // printed True / False as llm-foundry does
  std::string plain() const;  // as text (md and CSV)
};

struct OutputTable {
  std::string title;  // markdown section heading and JSON key when several tables are printed
  std::vector<std::string> columns;
  std::vector<std::vector<Cell>> rows;

  void add_row(std::vector<Cell> row);  // must have one cell per column
};

// One table: md is a pipe table, CSV a header and rows, JSON an array of objects.
// Several tables: md sections under "## title", CSV tables separated by a blank line, JSON an
// object keyed by title.
std::string render(const std::vector<OutputTable>& tables, Format format);

// Several tables as one, for a CSV a pipe can read with one header: a first column `key_column`
// holding each row's table title, then the union of the tables' columns in the order first met (a
// column of the same name is one column); a cell a table lacks is empty.
OutputTable stacked_table(const std::vector<OutputTable>& tables, const std::string& key_column);

// Prints to stdout, or writes the file atomically when `path` is set.
void emit(const std::string& text, const std::optional<std::string>& path);

}  // namespace tpsim
