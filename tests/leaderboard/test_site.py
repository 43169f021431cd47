"""The static site (``stratagym leaderboard site``): board tables, record pages with episodes and their
transcripts, escaping of hostile text, determinism, and a real headless Chromium reading it from file://."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from stratagym.eval.harness import EvalConfig, evaluate, progress_path, read_progress
from stratagym.eval.transcripts import find_transcripts, read_transcripts, record_identity_hash
from stratagym.leaderboard.site import MARKER, SiteError, build_site, record_page_name
from stratagym.leaderboard.store import Leaderboard
from lb_helpers import make_record
from test_render import _chromium

#: Text that breaks HTML where it is not escaped: a script, a cell closer, quotes, an entity.
HOSTILE = "<script>window.__pwned=1</script></td>\"'&amp; <img src=x onerror=\"window.__pwned=2\">"


@pytest.fixture(scope="module")
def real_eval(tmp_path_factory):
    """A real eval (scripted oracle on SearchStrata, 3 tasks) whose progress file keeps its transcripts."""
    root = tmp_path_factory.mktemp("eval")
    out = root / "runs" / "oracle.json"
    record = evaluate(EvalConfig(agent="scripted:oracle", env_id="stratagym/SearchStrata-v0", n=3), out=out, progress=False)
    return root, out, record


def test_eval_keeps_each_turn_in_the_progress_file_and_the_record_unchanged(real_eval):
    root, out, record = real_eval
    header, rows = read_progress(progress_path(out))
    assert header["identity_hash"] == record_identity_hash(record)  # the record alone names its eval
    assert [r["episode"] for r in rows] == record["episodes"]  # outcomes as the record keeps them
    assert "steps" not in json.dumps(record["episodes"])  # the record holds no transcript
    identity, transcripts = read_transcripts(progress_path(out))
    first = transcripts[(0, "q000")]
    # the oracle searches three times, then answers: 4 turns, the first observation states the question
    assert [s["step"] for s in first["steps"]] == [0, 1, 2, 3]
    assert first["steps"][0]["observation"].startswith("Question q000:")
    assert first["steps"][0]["action"].startswith("search[") and first["steps"][-1]["reward"] == 1.0
    assert [s["search_count"] for s in first["steps"]] == [1, 2, 3, 3]
    assert first["final_observation"] == "You answered sofia: correct."
    # each observation after the first is the env's answer to the turn before
    assert all(s["observation"] for s in first["steps"])
    assert "state_hash" not in first["steps"][0]["info"]


def test_site_of_a_real_eval_shows_its_turns(real_eval, tmp_path):
    root, out, record = real_eval
    lb = Leaderboard(tmp_path / "b.db")
    lb.submit(record)
    found = find_transcripts([root], lb.records())  # matched by identity, wherever the files sit
    assert set(found) == {record["record_id"]} and len(found[record["record_id"]]) == 3
    result = build_site(lb, tmp_path / "site", transcripts=found)
    lb.close()
    assert result["records"] == 1 and result["transcribed_episodes"] == 3
    page = (tmp_path / "site" / "records" / record_page_name(record["record_id"])).read_text()
    assert "Question q000:" in page and "You answered sofia: correct." in page
    assert page.count('class="turn"') == 12  # 3 episodes x 4 turns
    # searches per turn: all 3 episodes search at turns 0-2 (full bar, 330 px) and answer at turn 3 (none)
    import re

    chart = page[page.index("Searches per turn"):]
    searched = dict(re.findall(r'>turn (\d)</text><rect x="170.0" y="\d+" width="([\d.]+)"', chart))
    assert searched == {"0": "330.0", "1": "330.0", "2": "330.0", "3": "0.0"}
    index = (tmp_path / "site" / "index.html").read_text()
    assert f'href="records/{record_page_name(record["record_id"])}"' in index


def test_a_record_without_a_progress_file_lists_its_episodes_without_turns(real_eval, tmp_path):
    _, _, record = real_eval
    lb = Leaderboard(tmp_path / "b.db")
    lb.submit(record)
    assert find_transcripts([tmp_path], lb.records()) == {}
    build_site(lb, tmp_path / "site")
    lb.close()
    page = (tmp_path / "site" / "records" / record_page_name(record["record_id"])).read_text()
    assert page.count('class="episode"') == 3 and page.count("no-transcript") == 3 and 'class="turn"' not in page


def _hostile_records() -> list[dict]:
    """A record with hostile text in its label, algorithm, a task id and outcomes, and a plain one."""
    from stratagym.eval.records import finalize_record

    rec = make_record(HOSTILE, [True, False, True], algorithm="<b>alg</b>\"&")
    rec["episodes"][1]["task_id"] = HOSTILE
    rec["episodes"][0]["extra"] = {"task_type": HOSTILE, "answer": HOSTILE}
    rec["episodes"][2]["extra"] = {"task_type": "plain"}
    rec["episodes"][1]["extra"] = {"task_type": "plain"}
    rec.pop("record_id")
    return [finalize_record(rec), make_record("other", 0.5)]


def _hostile_board(tmp_path: Path, records: list[dict] | None = None) -> tuple[Path, dict, dict]:
    """The site of a board of :func:`_hostile_records`, with a hostile transcript for one episode."""
    records = records or _hostile_records()
    rec = records[0]
    lb = Leaderboard(tmp_path / "b.db")
    for r in records:
        lb.submit(r)
    steps = [{"step": 0, "observation": HOSTILE, "text": HOSTILE + " model", "action": HOSTILE, "reward": 0.0,
              "action_valid": False, "format_ok": False, "search_count": 0, "info": {HOSTILE: HOSTILE}},
             {"step": 1, "observation": "second", "text": "answer[x]", "action": "answer[x]", "reward": 1.0,
              "action_valid": True, "format_ok": True, "search_count": 0, "info": {}}]
    transcripts = {rec["record_id"]: {(0, "t0"): {"steps": steps, "final_observation": HOSTILE}}}
    build_site(lb, tmp_path / "site", transcripts=transcripts)
    lb.close()
    return tmp_path / "site", rec, transcripts


def test_hostile_text_is_escaped_everywhere(tmp_path):
    site, rec, _ = _hostile_board(tmp_path)
    for page in [site / "index.html", *sorted((site / "records").glob("*.html"))]:
        text = page.read_text()
        assert "<script>window" not in text and "<img" not in text and "</td>\"" not in text, page
        assert text.count("<script>") == 1  # the page's own script, nothing else
    page = (site / "records" / record_page_name(rec["record_id"])).read_text()
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;&lt;/td&gt;&quot;&#x27;&amp;amp;" in page
    assert 'data-type="&lt;script&gt;' in page  # attribute values escaped too


def test_same_input_same_bytes_and_only_a_site_is_replaced(tmp_path):
    records = _hostile_records()
    a, _, transcripts = _hostile_board(tmp_path / "a", records)
    b, _, _ = _hostile_board(tmp_path / "b", records)
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    assert files_a == sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert all((a / f).read_bytes() == (b / f).read_bytes() for f in files_a)
    assert (a / MARKER).is_file()
    # an earlier site is replaced whole (a stale page goes); any other folder is refused, untouched
    (a / "records" / "stale.html").write_text("old")
    lb = Leaderboard(tmp_path / "a" / "b.db")
    build_site(lb, a, transcripts=transcripts)
    assert not (a / "records" / "stale.html").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(SiteError, match="not a stratagym site"):
        build_site(lb, mine)
    lb.close()
    assert (mine / "notes.txt").read_text() == "keep me"


def test_cli_site_from_records_and_transcripts_and_its_errors(real_eval, tmp_path, capsys):
    from stratagym.cli import main

    root, out, record = real_eval
    records = tmp_path / "records"
    records.mkdir()
    shutil.copy(out, records / "renamed.json")  # bench copies records under other names
    with pytest.raises(SystemExit) as done:
        main(["leaderboard", "site", str(tmp_path / "site"), "--records", str(records), "--transcripts", str(root)])
    assert done.value.code == 0
    assert "1 record page(s), 3 episode(s) with a transcript" in capsys.readouterr().out
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("x")
    for argv, says in ((["--records", str(records), "--transcripts", str(tmp_path / "nope")], "is not a folder"),
                       (["--records", str(tmp_path / "empty")], "no record files"),
                       ):
        with pytest.raises(SystemExit) as bad:
            main(["leaderboard", "site", str(tmp_path / "site2"), *argv])
        err = capsys.readouterr().err
        assert bad.value.code == 2 and says in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit) as bad:
        main(["leaderboard", "site", str(tmp_path / "other"), "--records", str(records)])
    err = capsys.readouterr().err
    assert bad.value.code == 2 and "not a stratagym site" in err


@pytest.mark.browser
@pytest.mark.slow
def test_site_in_headless_chromium_escapes_filters_and_opens_turns(tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    site, rec, _ = _hostile_board(tmp_path)
    driver, profile = _chromium()
    try:
        driver.get((site / "index.html").resolve().as_uri())
        assert driver.execute_script("return window.__pwned === undefined")
        agents = [td.text for td in driver.find_elements(By.CSS_SELECTOR, "table.board tbody td.agent")]
        assert sorted(agents) == sorted([HOSTILE, "other"])  # shown literally (3 vs 10 tasks: two tables)
        # the narrow tables have 7 columns; the rest opens on a click
        assert {len(t.find_elements(By.CSS_SELECTOR, "thead th")) for t in driver.find_elements(By.CSS_SELECTOR, "table.board")} == {8}
        wide = driver.find_elements(By.CSS_SELECTOR, "details.more table")[0]
        assert not wide.is_displayed()
        driver.find_elements(By.CSS_SELECTOR, "details.more > summary")[0].click()
        assert wide.is_displayed()
        # follow the hostile record's link to its page
        link = [a for a in driver.find_elements(By.CSS_SELECTOR, "a.record-link") if a.text == rec["record_id"][:12]][0]
        link.click()
        assert driver.current_url.endswith(record_page_name(rec["record_id"]))
        assert driver.execute_script("return window.__pwned === undefined")
        assert HOSTILE in driver.find_element(By.TAG_NAME, "h1").text
        episodes = driver.find_elements(By.CSS_SELECTOR, "details.episode")
        assert len(episodes) == 3

        def shown() -> list[bool]:
            return [e.is_displayed() for e in episodes]

        Select(driver.find_element(By.ID, "f-won")).select_by_value("0")  # failed only: the hostile task id
        assert shown() == [False, True, False] and driver.find_element(By.ID, "f-count").text == "1"
        Select(driver.find_element(By.ID, "f-won")).select_by_value("")
        Select(driver.find_element(By.ID, "f-type")).select_by_value("plain")
        assert shown() == [False, True, True]
        Select(driver.find_element(By.ID, "f-type")).select_by_value("")
        driver.find_element(By.ID, "f-task").send_keys("t2")
        assert shown() == [False, False, True]
        driver.find_element(By.ID, "f-task").clear()
        driver.execute_script("arguments[0].dispatchEvent(new Event('input'))", driver.find_element(By.ID, "f-task"))
        assert all(shown())
        # the first episode opens to its turns; hostile observation and model text read literally
        episodes[0].find_element(By.TAG_NAME, "summary").click()
        obs = episodes[0].find_elements(By.CSS_SELECTOR, "pre.obs")
        assert [o.text for o in obs] == [HOSTILE, "second"]
        assert episodes[0].find_element(By.CSS_SELECTOR, "pre.text").text == HOSTILE + " model"
        assert episodes[0].find_element(By.CSS_SELECTOR, "pre.final").text == HOSTILE
        assert driver.execute_script("return window.__pwned === undefined")
        assert driver.execute_script("return document.querySelectorAll('svg.chart').length") >= 1
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
