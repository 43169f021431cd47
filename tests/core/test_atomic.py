"""stratagym.atomic: the one file and folder publish every layer uses (issue 29 item 5).

What is pinned: a reader sees the old folder or the complete new one, never a half-written one; every
file and folder of a published tree is fsynced before the rename and the parent after it; a failed
build leaves no debris and the previous folder as it was; concurrent builds of the same folder keep
the first complete copy (``keep_if``); no file handle stays open; a library that writes by path gets
a temporary name with the target's extension and the umask's permissions.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from stratagym import atomic
from stratagym.atomic import atomic_write_with, publish_dir, publish_folder


def _tree(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in sorted(root.rglob("*")) if p.is_file()}


def _write(files: dict[str, str]):
    def write(folder: Path) -> None:
        for rel, text in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)

    return write


def _open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.fixture()
def fsynced(monkeypatch) -> list[str]:
    """The real paths of everything ``os.fsync`` is called on (the real fsync still runs)."""
    seen: list[str] = []
    real = os.fsync

    def spy(fd: int) -> None:
        seen.append(os.path.realpath(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(atomic.os, "fsync", spy)
    return seen


def test_publish_dir_writes_a_new_folder_and_syncs_every_file_and_folder(tmp_path, fsynced):
    out = tmp_path / "model"
    publish_dir(out, _write({"config.json": "{}", "sub/weights.bin": "w"}))
    assert _tree(out) == {"config.json": "{}", "sub/weights.bin": "w"}
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no temporary folder left beside it
    # the files were synced under their temporary folder (then renamed): compare by name below it
    synced = {Path(p).name for p in fsynced}
    assert {"config.json", "weights.bin", "sub"} <= synced
    assert str(tmp_path) in fsynced  # the parent, after the rename
    assert fsynced.index(str(tmp_path)) == len(fsynced) - 1


def test_publish_dir_replaces_an_older_folder_only_once_the_new_one_is_complete(tmp_path):
    out = tmp_path / "index"
    publish_dir(out, _write({"a.txt": "old"}))
    seen_during: list[dict[str, str]] = []

    def write(folder: Path) -> None:
        seen_during.append(_tree(out))  # a reader during the build sees the old folder, whole
        _write({"b.txt": "new"})(folder)

    publish_dir(out, write)
    assert seen_during == [{"a.txt": "old"}]
    assert _tree(out) == {"b.txt": "new"}
    assert [p.name for p in tmp_path.iterdir()] == ["index"]  # the renamed-aside old folder is gone


def test_a_failed_build_leaves_the_previous_folder_and_no_debris(tmp_path):
    out = tmp_path / "ckpt"
    publish_dir(out, _write({"a.txt": "old"}))

    def broken(folder: Path) -> None:
        (folder / "half.bin").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        publish_dir(out, broken)
    assert _tree(out) == {"a.txt": "old"}
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_a_failed_rename_puts_the_previous_folder_back(tmp_path):
    out = tmp_path / "index"
    publish_dir(out, _write({"a.txt": "old"}))
    with pytest.raises(FileNotFoundError):
        publish_folder(tmp_path / "never-built", out)
    assert _tree(out) == {"a.txt": "old"}
    assert [p.name for p in tmp_path.iterdir()] == ["index"]


def test_keep_if_keeps_a_complete_copy_and_replaces_debris(tmp_path):
    complete = lambda folder: (folder / "config.json").exists()  # noqa: E731
    out = tmp_path / "tiny"
    out.mkdir()
    (out / "partial.bin").write_text("debris")
    publish_dir(out, _write({"config.json": "first"}), keep_if=complete)
    assert _tree(out) == {"config.json": "first"}  # debris replaced
    publish_dir(out, _write({"config.json": "second"}), keep_if=complete)
    assert _tree(out) == {"config.json": "first"}  # a complete copy stays
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]


def _other_process_first(monkeypatch, out: Path, text: str) -> None:
    """Make another process's complete copy of ``out`` appear just before this process renames its own
    in (the real ``os.replace`` then runs, and fails: ``out`` is a folder that is not empty)."""
    real_replace = os.replace

    def replace(src, dst):
        if Path(dst) == out and not out.exists():
            out.mkdir()
            (out / "COMPLETE").write_text(text)
        return real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)


def test_keep_if_when_another_process_renames_its_copy_in_first(tmp_path, monkeypatch):
    """The race concurrent builds run: ``out`` is absent when this process looks, and another process's
    complete copy is renamed in just before this one's rename. The other copy stays; this one's
    temporary folder is removed. Without ``keep_if`` the same race is an error, not an overwrite."""
    out = tmp_path / "games"
    _other_process_first(monkeypatch, out, "theirs")
    publish_dir(out, _write({"COMPLETE": "ours"}), keep_if=lambda f: (f / "COMPLETE").is_file())
    assert _tree(out) == {"COMPLETE": "theirs"}
    assert [p.name for p in tmp_path.iterdir()] == ["games"]

    other = tmp_path / "other"
    _other_process_first(monkeypatch, other, "theirs")
    with pytest.raises(OSError):
        publish_dir(other, _write({"COMPLETE": "ours"}))
    assert _tree(other) == {"COMPLETE": "theirs"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["games", "other"]


def test_publish_dir_replaces_a_symlink_and_follows_the_umask(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    out = tmp_path / "link"
    out.symlink_to(target)
    old = os.umask(0o022)
    try:
        publish_dir(out, _write({"f": "x"}))
    finally:
        os.umask(old)
    assert out.is_dir() and not out.is_symlink()
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert target.is_dir()  # the link's target is not touched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["elsewhere", "link"]


def test_atomic_write_with_keeps_the_extension_syncs_and_cleans_up(tmp_path, fsynced):
    seen: list[str] = []

    def savefig(tmp: Path) -> None:  # like matplotlib: the format comes from the name
        seen.append(tmp.name)
        assert tmp.parent == tmp_path and tmp.suffix == ".png" and tmp.name.startswith(".plot.png.")
        tmp.write_bytes(b"\x89PNG")

    old = os.umask(0o022)
    try:
        path = atomic_write_with(tmp_path / "plot.png", savefig)
    finally:
        os.umask(old)
    assert path.read_bytes() == b"\x89PNG"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # created by the writer, as it always was
    assert fsynced[-1] == str(tmp_path) and any(Path(p).name == seen[0] for p in fsynced[:-1])
    with pytest.raises(ValueError):
        atomic_write_with(tmp_path / "plot.png", lambda tmp: (tmp.write_bytes(b"half"), int("x")))
    assert path.read_bytes() == b"\x89PNG"
    assert [p.name for p in tmp_path.iterdir()] == ["plot.png"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_write_follows_the_umask(tmp_path, umask, mode):
    """A record or transcript archive others read was written 0600 (mkstemp's private mode) whatever the umask."""
    old = os.umask(umask)
    try:
        first = atomic.write_json_atomic(tmp_path / "record.json", {"a": 1})
        os.chmod(first, 0o600)
        again = atomic.atomic_write(tmp_path / "record.json", "{}\n")  # a rewrite takes the umask's mode again
        lines = atomic.atomic_write_lines(tmp_path / "t.jsonl.gz", [b"x", b"y"])
    finally:
        os.umask(old)
    assert [stat.S_IMODE(p.stat().st_mode) for p in (again, lines)] == [mode, mode]
    assert again.read_text() == "{}\n" and lines.read_bytes() == b"xy"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["record.json", "t.jsonl.gz"]


def test_a_library_that_writes_private_files_gets_the_umasks_mode(tmp_path):
    """safetensors' save_file writes its file 0600 (measured 2026-12-07); through atomic_write_with it gets the
    umask's mode, as every committed checkpoint must be readable by others."""
    import torch
    from safetensors.torch import save_file

    old = os.umask(0o022)
    try:
        path = atomic_write_with(tmp_path / "model.safetensors", lambda p: save_file({"w": torch.zeros(2)}, str(p)))
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_a_model_folder_published_from_save_pretrained_is_readable_by_others(tmp_path):
    """transformers' save_pretrained writes model.safetensors through safetensors, private (0600): the from-scratch
    base models (training/sft.py) and `models import` folders were owner-only. publish_dir gives them the umask's mode,
    and leaves what the writer chose for other files."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))

    def write(d: Path) -> None:
        model.save_pretrained(d)
        (d / "secret.txt").write_text("x")
        os.chmod(d / "secret.txt", 0o600)

    old = os.umask(0o022)
    try:
        out = publish_dir(tmp_path / "base", write)
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()}
    assert modes == {"config.json": 0o644, "generation_config.json": 0o644, "model.safetensors": 0o644,
                     "secret.txt": 0o600}


def test_a_name_at_the_file_system_limit_is_written_by_every_publish(tmp_path):
    # a 255-byte name fits the file system; its temporary name must too (a leaderboard record named
    # after a long env slug once failed on its temporary file after the transcripts were written)
    long = "é" + "r" * 244 + ".json"  # 2 + 244 + 5 = 251 bytes
    assert len(long.encode()) <= 255
    atomic.write_json_atomic(tmp_path / long, {"a": 1})
    atomic_write_with(tmp_path / ("w" * 250 + ".png"), lambda tmp: tmp.write_bytes(b"x"))
    publish_dir(tmp_path / ("d" * 255), _write({"a": "x"}))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([long, "w" * 250 + ".png", "d" * 255])
    assert (tmp_path / long).read_text() == '{\n "a": 1\n}\n'


def test_no_handle_stays_open(tmp_path):
    before = _open_fds()
    for i in range(5):
        publish_dir(tmp_path / "d", _write({"a": str(i), "b/c": "x"}))
        atomic_write_with(tmp_path / "f.bin", lambda p: p.write_bytes(b"x"))
        publish_dir(tmp_path / "k", _write({"a": "x"}), keep_if=lambda f: True)
    assert _open_fds() == before


def test_every_hand_rolled_publish_is_gone():
    """No module but stratagym.atomic renames files or folders into place itself (``os.replace``,
    ``os.rename``, ``Path.replace`` / ``Path.rename``): each publish goes through the helpers above."""
    import re

    import stratagym

    root = Path(stratagym.__file__).parent
    pattern = re.compile(r"\bos\.(replace|rename)\(|\b(tmp|staging|buf|work)\w*\.(replace|rename)\(")
    offenders = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "atomic.py" and path.parent == root:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if pattern.search(code) and "``" not in code:
                offenders.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    assert offenders == []
