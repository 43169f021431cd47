"""Committed transcripts: content-addressed archives that records name (``stratagym leaderboard attach``),
checked against their records, within the size budget, and rendered by the site from the repository alone.

The committed board is checked too: every archive a record names exists, hashes to its name and belongs to
its record; no archive is orphaned; ``leaderboard/`` stays under its 50 MB budget."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stratagym.cli import _load_plugins, app
from stratagym.eval.harness import EvalConfig, evaluate, progress_path
from stratagym.eval.records import load_record, record_id
from stratagym.eval.transcript_archive import (ArchiveError, archive_name, archived_transcripts, build_archive,
                                               check_archive, read_archive, write_archive)
from stratagym.eval.transcripts import find_transcripts, read_transcripts, record_identity_hash
from stratagym.leaderboard.render import NO_TRANSCRIPTS, transcripts_cell
from stratagym.leaderboard.site import record_page_name

ROOT = Path(__file__).resolve().parents[2]
BOARD = ROOT / "leaderboard"

_load_plugins()  # the command groups (leaderboard, ...) register on load, as `stratagym` does


def _cli(*args: str) -> subprocess.CompletedProcess:
    """``stratagym ARGS`` in a fresh process: user errors print one line and exit 2 only through ``main``."""
    return subprocess.run([sys.executable, "-c", "from stratagym.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def real_eval(tmp_path_factory):
    """A real eval (scripted oracle on SearchStrata, 2 seeds x 3 tasks) and its progress file's transcripts."""
    root = tmp_path_factory.mktemp("eval")
    out = root / "runs" / "oracle.json"
    record = evaluate(EvalConfig(agent="scripted:oracle", env_id="stratagym/SearchStrata-v0", n=3, seeds=[0, 1]),
                      out=out, progress=False)
    _, transcripts = read_transcripts(progress_path(out))
    return out, record, transcripts


def test_an_archive_holds_every_turn_and_is_named_by_its_uncompressed_content(real_eval, tmp_path):
    _, record, transcripts = real_eval
    ref = write_archive(record, transcripts, tmp_path)
    assert ref["episodes"] == ref["of"] == 6 and ref["schema"] == "stratagym.transcripts/1"
    path = tmp_path / archive_name(ref["sha256"])
    assert hashlib.sha256(gzip.decompress(path.read_bytes())).hexdigest() == ref["sha256"]
    header, rows = read_archive(tmp_path, ref)
    assert header == {"schema": "stratagym.transcripts/1", "record_id": record["record_id"], "episodes": 6, "of": 6}
    # the record's episode order, each with its outcome exactly as the record keeps it
    assert [r["episode"] for r in rows] == record["episodes"]
    assert check_archive({**record, "transcripts": ref}, tmp_path) == transcripts
    # writing it again is a no-op with the same name (deterministic content)
    assert write_archive(record, transcripts, tmp_path) == ref and len(list(tmp_path.iterdir())) == 1


def test_attaching_keeps_the_record_id(real_eval):
    _, record, _ = real_eval
    attached = {**record, "transcripts": {"schema": "stratagym.transcripts/1", "sha256": "0" * 64, "episodes": 1, "of": 1}}
    assert record_id(attached) == record["record_id"]
    assert transcripts_cell(record) == NO_TRANSCRIPTS and transcripts_cell(attached) == "1/6"


def test_the_budget_keeps_the_first_episodes_of_every_seed(real_eval):
    _, record, transcripts = real_eval
    full, _ = build_archive(record, transcripts)
    one_each, _ = build_archive(record, transcripts, budget_bytes=10**9)
    assert full == one_each
    # a budget between the size of 2 and 3 episodes per seed keeps 2 per seed
    sizes = {}
    for k in (1, 2, 3):
        keep = {key for s in (0, 1) for key in [(s, t) for t in ("q000", "q001", "q002")[:k]]}
        sizes[k] = len(gzip.compress(build_archive(record, {key: v for key, v in transcripts.items() if key in keep})[0], mtime=0))
    data, ref = build_archive(record, transcripts, budget_bytes=(sizes[2] + sizes[3]) // 2)
    assert (ref["episodes"], ref["of"]) == (4, 6)
    kept = [(r["seed"], r["task_id"]) for r in map(json.loads, data.splitlines()[1:])]
    assert kept == [(0, "q000"), (0, "q001"), (1, "q000"), (1, "q001")]
    with pytest.raises(ArchiveError, match="budget"):
        build_archive(record, transcripts, budget_bytes=10)


def test_a_tampered_or_foreign_archive_is_refused(real_eval, tmp_path):
    _, record, transcripts = real_eval
    ref = write_archive(record, transcripts, tmp_path)
    rec = {**record, "transcripts": ref}
    path = tmp_path / archive_name(ref["sha256"])
    good = path.read_bytes()
    # one character of one observation changed, recompressed: the content no longer hashes to the name
    text = gzip.decompress(good).replace(b"Question q000", b"Question q00X", 1)
    path.write_bytes(gzip.compress(text, mtime=0))
    with pytest.raises(ArchiveError, match="does not hash to its name"):
        check_archive(rec, tmp_path)
    path.write_bytes(b"not gzip")
    with pytest.raises(ArchiveError, match="not gzip"):
        check_archive(rec, tmp_path)
    path.unlink()
    with pytest.raises(ArchiveError, match="missing"):
        check_archive(rec, tmp_path)
    path.write_bytes(good)
    # the record's outcome edited after attaching: the archive's episode no longer matches
    edited = json.loads(json.dumps(rec))
    edited["episodes"][0]["total_reward"] = 0.5
    with pytest.raises(ArchiveError, match="differs from record"):
        check_archive(edited, tmp_path)
    # an archive of another record
    other = {**rec, "record_id": "f" * 64}
    with pytest.raises(ArchiveError, match="belongs to record"):
        check_archive(other, tmp_path)
    with pytest.raises(ArchiveError, match="no valid sha256"):
        check_archive({**record, "transcripts": {"sha256": "../../etc/passwd"}}, tmp_path)
    with pytest.raises(ArchiveError, match="none of record"):
        build_archive(record, {})


def test_attach_cli_then_the_site_renders_from_the_committed_files_alone(real_eval, tmp_path):
    out, record, _ = real_eval
    repo = tmp_path / "repo"
    (repo / "records").mkdir(parents=True)
    rec_path = repo / "records" / "oracle.json"
    shutil.copy(out, rec_path)
    progress = tmp_path / "oracle.json.progress.jsonl.gz"  # gzipped, as committed progress files are
    progress.write_bytes(gzip.compress(progress_path(out).read_bytes()))
    runner = CliRunner()
    res = runner.invoke(app, ["leaderboard", "attach", str(rec_path), "--progress", str(progress),
                              "--archives", str(repo / "transcripts")])
    assert res.exit_code == 0, res.output
    assert "attached 6 of 6" in res.output
    attached = load_record(rec_path)
    assert attached["record_id"] == record["record_id"] and attached["transcripts"]["episodes"] == 6
    # the progress file is gone: the site reads the archive beside the records folder
    progress.unlink()
    res = runner.invoke(app, ["leaderboard", "site", str(tmp_path / "site"), "--records", str(repo / "records")])
    assert res.exit_code == 0, res.output
    assert "6 episode(s) with a transcript" in res.output
    page = (tmp_path / "site" / "records" / record_page_name(record["record_id"])).read_text()
    assert "Question q000:" in page and page.count('class="turn"') == 24  # 6 episodes x 4 turns
    index = (tmp_path / "site" / "index.html").read_text()
    assert '<td class="t transcripts">6/6</td>' in index
    # a record whose archive was deleted: the site refuses with the fix, not a traceback
    next((repo / "transcripts").iterdir()).unlink()
    res = _cli("leaderboard", "site", str(tmp_path / "site2"), "--records", str(repo / "records"))
    assert res.returncode == 2 and "restore it from git" in res.stderr and "Traceback" not in res.stderr


def test_attach_refuses_a_progress_file_of_another_eval(real_eval, tmp_path):
    out, _, _ = real_eval
    rec_path = tmp_path / "r.json"
    shutil.copy(out, rec_path)
    other = tmp_path / "other"
    other.mkdir()
    res = CliRunner().invoke(app, ["leaderboard", "attach", str(rec_path), "--progress", str(other),
                                   "--archives", str(tmp_path / "a")])
    assert res.exit_code == 1 and "not attached" in res.output and "progress file of the eval" in res.output
    assert "transcripts" not in load_record(rec_path)
    res = _cli("leaderboard", "attach", str(rec_path), "--progress", str(tmp_path / "nope"))
    assert res.returncode == 2 and "does not exist" in res.stderr and "Traceback" not in res.stderr


# ---- the committed board ----------------------------------------------------------------------------


def _committed_records() -> list[dict]:
    return [load_record(p) for p in sorted((BOARD / "records").glob("*.json"))]


def test_every_committed_archive_belongs_to_its_record_and_none_is_orphaned():
    records = _committed_records()
    found = archived_transcripts(records, BOARD / "transcripts")  # raises on any mismatch
    named = {r["transcripts"]["sha256"] for r in records if "transcripts" in r}
    on_disk = {p.name for p in (BOARD / "transcripts").glob("*")} if (BOARD / "transcripts").is_dir() else set()
    assert on_disk == {archive_name(h) for h in named}
    assert len(found) == len(named) >= 6  # the WebShop rows and the third-hop row, at least


def test_the_committed_board_stays_within_its_size_budget():
    total = sum(p.stat().st_size for p in BOARD.rglob("*") if p.is_file())
    assert total < 50_000_000, f"leaderboard/ holds {total / 1e6:.1f} MB; docs/leaderboard.md says what to drop"


def test_a_file_of_the_same_identity_but_another_run_is_never_mixed_in(real_eval, tmp_path):
    """Evals hashed their identity without the compute dtype before 2026-12-02, so a bf16 and an fp32 eval
    of one checkpoint wrote progress files with one identity: a record takes only the file whose outcomes
    are its own."""
    out, record, transcripts = real_eval
    lines = progress_path(out).read_text().splitlines()
    other = []
    for line in lines:  # the same header, one episode's outcome changed: another run's file
        row = json.loads(line)
        if row.get("type") == "episode" and row["key"] == [0, "q001"]:
            row["episode"] = {**row["episode"], "total_reward": 0.0}
            row["steps"][0]["text"] = "ANOTHER RUN"
        other.append(json.dumps(row, sort_keys=True))
    (tmp_path / "a.progress.jsonl").write_text("\n".join(other) + "\n")  # sorts first: would win if accepted
    shutil.copy(progress_path(out), tmp_path / "b.progress.jsonl")
    found = find_transcripts([tmp_path], [record])
    assert found[record["record_id"]] == transcripts
    assert "ANOTHER RUN" not in json.dumps(list(found[record["record_id"]].values()))


def test_the_identity_holds_the_compute_dtype_unless_float32(real_eval):
    _, record, _ = real_eval
    fp32 = {**record, "agent": {**record["agent"], "dtype": "float32"}}
    bf16 = {**record, "agent": {**record["agent"], "dtype": "bfloat16"}}
    assert record_identity_hash(fp32) == record_identity_hash(record) == record_identity_hash(bf16, legacy=True)
    assert record_identity_hash(bf16) != record_identity_hash(record)


def test_attach_copies_a_search_dependence_block_only_from_a_rerun_of_the_same_evaluation(real_eval, tmp_path):
    out, record, _ = real_eval
    rec_path = tmp_path / "r.json"
    shutil.copy(out, rec_path)
    block = {"metric": "em", "real": {"value": 1.0}, "ablations": {}, "drop": {}}
    (tmp_path / "again.json").write_text(json.dumps({**record, "search_dependence": block}))
    other = json.loads(json.dumps(record))
    other["episodes"][0]["total_reward"] = 0.0  # another run: another record id
    other["record_id"] = record_id(other)
    (tmp_path / "other.json").write_text(json.dumps({**other, "search_dependence": block}))
    res = CliRunner().invoke(app, ["leaderboard", "attach", str(rec_path), "--rerun", str(tmp_path / "other.json")])
    assert res.exit_code == 1 and "no search dependence" in res.output and "search_dependence" not in load_record(rec_path)
    res = CliRunner().invoke(app, ["leaderboard", "attach", str(rec_path), "--rerun", str(tmp_path / "again.json")])
    assert res.exit_code == 0, res.output
    attached = load_record(rec_path)
    assert attached["search_dependence"] == block and attached["record_id"] == record["record_id"] == record_id(attached)


def test_a_rerun_on_newer_code_that_only_adds_fields_is_the_same_evaluation(real_eval, tmp_path):
    """Records written before ``prompt_cuts`` existed: a rerun whose episodes add that field but agree on
    every field the record holds gives it transcripts and its search-dependence block."""
    out, record, transcripts = real_eval
    rows = [json.loads(line) for line in progress_path(out).read_text().splitlines()]
    for row in rows:
        if row.get("type") == "episode":
            row["episode"]["prompt_cuts"] = 0
    (tmp_path / "new.progress.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert find_transcripts([tmp_path], [record])[record["record_id"]] == transcripts
    newer = json.loads(json.dumps(record))
    for ep in newer["episodes"]:
        ep["prompt_cuts"] = 0
    newer["record_id"] = record_id(newer)
    newer["search_dependence"] = {"metric": "em", "ablations": {}, "drop": {}}
    (tmp_path / "newer.json").write_text(json.dumps(newer))
    rec_path = tmp_path / "r.json"
    shutil.copy(out, rec_path)
    res = CliRunner().invoke(app, ["leaderboard", "attach", str(rec_path), "--rerun", str(tmp_path / "newer.json")])
    assert res.exit_code == 0, res.output
    assert load_record(rec_path)["search_dependence"] == newer["search_dependence"]
