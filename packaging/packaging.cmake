# Install rules and the Debian package (`cmake --install`, `cpack -G DEB` in the build folder):
# the sluice binary, its man page (packaging/make-manpage: help2man over every command's --help)
# and bash completion.
include(GNUInstallDirs)
install(TARGETS sluice RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${CMAKE_SOURCE_DIR}/packaging/bash-completion/sluice
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions)

find_program(SLUICE_HELP2MAN help2man)
if(SLUICE_HELP2MAN)
  add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/sluice.1
                     COMMAND ${CMAKE_SOURCE_DIR}/packaging/make-manpage $<TARGET_FILE:sluice> ${CMAKE_BINARY_DIR}/sluice.1
                     DEPENDS sluice ${CMAKE_SOURCE_DIR}/packaging/make-manpage
                     COMMENT "man page from the help texts (help2man)")
  add_custom_target(sluice_manpage ALL DEPENDS ${CMAKE_BINARY_DIR}/sluice.1)
  install(FILES ${CMAKE_BINARY_DIR}/sluice.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
else()
  message(WARNING "help2man not found (scripts/setup installs it): the man page is not built or installed")
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME sluice)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "sluice developers <sluice@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "run giant Mixture-of-Experts GGUF models out of core inside a RAM budget")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
# The shared libraries the binary links, by their Debian 12 packages (tests/test_packaging.cpp
# checks every library ldd lists against this). A CUDA build also needs NVIDIA's CUDA runtime
# (libcudart), which Debian does not package; it is not listed.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "libc6, libgcc-s1, libstdc++6, liburing2, libxxhash0, libpcre2-8-0")
# A sanitizer build (scripts/test packages it too) links GCC's shared sanitizer runtimes: name
# the Debian packages that own them (libasan8, libubsan1, libtsan2 with GCC 12), asked of the
# compiler and dpkg so another GCC version names its own. Clang links its runtimes statically.
set(sluice_sanitizer_runtimes)
if(SLUICE_SANITIZE STREQUAL "address")
  set(sluice_sanitizer_runtimes libasan.so libubsan.so)
elseif(SLUICE_SANITIZE STREQUAL "thread")
  set(sluice_sanitizer_runtimes libtsan.so)
endif()
foreach(runtime IN LISTS sluice_sanitizer_runtimes)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=${runtime} OUTPUT_VARIABLE runtime_path
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT IS_ABSOLUTE "${runtime_path}")
    continue()  # not a shared runtime of this compiler
  endif()
  file(REAL_PATH "${runtime_path}" runtime_path)
  execute_process(COMMAND dpkg -S "${runtime_path}" OUTPUT_VARIABLE owner ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  string(REGEX REPLACE ":.*" "" owner "${owner}")
  if(owner)
    string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", ${owner}")
  endif()
endforeach()
# With MPI (--expert-parallel) the binary links Open MPI and, through it, a few more libraries:
# name the package of each library the loader resolves for libmpi (Debian 12: libopenmpi3,
# libhwloc15, libevent-*, libudev1, ...), asked of ldd and dpkg as above.
if(SLUICE_HAVE_MPI)
  foreach(mpi_lib IN LISTS MPI_C_LIBRARIES)
    execute_process(COMMAND ldd "${mpi_lib}" OUTPUT_VARIABLE mpi_ldd ERROR_QUIET)
    string(REGEX MATCHALL "=> (/[^ ]+)" mpi_deps "${mpi_ldd}")
    set(mpi_paths "${mpi_lib}")
    foreach(dep IN LISTS mpi_deps)
      string(REGEX REPLACE "^=> " "" dep "${dep}")
      list(APPEND mpi_paths "${dep}")
    endforeach()
    foreach(path IN LISTS mpi_paths)
      file(REAL_PATH "${path}" real)
      execute_process(COMMAND dpkg -S "${real}" OUTPUT_VARIABLE owner ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(NOT owner)
        execute_process(COMMAND dpkg -S "${path}" OUTPUT_VARIABLE owner ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
      endif()
      string(REGEX REPLACE ":.*" "" owner "${owner}")
      string(FIND ", ${CPACK_DEBIAN_PACKAGE_DEPENDS}," ", ${owner}," known)
      if(owner AND known EQUAL -1)
        string(APPEND CPACK_DEBIAN_PACKAGE_DEPENDS ", ${owner}")
      endif()
    endforeach()
  endforeach()
endif()
include(CPack)
