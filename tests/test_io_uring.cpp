// UringReader specifics: fixed-buffer registration and its fallback, the resubmit paths for
// short reads and -EAGAIN, and open_reader's fallbacks (no io_uring, no O_DIRECT).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <linux/capability.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

#include "common/error.h"
#include "io/aligned_buffer.h"
#include "io/open_reader.h"
#include "io/pread_reader.h"
#include "io/uring_reader.h"
#include "tests/io_extent_check.h"
#include "tests/io_test_files.h"

using namespace sluice;
using sluice::test::Placement;

namespace {

struct TestFile {
  test::ScopedDir dir;
  std::filesystem::path path;
  std::vector<uint8_t> bytes;
};

TestFile make_file(const std::string& name, uint64_t size = (8u << 20) + 777) {
  auto dir = test::disk_dir(name);
  if (dir.empty()) dir = test::temp_dir(name);
  TestFile f{test::ScopedDir(dir), dir / "data.bin", test::pattern_bytes(size, 11)};
  test::write_file(f.path, f.bytes);
  return f;
}

// Reads `count` random extents into `arena` (placed for zero copy) and checks the bytes.
void read_into_arena(io::Reader& reader, const TestFile& f, std::span<std::byte> arena, uint64_t seed) {
  auto extents = test::random_extents(f.bytes.size(), 64, seed);
  uint64_t at = 0;
  std::vector<io::ReadRequest> placed;
  for (auto e : extents) {
    if (e.length > (1u << 20)) e.length = 1u << 20;
    at += io::placement_pad(arena.data() + at, e.offset, std::max<uint32_t>(reader.alignment(), 1));
    if (at + e.length > arena.size()) break;
    e.dst = arena.data() + at;
    at += e.length;
    placed.push_back(e);
  }
  REQUIRE(placed.size() > 10);
  reader.submit(placed);
  std::vector<io::Completion> done(placed.size());
  size_t n = 0;
  while (n < placed.size()) n += reader.reap(std::span(done).subspan(n), 1);
  for (const auto& c : done) {
    REQUIRE(c.result == static_cast<int64_t>(c.request.length));
    CHECK(std::memcmp(c.request.dst, f.bytes.data() + c.request.offset, c.request.length) == 0);
  }
}

}  // namespace

TEST_CASE("registering a 64 MiB arena either succeeds or falls back, and reads stay exact") {
  TestFile f = make_file("register");
  io::UringReader reader(f.path.string());
  io::AlignedBuffer arena(64u << 20);
  bool registered = reader.register_buffer(arena.span());
  // Under an 8 MiB RLIMIT_MEMLOCK without CAP_IPC_LOCK this is refused; as root it may pass.
  CHECK(registered == reader.region_registered());
  CHECK(reader.stats().registration_failures == (registered ? 0u : 1u));
  read_into_arena(reader, f, arena.span(), 3);
  if (registered && reader.direct()) CHECK(reader.stats().fixed_ops > 0);
  // Unregistering and registering again is allowed while nothing is in flight.
  CHECK_FALSE(reader.register_buffer({}));
  CHECK_FALSE(reader.region_registered());
  read_into_arena(reader, f, arena.span(), 4);
}

namespace {

// Drops CAP_IPC_LOCK so io_uring accounts pinned pages against RLIMIT_MEMLOCK, as it does for
// an unprivileged user.
bool drop_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2]{};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  data[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
  data[CAP_IPC_LOCK / 32].permitted &= ~(1u << (CAP_IPC_LOCK % 32));
  return ::syscall(SYS_capset, &header, data) == 0;
}

}  // namespace

TEST_CASE("under an 8 MiB memlock limit a 64 MiB arena falls back and reads stay exact") {
  TestFile f = make_file("memlock");
  // In a child: capabilities and limits are per process, and dropping them is one-way.
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    rlimit limit{8u << 20, 8u << 20};
    if (!drop_ipc_lock() || ::setrlimit(RLIMIT_MEMLOCK, &limit) != 0) ::_exit(3);
    try {
      io::UringReader reader(f.path.string());
      io::AlignedBuffer arena(64u << 20);
      if (reader.register_buffer(arena.span())) ::_exit(1);
      if (reader.stats().registration_failures == 0 || reader.region_registered()) ::_exit(4);
      auto extents = test::random_extents(f.bytes.size(), 40, 21);
      uint64_t at = 0;
      for (auto& e : extents) {
        e.length = std::min<uint64_t>(e.length, 1u << 20);
        e.dst = arena.data() + at;
        at += e.length + 1;
      }
      reader.submit(extents);
      std::vector<io::Completion> done(extents.size());
      size_t n = 0;
      while (n < extents.size()) n += reader.reap(std::span(done).subspan(n), 1);
      for (const auto& c : done) {
        if (c.result != static_cast<int64_t>(c.request.length) ||
            std::memcmp(c.request.dst, f.bytes.data() + c.request.offset, c.request.length) != 0) {
          ::_exit(2);
        }
      }
    } catch (...) {
      ::_exit(5);
    }
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  int code = WEXITSTATUS(status);
  if (code == 3) {
    MESSAGE("skipped: cannot drop CAP_IPC_LOCK or set RLIMIT_MEMLOCK here");
    return;
  }
  CHECK_MESSAGE(code != 1, "a 64 MiB registration passed under an 8 MiB memlock limit");
  CHECK_MESSAGE(code != 4, "the refused registration was not counted");
  CHECK_MESSAGE(code != 2, "bytes differ after the registration fallback");
  CHECK_MESSAGE(code != 5, "the reader threw after the registration fallback");
  CHECK(code == 0);
}

TEST_CASE("a region the kernel refuses to register falls back silently but counted") {
  TestFile f = make_file("register-refused");
  // io_uring refuses to pin pages of a regular file mapping (EOPNOTSUPP/EFAULT): a real refusal
  // that does not depend on RLIMIT_MEMLOCK or privileges.
  auto backing = f.dir.path / "arena.bin";
  int fd = ::open(backing.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, 16u << 20) == 0);
  void* p = ::mmap(nullptr, 16u << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  REQUIRE(p != MAP_FAILED);
  std::span<std::byte> arena(static_cast<std::byte*>(p), 16u << 20);
  {
    io::UringReader reader(f.path.string());
    bool staging_before = reader.staging_registered();
    bool registered = reader.register_buffer(arena);
    if (registered) {
      MESSAGE("this kernel registers file-backed memory; fallback not exercised here");
    } else {
      CHECK(reader.stats().registration_failures >= 1);
      CHECK_FALSE(reader.region_registered());
      CHECK(reader.staging_registered() == staging_before);  // staging stays on the fast path
    }
    read_into_arena(reader, f, arena, 5);
  }
  ::munmap(p, 16u << 20);
}

TEST_CASE("register_buffer with reads in flight is refused") {
  TestFile f = make_file("register-busy");
  io::UringReader reader(f.path.string());
  std::vector<std::byte> buf(1u << 20);
  io::ReadRequest r{0, buf.size(), buf.data(), 0};
  reader.submit({&r, 1});
  io::AlignedBuffer arena(1u << 20);
  try {
    reader.register_buffer(arena.span());
    FAIL("register_buffer with a read in flight did not throw");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::internal);
    CHECK(std::string(e.what()).find("in flight") != std::string::npos);
  }
  io::Completion c;
  REQUIRE(reader.reap({&c, 1}, 1) == 1);
  CHECK(c.result == static_cast<int64_t>(buf.size()));
}

TEST_CASE("uring reader resubmits short reads and -EAGAIN until the bytes are exact") {
  TestFile f = make_file("hooks");
  for (bool direct : {true, false}) {
    CAPTURE(direct);
    io::UringOptions o;
    o.direct = direct;
    o.queue_depth = 16;
    o.hooks = {1234, 0.3, 0.2};
    io::UringReader reader(f.path.string(), o);
    auto check = test::check_extents(reader, f.bytes, test::random_extents(f.bytes.size(), 120, 17), 24,
                                     direct ? Placement::zero_copy : Placement::arbitrary);
    CHECK(check.failed == 0);
    CHECK(check.mismatched == 0);
    io::UringStats s = reader.stats();
    CHECK(s.short_reads > 0);
    CHECK(s.retries > 0);
    CHECK(s.failed_requests == 0);
  }
}

TEST_CASE("forced io_uring setup failure falls back to pread with identical bytes and a notice") {
  TestFile f = make_file("fallback");
  io::IoOptions o;
  o.simulate_uring_failure = true;
  std::vector<std::string> seen;
  o.on_notice = [&](const std::string& line) { seen.push_back(line); };
  io::OpenedReader opened = io::open_reader(f.path.string(), o);
  CHECK(opened.reader->backend() == "pread");
  REQUIRE(opened.notices.size() == 1);
  CHECK(opened.notices[0].find("io_uring setup failed") != std::string::npos);
  CHECK(opened.notices[0].find("pread") != std::string::npos);
  CHECK(seen == opened.notices);
  auto check = test::check_extents(*opened.reader, f.bytes, test::random_extents(f.bytes.size(), 60, 5), 16,
                                   Placement::arbitrary);
  CHECK(check.verified == 60);

  SUBCASE("but an explicit --io uring reports the failure instead") {
    o.kind = io::IoKind::uring;
    try {
      io::open_reader(f.path.string(), o);
      FAIL("kind=uring with a failing ring did not throw");
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::unsupported);
      CHECK(std::string(e.what()).find("io_uring setup failed") != std::string::npos);
    }
  }
}

TEST_CASE("when O_DIRECT is refused the uring reader reads buffered, drops pages and says so") {
  SUBCASE("simulated refusal on a disk file") {
    TestFile f = make_file("direct-refused");
    io::IoOptions o;
    o.simulate_direct_refused = true;
    io::OpenedReader opened = io::open_reader(f.path.string(), o);
    CHECK(opened.reader->backend() == "uring");
    CHECK(opened.reader->alignment() == 1);
    REQUIRE(opened.notices.size() == 1);
    CHECK(opened.notices[0].find("O_DIRECT refused") != std::string::npos);
    CHECK(opened.notices[0].find("DONTNEED") != std::string::npos);
    auto check = test::check_extents(*opened.reader, f.bytes, test::random_extents(f.bytes.size(), 60, 6), 16,
                                     Placement::arbitrary);
    CHECK(check.verified == 60);
  }
  SUBCASE("a file on tmpfs (/dev/shm)") {
    std::filesystem::path shm("/dev/shm");
    if (!std::filesystem::is_directory(shm) || !test::is_tmpfs(shm)) {
      MESSAGE("skipped: no tmpfs at /dev/shm");
      return;
    }
    test::ScopedDir dir(shm / ("sluice-io-test-" + std::to_string(::getpid())));
    std::filesystem::create_directories(dir.path);
    auto path = dir.path / "data.bin";
    auto bytes = test::pattern_bytes((2u << 20) + 99, 8);
    test::write_file(path, bytes);
    io::OpenedReader opened = io::open_reader(path.string());
    // Older kernels refuse O_DIRECT on tmpfs (EINVAL); since 6.6 tmpfs accepts it. Either way
    // the bytes are right, and a refusal comes with its notice.
    auto* uring = dynamic_cast<io::UringReader*>(opened.reader.get());
    if (uring && !uring->direct()) CHECK(opened.notices.size() == 1);
    auto check = test::check_extents(*opened.reader, bytes, test::random_extents(bytes.size(), 60, 9), 16,
                                     Placement::arbitrary);
    CHECK(check.verified == 60);
  }
}

TEST_CASE("the --io flag maps onto reader kinds and rejects anything else") {
  CHECK(io::parse_io_kind("uring") == io::IoKind::uring);
  CHECK(io::parse_io_kind("pread") == io::IoKind::pread);
  CHECK(io::parse_io_kind("auto") == io::IoKind::automatic);
  try {
    io::parse_io_kind("mmap");
    FAIL("parse_io_kind accepted mmap");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("--io") != std::string::npos);
    CHECK(std::string(e.what()).find("mmap") != std::string::npos);
  }
}

TEST_CASE("a queue depth of zero is rejected") {
  TestFile f = make_file("qd0", 4096);
  io::UringOptions o;
  o.queue_depth = 0;
  try {
    io::UringReader reader(f.path.string(), o);
    FAIL("queue depth 0 accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::invalid_argument);
    CHECK(std::string(e.what()).find("queue depth") != std::string::npos);
  }
}

TEST_CASE("a batch of requests goes to the kernel with one io_uring_submit") {
  TestFile f = make_file("batch");
  io::UringOptions o;
  o.queue_depth = 64;
  io::UringReader reader(f.path.string(), o);
  io::AlignedBuffer buf(32u * 65536);
  std::vector<io::ReadRequest> requests;
  for (uint64_t i = 0; i < 32; ++i) requests.push_back({i * 65536, 65536, buf.data() + i * 65536, i});
  uint64_t before = reader.stats().submit_calls;
  reader.submit(requests);
  CHECK(reader.stats().submit_calls - before == 1);
  CHECK(reader.stats().ops == 32);
  std::vector<io::Completion> done(32);
  size_t n = 0;
  while (n < 32) n += reader.reap(std::span(done).subspan(n), 1);
  for (const auto& c : done) {
    CHECK(c.result == 65536);
    CHECK(std::memcmp(c.request.dst, f.bytes.data() + c.request.offset, 65536) == 0);
  }
  if (reader.direct()) CHECK(reader.stats().staged_ops == 0);  // aligned extents, aligned memory
}
