"""Builds hoist._native and the hoist command-line tool (shipped as hoist/_bin/hoist) with the project's own CMake (python/CMakeLists.txt), so that pip and
CMake builds are the same build. Environment: HOIST_CMAKE_ARGS adds CMake arguments (for
example -DHOIST_CUDA=OFF); HOIST_BUILD_JOBS sets the parallelism; HOIST_CMAKE_BUILD_DIR builds in
an existing CMake build folder configured with -DHOIST_PYTHON=ON for the same Python version (its
configuration is kept; what it has built is not built again)."""
import importlib.util
import os
import re
import subprocess
import sys


def missing_build_requirements():
    """The build requirements (pyproject.toml's) this interpreter cannot import. pip's build
    isolation installs them; with --no-build-isolation they must be the interpreter's own, and
    without them setuptools fails later with "invalid command 'bdist_wheel'". (pybind11 may
    also be CMake's alone, as Debian's pybind11-dev is: CMake says when it is missing.)"""
    return [name for name in ("setuptools", "wheel") if importlib.util.find_spec(name) is None]


if missing_build_requirements():
    _missing = missing_build_requirements()
    sys.exit(f"hoist's build needs {', '.join(_missing)} in the Python that runs it "
             f"({sys.executable}), which cannot import {'it' if len(_missing) == 1 else 'them'}. "
             f"Either let pip fetch them "
             f"(pip install . without --no-build-isolation), or build with a Python that has "
             f"them: on Debian, apt-get install python3-setuptools python3-wheel pybind11-dev "
             f"and use /usr/bin/python3 (or a venv made from it with --system-site-packages).")

from setuptools import Extension, setup  # noqa: E402
from setuptools.command.build_ext import build_ext


def cmake_version():
    """project(hoist VERSION X.Y.Z) in CMakeLists.txt: the one place hoist's version is written."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "CMakeLists.txt"), encoding="utf-8") as f:
        found = re.search(r"project\(hoist VERSION (\d+\.\d+\.\d+)", f.read())
    if found is None:
        raise RuntimeError("CMakeLists.txt has no project(hoist VERSION X.Y.Z)")
    return found.group(1)


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        source = os.path.dirname(os.path.abspath(__file__))
        existing = os.environ.get("HOIST_CMAKE_BUILD_DIR")
        build = os.path.abspath(existing or os.path.join(self.build_temp, "cmake"))
        args = []
        if not existing:  # an existing folder keeps its configuration (its Python's ABI too)
            args = [f"-DPython_EXECUTABLE={sys.executable}", "-DHOIST_PYTHON=ON",
                    "-DHOIST_BUILD_TESTS=OFF", "-DHOIST_BUILD_BENCH=OFF",
                    "-DCMAKE_BUILD_TYPE=Release"]
            # pybind11 from PyPI (pip's isolated build) carries its CMake files inside the
            # module; Debian's pybind11-dev puts them where CMake looks.
            if importlib.util.find_spec("pybind11") is not None:
                import pybind11
                args.append(f"-Dpybind11_DIR={pybind11.get_cmake_dir()}")
        args += os.environ.get("HOIST_CMAKE_ARGS", "").split()
        jobs = os.environ.get("HOIST_BUILD_JOBS", str(os.cpu_count() or 2))
        subprocess.run(["cmake", "-S", source, "-B", build] + args, check=True)
        subprocess.run(["cmake", "--build", build, "--target", "hoist_python_native", "hoist_cli",
                        "-j", jobs], check=True)
        built = os.path.join(build, "python", "hoist")
        native = [f for f in os.listdir(built) if f.startswith("_native") and f.endswith((".so", ".pyd"))]
        if len(native) != 1:
            raise RuntimeError(f"expected one _native module in {built}, found {native}")
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        self.copy_file(os.path.join(built, native[0]), target)
        # The command-line tool travels inside the package: `hoist` (the console script) and
        # `python -m hoist` run it.
        cli = "hoist.exe" if os.name == "nt" else "hoist"
        bin_dir = os.path.join(os.path.dirname(target), "_bin")
        os.makedirs(bin_dir, exist_ok=True)
        self.copy_file(os.path.join(build, cli), os.path.join(bin_dir, cli))


setup(version=cmake_version(), ext_modules=[CMakeExtension("hoist._native")], cmdclass={"build_ext": CMakeBuild},
      options={"build": {"build_base": "build-py"}})
