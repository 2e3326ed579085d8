#include "io/terminal.hpp"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "io/error.hpp"
#include "io/names.hpp"

namespace tpsim {
namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

// Characters on screen: UTF-8 code points (every header and cell is one column wide each).
size_t text_width(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

// The first `n` characters of s (n >= 3) ending in "...", when s is longer.
std::string cut(const std::string& s, size_t n) {
  if (text_width(s) <= n) return s;
  std::string out;
  size_t shown = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && shown++ == n - 3) break;
    out += s[i];
  }
  return out + "...";
}

std::string pad(const std::string& s, size_t width, bool right) {
  const std::string fill(width > text_width(s) ? width - text_width(s) : 0, ' ');
  return right ? fill + s : s + fill;
}

const TerminalColumn* first_column(const TerminalLayout& layout, const std::string& header) {
  for (const auto& c : layout.first)
    if (c.header == header) return &c;
  return nullptr;
}

std::string label_of(const TerminalLayout& layout, const std::string& header) {
  const TerminalColumn* c = first_column(layout, header);
  return c ? c->label : header;
}

std::string unit_label(const TerminalLayout& layout, const std::string& header) {
  for (const auto& [h, label] : layout.units)
    if (h == header) return label;
  return header;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

std::string cell_text(const Cell& c) { return c.kind == Cell::Kind::kEmpty ? "-" : c.plain(); }

bool right_aligned(const Cell& c) {
  return c.kind == Cell::Kind::kNumber || c.kind == Cell::Kind::kInteger || c.kind == Cell::Kind::kEmpty;
}

// Words joined into lines of at most `width` characters (a word longer than that on its own line).
std::string wrap(const std::vector<std::string>& words, int width) {
  std::string out, line;
  for (const auto& w : words) {
    if (!line.empty() && static_cast<int>(text_width(line) + 1 + text_width(w)) > width) {
      out += line + "\n";
      line.clear();
    }
    line += (line.empty() ? "" : " ") + w;
  }
  return line.empty() ? out : out + line + "\n";
}

// The indices of the columns the compact table starts from, in the order printed.
std::vector<size_t> compact_columns(const OutputTable& t, const TerminalLayout& layout, bool chosen) {
  std::vector<size_t> shown;
  if (chosen) {
    for (size_t i = 0; i < t.columns.size(); ++i) shown.push_back(i);
    return shown;
  }
  for (const auto& c : layout.first) {
    const auto it = std::find(t.columns.begin(), t.columns.end(), c.header);
    if (it != t.columns.end() && (c.unless.empty() || !has(t.columns, c.unless)))
      shown.push_back(static_cast<size_t>(it - t.columns.begin()));
  }
  for (size_t i = 0; i < t.columns.size(); ++i)
    if (!first_column(layout, t.columns[i]) && !has(layout.details, t.columns[i])) shown.push_back(i);
  return shown;
}

struct Fitted {
  std::vector<size_t> columns;  // indices into the table, in the order printed
  std::vector<size_t> widths;   // characters of each
  bool cut = false;             // some text was cut to fit
};

size_t line_width(const std::vector<size_t>& widths) {
  size_t w = 0;
  for (size_t x : widths) w += x;
  return w + 2 * (widths.empty() ? 0 : widths.size() - 1);
}

// Narrows the columns to `width`: a text column wider than 24 characters gives up its excess
// first (its cells cut), then the column kept least is dropped, until a line fits.
Fitted fit_columns(const OutputTable& t, std::vector<size_t> columns, int width, const TerminalLayout& layout) {
  Fitted f;
  const auto natural = [&](size_t i) {
    size_t w = text_width(label_of(layout, t.columns[i]));
    for (const auto& row : t.rows) w = std::max(w, text_width(cell_text(row[i])));
    return w;
  };
  for (size_t i : columns) f.widths.push_back(natural(i));
  f.columns = std::move(columns);
  const size_t limit = static_cast<size_t>(std::max(width, 20));
  while (line_width(f.widths) > limit) {
    const size_t excess = line_width(f.widths) - limit;
    size_t widest = 0;
    for (size_t k = 1; k < f.widths.size(); ++k)
      if (f.widths[k] > f.widths[widest]) widest = k;
    const bool text = !t.rows.empty() && !right_aligned(t.rows.front()[f.columns[widest]]);
    if ((text || f.columns.size() == 1) && f.widths[widest] > 24) {
      f.widths[widest] = std::max<size_t>(24, f.widths[widest] > excess ? f.widths[widest] - excess : 0);
      f.cut = true;
      continue;
    }
    if (f.columns.size() == 1) break;
    size_t drop = f.columns.size() - 1;  // among the least kept, the rightmost
    const auto keep = [&](size_t k) {
      const TerminalColumn* c = first_column(layout, t.columns[f.columns[k]]);
      return c ? c->keep : 50;
    };
    for (size_t k = f.columns.size(); k-- > 0;)
      if (keep(k) < keep(drop)) drop = k;
    f.columns.erase(f.columns.begin() + static_cast<std::ptrdiff_t>(drop));
    f.widths.erase(f.widths.begin() + static_cast<std::ptrdiff_t>(drop));
  }
  return f;
}

// One note under the table: the columns left out to fit the width, by name; how many more the
// compact table leaves out; whether text was cut; how to see every column or choose them.
std::string compact_footer(const OutputTable& t, const std::vector<size_t>& wanted, const Fitted& f, int width) {
  std::string dropped;
  for (size_t i : wanted)
    if (std::find(f.columns.begin(), f.columns.end(), i) == f.columns.end())
      dropped += (dropped.empty() ? "" : ", ") + t.columns[i];
  const size_t more = t.columns.size() - wanted.size();
  if (dropped.empty() && more == 0 && !f.cut) return "";
  std::string note = "(";
  if (!dropped.empty()) note += "Left out to fit " + std::to_string(width) + " characters: " + dropped + ". ";
  if (more > 0) note += "Not shown: " + std::to_string(more) + (more == 1 ? " more column. " : " more columns. ");
  if (f.cut) note += "Text ending in ... was cut. ";
  note += "Every column: --format md (or csv, json); chosen ones: --columns NAME,NAME.)";
  std::vector<std::string> words;
  for (size_t a = 0, b; a < note.size(); a = b + 1) {
    b = std::min(note.find(' ', a), note.size());
    words.push_back(note.substr(a, b - a));
  }
  return wrap(words, width);
}

}  // namespace

std::vector<std::string> parse_column_list(const std::string& s) {
  std::vector<std::string> names;
  size_t start = 0;
  while (true) {
    const size_t comma = s.find(',', start);
    const std::string name = trim(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (name.empty()) throw Error("--columns '" + s + "': an empty column name (expected NAME,NAME,...)");
    names.push_back(name);
    if (comma == std::string::npos) return names;
    start = comma + 1;
  }
}

std::vector<OutputTable> choose_columns(const std::vector<OutputTable>& tables, const std::vector<std::string>& names,
                                        const TerminalLayout& layout) {
  const auto matches = [&](const std::string& header, const std::string& name) {
    return to_lower(header) == to_lower(name) || to_lower(label_of(layout, header)) == to_lower(name);
  };
  for (const auto& name : names) {
    bool found = false;
    std::vector<std::string> all;
    for (const auto& t : tables)
      for (const auto& c : t.columns) {
        found = found || matches(c, name);
        if (!has(all, c)) all.push_back(c);
      }
    if (found) continue;
    std::string list;
    for (const auto& c : all) list += (list.empty() ? "" : ", ") + c;
    throw Error("--columns " + name + ": no such column; the columns are: " + list);
  }
  std::vector<OutputTable> out;
  for (const auto& t : tables) {
    std::vector<size_t> index;
    for (const auto& name : names)
      for (size_t i = 0; i < t.columns.size(); ++i)
        if (matches(t.columns[i], name) && std::find(index.begin(), index.end(), i) == index.end()) index.push_back(i);
    if (index.empty()) {
      out.push_back(t);
      continue;
    }
    OutputTable c;
    c.title = t.title;
    for (size_t i : index) c.columns.push_back(t.columns[i]);
    for (const auto& row : t.rows) {
      std::vector<Cell> cells;
      for (size_t i : index) cells.push_back(row[i]);
      c.add_row(std::move(cells));
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::string render_compact(const OutputTable& t, int width, const TerminalLayout& layout, bool chosen) {
  const std::vector<size_t> wanted = compact_columns(t, layout, chosen);
  const Fitted f = fit_columns(t, wanted, width, layout);
  const auto line = [&](const std::vector<std::string>& cells, const std::vector<bool>& right) {
    std::string s;
    for (size_t k = 0; k < cells.size(); ++k)
      s += (k ? "  " : "") + pad(cut(cells[k], f.widths[k]), f.widths[k], right[k]);
    return s.erase(s.find_last_not_of(' ') + 1) + "\n";
  };
  std::vector<std::string> header, rule;
  std::vector<bool> right;
  for (size_t k = 0; k < f.columns.size(); ++k) {
    header.push_back(label_of(layout, t.columns[f.columns[k]]));
    rule.emplace_back(f.widths[k], '-');
    right.push_back(!t.rows.empty() && right_aligned(t.rows.front()[f.columns[k]]));
  }
  std::string out = line(header, right) + line(rule, right);
  for (const auto& row : t.rows) {
    std::vector<std::string> cells;
    std::vector<bool> r;
    for (size_t i : f.columns) {
      cells.push_back(cell_text(row[i]));
      r.push_back(right_aligned(row[i]));
    }
    out += line(cells, r);
  }
  return out + compact_footer(t, wanted, f, width);
}

std::string render_vertical(const OutputTable& t, int width, const TerminalLayout& layout) {
  if (t.rows.size() != 1) throw Error("internal error: a vertical list is of one row");
  const std::vector<Cell>& row = t.rows.front();
  std::vector<size_t> order;
  const auto add = [&](size_t i) {
    if (std::find(order.begin(), order.end(), i) == order.end()) order.push_back(i);
  };
  const auto index = [&](const std::string& h) {
    return static_cast<size_t>(std::find(t.columns.begin(), t.columns.end(), h) - t.columns.begin());
  };
  for (const auto& c : layout.first)
    if (index(c.header) < t.columns.size()) add(index(c.header));
  const size_t total = index(layout.total);
  const size_t first_end = order.size();
  if (total < t.columns.size()) add(total);
  for (const auto& p : layout.parts)
    if (index(p) < t.columns.size()) add(index(p));
  const size_t parts_end = order.size();
  for (size_t i = 0; i < t.columns.size(); ++i) add(i);
  size_t name_w = 0;
  for (size_t i : order)
    name_w = std::max(name_w, text_width(unit_label(layout, t.columns[i])) + (has(layout.parts, t.columns[i]) ? 2 : 0));
  const bool shares = total < t.columns.size() && row[total].kind == Cell::Kind::kNumber && row[total].number > 0;
  std::string out;
  for (size_t k = 0; k < order.size(); ++k) {
    const size_t i = order[k];
    if ((k == first_end && first_end < parts_end) || (k == parts_end && k > 0)) out += "\n";
    const bool part = has(layout.parts, t.columns[i]);
    std::string value = cell_text(row[i]);
    if (part && shares && row[i].kind == Cell::Kind::kNumber)
      value += "  (" + std::to_string(static_cast<int>(std::lround(100.0 * row[i].number / row[total].number))) + "%)";
    const std::string name = (part ? "  " : "") + unit_label(layout, t.columns[i]);
    out += cut(pad(name, name_w, false) + "  " + value, static_cast<size_t>(std::max(width, 20))) + "\n";
  }
  return out;
}

std::string render(const std::vector<OutputTable>& given, const OutputOptions& o) {
  const std::vector<OutputTable> tables = o.columns.empty() ? given : choose_columns(given, o.columns, o.layout);
  if (o.width <= 0) return render(tables, o.format);
  if (tables.size() == 1 && tables.front().rows.size() == 1) return render_vertical(tables.front(), o.width, o.layout);
  std::string out;
  for (size_t i = 0; i < tables.size(); ++i) {
    if (tables.size() > 1) out += (i ? "\n" : "") + tables[i].title + ":\n";
    out += render_compact(tables[i], o.width, o.layout, !o.columns.empty());
  }
  return out;
}

bool terminal_view(bool stdout_is_tty, bool format_given, bool output_given) {
  return stdout_is_tty && !format_given && !output_given;
}

bool stdout_is_terminal() { return isatty(STDOUT_FILENO) == 1; }

int terminal_width() {
  if (const char* c = std::getenv("COLUMNS")) {
    char* end = nullptr;
    const long v = std::strtol(c, &end, 10);
    if (end != c && *end == '\0' && v >= 20 && v <= 10000) return static_cast<int>(v);
  }
  winsize ws{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
  return 80;
}

}  // namespace tpsim
