// ShardCache through the real IO backends (io_uring with O_DIRECT where the kernel and file
// system allow it, else the pread pool): the bytes that land are the file's.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "cache/shard_cache.h"
#include "io/open_reader.h"
#include "tests/cache_test_util.h"

using namespace sluice::cache;
using sluice::test::CacheFixture;

TEST_CASE("shard cache lands the right bytes through every available IO backend") {
  CacheFixture fx(4, 16, true);
  for (auto kind : {sluice::io::IoKind::automatic, sluice::io::IoKind::pread}) {
    sluice::io::IoOptions io;
    io.kind = kind;
    auto opened = sluice::io::open_reader(fx.path.string(), io);
    for (const auto& n : opened.notices) MESSAGE(n);
    ShardCacheOptions o;
    o.budget_bytes = 8 * (12288 + 24576);
    o.policy = "predict";
    ShardCache cache(fx.layout, *opened.reader, o);
    CAPTURE(opened.reader->backend());
    bool ok = true;
    for (uint32_t t = 0; t < 20; ++t) {
      cache.begin_token();
      for (uint32_t l = 0; l < 4; ++l) {
        std::vector<ShardKey> keys = {{l, (t * 3 + l) % 16}, {l, (t * 7 + 2 * l + 1) % 16}};
        if (keys[0] == keys[1]) keys.pop_back();
        auto pins = cache.acquire_all(keys);
        for (size_t n = 0; n < pins.size(); ++n) {
          size_t i = cache.wait_any(pins);
          ok = ok && fx.pin_matches(pins[i]);
          pins[i].release();
        }
      }
    }
    CHECK(ok);
    CHECK(cache.stats().total.evictions > 0);
  }
}
