"""Only the optional C extension; everything else about the package is in pyproject.toml.

``stratagym.envs._speedups`` holds C twins of the pure functions on a text env's step hot path
(stratagym/envs/speedups.py says which). ``optional=True``: without a C compiler the build skips it
with a warning and the package installs as pure Python, which the modules fall back to.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "stratagym.envs._speedups",
            sources=["stratagym/envs/_speedups.c"],
            optional=True,
            extra_compile_args=["-O2"],
        )
    ]
)
