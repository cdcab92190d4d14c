"""The optional native decoder (goodhart_prof/trace/native: yyjson + the columnar walker).

Everything else is declared in pyproject.toml. The extension is optional: where it cannot be
built (no C compiler), the install goes on and the loader uses the msgspec path alone."""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "goodhart_prof.trace._columnar",
    sources=["goodhart_prof/trace/native/columnar.c", "goodhart_prof/trace/native/yyjson.c"],
    include_dirs=["goodhart_prof/trace/native"],
    extra_compile_args=["-O2"],
    optional=True)])
