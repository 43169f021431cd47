"""The project's user-facing error types, at the base of the layers.

Every layer raises :class:`ConfigError` for bad configuration, so it lives below all of them: an
algorithm or the trainer can raise it without importing the env package.
"""

from __future__ import annotations

__all__ = ["UserError", "ConfigError"]


class UserError(Exception):
    """What the user asked for cannot be done, and the message says how to fix it.

    The base of every such error in every layer (:class:`ConfigError`, a bad record, a bad agent spec, a
    refused submission, ...): the ``stratagym`` command prints its message as ``error: ...`` and exits
    with code 2, never a traceback. An error class joins by subclassing it (keeping its ``ValueError`` or
    ``RuntimeError`` base for the code that catches those); nothing else needs listing anywhere.
    """


class ConfigError(UserError, ValueError):
    """Bad configuration (missing index, corrupt data file, unknown split, unknown name...).

    Raised at construction, never from an env's ``step``. The message says what is wrong and how to fix
    it; the command-line entry points print it and exit with code 2, without a traceback.
    """
