"""Builds fastfair._C with CMake. Never imports torch: the extension speaks DLPack only."""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


class CMakeExtension(Extension):
    def __init__(self, name: str) -> None:
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    """Configures and builds one CMake project per extension into the wheel's package folder.

    Environment: FASTFAIR_CUDA=AUTO|ON|OFF (default AUTO), FASTFAIR_CUDA_ARCHS (e.g. "80;90"),
    FASTFAIR_BUILD_DIR (a persistent build folder for fast rebuilds), CMAKE_BUILD_PARALLEL_LEVEL.
    """

    def build_extension(self, ext: CMakeExtension) -> None:
        import pybind11

        out_dir = Path(self.get_ext_fullpath(ext.name)).resolve().parent
        build_dir = Path(os.environ.get("FASTFAIR_BUILD_DIR", Path(self.build_temp) / "cmake"))
        build_dir.mkdir(parents=True, exist_ok=True)
        args = [
            f"-DCMAKE_LIBRARY_OUTPUT_DIRECTORY={out_dir}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-Dpybind11_DIR={pybind11.get_cmake_dir()}",
            f"-DFASTFAIR_CUDA={os.environ.get('FASTFAIR_CUDA', 'AUTO')}",
            f"-DFASTFAIR_VERSION={self.distribution.get_version()}",
            "-DCMAKE_BUILD_TYPE=Release",
        ]
        if "FASTFAIR_CUDA_ARCHS" in os.environ:
            args.append(f"-DFASTFAIR_CUDA_ARCHS={os.environ['FASTFAIR_CUDA_ARCHS']}")
        subprocess.run(["cmake", "-S", str(ROOT), "-B", str(build_dir), *args], check=True)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.run(["cmake", "--build", str(build_dir), "--parallel", jobs], check=True)


setup(ext_modules=[CMakeExtension("fastfair._C")], cmdclass={"build_ext": CMakeBuild})
