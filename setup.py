"""The optional native decoder (goodhart_prof/trace/native: yyjson, the walk over the events, the module).

Everything else is declared in pyproject.toml. The extension is optional: where it cannot be
built (no C compiler), the install goes on and the loader uses the msgspec path alone."""
from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "goodhart_prof.trace.cdecoder",
    sources=[f"goodhart_prof/trace/native/{name}.c" for name in ("columnar", "walk", "intern", "arena", "yyjson")],
    include_dirs=["goodhart_prof/trace/native"],
    extra_compile_args=["-O2"],
    optional=True)])
