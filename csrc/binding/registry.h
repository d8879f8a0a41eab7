// Each binding file registers its functions here, so that adding an op never edits module.cpp.
#pragma once

#include <pybind11/pybind11.h>

#include <vector>

namespace fastfair::binding {

using Registrar = void (*)(pybind11::module_&);

inline std::vector<Registrar>& registrars() {
  static std::vector<Registrar> all;
  return all;
}

struct Register {
  explicit Register(Registrar f) { registrars().push_back(f); }
};

}  // namespace fastfair::binding

#define FASTFAIR_REGISTER(fn) static ::fastfair::binding::Register fn##_registration(fn)
