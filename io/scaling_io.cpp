#include "io/scaling_io.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <sstream>

#include "io/devices.hpp"
#include "io/error.hpp"
#include "io/files.hpp"
#include "io/names.hpp"
#include "io/yaml_util.hpp"

namespace tpsim {
namespace {

// {value: number, source: "..."}: the value (> 0) and its source; Error naming the key otherwise.
double sourced(const YAML::Node& n, const std::string& origin, const std::string& key, std::string& source) {
  if (!n.IsMap() || !n["value"] || !n["source"])
    throw Error(yaml::where(origin, n) + ": " + key + " must be {value: ..., source: \"...\"}");
  const double v = yaml::as_double(n["value"], origin, key);
  if (!(v > 0) || !std::isfinite(v)) throw Error(yaml::where(origin, n) + ": " + key + " must be positive");
  source = yaml::as_string(n["source"], origin, key + ".source");
  if (source.empty()) throw Error(yaml::where(origin, n) + ": " + key + " has an empty source");
  return v;
}

DeviceSpec parse_cluster_unguarded(const std::string& text, const std::string& origin) {
  const YAML::Node root = yaml::parse(text, origin);
  if (!root.IsMap()) throw Error(origin + ": a cluster file must be a YAML map");
  const std::set<std::string> known = {"cluster", "device", "gpus_per_node", "intra_node_gb_per_s",
                                       "inter_node_gbps_per_node"};
  for (const auto& kv : root) {
    const std::string k = yaml::key(kv.first, origin);
    if (!known.count(k)) throw Error(yaml::where(origin, kv.first) + ": unknown key '" + k + "'");
  }
  for (const char* k : {"cluster", "device", "gpus_per_node", "intra_node_gb_per_s", "inter_node_gbps_per_node"})
    if (!root[k]) throw Error(origin + ": missing required key " + k);
  const std::string id = yaml::as_string(root["cluster"], origin, "cluster");
  DeviceSpec d = load_device(yaml::as_string(root["device"], origin, "device"));
  std::string src;
  const double gpn = sourced(root["gpus_per_node"], origin, "gpus_per_node", src);
  if (gpn != std::floor(gpn) || gpn > 1024) throw Error(origin + ": gpus_per_node must be a whole number up to 1024");
  d.gpus_per_node = static_cast<int>(gpn);
  d.sources["gpus_per_node"] = id + ": " + src;
  d.intra_node_bytes_per_s = sourced(root["intra_node_gb_per_s"], origin, "intra_node_gb_per_s", src) * 1e9;
  d.sources["intra_node_gb_per_s"] = id + ": " + src;
  d.inter_node_bytes_per_s =
      sourced(root["inter_node_gbps_per_node"], origin, "inter_node_gbps_per_node", src) * 1e9 / 8;
  d.sources["inter_node_gbps_per_node"] = id + ": " + src;
  d.name = d.name + " (" + id + ")";
  return d;
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t\r");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t\r") - a + 1);
}

// The cells of a markdown table line "| a | b |"; empty when the line is not one.
std::vector<std::string> md_cells(const std::string& line) {
  const std::string t = trim(line);
  if (t.size() < 2 || t.front() != '|') return {};
  std::vector<std::string> cells;
  std::string cell;
  for (size_t i = 1; i < t.size(); ++i) {
    if (t[i] == '|') {
      cells.push_back(trim(cell));
      cell.clear();
    } else {
      cell += t[i];
    }
  }
  if (!trim(cell).empty()) cells.push_back(trim(cell));
  return cells;
}

bool is_rule(const std::vector<std::string>& cells) {
  return !cells.empty() && std::all_of(cells.begin(), cells.end(), [](const std::string& c) {
    return !c.empty() && c.find_first_not_of("-: ") == std::string::npos;
  });
}

std::optional<double> number(const std::string& s) {
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

int64_t count_cell(const std::string& s, const std::string& where, const std::string& column) {
  const std::optional<double> v = number(s);
  if (!v || *v < 1 || *v != std::floor(*v) || *v > 1e6)
    throw Error(where + ": " + column + " '" + s + "' is not a positive whole number");
  return static_cast<int64_t>(*v);
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

}  // namespace

DeviceSpec parse_cluster_yaml(const std::string& text, const std::string& origin) {
  return yaml::guard(origin, [&] { return parse_cluster_unguarded(text, origin); });
}

std::vector<std::string> known_clusters() {
  std::vector<std::string> ids;
  for (const auto& e : std::filesystem::directory_iterator(data_dir() / "clusters"))
    if (e.path().extension() == ".yaml") ids.push_back(e.path().stem().string());
  std::sort(ids.begin(), ids.end());
  return ids;
}

DeviceSpec load_cluster(const std::string& id) {
  const std::vector<std::string> known = known_clusters();
  if (std::find(known.begin(), known.end(), id) == known.end()) {
    std::string list;
    for (const std::string& k : known) list += (list.empty() ? "" : ", ") + k;
    throw Error("--cluster '" + id + "': unknown cluster (known: " + list + ")");
  }
  const std::filesystem::path path = data_dir() / "clusters" / (id + ".yaml");
  return parse_cluster_yaml(read_text_file(path, "cluster file"), path.string());
}

std::map<std::string, ScalingModel> parse_scaling_models(const std::string& text, const std::string& origin) {
  return yaml::guard(origin, [&] {
    const YAML::Node root = yaml::parse(text, origin);
    if (!root.IsMap()) throw Error(origin + ": a model catalogue must be a YAML map of models");
    std::map<std::string, ScalingModel> out;
    for (const auto& kv : root) {
      ScalingModel m;
      m.id = yaml::key(kv.first, origin);
      const YAML::Node& n = kv.second;
      if (!n.IsMap() || !n["params"]) throw Error(yaml::where(origin, n) + ": " + m.id + " needs params");
      for (const auto& f : n) {
        const std::string k = yaml::key(f.first, origin);
        std::string src;
        const double v = sourced(f.second, origin, m.id + "." + k, src);
        if (k == "params") m.params = v;
        else if (k == "grad_bytes_per_param") m.grad_bytes_per_param = v;
        else if (k == "per_device_batch") m.per_device_batch = static_cast<int64_t>(v);
        else if (k == "global_batch") m.global_batch = static_cast<int64_t>(v);
        else throw Error(yaml::where(origin, f.first) + ": unknown key '" + k + "'");
        m.sources[k] = src;
      }
      out[m.id] = m;
    }
    return out;
  });
}

std::map<std::string, ScalingModel> load_scaling_models() {
  const std::filesystem::path path = data_dir() / "models" / "dp_benchmarks.yaml";
  return parse_scaling_models(read_text_file(path, "model catalogue"), path.string());
}

namespace {

int column(const std::vector<std::string>& header, const std::string& name) {
  for (size_t i = 0; i < header.size(); ++i)
    if (header[i] == name) return static_cast<int>(i);
  return -1;
}

// The csc table's Benchmark cell: the framework and the model it runs.
void classify_benchmark(const std::string& cell, const std::string& where, ScalingRow& row) {
  const std::string b = to_lower(cell);
  row.model = "resnet50";
  if (b.rfind("ddp lightning", 0) == 0) row.framework = SyncFramework::kLightning;
  else if (b.rfind("ddp", 0) == 0) row.framework = SyncFramework::kDdp;
  else if (b.rfind("deepspeed", 0) == 0) row.framework = SyncFramework::kDeepSpeed;
  else if (b.rfind("horovod", 0) == 0) row.framework = SyncFramework::kHorovod;
  else if (b.rfind("run_clm", 0) == 0) {
    row.framework = SyncFramework::kDdp;  // Hugging Face Trainer under torch.distributed.run: DDP
    row.model = "gpt-neo-1.3b";
  } else {
    throw Error(where + ": Benchmark '" + cell + "': expected DDP, DDP Lightning, DeepSpeed, Horovod or run_clm");
  }
}

ScalingTable parse_csc(const std::vector<std::string>& lines, size_t header_at, const std::string& origin) {
  ScalingTable t;
  t.kind = "csc";
  t.columns = md_cells(lines[header_at]);
  const std::vector<std::string> need = {"Benchmark", "Framework", "Cluster", "GPUs", "Date", "Img/sec"};
  for (const std::string& n : need)
    if (column(t.columns, n) < 0) throw Error(origin + ":" + std::to_string(header_at + 1) + ": no column " + n);
  const std::vector<std::string> clusters = known_clusters();
  for (size_t i = header_at + 1; i < lines.size(); ++i) {
    const std::vector<std::string> cells = md_cells(lines[i]);
    if (cells.empty() || is_rule(cells)) continue;
    const std::string where = origin + ":" + std::to_string(i + 1);
    if (cells.size() != t.columns.size())
      throw Error(where + ": " + std::to_string(cells.size()) + " cells, the header has " +
                  std::to_string(t.columns.size()));
    ScalingRow r;
    r.line = static_cast<int>(i + 1);
    r.cells = cells;
    const auto at = [&](const char* name) { return cells[static_cast<size_t>(column(t.columns, name))]; };
    classify_benchmark(at("Benchmark"), where, r);
    r.cluster = at("Cluster");
    if (std::find(clusters.begin(), clusters.end(), r.cluster) == clusters.end())
      throw Error(where + ": Cluster '" + r.cluster + "' has no file in data/clusters");
    r.gpus = count_cell(at("GPUs"), where, "GPUs");
    r.measured = number(at("Img/sec"));
    if (r.measured && !(*r.measured > 0)) throw Error(where + ": Img/sec '" + at("Img/sec") + "' must be positive");
    if (!r.measured)
      t.warnings.push_back(where + ": Img/sec '" + at("Img/sec") +
                           "' is not a number: a missing measurement, not predicted");
    r.group = at("Benchmark") + " | " + at("Framework") + " | " + r.cluster + " | " + at("Date");
    t.rows.push_back(std::move(r));
  }
  if (t.rows.empty()) throw Error(origin + ": the table has no rows");
  return t;
}

struct Section32 {
  int64_t batch = 0;
  bool all_values = false;
};

// One table of the 32gpu format starting at lines[i] (its header): summary rows become rows,
// repeats are attached to the summary row they repeat. Returns the line after the table.
size_t parse_32gpu_table(const std::vector<std::string>& lines, size_t i, const Section32& s, const std::string& origin,
                         ScalingTable& t) {
  const std::vector<std::string> header = md_cells(lines[i]);
  const std::string head_where = origin + ":" + std::to_string(i + 1);
  for (const char* n : {"num_nodes", "gpu_num_per_node", "batch_size_per_device", "throughput"})
    if (column(header, n) < 0) throw Error(head_where + ": no column " + std::string(n));
  const bool summary = column(header, "speedup") >= 0;
  if (summary && t.columns.empty()) t.columns = header;
  size_t j = i + 1;
  for (; j < lines.size(); ++j) {
    const std::vector<std::string> cells = md_cells(lines[j]);
    if (cells.empty()) break;
    if (is_rule(cells)) continue;
    const std::string where = origin + ":" + std::to_string(j + 1);
    if (cells.size() != header.size())
      throw Error(where + ": " + std::to_string(cells.size()) + " cells, the header has " +
                  std::to_string(header.size()));
    if (s.all_values) continue;  // the closing "all values" section repeats the sections' rows
    if (s.batch == 0) throw Error(where + ": a table before any '## batch size = N' section");
    const auto at = [&](const char* n) { return cells[static_cast<size_t>(column(header, n))]; };
    const int64_t nodes = count_cell(at("num_nodes"), where, "num_nodes");
    const int64_t gpn = count_cell(at("gpu_num_per_node"), where, "gpu_num_per_node");
    const int64_t batch = count_cell(at("batch_size_per_device"), where, "batch_size_per_device");
    if (batch != s.batch)
      throw Error(where + ": batch_size_per_device " + std::to_string(batch) + " in the section of batch size " +
                  std::to_string(s.batch));
    const std::optional<double> thr = number(at("throughput"));
    if (!thr || !(*thr > 0)) throw Error(where + ": throughput '" + at("throughput") + "' is not a positive number");
    if (summary) {
      ScalingRow r;
      r.line = static_cast<int>(j + 1);
      r.cells = cells;
      r.cluster = "unnamed";
      r.model = "unnamed";
      r.framework = SyncFramework::kUnnamed;
      r.gpus = nodes * gpn;
      r.gpus_per_node = gpn;
      r.per_device_batch = batch;
      r.measured = *thr;
      r.group = "batch size " + std::to_string(batch);
      t.rows.push_back(std::move(r));
      continue;
    }
    auto it = std::find_if(t.rows.begin(), t.rows.end(), [&](const ScalingRow& r) {
      return r.group == "batch size " + std::to_string(batch) && r.gpus == nodes * gpn;
    });
    if (it == t.rows.end()) throw Error(where + ": a repeat of a run the section's summary table does not list");
    it->repeats.push_back(*thr);
  }
  return j;
}

ScalingTable parse_32gpu(const std::vector<std::string>& lines, const std::string& origin) {
  ScalingTable t;
  t.kind = "32gpu";
  Section32 s;
  for (size_t i = 0; i < lines.size();) {
    const std::string l = trim(lines[i]);
    if (l.rfind("##", 0) == 0) {
      const std::string title = trim(l.substr(2));
      s = Section32{};
      if (title == "all values") {
        s.all_values = true;
      } else if (title.rfind("batch size =", 0) == 0) {
        const std::string v = trim(title.substr(12));
        s.batch = count_cell(v, origin + ":" + std::to_string(i + 1), "batch size");
      } else {
        throw Error(origin + ":" + std::to_string(i + 1) + ": section '" + title +
                    "': expected '## batch size = N' or '## all values'");
      }
      ++i;
    } else if (!md_cells(l).empty()) {
      i = parse_32gpu_table(lines, i, s, origin, t);
    } else {
      ++i;
    }
  }
  if (t.rows.empty())
    throw Error(origin +
                ": no summary table (num_nodes, gpu_num_per_node, batch_size_per_device, throughput, speedup)");
  int64_t gpn = 1;
  for (const ScalingRow& r : t.rows) gpn = std::max(gpn, r.gpus_per_node);
  for (ScalingRow& r : t.rows) r.gpus_per_node = gpn;  // the node is the table's largest (8 GPUs)
  return t;
}

}  // namespace

ScalingTable parse_scaling_table(const std::string& text, const std::string& origin) {
  const std::vector<std::string> lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::vector<std::string> cells = md_cells(lines[i]);
    if (cells.empty()) continue;
    if (column(cells, "Benchmark") >= 0) return parse_csc(lines, i, origin);
    if (column(cells, "num_nodes") >= 0) return parse_32gpu(lines, origin);
    throw Error(origin + ":" + std::to_string(i + 1) +
                ": not a scaling table (expected the columns Benchmark | Framework | Cluster | GPUs | Date | Img/sec, "
                "or num_nodes | gpu_num_per_node | batch_size_per_device | throughput under '## batch size = N')");
  }
  throw Error(origin + ": no markdown table");
}

ScalingTable read_scaling_table(const std::string& path) {
  return parse_scaling_table(read_text_file(path, "--table"), path);
}

const ScalingRow* one_gpu_row(const ScalingTable& t, const ScalingRow& row) {
  for (const ScalingRow& r : t.rows)
    if (r.group == row.group && r.gpus == 1 && r.measured) return &r;
  if (t.kind != "csc") return nullptr;
  // DeepSpeed / Horovod groups: the DDP run of the same data, version, cluster and date.
  const std::string data =
      row.cells.at(0).find("Imagenet") != std::string::npos ? "DDP, Imagenet data" : "DDP, synthetic";
  const std::string rest = row.group.substr(row.group.find(" | "));
  for (const ScalingRow& r : t.rows)
    if (r.group == data + rest && r.gpus == 1 && r.measured) return &r;
  return nullptr;
}

}  // namespace tpsim
