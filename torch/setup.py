"""Builds braid_torch._C, Braid's c10d process group, against the PyTorch
that runs this script (1.13: Debian's python3-torch, libtorch-dev and
pybind11-dev; the source follows 2.x's API too, but no 2.x build has been
tried), and libbraid.so beside it (go build -buildmode=c-shared ../capi).

    python3 setup.py build_ext --inplace   # what `make -C torch` runs
"""

import os
import subprocess

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = os.path.dirname(os.path.abspath(__file__))
capi = os.path.join(here, "..", "capi")
pkg = os.path.join(here, "braid_torch")


class Build(BuildExtension):
    def run(self):
        out = os.path.join(pkg, "libbraid.so")
        subprocess.run(["go", "build", "-buildmode=c-shared", "-ldflags=-s -w", "-o", out, "."],
                       cwd=capi, check=True)
        os.remove(os.path.join(pkg, "libbraid.h"))  # braid.h is the header
        # The extension finds libbraid.so beside itself (rpath $ORIGIN).
        if not self.inplace:
            self.mkpath(os.path.join(self.build_lib, "braid_torch"))
            self.copy_file(out, os.path.join(self.build_lib, "braid_torch", "libbraid.so"))
        super().run()


setup(
    name="braid_torch",
    version="0.1",
    description="Braid's backend for torch.distributed",
    packages=["braid_torch"],
    ext_modules=[
        CppExtension(
            "braid_torch._C",
            ["csrc/ProcessGroupBraid.cpp"],
            include_dirs=[capi],
            library_dirs=[pkg],
            libraries=["braid"],
            extra_compile_args=["-O2"],
            extra_link_args=["-Wl,-rpath,$ORIGIN"],
        )
    ],
    cmdclass={"build_ext": Build},
)
