# The build id of fastfair._C: a hash of every source the compiled core is built from, so that a
# core can be matched with the tree it came from (`python -m bench run` refuses a core built from
# other sources; bench/tracking.py computes the same hash in Python).
#
# The files: CMakeLists.txt, cmake/*.cmake and every C++/CUDA source or header under csrc/
# (extensions .cpp .cc .h .hpp .cu .cuh). The text hashed: one line per file, in byte order of the
# path relative to the root, "<path> <sha256 of the file>\n"; the id is the first 16 hex digits of
# the SHA-256 of that text.
#
# Included by CMakeLists.txt (fastfair_source_files / fastfair_source_hash), or run as a script,
# which prints the id (the tests compare it with the Python side):
#   cmake -DROOT=<repo> -P cmake/FastfairSourceHash.cmake

function(fastfair_source_files root out_var)
  file(GLOB_RECURSE _sources LIST_DIRECTORIES false RELATIVE "${root}"
       "${root}/csrc/*.cpp" "${root}/csrc/*.cc" "${root}/csrc/*.h" "${root}/csrc/*.hpp"
       "${root}/csrc/*.cu" "${root}/csrc/*.cuh")
  file(GLOB _cmake LIST_DIRECTORIES false RELATIVE "${root}" "${root}/cmake/*.cmake")
  set(_files CMakeLists.txt ${_cmake} ${_sources})
  list(SORT _files)
  set(${out_var} ${_files} PARENT_SCOPE)
endfunction()

function(fastfair_source_hash root out_var)
  fastfair_source_files("${root}" _files)
  set(_text "")
  foreach(_file IN LISTS _files)
    file(SHA256 "${root}/${_file}" _digest)
    string(APPEND _text "${_file} ${_digest}\n")
  endforeach()
  string(SHA256 _id "${_text}")
  string(SUBSTRING "${_id}" 0 16 _id)
  set(${out_var} "${_id}" PARENT_SCOPE)
endfunction()

if(CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  if(NOT DEFINED ROOT)
    get_filename_component(ROOT "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
  endif()
  fastfair_source_hash("${ROOT}" _id)
  execute_process(COMMAND "${CMAKE_COMMAND}" -E echo "${_id}")
endif()
