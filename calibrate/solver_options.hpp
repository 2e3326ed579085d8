// The Ceres Solver options the fits of calibrate/ share (table_fit, kernel_fit, comm_fit): small
// dense problems — a handful of log-space parameters against tens to hundreds of residuals —
// solved by dense QR on one thread, silently, to tight tolerances.
#pragma once

#include <ceres/ceres.h>

namespace tpsim {

inline ceres::Solver::Options fit_solver_options(int max_iterations, double tolerance) {
  ceres::Solver::Options o;
  o.linear_solver_type = ceres::DENSE_QR;
  o.max_num_iterations = max_iterations;
  o.function_tolerance = tolerance;
  o.parameter_tolerance = tolerance;
  o.num_threads = 1;
  o.logging_type = ceres::SILENT;
  return o;
}

}  // namespace tpsim
