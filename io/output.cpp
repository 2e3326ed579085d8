#include "io/output.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "io/error.hpp"
#include "io/files.hpp"

namespace tpsim {

Format parse_format(const std::string& s) {
  if (s == "md" || s == "markdown") return Format::kMarkdown;
  if (s == "csv") return Format::kCsv;
  if (s == "json") return Format::kJson;
  throw Error("--format '" + s + "': expected md, csv or json");
}

Cell Cell::str(std::string s) {
  Cell c;
  c.kind = Kind::kText;
  c.text = std::move(s);
  return c;
}

Cell Cell::num(double v, int decimals) {
  if (!std::isfinite(v)) throw Error("internal error: a non-finite number reached the output");
  Cell c;
  c.kind = Kind::kNumber;
  c.number = v;
  c.decimals = decimals;
  return c;
}

Cell Cell::integer_value(int64_t v) {
  Cell c;
  c.kind = Kind::kInteger;
  c.integer = v;
  return c;
}

Cell Cell::flag(bool b) {
  Cell c;
  c.kind = Kind::kBool;
  c.boolean = b;
  return c;
}

std::string Cell::plain() const {
  switch (kind) {
    case Kind::kEmpty: return "";
    case Kind::kText: return text;
    case Kind::kNumber: {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.*f", decimals, number);
      std::string s = buf;
      if (s == "-0" || s.find_first_not_of("-0.") == std::string::npos) s.erase(0, s[0] == '-' ? 1 : 0);
      return s;
    }
    case Kind::kInteger: return std::to_string(integer);
    case Kind::kBool: return boolean ? "True" : "False";
  }
  return "";
}

void OutputTable::add_row(std::vector<Cell> row) {
  if (row.size() != columns.size())
    throw Error("internal error: row of " + std::to_string(row.size()) + " cells for " +
                std::to_string(columns.size()) + " columns");
  rows.push_back(std::move(row));
}

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string render_md(const OutputTable& t) {
  std::string out = "|";
  for (const auto& c : t.columns) out += " " + c + " |";
  out += "\n|";
  for (size_t i = 0; i < t.columns.size(); ++i) out += " --- |";
  out += "\n";
  for (const auto& row : t.rows) {
    out += "|";
    for (const auto& cell : row) {
      std::string s = cell.plain();
      for (auto& ch : s)
        if (ch == '|') ch = '/';
      out += " " + s + " |";
    }
    out += "\n";
  }
  return out;
}

std::string render_csv(const OutputTable& t) {
  std::string out;
  for (size_t i = 0; i < t.columns.size(); ++i) out += (i ? "," : "") + csv_field(t.columns[i]);
  out += "\n";
  for (const auto& row : t.rows) {
    for (size_t i = 0; i < row.size(); ++i) out += (i ? "," : "") + csv_field(row[i].plain());
    out += "\n";
  }
  return out;
}

nlohmann::ordered_json to_json(const OutputTable& t) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& row : t.rows) {
    nlohmann::ordered_json obj = nlohmann::ordered_json::object();
    for (size_t i = 0; i < row.size(); ++i) {
      const Cell& c = row[i];
      switch (c.kind) {
        case Cell::Kind::kEmpty: obj[t.columns[i]] = nullptr; break;
        case Cell::Kind::kText: obj[t.columns[i]] = c.text; break;
        case Cell::Kind::kNumber: obj[t.columns[i]] = std::stod(c.plain()); break;
        case Cell::Kind::kInteger: obj[t.columns[i]] = c.integer; break;
        case Cell::Kind::kBool: obj[t.columns[i]] = c.boolean; break;
      }
    }
    rows.push_back(obj);
  }
  return rows;
}

}  // namespace

std::string render(const std::vector<OutputTable>& tables, Format format) {
  std::string out;
  switch (format) {
    case Format::kMarkdown:
      for (size_t i = 0; i < tables.size(); ++i) {
        if (tables.size() > 1) out += (i ? "\n" : "") + std::string("## ") + tables[i].title + "\n\n";
        out += render_md(tables[i]);
      }
      return out;
    case Format::kCsv:
      for (size_t i = 0; i < tables.size(); ++i) out += (i ? "\n" : "") + render_csv(tables[i]);
      return out;
    case Format::kJson: {
      if (tables.size() == 1) return to_json(tables[0]).dump(2) + "\n";
      nlohmann::ordered_json obj = nlohmann::ordered_json::object();
      for (const auto& t : tables) obj[t.title] = to_json(t);
      return obj.dump(2) + "\n";
    }
  }
  return out;
}

OutputTable stacked_table(const std::vector<OutputTable>& tables, const std::string& key_column) {
  OutputTable out;
  out.columns = {key_column};
  for (const auto& t : tables)
    for (const auto& c : t.columns)
      if (std::find(out.columns.begin(), out.columns.end(), c) == out.columns.end()) out.columns.push_back(c);
  for (const auto& t : tables)
    for (const auto& row : t.rows) {
      std::vector<Cell> cells(out.columns.size());
      cells[0] = Cell::str(t.title);
      for (size_t i = 0; i < row.size(); ++i)
        cells[std::find(out.columns.begin(), out.columns.end(), t.columns[i]) - out.columns.begin()] = row[i];
      out.add_row(std::move(cells));
    }
  return out;
}

void emit(const std::string& text, const std::optional<std::string>& path) {
  if (path) {
    write_file_atomic(*path, text);
  } else {
    std::cout << text;
    std::cout.flush();
  }
}

}  // namespace tpsim
