"""Rendering: markdown order, escaping, plots, and the HTML board in a real headless Chromium."""

from __future__ import annotations

import html as html_lib
import os
import shutil
import tempfile

import pytest

from stratagym.leaderboard.render import render_board
from stratagym.leaderboard.store import Leaderboard
from lb_helpers import ENV, make_record

SUBMITTED = [("steady", 0.6, "grpo"), ("champion", 0.9, "stratified"), ("<b>rookie</b>", 0.2, None), ("solid", 0.7, "rloo")]
RANK_ORDER = ["champion", "solid", "steady", "<b>rookie</b>"]


@pytest.fixture
def rendered(tmp_path):
    lb = Leaderboard(tmp_path / "board.db")
    for i, (name, rate, alg) in enumerate(SUBMITTED):
        curve = [{"step": s, "reward": rate * s / 10} for s in range(11)] if alg else None
        lb.submit(make_record(name, rate, algorithm=alg, seeds=(0, 1), training={"algorithm": alg, "curve": curve} if curve else None))
    lb.submit(make_record("other-env", 0.5, env="stratagym/DifficultyMix-v0"))
    paths = render_board(lb, tmp_path / "site")
    lb.close()
    return paths


def test_markdown_and_plots(rendered):
    md = rendered["markdown"].read_text()
    rows = [line for line in md.splitlines() if line.startswith("| ") and not line.startswith("| rank")]
    shown = {n: html_lib.escape(n, quote=False) for n, _, _ in SUBMITTED}  # Markdown escapes HTML too
    strata = [r for r in rows if any(shown[n] in r for n, _, _ in SUBMITTED)]
    assert [r.split(" | ")[1] for r in strata] == [shown[n] for n in RANK_ORDER]
    assert "<b>" not in md
    assert "## stratagym/DifficultyMix-v0" in md and "## stratagym/SearchStrata-v0" in md
    assert "0.900 [" in md  # value [CI]
    site = rendered["html"].parent
    pngs = sorted(p.name for p in (site / "plots").glob("*.png"))
    assert "training-curves.png" in pngs and len(pngs) == 3
    for p in (site / "plots").glob("*.png"):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = rendered["html"].read_text()
    assert "<b>rookie</b>" not in html and "&lt;b&gt;rookie&lt;/b&gt;" in html  # echoed text is escaped


def _chromium():
    if not (shutil.which("chromium") or os.path.exists("/usr/bin/chromium")) or not os.path.exists("/usr/bin/chromedriver"):
        pytest.skip("needs Debian chromium + chromedriver (/usr/bin/chromium, /usr/bin/chromedriver)")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        pytest.skip("selenium is not installed")
    os.environ.setdefault("SE_OFFLINE", "true")
    profile = tempfile.mkdtemp(prefix="stratagym-chrome-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    return driver, profile


@pytest.mark.browser
@pytest.mark.slow
def test_html_board_in_headless_chromium_shows_rank_order_and_sorts(rendered):
    from selenium.webdriver.common.by import By

    driver, profile = _chromium()
    try:
        driver.get(rendered["html"].resolve().as_uri())
        table = driver.find_element(By.CSS_SELECTOR, 'table[data-env="stratagym/SearchStrata-v0"]')

        def column(css: str) -> list[str]:
            return [td.text for td in table.find_elements(By.CSS_SELECTOR, f"tbody tr td.{css}")]

        assert column("agent") == RANK_ORDER  # as submitted, shown in rank order
        ranks = [tr.find_elements(By.TAG_NAME, "td")[0].text for tr in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
        assert ranks == ["1", "2", "3", "4"]
        # the vanilla-JS sort: clicking the primary metric header sorts ascending, again descending
        header = table.find_element(By.CSS_SELECTOR, 'th[data-col="success"]')
        header.click()
        assert column("agent") == RANK_ORDER[::-1]
        assert header.get_attribute("aria-sort") == "ascending"
        header.click()
        assert column("agent") == RANK_ORDER
        table.find_element(By.CSS_SELECTOR, 'th[data-col="agent"]').click()
        assert column("agent") == sorted(RANK_ORDER, key=str.lower)
        # images load (plots are real PNGs next to the page)
        imgs = driver.find_elements(By.TAG_NAME, "img")
        assert imgs and all(driver.execute_script("return arguments[0].naturalWidth", img) > 0 for img in imgs)
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
