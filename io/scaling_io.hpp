// What `tpsim scale` reads: cluster files (data/clusters/<id>.yaml: a device datasheet with the
// cluster's GPUs per node, GPU links and network per node, each with its source), the catalogue of
// the scaling benchmarks' models (data/models/dp_benchmarks.yaml), and the two data-parallel
// scaling tables in their own formats:
//   csc    Benchmark | Framework | Cluster | GPUs | Date | Img/sec (seed 000); a cell that is not
//          a number (ERROR) is a missing measurement, with a warning naming the line.
//   32gpu  "## batch size = N" sections, each a summary table (num_nodes, gpu_num_per_node,
//          batch_size_per_device, throughput, speedup) and a table of repeats (seed 002).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/device.hpp"
#include "model/scaling.hpp"

namespace tpsim {

// data/clusters/<id>.yaml: the device named by `device:`, with the cluster's values replacing the
// device file's (sources kept, prefixed with the cluster's id).
DeviceSpec load_cluster(const std::string& id);
DeviceSpec parse_cluster_yaml(const std::string& text, const std::string& origin);
std::vector<std::string> known_clusters();

struct ScalingModel {
  std::string id;
  double params = 0;
  double grad_bytes_per_param = 4;
  int64_t per_device_batch = 0;  // 0: not given
  int64_t global_batch = 0;      // 0: weak scaling
  std::map<std::string, std::string> sources;
};
std::map<std::string, ScalingModel> load_scaling_models();  // data/models/dp_benchmarks.yaml
std::map<std::string, ScalingModel> parse_scaling_models(const std::string& text, const std::string& origin);

// One row of a scaling table, as read.
struct ScalingRow {
  int line = 0;                    // in the file
  std::vector<std::string> cells;  // the input's columns, as written
  std::string group;               // rows sharing a one-GPU row and a run's settings
  std::string cluster;             // a data/clusters id, or "unnamed" (the 32gpu table)
  std::string model;               // a dp_benchmarks id, or "unnamed"
  SyncFramework framework = SyncFramework::kDdp;
  int64_t gpus = 1, gpus_per_node = 0;  // gpus_per_node: 0 unless the table says
  int64_t per_device_batch = 0;         // 0: the model's
  std::optional<double> measured;       // samples/s; unset: missing (ERROR)
  std::vector<double> repeats;          // the 32gpu table's repeated runs of this row
};

struct ScalingTable {
  std::string kind;                  // "csc" or "32gpu"
  std::vector<std::string> columns;  // the input's
  std::vector<ScalingRow> rows;
  std::vector<std::string> warnings;
};

ScalingTable read_scaling_table(const std::string& path);
ScalingTable parse_scaling_table(const std::string& text, const std::string& origin);

// The one-GPU row a row is predicted from: its group's; for a group without one (the csc table's
// DeepSpeed and Horovod rows) the DDP row of the same data, framework version, cluster and date.
// nullptr when there is none.
const ScalingRow* one_gpu_row(const ScalingTable& t, const ScalingRow& row);

}  // namespace tpsim
