// Tables for a person at a terminal, and the choice of columns (--columns) for every format.
// Files and pipes get md, CSV or JSON with every column (io/output.hpp); standard output on a
// terminal, with no --format and no -o, gets a compact table fitted to the terminal's width, or
// for a single row (one `predict`) a vertical list of name and value with its step-time breakdown.
// The renderers are pure (a width and the tables in, text out), so tests call them directly.
#pragma once

#include <string>
#include <vector>

#include "io/output.hpp"

namespace tpsim {

// A column as the terminal shows it unasked: its header, the short label printed above it, how
// long it is kept when the terminal is narrow (higher: kept longer), and the header of a column
// it stands in for (shown only when the table lacks that one: plan's Throughput (T/s) for the
// Throughput (T/s/GPU) that its table does not have).
struct TerminalColumn {
  std::string header, label;
  int keep = 0;
  std::string unless;
};

// What the terminal shows of the tables the commands print (cli/report.cpp says which columns).
struct TerminalLayout {
  std::vector<TerminalColumn> first;                       // the columns a person reads first, in the order printed
  std::vector<std::string> details;                        // left out of the compact table unless --columns names them
  std::vector<std::pair<std::string, std::string>> units;  // header -> the label with its unit (vertical list)
  std::string total;                                       // the step time's header ...
  std::vector<std::string> parts;                          // ... and its parts, listed with their shares
};

// Where and how the tables go: `format` for files and pipes; `width` > 0 for a terminal that wide.
struct OutputOptions {
  Format format = Format::kMarkdown;
  std::vector<std::string> columns;  // --columns: headers (or the terminal's labels), any case; empty: all
  int width = 0;
  TerminalLayout layout;
};

// "a,b,c" -> {"a", "b", "c"}, blanks around each trimmed; an Error for an empty name.
std::vector<std::string> parse_column_list(const std::string& s);

// --columns: each table keeps the named columns it has, in the order named; a table with none of
// them is left whole. A name that no table has (matched without regard to case, against the headers
// and the terminal's labels) is an Error listing the columns there are.
std::vector<OutputTable> choose_columns(const std::vector<OutputTable>& tables, const std::vector<std::string>& names,
                                        const TerminalLayout& layout);

// One table in at most `width` characters a line: the layout's first columns (or every column of
// the table when `chosen`), the lowest `keep` dropped first until a row fits, long text cut with
// "..."; a footer line names what was left out and how to see it. Rows never wrap.
std::string render_compact(const OutputTable& t, int width, const TerminalLayout& layout, bool chosen);

// One row as "name  value" lines: the first columns, then the step time and its parts with their
// shares of it, then the rest; empty cells print as "-".
std::string render_vertical(const OutputTable& t, int width, const TerminalLayout& layout);

// The tables as `o` says: the terminal's forms when o.width > 0 (a vertical list for one table of
// one row), else o.format; --columns first in either case.
std::string render(const std::vector<OutputTable>& tables, const OutputOptions& o);

// Whether a person reads the output: standard output is a terminal, and neither --format nor -o
// was given (both ask for every column).
bool terminal_view(bool stdout_is_tty, bool format_given, bool output_given);
bool stdout_is_terminal();
// The terminal's width: COLUMNS when it is a number from 20 to 10000, else the terminal's own
// (TIOCGWINSZ), else 80.
int terminal_width();

}  // namespace tpsim
