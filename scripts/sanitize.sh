#!/usr/bin/env bash
# Builds fastfair._C with AddressSanitizer and UndefinedBehaviorSanitizer, runs the test suite
# against it and reports what the sanitizers found. Not part of CI (it takes minutes); run it after
# touching the C++ core:
#
#   scripts/sanitize.sh                  # the whole test suite
#   scripts/sanitize.sh tests/ops/test_ons.py -k step   # arguments go to pytest
#
# Environment: BUILD (default build/sanitize), JOBS (parallel compile jobs, default 2), PYTHON
# (default python). CUDA is off: the sanitizers see the host code only.
#
# How: the module is built into a copy of the Python sources and tests under $BUILD/tree, so the
# installed (unsanitized) module and the working tree stay as they are. Python itself is not
# instrumented, so the ASan runtime must be the first library loaded (LD_PRELOAD), followed by
# libstdc++ (Python does not link it, and ASan resolves its exception interceptors at start-up);
# leak detection is off (the interpreter's own allocations would drown the report). Reports go
# to $BUILD/logs; the exit status is non-zero if the tests failed or any sanitizer reported.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$(mkdir -p "${BUILD:-$ROOT/build/sanitize}" && cd "${BUILD:-$ROOT/build/sanitize}" && pwd)"
JOBS="${JOBS:-2}"
PYTHON="${PYTHON:-python}"
CXX="${CXX:-g++}"
SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=address"

# 1. A copy of the package and its tests (tracked and untracked files, not ignored ones).
rm -rf "$BUILD/tree" "$BUILD/logs"
mkdir -p "$BUILD/tree" "$BUILD/logs"
(cd "$ROOT" && git ls-files -co --exclude-standard -z -- fastfair tests README.md docs pyproject.toml \
  | xargs -0 cp --parents -t "$BUILD/tree")

# 2. The sanitized module, built from the working tree's sources into the copy.
cmake -S "$ROOT" -B "$BUILD/cmake" -DFASTFAIR_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$CXX" -DCMAKE_CXX_FLAGS="$SAN" \
  -DCMAKE_MODULE_LINKER_FLAGS="$SAN" -DCMAKE_SHARED_LINKER_FLAGS="$SAN" \
  -DCMAKE_LIBRARY_OUTPUT_DIRECTORY="$BUILD/tree/fastfair" \
  -Dpybind11_DIR="$("$PYTHON" -m pybind11 --cmakedir)" -DPython_EXECUTABLE="$(command -v "$PYTHON")" \
  > "$BUILD/cmake.log"
cmake --build "$BUILD/cmake" --parallel "$JOBS" > "$BUILD/build.log" 2>&1 \
  || { tail -30 "$BUILD/build.log"; exit 1; }

# 3. The tests, from the copy (so that `import fastfair` finds the sanitized module first).
PRELOAD="$("$CXX" -print-file-name=libasan.so) $("$CXX" -print-file-name=libstdc++.so)"
status=0
(
  cd "$BUILD/tree"
  export LD_PRELOAD="$PRELOAD"
  # alloc_dealloc_mismatch: uninstrumented libraries (torch, NumPy) mix allocators legitimately.
  export ASAN_OPTIONS="detect_leaks=0:alloc_dealloc_mismatch=0:abort_on_error=0:log_path=$BUILD/logs/asan"
  export UBSAN_OPTIONS="print_stacktrace=1:log_path=$BUILD/logs/ubsan"
  export FLWR_TELEMETRY_ENABLED=0 RAY_USAGE_STATS_ENABLED=0
  "$PYTHON" -m pytest -q -p no:cacheprovider "${@:-tests}"
) || status=$?

# 4. The report.
reports=$(grep -l -E "Sanitizer|runtime error:" "$BUILD"/logs/* 2>/dev/null || true)
echo
echo "sanitize.sh: pytest exit status $status; module $BUILD/tree/fastfair (ASan + UBSan)"
if [ -n "$reports" ]; then
  echo "sanitize.sh: sanitizer reports:"
  for f in $reports; do
    echo "--- $f"
    grep -m 8 -E "Sanitizer|runtime error:|^    #[0-4] " "$f" || true
  done
  exit 1
fi
echo "sanitize.sh: no AddressSanitizer or UndefinedBehaviorSanitizer reports"
exit "$status"
