"""Finding ALFWorld games: the real ALFWorld data when present, else the bundled generated games.

Both sources end up as the same on-disk layout ALFWorld uses, ``<root>/json_2.1.1/<split folder>/
<task>-<Obj>-<Mrecep>-<Recep>-<scene>/trial_.../{game.tw-pddl,traj_data.json}``, and are scanned by
the same code, with ALFWorld's own rules (``AlfredTWEnv.collect_game_files``): a game needs both
files, paths containing "movable" or "Sliced" are skipped, and so are games not marked solvable.

* **Real data**: ``$ALFWORLD_DATA/json_2.1.1/{train,valid_seen,valid_unseen}`` (what
  ``alfworld-download`` fetches). Scanning reads every game file, so the result is kept in a small
  index under the cache root, refreshed when the folder's files change.
* **Bundled data**: ``data/alfworld/<split folder>.jsonl`` holds compact :class:`GameRecord` lines; the
  game folders are materialised once into ``<cache root>/games/<digest>/json_2.1.1/...`` (built in a
  temporary folder and renamed into place, so concurrent workers never see half a tree). Each
  record carries the SHA-256 of its PDDL problem, checked when materialising, so a changed
  alfworld package cannot silently change a bundled game.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from stratagym.atomic import atomic_write, publish_folder
from stratagym.envs.alfworld import paths
from stratagym.envs.alfworld.generator import (  # noqa: F401  (problem_pddl: re-exported, the translator tests and benchmark read it here)
    TASK_TYPES,
    GameRecord,
    combo,
    game_json,
    problem_digest,
    problem_pddl,
    traj_data,
)
from stratagym.envs.alfworld.runtime import logic_files  # re-exported: the CLI and tests read it from here
from stratagym.errors import ConfigError
from stratagym.jsonl import read_jsonl

__all__ = [
    "SPLITS",
    "GameEntry",
    "GameSet",
    "canonical_split",
    "canonical_task_types",
    "logic_files",
    "load_records",
    "materialise_bundled",
    "scan_split_dir",
    "resolve_games",
    "problem_digest",
    "EvalExclusions",
    "eval_exclusions",
]

#: Canonical split names, in order.
SPLITS: tuple[str, ...] = ("train", "in_distribution", "out_of_distribution")
_SPLIT_ALIASES = {
    "train": "train",
    "in_distribution": "in_distribution",
    "valid_seen": "in_distribution",
    "eval_in_distribution": "in_distribution",
    "id": "in_distribution",
    "seen": "in_distribution",
    "out_of_distribution": "out_of_distribution",
    "valid_unseen": "out_of_distribution",
    "eval_out_of_distribution": "out_of_distribution",
    "ood": "out_of_distribution",
    "unseen": "out_of_distribution",
}
#: Bumped whenever materialised game folders would differ for the same records.
MATERIALISE_VERSION = 1
_LOCK = threading.Lock()


@dataclass(frozen=True)
class GameEntry:
    """One playable game: its task id (trial folder relative to the split folder), type and file."""

    task_id: str
    task_type: str
    game_file: Path


@dataclass(frozen=True)
class GameSet:
    """The games of one split from one source."""

    split: str
    source: str  # "bundled" or the real data root
    split_dir: Path
    entries: tuple[GameEntry, ...]

    def by_id(self) -> dict[str, GameEntry]:
        return {e.task_id: e for e in self.entries}


def canonical_split(split: str) -> str:
    key = str(split).strip().lower().replace("-", "_")
    if key not in _SPLIT_ALIASES:
        raise ConfigError(
            f"unknown ALFWorld split {split!r}; use train, in_distribution (valid_seen) or "
            "out_of_distribution (valid_unseen)"
        )
    return _SPLIT_ALIASES[key]


def canonical_task_types(task_types: Iterable[str | int] | str | int | None) -> tuple[str, ...]:
    """Task type names from names or ALFWorld's numeric ids (1..6, as in its config's ``task_types``)."""
    if task_types is None:
        return TASK_TYPES
    if isinstance(task_types, (str, int)):
        task_types = [task_types]
    out = []
    for t in task_types:
        if isinstance(t, int) or (isinstance(t, str) and t.isdigit()):
            idx = int(t)
            if not 1 <= idx <= len(TASK_TYPES):
                raise ConfigError(f"ALFWorld task type ids are 1..6, got {t}")
            out.append(TASK_TYPES[idx - 1])
        elif t in TASK_TYPES:
            out.append(t)
        else:
            raise ConfigError(f"unknown ALFWorld task type {t!r}; choose from {', '.join(TASK_TYPES)} (or ids 1-6)")
    if not out:
        raise ConfigError("task_types is empty; leave it out to use all six ALFWorld task types")
    return tuple(dict.fromkeys(out))


# --------------------------------------------------------------------------------------------------
# Bundled data
# --------------------------------------------------------------------------------------------------


def load_records(split: str, directory: Path | None = None) -> list[tuple[GameRecord, str]]:
    """The bundled records of ``split`` with their stored problem digests."""
    split = canonical_split(split)
    path = (directory or paths.bundled_dir()) / f"{paths.REAL_SPLIT_DIRS[split]}.jsonl"
    if not path.is_file():
        raise ConfigError(f"bundled ALFWorld games not found at {path}; run scripts/make_alfworld_data.py "
                          "or pass data_path= pointing at ALFWorld data")
    out = []
    for line in read_jsonl(path):  # a bad line is a ConfigError naming it
        data = line.value
        digest = data.pop("problem_sha256", "")
        out.append((GameRecord.from_dict(data), digest))
    return out


@dataclass(frozen=True)
class EvalExclusions:
    """What a new train game must not be, so the bundled evaluation splits stay what they claim.

    ``problems``: the PDDL problem digests of every evaluation game (no train game *is* an eval game);
    ``combos``: the (task type, object, receptacle-or-lamp) triples of the out-of-distribution games
    (that split promises no combination seen in train, as ALFWorld's valid_unseen does).
    """

    problems: frozenset[str]
    combos: frozenset[tuple[str, str, str]]


def eval_exclusions(directory: Path | None = None) -> EvalExclusions:
    """The :class:`EvalExclusions` of the bundled (or ``directory``'s) evaluation splits."""
    problems: set[str] = set()
    combos: set[tuple[str, str, str]] = set()
    for split in SPLITS[1:]:
        for record, _digest in load_records(split, directory):
            problems.add(problem_digest(record))
            if split == "out_of_distribution":
                combos.add(combo(record))
    return EvalExclusions(problems=frozenset(problems), combos=frozenset(combos))


def _bundled_fingerprint() -> str:
    h = hashlib.sha256(f"v{MATERIALISE_VERSION}".encode())
    d = paths.bundled_dir()
    for name in ("alfred.pddl", "alfred.twl2", *(f"{v}.jsonl" for v in paths.REAL_SPLIT_DIRS.values())):
        p = d / name
        h.update(name.encode())
        h.update(p.read_bytes() if p.is_file() else b"-")
    return h.hexdigest()[:16]


def materialise_bundled() -> Path:
    """Write the bundled games as ALFWorld game folders (once) and return their ``json_2.1.1`` root."""
    fingerprint = _bundled_fingerprint()
    final = paths.cache_root() / "games" / fingerprint
    root = final / "json_2.1.1"
    if (final / "COMPLETE").is_file():
        return root
    with _LOCK:
        if (final / "COMPLETE").is_file():
            return root
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{fingerprint}-", dir=final.parent))
        try:
            domain, grammar = logic_files()
            for split, folder in paths.REAL_SPLIT_DIRS.items():
                split_dir = tmp / "json_2.1.1" / folder
                split_dir.mkdir(parents=True)
                for record, digest in load_records(split):
                    if digest and problem_digest(record) != digest:
                        raise ConfigError(
                            f"bundled ALFWorld game {record.key} rebuilds to a different PDDL problem than when it "
                            "was generated (the installed alfworld differs from 0.4.2?); regenerate the bundled "
                            "games with scripts/make_alfworld_data.py"
                        )
                    folder_path = split_dir / record.key
                    folder_path.mkdir(parents=True)
                    (folder_path / "traj_data.json").write_text(json.dumps(traj_data(record), indent=1))
                    (folder_path / "game.tw-pddl").write_text(json.dumps(game_json(record, domain, grammar)))
            (tmp / "COMPLETE").write_text(fingerprint + "\n")
            # a complete copy another process finished first is identical: kept
            publish_folder(tmp, final, keep_if=lambda folder: (folder / "COMPLETE").is_file())
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return root


# --------------------------------------------------------------------------------------------------
# Scanning game folders (real or materialised)
# --------------------------------------------------------------------------------------------------


def _scan(split_dir: Path) -> list[tuple[str, str]]:
    """(task id, task type) of every playable game under ``split_dir``, by ALFWorld's rules."""
    found = []
    for root, _dirs, files in os.walk(split_dir):
        if "traj_data.json" not in files or "game.tw-pddl" not in files:
            continue
        folder = Path(root)
        rel = folder.relative_to(split_dir).as_posix()
        if "movable" in rel or "Sliced" in rel:
            continue
        try:
            traj = json.loads((folder / "traj_data.json").read_text())
            game = json.loads((folder / "game.tw-pddl").read_text())
        except (OSError, json.JSONDecodeError):
            continue  # ALFWorld skips unreadable games too
        if not game.get("solvable", False) or traj.get("task_type") not in TASK_TYPES:
            continue
        found.append((rel, traj["task_type"]))
    found.sort()
    return found


def _signature(split_dir: Path) -> list:
    n, latest = 0, 0
    for root, _dirs, files in os.walk(split_dir):
        for name in ("traj_data.json", "game.tw-pddl"):
            if name in files:
                n += 1
                latest = max(latest, os.stat(os.path.join(root, name)).st_mtime_ns)
    return [n, latest]


def scan_split_dir(split_dir: Path, *, use_index: bool = True) -> list[GameEntry]:
    """Playable games under ``split_dir``; the scan is cached in an index under the cache root."""
    split_dir = Path(split_dir).resolve()
    if not split_dir.is_dir():
        raise ConfigError(f"ALFWorld split folder {split_dir} does not exist")
    sig = _signature(split_dir) if use_index else None
    index_file = paths.cache_root() / "index" / (hashlib.sha256(str(split_dir).encode()).hexdigest()[:20] + ".json")
    items = None
    if use_index and index_file.is_file():
        try:
            data = json.loads(index_file.read_text())
            if data.get("split_dir") == str(split_dir) and data.get("signature") == sig:
                items = [tuple(x) for x in data["games"]]
        except (OSError, json.JSONDecodeError, KeyError, TypeError):
            items = None
    if items is None:
        items = _scan(split_dir)
        if use_index:
            atomic_write(index_file, json.dumps({"split_dir": str(split_dir), "signature": sig, "games": items}))
    return [GameEntry(task_id, task_type, split_dir / task_id / "game.tw-pddl") for task_id, task_type in items]


def _real_root(data_path: Path) -> Path | None:
    """The ``json_2.1.1`` folder of an ALFWorld data root, or the path itself if it is one."""
    if (data_path / "json_2.1.1").is_dir():
        return data_path / "json_2.1.1"
    if any((data_path / v).is_dir() for v in paths.REAL_SPLIT_DIRS.values()):
        return data_path
    return None


def resolve_games(split: str = "train", data_path: str | Path | None = None,
                  task_types: Sequence[str | int] | str | int | None = None) -> GameSet:
    """The games of ``split``.

    ``data_path``: None picks the real ALFWorld data when ``$ALFWORLD_DATA/json_2.1.1`` exists (and
    raises :class:`ConfigError` if that data lacks the split's folder, rather than mixing sources) and
    the bundled games otherwise; ``"bundled"`` forces the bundled games; a path may be an ALFWorld data
    root (with ``json_2.1.1``), a ``json_2.1.1`` folder, or a folder of game folders (used for every
    split, e.g. the output of ``stratagym alfworld generate``).
    """
    split = canonical_split(split)
    types = canonical_task_types(task_types)
    source: str
    if data_path is None:
        user = paths.user_alfworld_data()
        root = _real_root(user) if user is not None else None
        if root is not None:
            split_dir, source = root / paths.REAL_SPLIT_DIRS[split], str(user)
            if not split_dir.is_dir():
                # Falling back to the generated games here would mix real training data with generated
                # evaluation games without a word: refuse, and say how to choose either explicitly.
                raise ConfigError(
                    f"ALFWORLD_DATA={user} holds real ALFWorld data but no {paths.REAL_SPLIT_DIRS[split]}/ folder "
                    f"for split {split!r}; download it (alfworld-download) or choose the generated games "
                    "explicitly with data_path='bundled' (results then say data_source 'bundled')"
                )
        else:
            split_dir, source = materialise_bundled() / paths.REAL_SPLIT_DIRS[split], "bundled"
    elif str(data_path) == "bundled":
        split_dir, source = materialise_bundled() / paths.REAL_SPLIT_DIRS[split], "bundled"
    else:
        data_path = Path(os.path.expandvars(os.path.expanduser(str(data_path))))
        if not data_path.is_dir():
            raise ConfigError(f"ALFWorld data_path {data_path} is not a folder; pass an ALFWorld data root "
                              "(with json_2.1.1/), a folder of game folders, or 'bundled'")
        root = _real_root(data_path)
        if root is not None:
            split_dir = root / paths.REAL_SPLIT_DIRS[split]
            if not split_dir.is_dir():
                raise ConfigError(f"{root} has no {paths.REAL_SPLIT_DIRS[split]}/ folder for split {split!r}")
        else:
            split_dir = data_path
        source = str(data_path)
    entries = tuple(e for e in scan_split_dir(split_dir) if e.task_type in types)
    if not entries:
        raise ConfigError(f"no playable ALFWorld games of types {list(types)} in {split_dir} (split {split!r}); "
                          "check data_path / ALFWORLD_DATA, or generate some with `stratagym alfworld generate`")
    return GameSet(split=split, source=source, split_dir=split_dir, entries=entries)
