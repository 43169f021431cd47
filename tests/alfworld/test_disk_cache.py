"""The on-disk translation cache (disk_cache.py): a process meeting a game translated before skips the
translation and says exactly what a translation would have made it say; bad entries, the off switch,
other keys, unwritable folders and the size cap."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from stratagym.envs.alfworld import disk_cache, speedups
from stratagym.envs.alfworld.engine import AlfredEngine
from stratagym.envs.alfworld.runtime import preserve_argv
from stratagym.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty cache folder of this test; the process's in-memory game caches emptied."""
    folder = tmp_path / "cache" / "alfworld-sas"
    monkeypatch.setenv("STRATAGYM_ALFWORLD_SAS_CACHE", str(folder))
    monkeypatch.delenv("STRATAGYM_ALFWORLD_DISK_CACHE", raising=False)
    monkeypatch.delenv("STRATAGYM_ALFWORLD_DISK_CACHE_MAX", raising=False)
    speedups.clear_caches(games_only=True)
    yield folder
    speedups.clear_caches(games_only=True)


@pytest.fixture
def translations(monkeypatch):
    """Counts the translator's runs (fast-downward's ``pddl_to_sas``, which every translation goes through)."""
    speedups.install()
    with preserve_argv():
        sys.argv = ["translate.py", "domain", "task"]  # fast-downward's options module parses argv on import
        from fast_downward.translate import translate
    calls = []
    stock = translate.pddl_to_sas

    def counting(task):
        calls.append(task)
        return stock(task)

    monkeypatch.setattr(translate, "pddl_to_sas", counting)
    return calls


def _game_file(train_games, one_game_per_type, task_type="pick_and_place_simple") -> str:
    return train_games.by_id()[one_game_per_type[task_type]].game_file


def _pddl(game_file: str) -> tuple[str, str]:
    data = json.loads(Path(game_file).read_text())
    return data["pddl_domain"], data["pddl_problem"]


def _translate(domain: str, problem: str, optimize: bool = False, **active):
    """``pddl2sas`` through the speed-ups, the in-memory cache emptied first (a process new to the game)."""
    import fast_downward

    speedups.clear_caches(games_only=True)
    with preserve_argv(), speedups.active(True, **active):
        return fast_downward.pddl2sas(domain, problem, optimize=optimize)


def _play(engine: AlfredEngine, game_file: str, n: int = 6) -> list:
    state = engine.load(game_file)
    out = [(state.feedback, state.admissible_commands, state.won)]
    for i in range(n):
        state = engine.step(state.admissible_commands[(7 * i) % len(state.admissible_commands)])
        out.append((state.feedback, state.admissible_commands, state.won))
    return out


def _session(game_file: str, **kwargs) -> list:
    engine = AlfredEngine(**kwargs)
    try:
        return _play(engine, game_file)
    finally:
        engine.close()


def test_second_engine_new_to_the_game_reads_disk_not_the_translator(cache, translations, train_games,
                                                                     one_game_per_type):
    game = _game_file(train_games, one_game_per_type)
    stock = _session(game, fast=False)
    translations.clear()
    first = _session(game)
    assert len(translations) == 1 and speedups.cache_info()["disk_writes"] == 1
    assert len(list(cache.glob("*.sasz"))) == 1
    speedups.clear_caches(games_only=True)  # what a new process has in memory
    translations.clear()
    second = _session(game)
    assert translations == []  # the translator did not run
    info = speedups.cache_info()
    assert info["disk_hits"] == 1 and info["disk_writes"] == 0
    assert second == first == stock  # observation, admissible commands, won: as translated, as stock


def test_planner_translation_round_trips_and_the_task_is_rebuilt_exactly(cache, translations, train_games,
                                                                          one_game_per_type):
    """Both modes come back byte for byte; the rebuilt PDDL task pickles like the translator's own."""
    domain, problem = _pddl(_game_file(train_games, one_game_per_type, "pick_cool_then_place_in_recep"))
    for optimize in (False, True):
        translations.clear()
        task, sas = _translate(domain, problem, optimize)
        again_task, again_sas = _translate(domain, problem, optimize)
        assert len(translations) == 1  # the first call only
        assert again_sas == sas and sas.startswith("begin_version")
        assert pickle.dumps(again_task) == pickle.dumps(task)
    assert len(list(cache.glob("*.sasz"))) == 2


def test_task_rebuilt_from_the_pddl_equals_the_translated_one_for_every_task_type(cache, train_games,
                                                                                  one_game_per_type):
    """The translation does not change the parsed task after parsing + normalising (what a hit rebuilds)."""
    for task_type in one_game_per_type:
        domain, problem = _pddl(_game_file(train_games, one_game_per_type, task_type))
        task, _ = _translate(domain, problem, disk_cache=False)
        with preserve_argv():
            rebuilt = disk_cache.rebuild_task(domain, problem)
        assert pickle.dumps(rebuilt) == pickle.dumps(task), task_type


@pytest.mark.parametrize("damage", ["garbage", "truncated", "empty", "flipped_byte", "other_key", "appended",
                                    "directory"])
def test_a_bad_entry_is_a_miss_and_is_rewritten(cache, translations, train_games, one_game_per_type, damage):
    domain, problem = _pddl(_game_file(train_games, one_game_per_type))
    task, sas = _translate(domain, problem)
    (entry,) = cache.glob("*.sasz")
    blob = entry.read_bytes()
    if damage == "garbage":
        entry.write_bytes(b"\x00 not a cache file")
    elif damage == "truncated":
        entry.write_bytes(blob[: len(blob) // 2])
    elif damage == "empty":
        entry.write_bytes(b"")
    elif damage == "flipped_byte":
        entry.write_bytes(blob[:-10] + bytes([blob[-10] ^ 0xFF]) + blob[-9:])
    elif damage == "other_key":  # a whole, valid file under another entry's name
        entry.write_bytes(blob.replace(entry.stem.encode(), b"0" * 64, 1))
    elif damage == "appended":
        entry.write_bytes(blob + b"more")
    else:  # unreadable: a folder where the file should be; the rewrite cannot replace it either
        entry.unlink()
        entry.mkdir()
    translations.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the directory case cannot be rewritten
        again_task, again_sas = _translate(domain, problem)
    assert len(translations) == 1  # translated again
    assert again_sas == sas
    info = speedups.cache_info()
    assert info["disk_bad_entries"] == 1 and info["disk_hits"] == 0
    if damage != "directory":
        assert info["disk_writes"] == 1
        assert entry.read_bytes() == blob  # rewritten whole
        translations.clear()
        assert _translate(domain, problem)[1] == sas and translations == []


def test_off_switch_env_var_and_kwarg(cache, translations, train_games, one_game_per_type, monkeypatch):
    game = _game_file(train_games, one_game_per_type)
    domain, problem = _pddl(game)
    monkeypatch.setenv("STRATAGYM_ALFWORLD_DISK_CACHE", "0")
    _session(game)
    assert not cache.exists()  # nothing written
    monkeypatch.delenv("STRATAGYM_ALFWORLD_DISK_CACHE")
    _translate(domain, problem)  # on by default: written
    assert len(list(cache.glob("*.sasz"))) == 1
    for off in ({"disk_cache": False}, {"env": "off"}):
        if "env" in off:
            monkeypatch.setenv("STRATAGYM_ALFWORLD_DISK_CACHE", off["env"])
        speedups.clear_caches(games_only=True)
        translations.clear()
        engine = AlfredEngine(disk_cache=off.get("disk_cache"))
        try:
            engine.load(game)
        finally:
            engine.close()
        assert len(translations) == 1 and speedups.cache_info()["disk_hits"] == 0  # the entry was not read
    monkeypatch.setenv("STRATAGYM_ALFWORLD_DISK_CACHE", "maybe")
    with pytest.raises(ConfigError, match="STRATAGYM_ALFWORLD_DISK_CACHE"):
        AlfredEngine()
    engine = AlfredEngine(disk_cache=True)  # an explicit kwarg wins over the variable
    engine.close()
    assert engine.disk_cache


def test_another_translator_version_misses(cache, translations, train_games, one_game_per_type, monkeypatch):
    domain, problem = _pddl(_game_file(train_games, one_game_per_type))
    _, sas = _translate(domain, problem)
    old_key = disk_cache.key(domain, problem, False)
    monkeypatch.setattr(disk_cache, "_version", "a changed translator")
    assert disk_cache.key(domain, problem, False) != old_key
    translations.clear()
    assert _translate(domain, problem)[1] == sas
    assert len(translations) == 1
    assert len(list(cache.glob("*.sasz"))) == 2  # the old entry stays until evicted


def test_the_key_covers_the_mode_domain_and_problem(cache):
    keys = {disk_cache.key("d", "p", False), disk_cache.key("d", "p", True), disk_cache.key("d2", "p", False),
            disk_cache.key("d", "p2", False), disk_cache.key("dp", "", False), disk_cache.key("", "dp", False)}
    assert len(keys) == 6
    assert all(len(k) == 64 for k in keys)


def test_unwritable_folder_means_no_caching_and_one_warning(tmp_path, monkeypatch, translations, train_games,
                                                            one_game_per_type):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("STRATAGYM_ALFWORLD_SAS_CACHE", str(blocker / "alfworld-sas"))  # mkdir fails, as on a read-only or full disk
    monkeypatch.setattr(disk_cache, "_warned", False)
    domain, _ = _pddl(_game_file(train_games, one_game_per_type))
    problems = [_pddl(_game_file(train_games, one_game_per_type, t))[1]
                for t in ("pick_and_place_simple", "look_at_obj_in_light")]
    with pytest.warns(RuntimeWarning, match="STRATAGYM_ALFWORLD_SAS_CACHE") as record:
        for problem in problems:
            _, sas = _translate(domain, problem)
            assert sas.startswith("begin_version")
    assert len([w for w in record if "STRATAGYM_ALFWORLD_SAS_CACHE" in str(w.message)]) == 1
    assert speedups.cache_info()["disk_write_errors"] == 1  # counters are per _translate call (cleared)


def test_eviction_keeps_the_most_recently_used(cache, monkeypatch):
    cache.mkdir(parents=True)
    now = time.time()
    for i in range(20):
        p = cache / f"{i:064x}.sasz"
        p.write_bytes(b"x")
        os.utime(p, (now - 1000 + i, now - 1000 + i))
    stale, fresh = cache / "a.1.2.tmp", cache / "b.1.2.tmp"
    for p in (stale, fresh):
        p.write_bytes(b"")
    os.utime(stale, (now - 7200, now - 7200))
    monkeypatch.setenv("STRATAGYM_ALFWORLD_DISK_CACHE_MAX", "10")
    assert disk_cache.evict() == 11  # down to 90% of the cap
    left = sorted(p.name for p in cache.glob("*.sasz"))
    assert left == [f"{i:064x}.sasz" for i in range(11, 20)]
    assert not stale.exists() and fresh.exists()
    assert disk_cache.evict() == 0
    monkeypatch.setenv("STRATAGYM_ALFWORLD_DISK_CACHE_MAX", "lots")
    with pytest.raises(ConfigError, match="STRATAGYM_ALFWORLD_DISK_CACHE_MAX"):
        disk_cache.max_entries()


def test_the_folder_is_scanned_on_the_first_write_and_then_only_now_and_then(cache, monkeypatch):
    scans = []
    monkeypatch.setattr(disk_cache, "evict", lambda limit=None: scans.append(1) or 0)
    monkeypatch.setattr(disk_cache, "_writes_since_scan", -1)
    monkeypatch.setattr(disk_cache, "_version", "test")
    for i in range(disk_cache.SCAN_EVERY + 1):
        assert disk_cache.store("d", f"p{i}", False, "begin_version\n")
    assert len(scans) == 2  # the process's first write, then after SCAN_EVERY more


def test_a_new_process_reads_what_another_wrote(cache, train_games, one_game_per_type):
    """The point of the cache: a fresh interpreter (a new run, a worker) does not translate the game again."""
    game = _game_file(train_games, one_game_per_type)
    here = _session(game)  # this process translates and writes
    assert len(list(cache.glob("*.sasz"))) == 1
    script = textwrap.dedent(
        f"""
        import json, sys
        from fast_downward.translate import translate
        from stratagym.envs.alfworld import speedups
        from stratagym.envs.alfworld.engine import AlfredEngine
        engine = AlfredEngine()
        translate.pddl_to_sas = None  # running the translator would fail
        state = engine.load({str(game)!r})
        out = [(state.feedback, state.admissible_commands, state.won)]
        for i in range(6):
            state = engine.step(state.admissible_commands[(7 * i) % len(state.admissible_commands)])
            out.append((state.feedback, state.admissible_commands, state.won))
        engine.close()
        print(json.dumps({{"out": out, "info": speedups.cache_info()}}))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "STRATAGYM_ALFWORLD_SAS_CACHE": str(cache)}
    script = "import sys; sys.argv = ['translate.py', 'domain', 'task']\n" + script  # fast-downward reads argv
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["info"]["disk_hits"] == 1 and result["info"]["disk_writes"] == 0
    assert [tuple(x) for x in result["out"]] == here
