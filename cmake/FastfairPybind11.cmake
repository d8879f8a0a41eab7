# pybind11, found as usual (pybind11_DIR, else the interpreter's `python -m pybind11`), then copied
# into the build tree and loaded from there.
#
# Why: pip builds in an isolated environment under a new temporary folder each time, so the
# headers of the same pybind11 sit at a new path on every `pip install -e .`; with that path on
# every compile line, a persistent build folder would recompile the whole core each time. The copy
# is made file by file and only rewrites a file whose content changed (ONLY_IF_DIFFERENT),
# so the compile lines, and the headers' timestamps, stay the same while pybind11 does; a new
# pybind11 version rewrites the headers and recompiles, as it must.

set(_fastfair_pybind11_copy "${CMAKE_BINARY_DIR}/_pybind11")
set(_fastfair_pybind11_src "")
set(_in_copy -1)
if(DEFINED pybind11_DIR)
  string(FIND "${pybind11_DIR}" "${_fastfair_pybind11_copy}/" _in_copy)
endif()
if(DEFINED pybind11_DIR AND EXISTS "${pybind11_DIR}/pybind11Config.cmake" AND NOT _in_copy EQUAL 0)
  set(_fastfair_pybind11_src "${pybind11_DIR}")
else()
  execute_process(COMMAND "${Python_EXECUTABLE}" -m pybind11 --cmakedir
                  OUTPUT_VARIABLE _fastfair_pybind11_src OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _rc ERROR_QUIET)
  if(NOT _rc EQUAL 0 OR NOT EXISTS "${_fastfair_pybind11_src}/pybind11Config.cmake")
    message(FATAL_ERROR "pybind11 not found: install it in the Python that builds "
            "(${Python_EXECUTABLE} -m pip install pybind11) or pass -Dpybind11_DIR=...")
  endif()
endif()

# A pip-installed pybind11 is <prefix>/share/cmake/pybind11 with headers in <prefix>/include;
# copy both, keeping the layout that pybind11Targets.cmake finds its headers by.
get_filename_component(_fastfair_pybind11_prefix "${_fastfair_pybind11_src}/../../.." ABSOLUTE)
if(EXISTS "${_fastfair_pybind11_prefix}/include/pybind11/pybind11.h")
  file(GLOB_RECURSE _fastfair_pybind11_files LIST_DIRECTORIES false
       RELATIVE "${_fastfair_pybind11_prefix}"
       "${_fastfair_pybind11_prefix}/include/pybind11/*" "${_fastfair_pybind11_src}/*.cmake")
  foreach(_file IN LISTS _fastfair_pybind11_files)
    if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.21)  # no configure dependency on the temporary copy
      get_filename_component(_dir "${_fastfair_pybind11_copy}/${_file}" DIRECTORY)
      file(MAKE_DIRECTORY "${_dir}")
      file(COPY_FILE "${_fastfair_pybind11_prefix}/${_file}" "${_fastfair_pybind11_copy}/${_file}"
           ONLY_IF_DIFFERENT)
    else()
      configure_file("${_fastfair_pybind11_prefix}/${_file}" "${_fastfair_pybind11_copy}/${_file}"
                     COPYONLY)
    endif()
  endforeach()
  file(RELATIVE_PATH _cmakedir "${_fastfair_pybind11_prefix}" "${_fastfair_pybind11_src}")
  set(pybind11_DIR "${_fastfair_pybind11_copy}/${_cmakedir}" CACHE PATH "pybind11's CMake package"
      FORCE)
else()
  # Another layout (a system package, a source checkout): used where it is.
  set(pybind11_DIR "${_fastfair_pybind11_src}" CACHE PATH "pybind11's CMake package" FORCE)
endif()
find_package(pybind11 CONFIG REQUIRED)
