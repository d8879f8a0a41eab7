# fastfair_visible_gpu_archs(<out_var>): the CUDA architectures of the GPUs this machine can see,
# as a CMake list ("90", "80;86"), or "" when none is visible. Used by FASTFAIR_CUDA=AUTO, so that
# a machine with nvcc but no GPU compiles no CUDA, and one with a GPU compiles for it alone.
#
# A GPU is visible when `nvidia-smi -L` succeeds and lists one. Its architecture comes from
# `nvidia-smi --query-gpu=compute_cap` (drivers from 2021 on); where that query is not supported,
# CMake's own detection ("native", CMake >= 3.24), else the full list.
#
# FASTFAIR_VISIBLE_GPU_ARCHS (a cache or -D variable) replaces the detection, for tests and for
# machines whose driver tools are elsewhere: "none" for no GPU, else the architectures.

function(fastfair_visible_gpu_archs out_var)
  if(DEFINED FASTFAIR_VISIBLE_GPU_ARCHS AND NOT FASTFAIR_VISIBLE_GPU_ARCHS STREQUAL "")
    if(FASTFAIR_VISIBLE_GPU_ARCHS STREQUAL "none")
      set(${out_var} "" PARENT_SCOPE)
    else()
      set(${out_var} "${FASTFAIR_VISIBLE_GPU_ARCHS}" PARENT_SCOPE)
    endif()
    return()
  endif()
  set(${out_var} "" PARENT_SCOPE)
  find_program(FASTFAIR_NVIDIA_SMI nvidia-smi)
  if(NOT FASTFAIR_NVIDIA_SMI)
    return()
  endif()
  execute_process(COMMAND "${FASTFAIR_NVIDIA_SMI}" -L RESULT_VARIABLE _rc OUTPUT_VARIABLE _gpus
                  ERROR_QUIET TIMEOUT 30)
  if(NOT _rc EQUAL 0 OR NOT _gpus MATCHES "GPU [0-9]")
    return()
  endif()
  execute_process(COMMAND "${FASTFAIR_NVIDIA_SMI}" --query-gpu=compute_cap --format=csv,noheader
                  RESULT_VARIABLE _rc OUTPUT_VARIABLE _caps ERROR_QUIET TIMEOUT 30)
  set(_archs "")
  if(_rc EQUAL 0)
    string(REGEX MATCHALL "[0-9]+\\.[0-9]+" _caps "${_caps}")
    foreach(_cap IN LISTS _caps)
      string(REPLACE "." "" _arch "${_cap}")
      list(APPEND _archs "${_arch}")
    endforeach()
    list(REMOVE_DUPLICATES _archs)
  endif()
  if(_archs STREQUAL "")
    if(CMAKE_VERSION VERSION_GREATER_EQUAL 3.24)
      set(_archs native)
    else()
      set(_archs "${FASTFAIR_CUDA_ARCHS_ALL}")
    endif()
  endif()
  message(STATUS "fastfair: visible GPU architectures: ${_archs}")
  set(${out_var} "${_archs}" PARENT_SCOPE)
endfunction()
