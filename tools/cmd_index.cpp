// sluice index MODEL.gguf: digest every extent sluice reads as a unit and write the sidecar.
#include <chrono>
#include <cstdio>
#include <iostream>

#include <cxxopts.hpp>

#include "common/error.h"
#include "common/units.h"
#include "core/gguf/gguf.h"
#include "core/gguf/shard_index.h"
#include "io/pread_reader.h"
#include "tools/commands.h"
#include "tools/progress_bar.h"

namespace sluice::tools {

int cmd_index(int argc, char** argv) {
  cxxopts::Options options("sluice index", "Write XXH3-64 digests of every shard extent next to the model");
  options.add_options()
      ("model", "GGUF file", cxxopts::value<std::string>())
      ("force", "rebuild even when a matching index exists")
      ("progress", "draw the progress bar even when stderr is not a terminal")
      ("h,help", "show this help");
  options.parse_positional({"model"});
  options.positional_help("MODEL.gguf");
  auto args = options.parse(argc, argv);
  if (args.count("help")) {
    std::cout << options.help();
    return 0;
  }
  if (!args.count("model")) throw Error(ErrorCode::invalid_argument, "missing MODEL.gguf (usage: sluice index MODEL.gguf)");
  const std::string path = args["model"].as<std::string>();

  // Buffered reads that drop their pages: indexing must not fill the page cache.
  io::PreadReader reader(path, io::PreadOptions{0, true});
  core::GgufFile file = core::GgufFile::parse(reader);
  if (!args.count("force")) {
    const core::ShardIndex::Lookup existing = core::ShardIndex::lookup(path, file, reader);
    if (existing.index) {
      std::printf("index is up to date: %llu extents\n", static_cast<unsigned long long>(existing.index->extent_count()));
      return 0;
    }
    if (existing.state == core::IndexState::stale) {
      std::fprintf(stderr, "sluice index: replacing '%s' (%s)\n", existing.path.c_str(), existing.reason.c_str());
    }
  }
  ProgressBar bar("indexing", args.count("progress") > 0);
  auto start = std::chrono::steady_clock::now();
  core::ShardIndex index = core::ShardIndex::build(file, reader, [&](uint64_t d, uint64_t t) { bar.update(d, t); });
  bar.finish();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto where = index.save(path);
  uint64_t bytes = 0;
  for (const auto& t : index.tensors()) bytes += t.bytes;
  std::printf("indexed %llu extents, %s in %.2f s (%.2f GB/s) -> %s\n",
              static_cast<unsigned long long>(index.extent_count()), human_bytes(bytes).c_str(), secs,
              secs > 0 ? static_cast<double>(bytes) / secs / 1e9 : 0.0, where.c_str());
  return 0;
}

}  // namespace sluice::tools
