"""The project's one user-facing error type, at the base of the layers.

Every layer raises :class:`ConfigError` for bad configuration, so it lives below all of them: an
algorithm or the trainer can raise it without importing the env package.
"""

from __future__ import annotations

__all__ = ["ConfigError"]


class ConfigError(ValueError):
    """Bad configuration (missing index, corrupt data file, unknown split, unknown name...).

    Raised at construction, never from an env's ``step``. The message says what is wrong and how to fix
    it; the command-line entry points print it and exit with code 2, without a traceback.
    """
