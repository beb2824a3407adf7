"""Builds the torch C++/CUDA extension cuda_attention._C (python setup.py build_ext --inplace)."""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="cuda-attention",
    packages=["cuda_attention"],
    ext_modules=[
        CUDAExtension(
            "cuda_attention._C",
            ["csrc/binding.cpp", "csrc/attention.cu"],
            extra_compile_args={"cxx": ["-O3"], "nvcc": ["-O3", "--use_fast_math"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
