"""The simulator's C extension (specaudit.simulate.kernels); everything else is in pyproject.toml.

Optional: an install without a C compiler goes on, and the numpy simulator runs (same results,
slower).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("specaudit.simulate._kernels", ["specaudit/simulate/_kernels.c"], optional=True, extra_compile_args=["-O3"])])
