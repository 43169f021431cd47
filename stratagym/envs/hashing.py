"""The state hashes of the env contract: stable 63-bit hashes of observations and of their histories.

GiGPO's anchor states and HGPO's context groups are equal hashes, so a hash must be the same in every
process, Python run and rollout worker (``hash()`` is salted per process; blake2b is not), and two
observations that differ only in spacing or Unicode composition must be one state (:func:`normalize_text`).
:class:`ContextTracker` keeps an episode's last ``k + 1`` hashes and derives the HGPO levels.

Below :mod:`stratagym.envs.core` (which re-exports these names) and :mod:`stratagym.envs.episode`, so
everything that needs a stable hash reaches it without the env base class. The BLAKE2b digest, the plain
``str`` hash and the tracker's level update have C twins (:mod:`stratagym.envs.speedups`).
"""

from __future__ import annotations

import hashlib
import unicodedata
from typing import Any, Iterable

from stratagym.envs import speedups
from stratagym.errors import ConfigError

__all__ = ["HASH_MASK", "NO_CONTEXT", "ContextTracker", "combine_hashes", "normalize_text", "stable_hash"]

HASH_MASK = (1 << 63) - 1
NO_CONTEXT = -1  # marks a history level that is not available yet (in algorithm tensors)

#: ASCII whitespace other than space and newline (``str.split`` splits on these too, \x1c-\x1f included).
_RARE_ASCII_SPACE = b"\t\x0b\x0c\r\x1c\x1d\x1e\x1f"


def normalize_text(text: str) -> str:
    """Canonical form of an observation for hashing: NFC, whitespace runs collapsed, stripped.

    Two observations that differ only in spacing or Unicode composition are the same state. Always
    equal to ``" ".join(unicodedata.normalize("NFC", text).split())`` (a hypothesis test checks it).
    """
    if text.isascii():  # ASCII is already NFC, and most observations are single-spaced
        plain = _plain_ascii(text)
        if plain is not None:
            return plain
    else:
        text = unicodedata.normalize("NFC", text)
    return " ".join(text.split())


def _plain_ascii(text: str) -> str | None:
    """The normal form of ASCII ``text`` when its whitespace is only single spaces and newlines, else None.

    Why: splitting an observation into words and joining them builds one string per word (~3 us for a
    500-character search result, most of a step's hashing). When no two whitespace characters touch and
    none is a tab, CR or other rare one, the split-and-join only turns each newline into a space, which
    ``str.replace`` does in one C pass; the checks are C scans too.
    """
    plain = text.strip().replace("\n", " ")
    if "  " in plain:
        return None
    data = plain.encode("ascii")
    if len(data.translate(None, _RARE_ASCII_SPACE)) != len(data):
        return None
    return plain


def _digest_py(data: bytes) -> int:
    """BLAKE2b-64 of ``data`` as a 63-bit int (the reference; ``_speedups.digest8`` is its C twin)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") & HASH_MASK


_digest = _digest_py  # the C twin once bound (_bind_speedups)


def stable_hash(text: str) -> int:
    """A non-negative 63-bit hash of ``text`` that is the same in every process and Python run.

    Python's ``hash()`` is salted per process, so it cannot identify states across rollout workers;
    blake2b of the normalised UTF-8 text can. The value fits in int64 and is never -1, which the
    algorithms use for "no history at this level". A plain ``str`` goes to the C twin when the
    speed-ups are built (it streams the normalised text into the hash without building it).
    """
    if _stable_hash_c is not None and type(text) is str:
        return _stable_hash_c(text)
    return _stable_hash_py(text)


_stable_hash_c = None  # _speedups.stable_hash once bound


def _stable_hash_py(text: str) -> int:
    """:func:`stable_hash` in Python: the reference of its C twin, and the path for str subclasses."""
    return _digest(normalize_text(text).encode("utf-8", "surrogatepass"))


_CTX_HASHER = hashlib.blake2b(b"ctx:", digest_size=8)  # only ever copied, never updated
_ctx_push = None  # _speedups.ctx_push once bound


def _combine2(left: int, right: int) -> int:
    return _digest(b"ctx:" + left.to_bytes(8, "little") + right.to_bytes(8, "little"))


def combine_hashes(hashes: Iterable[int]) -> int:
    """Hash of an ordered sequence of hashes (a history of observations), stable across processes.

    A left fold, ``combine([a, b, c]) == combine2(combine2(a, b), c)``, so a tracker can extend the
    hash of the last k observations to the last k+1 with one digest instead of rehashing the window.
    """
    it = iter(hashes)
    try:
        acc = int(next(it))
    except StopIteration:
        return _digest(b"ctx:")
    for h in it:
        acc = _combine2(acc, int(h))
    return acc


class ContextTracker:
    """Keeps the hashes of the last ``k + 1`` observations and derives the HGPO context keys.

    ``context_hashes()[k]`` identifies the last ``k + 1`` observations (oldest to newest), so
    ``context_hashes()[0]`` is the current state's hash, and two steps share level ``k`` exactly when
    their last ``k + 1`` observations are equal. Early in an episode the list is shorter than
    ``k + 1``: a level exists only once that much history does. Levels are updated incrementally
    (level k now = combine(level k-1 one step ago, current hash)): K digests per step.
    """

    def __init__(self, k: int = 4):
        if k < 0:
            raise ConfigError(f"context length K must be >= 0, got {k}")
        self.k = int(k)
        self._levels: list[int] = []
        # the levels as 8 little-endian bytes, what the next combine feeds (None: not kept by the C twin)
        self._level_bytes: list[bytes] | None = []

    def reset(self, observation: str | None = None) -> None:
        self._levels, self._level_bytes = [], []
        if observation is not None:
            self.push(observation)

    def push(self, observation: str) -> int:
        return self.push_hash(stable_hash(observation))

    def _push_hash_py(self, h: int) -> int:
        """Push an observation by its :func:`stable_hash` (for envs that know it without rehashing)."""
        if self._level_bytes is None:  # the C twin ran before (speedups.use switched): rebuild from the ints
            self._level_bytes = [v.to_bytes(8, "little") for v in self._levels]
        prev = self._level_bytes[: self.k]
        tail = h.to_bytes(8, "little")
        if prev:  # _combine2(p, h) for each level, inlined (this runs on every env step)
            levels, level_bytes = [h], [tail]
            new_hasher, from_bytes, mask = _CTX_HASHER.copy, int.from_bytes, HASH_MASK  # locals: ~20% of this loop
            for p in prev:
                d = new_hasher()  # blake2b already fed b"ctx:": a copy is cheaper than a new hasher
                d.update(p + tail)
                v = from_bytes(d.digest(), "little") & mask
                levels.append(v)
                level_bytes.append(v.to_bytes(8, "little"))
            self._levels, self._level_bytes = levels, level_bytes
        else:
            self._levels, self._level_bytes = [h], [tail]
        return h

    def _push_hash_c(self, h: int) -> int:
        """:meth:`push_hash` with the levels computed by ``_speedups.ctx_push`` (the same digests, from
        the level ints themselves; ``_level_bytes`` is not kept)."""
        self._levels, self._level_bytes = _ctx_push(self._levels, h, self.k), None
        return h

    push_hash = _push_hash_py  # or _push_hash_c (_bind_speedups)

    @property
    def state_hash(self) -> int:
        return self._levels[0] if self._levels else NO_CONTEXT

    def context_hashes(self) -> list[int]:
        return list(self._levels)


def _bind_speedups(module: Any) -> None:
    """Point the hashing hot-path names at the C twins in ``module``, or at the Python references."""
    global _digest, _stable_hash_c, _ctx_push
    c = module is not None
    _digest = module.digest8 if c else _digest_py
    _stable_hash_c = module.stable_hash if c else None
    _ctx_push = module.ctx_push if c else None
    ContextTracker.push_hash = ContextTracker._push_hash_c if c else ContextTracker._push_hash_py


speedups.bind(_bind_speedups)
