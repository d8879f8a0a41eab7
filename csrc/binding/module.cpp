#include <pybind11/pybind11.h>

#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef FASTFAIR_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include "fastfair/cpu_isa.h"
#include "registry.h"

namespace py = pybind11;

namespace {

std::string compiler() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown";
#endif
}

py::dict build_info() {
  py::dict d;
  d["version"] = FASTFAIR_VERSION;
  d["build_id"] = FASTFAIR_BUILD_ID;  // hash of the sources (CMakeLists.txt, bench/tracking.py)
  d["compiler"] = compiler();
  d["cxx_standard"] = __cplusplus;
  d["cpu_isa"] = fastfair::cpu::isa_name(fastfair::cpu::active_isa());
  d["pybind11"] = std::to_string(PYBIND11_VERSION_MAJOR) + "." +
                  std::to_string(PYBIND11_VERSION_MINOR) + "." +
                  std::to_string(PYBIND11_VERSION_PATCH);
#ifdef _OPENMP
  d["openmp"] = true;
  d["openmp_version"] = _OPENMP;
  d["openmp_threads"] = omp_get_max_threads();
#else
  d["openmp"] = false;
  d["openmp_version"] = 0;
  d["openmp_threads"] = 1;
#endif
#ifdef FASTFAIR_WITH_CUDA
  d["cuda"] = true;
  d["cuda_version"] = CUDART_VERSION;
  d["cuda_archs"] = FASTFAIR_CUDA_ARCHS;
  int runtime = 0, count = 0;
  cudaRuntimeGetVersion(&runtime);
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  d["cuda_runtime_version"] = runtime;
  d["cuda_device_count"] = count;
#else
  d["cuda"] = false;
  d["cuda_version"] = 0;
  d["cuda_archs"] = "";
  d["cuda_runtime_version"] = 0;
  d["cuda_device_count"] = 0;
#endif
  return d;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "fastfair's compiled core: framework-free kernels over DLPack arrays.";
  m.def("build_info", &build_info,
        "What this build of fastfair._C contains: CUDA on/off and versions, OpenMP thread count, "
        "compiler, pybind11 version.");
  m.def("set_num_threads", [](int n) {
#ifdef _OPENMP
    if (n < 1) throw py::value_error("num_threads must be >= 1; got " + std::to_string(n));
    omp_set_num_threads(n);
#else
    (void)n;
#endif
  }, py::arg("num_threads"), "Sets the number of OpenMP threads the CPU kernels use.");
  m.def("get_num_threads", []() {
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
  }, "The number of OpenMP threads the CPU kernels use.");
  m.def("_set_cpu_isa", [](const std::string& name) {
    using fastfair::cpu::Isa;
    Isa cap = Isa::base;
    if (name == "avx2") cap = Isa::avx2;
    else if (name == "avx512") cap = Isa::avx512;
    else if (name != "base")
      throw py::value_error("isa must be 'base', 'avx2' or 'avx512'; got '" + name + "'");
    return fastfair::cpu::isa_name(fastfair::cpu::set_isa_cap(cap));
  }, py::arg("isa"),
        "Testing hook: caps the CPU instruction set of the kernels for this process (as "
        "FASTFAIR_CPU_ISA does at start-up) and returns the level now in use.");
  for (auto reg : fastfair::binding::registrars()) reg(m);
}
