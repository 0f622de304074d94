# Cross-builds (the MinGW toolchain sets HOIST_HOST_HEADER_ONLY_DEPS) and machines without the
# packages (the GPU machine, given a copied folder): the header-only libraries come from
# HOIST_HEADER_ONLY_DEPS_DIR (default: the build machine's /usr/include, from Debian's
# packages). That folder itself must not be on a cross compiler's path (glibc's headers would
# shadow the target's), so link just those headers into one folder of the build tree and make
# the targets the build expects.
set(HOIST_HEADER_ONLY_DEPS_DIR /usr/include CACHE PATH "Where xxhash.h, nlohmann/ and CLI/ are")
set(_hoist_host_headers ${CMAKE_BINARY_DIR}/host-header-deps)
file(MAKE_DIRECTORY ${_hoist_host_headers})
foreach(_header xxhash.h nlohmann CLI)
  if(NOT EXISTS ${HOIST_HEADER_ONLY_DEPS_DIR}/${_header})
    message(FATAL_ERROR "${HOIST_HEADER_ONLY_DEPS_DIR}/${_header} is missing: run scripts/install-deps.sh")
  endif()
  file(CREATE_LINK ${HOIST_HEADER_ONLY_DEPS_DIR}/${_header} ${_hoist_host_headers}/${_header} SYMBOLIC)
endforeach()
add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
set_target_properties(nlohmann_json::nlohmann_json PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES ${_hoist_host_headers})
add_library(CLI11::CLI11 INTERFACE IMPORTED)
set_target_properties(CLI11::CLI11 PROPERTIES INTERFACE_INCLUDE_DIRECTORIES ${_hoist_host_headers})
set(XXHASH_INCLUDE_DIR ${_hoist_host_headers})

# GoogleTest built from the sources Debian's libgtest-dev ships.
if(HOIST_BUILD_TESTS)
  if(NOT EXISTS /usr/src/googletest/CMakeLists.txt)
    message(FATAL_ERROR "/usr/src/googletest is missing: run scripts/install-deps.sh")
  endif()
  set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
  set(BUILD_GMOCK OFF CACHE BOOL "" FORCE)
  add_subdirectory(/usr/src/googletest ${CMAKE_BINARY_DIR}/googletest EXCLUDE_FROM_ALL)
  if(NOT TARGET GTest::gtest)
    add_library(GTest::gtest ALIAS gtest)
    add_library(GTest::gtest_main ALIAS gtest_main)
  endif()
endif()
