# The build under pip (scikit-build-core): the core is configured and built by CMake in a nested
# build folder, <build-dir>/core, which outlives every `pip install`.
#
# Why nested: pip builds in an isolated environment that is new for every install, and
# scikit-build-core clears the CMake cache and CMakeFiles/ (where the objects live) of its build
# folder whenever that environment changes, so a persistent build-dir alone still recompiles the
# whole core on every `pip install -e .`. This outer project compiles nothing: at build time it
# (re)configures the nested build with the same options (cheap: its cache is kept) and builds it,
# which recompiles only what changed, then installs the module into the wheel. A direct
# `cmake -S . -B build/x` (CI, .ci/gpu, scripts/sanitize.sh) builds the core itself, as before.

set(_core "${CMAKE_BINARY_DIR}/core")

# pybind11 of the build environment (the nested build copies its headers: FastfairPybind11.cmake).
execute_process(COMMAND "${Python_EXECUTABLE}" -m pybind11 --cmakedir
                OUTPUT_VARIABLE _pybind11_dir OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "fastfair: pybind11 is not importable by ${Python_EXECUTABLE}")
endif()

set(_args
    "-DFASTFAIR_NESTED=ON"
    "-DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}"
    "-DFASTFAIR_CUDA=${FASTFAIR_CUDA}"
    "-DFASTFAIR_CUDA_ARCHS=${FASTFAIR_CUDA_ARCHS}"
    "-DSKBUILD_PROJECT_VERSION_FULL=${SKBUILD_PROJECT_VERSION_FULL}"
    "-DPython_EXECUTABLE=${Python_EXECUTABLE}"
    "-Dpybind11_DIR=${_pybind11_dir}"
    "-DCMAKE_LIBRARY_OUTPUT_DIRECTORY=${_core}/out")
foreach(_var FASTFAIR_VISIBLE_GPU_ARCHS CMAKE_CXX_COMPILER CMAKE_CUDA_COMPILER CMAKE_CXX_FLAGS
             CMAKE_CXX_COMPILER_LAUNCHER CMAKE_CUDA_COMPILER_LAUNCHER)
  if(DEFINED ${_var})
    list(APPEND _args "-D${_var}=${${_var}}")
  endif()
endforeach()
if(CMAKE_MAKE_PROGRAM)
  list(APPEND _args "-DCMAKE_MAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}")
endif()

# A nested build made with another generator (pip found ninja one time and not the next) starts
# over; CMake refuses to switch generators in place.
if(EXISTS "${_core}/CMakeCache.txt")
  file(STRINGS "${_core}/CMakeCache.txt" _generator REGEX "^CMAKE_GENERATOR:INTERNAL=")
  if(NOT _generator STREQUAL "CMAKE_GENERATOR:INTERNAL=${CMAKE_GENERATOR}")
    file(REMOVE "${_core}/CMakeCache.txt")
    file(REMOVE_RECURSE "${_core}/CMakeFiles")
  endif()
endif()

# As many compile jobs as cores, unless CMAKE_BUILD_PARALLEL_LEVEL says otherwise.
if(DEFINED ENV{CMAKE_BUILD_PARALLEL_LEVEL} AND NOT "$ENV{CMAKE_BUILD_PARALLEL_LEVEL}" STREQUAL "")
  set(_jobs "$ENV{CMAKE_BUILD_PARALLEL_LEVEL}")
else()
  cmake_host_system_information(RESULT _jobs QUERY NUMBER_OF_LOGICAL_CORES)
endif()

message(STATUS "fastfair: the core builds in ${_core} (kept between installs), ${_jobs} jobs")
add_custom_target(fastfair_core ALL
  COMMAND "${CMAKE_COMMAND}" -S "${CMAKE_SOURCE_DIR}" -B "${_core}" -G "${CMAKE_GENERATOR}" ${_args}
  COMMAND "${CMAKE_COMMAND}" --build "${_core}" --parallel "${_jobs}"
  USES_TERMINAL VERBATIM)
install(DIRECTORY "${_core}/out/" DESTINATION fastfair USE_SOURCE_PERMISSIONS
        FILES_MATCHING PATTERN "_C*")
