// Reading and writing files: whole-file reads with clear errors, and writes that appear whole or
// not at all (a temporary file in the same folder, renamed over the target).
#pragma once

#include <filesystem>
#include <string>

namespace tpsim {

// Reads a regular, non-empty text file; rejects directories, missing files and binary content.
std::string read_text_file(const std::filesystem::path& path, const std::string& what);

// Writes `content` to `path` atomically: the target is either left as it was or fully replaced.
// A process killed while it writes leaves no temporary file: the content goes to an unnamed file
// (O_TMPFILE, where the file system has it) that is named only once whole and renamed over the
// target at once; SIGINT, SIGTERM and SIGHUP (at their default action) remove a named temporary
// before they terminate the process.
void write_file_atomic(const std::filesystem::path& path, const std::string& content);

// The folder holding tpsim's data (models/, devices/, profiles/, measured/): $TPSIM_DATA_DIR,
// else the source tree's data/ the binary was built from, else ../share/tpsim/data beside it.
std::filesystem::path data_dir();

}  // namespace tpsim
