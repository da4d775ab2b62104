// Packaging: `cmake --install` lays out sluice, its man page (from the help texts) and bash
// completion; `cpack -G DEB` builds a .deb whose Depends name the package of every shared library
// the binary links, and whose extracted sluice runs.
#include <doctest/doctest.h>

#include <filesystem>
#include <set>
#include <sstream>

#include "tests/test_support.h"

using namespace sluice;
namespace fs = std::filesystem;

namespace {

fs::path build_dir() { return fs::path(test::sluice_binary()).parent_path(); }

std::string shq(const fs::path& p) { return "'" + p.string() + "'"; }

}  // namespace

TEST_CASE("cmake --install lays out sluice, its man page and its bash completion, and they work") {
  const test::ScopedTempDir install_dir("install");
  const fs::path& root = install_dir.path();
  const auto r = test::run_command("cmake --install " + shq(build_dir()) + " --prefix " + shq(root));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  const auto help = test::run_command(shq(root / "bin/sluice") + " --help");
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("commands:") != std::string::npos);
  const std::string man = test::read_text(root / "share/man/man1/sluice.1");
  CHECK(man.find(".SH COMMANDS") != std::string::npos);
  CHECK(man.find(".SS run") != std::string::npos);
  CHECK(man.find("perplexity") != std::string::npos);
  // Completion: the subcommand, then a flag from that subcommand's own help.
  const fs::path completion = root / "share/bash-completion/completions/sluice";
  REQUIRE(fs::exists(completion));
  const auto words = test::run_command("PATH=" + shq(root / "bin") + ":$PATH bash -c 'source " + completion.string() +
                                       "; COMP_WORDS=(sluice perp); COMP_CWORD=1; _sluice; echo ${COMPREPLY[@]}; "
                                       "COMP_WORDS=(sluice perplexity --kl); COMP_CWORD=2; _sluice; echo ${COMPREPLY[@]}'");
  CHECK(words.out == "perplexity\n--kl-base --kl-base-out\n");
}

TEST_CASE("cpack -G DEB builds a package whose Depends cover every linked library and whose sluice runs") {
  const test::ScopedTempDir deb_dir("deb");
  const fs::path& out = deb_dir.path();
  const auto r = test::run_command("cd " + shq(out) + " && cpack -G DEB --config " + shq(build_dir() / "CPackConfig.cmake"));
  INFO(r.out << r.err);
  REQUIRE(r.exit_code == 0);
  fs::path deb;
  for (const auto& e : fs::directory_iterator(out))
    if (e.path().extension() == ".deb") deb = e.path();
  REQUIRE(!deb.empty());
  const fs::path root = out / "root";
  REQUIRE(test::run_command("dpkg-deb -x " + shq(deb) + " " + shq(root)).exit_code == 0);
  const fs::path bin = root / "usr/bin/sluice";
  const auto help = test::run_command(shq(bin) + " --help");
  CHECK(help.exit_code == 0);
  CHECK(fs::exists(root / "usr/share/man/man1/sluice.1.gz") != fs::exists(root / "usr/share/man/man1/sluice.1") );

  std::set<std::string> depends;
  {
    std::istringstream in(test::run_command("dpkg-deb -f " + shq(deb) + " Depends").out);
    for (std::string item; std::getline(in, item, ',');) {
      item.erase(0, item.find_first_not_of(' '));
      item = item.substr(0, item.find_first_of(" \n("));
      depends.insert(item);
    }
  }
  // Every library the loader resolves for the binary, by the Debian package that owns it (NVIDIA's
  // CUDA runtime is outside Debian and named in the package description instead).
  std::istringstream libs(test::run_command("(ldd " + shq(bin) + " | awk '$2 == \"=>\" && substr($3, 1, 1) == \"/\" {print $3}')").out);
  int checked = 0;
  for (std::string lib; std::getline(libs, lib);) {
    if (lib.find("cuda") != std::string::npos || lib.find("libcudart") != std::string::npos) continue;
    std::string owner = test::run_command("(dpkg -S " + shq(fs::canonical(lib)) + " 2>/dev/null || dpkg -S " + shq(lib) + ")").out;
    owner = owner.substr(0, owner.find(':'));
    INFO(lib << " belongs to " << owner);
    CHECK(depends.count(owner) == 1);
    ++checked;
  }
  CHECK(checked >= 4);
}
