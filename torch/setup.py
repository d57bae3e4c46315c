"""Builds braid_torch._C, Braid's c10d process group, against the PyTorch
that runs this script, and libbraid.so beside it (go build -buildmode=c-shared
../capi, or the library BRAID_LIB names, for a machine without Go).

PyTorch 1.13 (Debian's python3-torch, libtorch-dev and pybind11-dev) builds
the CPU backend. A PyTorch 2.x with CUDA, where the CUDA runtime's headers
are found (CUDA_HOME, nvcc's folder, or the nvidia-cuda-runtime wheel),
builds it with CUDA tensors too (BRAID_TORCH_CUDA; BRAID_TORCH_CUDA=0 leaves
them out). scripts/torch-gpu.sh builds the same way with the compiler
directly.

    python3 setup.py build_ext --inplace   # what `make -C torch` runs
"""

import os
import shutil
import subprocess

import torch
from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension

here = os.path.dirname(os.path.abspath(__file__))
capi = os.path.join(here, "..", "capi")
pkg = os.path.join(here, "braid_torch")


def cuda_include():
    """The folder of cuda_runtime_api.h for a CUDA build, or None."""
    if os.environ.get("BRAID_TORCH_CUDA") == "0" or torch.version.cuda is None:
        return None
    if int(torch.__version__.split(".")[0]) < 2:
        return None
    dirs = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            dirs.append(os.path.join(os.environ[var], "include"))
    nvcc = shutil.which("nvcc")
    if nvcc:
        dirs.append(os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "include"))
    dirs.append("/usr/local/cuda/include")
    try:
        import nvidia  # the CUDA wheels PyTorch depends on

        for root in nvidia.__path__:
            for sub in ("cuda_runtime/include", "cu13/include", "cu12/include"):
                dirs.append(os.path.join(root, sub))
    except ImportError:
        pass
    for d in dirs:
        if os.path.exists(os.path.join(d, "cuda_runtime_api.h")):
            return d
    return None


class Build(BuildExtension):
    def run(self):
        out = os.path.join(pkg, "libbraid.so")
        if os.environ.get("BRAID_LIB"):
            shutil.copyfile(os.environ["BRAID_LIB"], out)
        else:
            subprocess.run(["go", "build", "-buildmode=c-shared", "-ldflags=-s -w", "-o", out, "."],
                           cwd=capi, check=True)
            os.remove(os.path.join(pkg, "libbraid.h"))  # braid.h is the header
        # The extension finds libbraid.so beside itself (rpath $ORIGIN).
        if not self.inplace:
            self.mkpath(os.path.join(self.build_lib, "braid_torch"))
            self.copy_file(out, os.path.join(self.build_lib, "braid_torch", "libbraid.so"))
        super().run()


cuda = cuda_include()
setup(
    name="braid_torch",
    version="0.1",
    description="Braid's backend for torch.distributed",
    packages=["braid_torch"],
    ext_modules=[
        CppExtension(
            "braid_torch._C",
            ["csrc/ProcessGroupBraid.cpp"],
            include_dirs=[capi] + ([cuda] if cuda else []),
            library_dirs=[pkg],
            libraries=["braid"] + (["c10_cuda"] if cuda else []),
            define_macros=[("BRAID_TORCH_CUDA", "1")] if cuda else [],
            extra_compile_args=["-O2"],
            extra_link_args=["-Wl,-rpath,$ORIGIN"],
        )
    ],
    cmdclass={"build_ext": Build},
)
