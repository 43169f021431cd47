"""Pre-registration of an LLM study: the prediction, metric, seeds, test and threshold, fixed before any run.

An LLM study (:mod:`stratagym.studies.llm`) names its pre-registration file, and the runner refuses to
start without it: the file must exist, be complete, agree with the study (seeds, step budget, split,
number of questions, metric, arms), ask for at least 3 seeds and an unseen split, and -- so that it
demonstrably predates the runs -- be committed to git, unchanged since the commit that first added it
(:func:`git_proof`; the runner records that commit). Withdrawing a registration (a ``# WITHDRAWN`` comment
block added before or after its text, nothing else changed) ends it: runs refuse it. A file, in ``suites/studies/prereg/<study>.yaml``::

    study: stratified-smollm2-hops       # the study it registers
    registered: "2026-11-28"             # when (the git commit is the proof; this is for readers)
    claim: what the paper says
    prediction: what we expect here and why (from the testbed check), in words
    hypotheses:                          # each: arm vs baseline, in the direction the paper claims
      - {arm: Stratified GRPO, baseline: GRPO, direction: greater}
    metric: em                           # per-episode metric of the eval records (em, won, ...)
    split: test_unseen                   # an unseen split: the name must contain "unseen", or ...
    no_unseen_split: ""                  # ... why the env has none (optional; then split is "default")
    n_questions: 200                     # the first N tasks of the split, every run the same
    seeds: [0, 1, 2]                     # >= 3, paired across arms
    steps: 30                            # training steps per run (the step budget)
    test: permutation                    # permutation (sign-flip over questions) or mcnemar
    alpha: 0.05
    min_effect: 0.03                     # the smallest difference that counts as the claimed effect
    diagnostics: [adv/stratum/1/mean]    # metrics.jsonl keys the report must show, whatever the outcome

The verdict per hypothesis is :func:`stratagym.eval.paired.decide` with these values.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from stratagym.errors import ConfigError

__all__ = ["Hypothesis", "Preregistration", "PreregistrationError", "load_preregistration", "git_proof", "TESTS",
           "WITHDRAWAL_MARK"]

#: The paired tests a pre-registration may name (:class:`stratagym.eval.paired.PairedComparison.p`).
TESTS = ("permutation", "mcnemar")
MIN_SEEDS = 3


class PreregistrationError(ConfigError):
    """The pre-registration is missing, incomplete, inconsistent with its study, or not committed."""


@dataclass(frozen=True)
class Hypothesis:
    """``arm`` differs from ``baseline`` in ``direction`` (``greater`` or ``less``) on the metric."""

    arm: str
    baseline: str
    direction: str


@dataclass(frozen=True)
class Preregistration:
    """A checked pre-registration file (see the module docstring for each field)."""

    path: str
    study: str
    registered: str
    claim: str
    prediction: str
    hypotheses: tuple[Hypothesis, ...]
    metric: str
    split: str
    n_questions: int
    seeds: tuple[int, ...]
    steps: int
    test: str
    alpha: float
    min_effect: float
    diagnostics: tuple[str, ...]
    sha256: str
    no_unseen_split: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["hypotheses"] = [asdict(h) for h in self.hypotheses]
        return d


_TEXT = ("study", "registered", "claim", "prediction", "metric", "split")


def _fail(path: Path, msg: str) -> None:
    raise PreregistrationError(f"pre-registration {path}: {msg}")


def load_preregistration(path: str | os.PathLike[str]) -> Preregistration:
    """Read and check one pre-registration file on its own (the study's consistency is checked by the
    runner); a missing file is refused with the fix."""
    import yaml

    p = Path(path)
    if not p.is_file():
        raise PreregistrationError(
            f"no pre-registration file {p}: an LLM study runs only after its prediction, metric, seeds, test and "
            "threshold are written there and committed (see stratagym/studies/preregistration.py)")
    raw = p.read_bytes()
    try:
        data = yaml.safe_load(raw.decode("utf-8"))
    except (UnicodeDecodeError, yaml.YAMLError) as exc:
        _fail(p, f"not valid UTF-8 YAML: {exc}")
    if not isinstance(data, dict):
        _fail(p, "must be a mapping (see stratagym/studies/preregistration.py)")
    fields = set(_TEXT) | {"hypotheses", "n_questions", "seeds", "steps", "test", "alpha", "min_effect", "diagnostics"}
    unknown = sorted(set(map(str, data)) - fields - {"no_unseen_split"})
    if unknown:
        _fail(p, f"unknown key(s) {', '.join(unknown)}; keys: {', '.join(sorted(fields))}")
    missing = sorted(fields - set(data))
    if missing:
        _fail(p, f"missing {', '.join(missing)}: a pre-registration states every one before the runs")
    for key in _TEXT:
        if not isinstance(data[key], str) or not data[key].strip():
            _fail(p, f"{key} must be a non-empty string, got {data[key]!r}")
    why = data.get("no_unseen_split", "")
    if not isinstance(why, str):
        _fail(p, f"no_unseen_split must be a string, got {why!r}")
    if "unseen" not in data["split"] and not why.strip():
        _fail(p, f"split {data['split']!r} is not an unseen split: claims are measured on tasks training never saw "
                 "(test_unseen for SearchQA, valid_unseen for ALFWorld); for an env without one, say why in "
                 "no_unseen_split")
    seeds = data["seeds"]
    if not (isinstance(seeds, list) and all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
            and len(set(seeds)) == len(seeds)):
        _fail(p, f"seeds must be a list of distinct integers, got {seeds!r}")
    if len(seeds) < MIN_SEEDS:
        _fail(p, f"{len(seeds)} seed(s); a paired comparison across seeds needs at least {MIN_SEEDS}")
    for key in ("n_questions", "steps"):
        v = data[key]
        if not (isinstance(v, int) and not isinstance(v, bool) and v >= 1):
            _fail(p, f"{key} must be a positive integer, got {v!r}")
    if data["test"] not in TESTS:
        _fail(p, f"test must be one of {', '.join(TESTS)}, got {data['test']!r}")
    alpha, eff = data["alpha"], data["min_effect"]
    if not (isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and 0 < alpha < 1):
        _fail(p, f"alpha must be in (0, 1), got {alpha!r}")
    if not (isinstance(eff, (int, float)) and not isinstance(eff, bool) and eff > 0):
        _fail(p, f"min_effect must be a positive number, got {eff!r}")
    diags = data["diagnostics"]
    if not (isinstance(diags, list) and all(isinstance(d, str) and d for d in diags)):
        _fail(p, f"diagnostics must be a list of metrics.jsonl keys, got {diags!r}")
    hyps = data["hypotheses"]
    if not isinstance(hyps, list) or not hyps:
        _fail(p, "hypotheses must be a non-empty list of {arm, baseline, direction}")
    hypotheses = []
    for i, h in enumerate(hyps):
        if not (isinstance(h, dict) and set(h) == {"arm", "baseline", "direction"}
                and all(isinstance(h[k], str) and h[k] for k in h)):
            _fail(p, f"hypotheses[{i}] must be {{arm, baseline, direction}} strings, got {h!r}")
        if h["direction"] not in ("greater", "less"):
            _fail(p, f"hypotheses[{i}].direction must be greater or less, got {h['direction']!r}")
        if h["arm"] == h["baseline"]:
            _fail(p, f"hypotheses[{i}] compares {h['arm']!r} with itself")
        hypotheses.append(Hypothesis(h["arm"], h["baseline"], h["direction"]))
    return Preregistration(
        path=str(p), study=data["study"], registered=data["registered"], claim=data["claim"].strip(),
        prediction=data["prediction"].strip(), hypotheses=tuple(hypotheses), metric=data["metric"], split=data["split"],
        n_questions=data["n_questions"], seeds=tuple(seeds), steps=data["steps"], test=data["test"],
        alpha=float(alpha), min_effect=float(eff), diagnostics=tuple(diags), sha256=hashlib.sha256(raw).hexdigest(),
        no_unseen_split=why.strip())


#: The first line of a withdrawal block: comment lines added to a registration after its first commit (before or
#: after the registered text) that say why it was withdrawn. Nothing else may change.
WITHDRAWAL_MARK = "# WITHDRAWN"


def git_proof(path: str | os.PathLike[str]) -> dict[str, str]:
    """The commit that first added ``path``, which fixes it: ``{"commit", "date"}``.

    A registration counts from its first commit, and its text must be unchanged since: re-committing an
    edited file after the runs would otherwise pass (a check of the last commit accepts it). Refused: a
    file not in a git checkout, never committed, with uncommitted changes, changed since its first commit,
    or withdrawn (the registered text plus a comment block beginning ``# WITHDRAWN``, the one change
    allowed, which ends the registration: register anew in a new file)."""
    p = Path(path).resolve()

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(p.parent), *args], capture_output=True, text=True, check=False)

    top = git("rev-parse", "--show-toplevel")
    if top.returncode != 0:
        raise PreregistrationError(f"pre-registration {path} is not in a git checkout, so nothing shows it was written "
                                   "before the runs; commit it in the project's repository first")
    status = git("status", "--porcelain", "--", p.name)
    if status.stdout.strip():
        raise PreregistrationError(f"pre-registration {path} has uncommitted changes ({status.stdout.strip()[:2].strip()}); "
                                   f"commit it before the runs: git add {path} && git commit -m ... -- {path}")
    # every commit that touched the file (following renames), oldest last, with the path it had then
    log = git("log", "--follow", "--format=%x00%H %cI", "--name-only", "--", p.name)
    entries = [e.split() for e in log.stdout.split("\x00") if e.strip()] if log.returncode == 0 else []
    if not entries:
        raise PreregistrationError(f"pre-registration {path} was never committed; commit it before the runs")
    commit, date, first_path = entries[-1][0], entries[-1][1], entries[-1][-1]
    registered = subprocess.run(["git", "-C", top.stdout.strip(), "show", f"{commit}:{first_path}"],
                                capture_output=True, check=False).stdout
    problem = _change_since_registration(registered.decode("utf-8", "replace"), p.read_text(encoding="utf-8"))
    if problem:
        raise PreregistrationError(f"pre-registration {path} {problem} since its first commit {commit[:12]} ({date}); "
                                   "a registration is fixed when first committed: withdraw it (a '# WITHDRAWN ...' "
                                   "comment block, nothing else changed) and register anew in a new file")
    return {"commit": commit, "date": date}


def _change_since_registration(registered: str, now: str) -> str | None:
    """None when ``now`` is the registered text; else what changed: ``"was withdrawn"`` (the registered text
    with a withdrawal block before or after it) or ``"was changed"``."""
    if now == registered:
        return None
    added = now.replace(registered, "", 1) if registered and registered in now else None
    if added is not None and (now.startswith(registered) or now.endswith(registered)):
        lines = [ln for ln in added.splitlines() if ln.strip()]
        if lines and lines[0].startswith(WITHDRAWAL_MARK) and all(ln.lstrip().startswith("#") for ln in lines):
            return "was withdrawn"
    return "was changed"
