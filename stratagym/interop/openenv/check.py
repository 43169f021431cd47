"""Contract, fuzz, determinism and soak checks pointed at any OpenEnv server (issue 30 item 5).

The same checks stratagym runs on its own envs (gymnasium's ``check_env``, hostile agent text,
same seed and task -> same start), through ``stratagym/OpenEnv-v0``; and a soak: thousands of resets and
steps over concurrent sessions while the server's resident memory, threads and open files are sampled
(from ``/proc/<pid>`` when the server runs on this machine and its pid is given). A resource that keeps
growing after the warm-up is reported as a leak by name: an env server that leaked one env per episode
killed a 2.5-hour training run in AgentGym's WebShop.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from stratagym.envs.core import INFO_KEYS
from stratagym.interop.openenv.client_env import OpenEnvTextEnv

__all__ = ["FUZZ_TEXT", "CheckResult", "check_server", "check_envs", "soak", "soak_envs", "SoakReport",
           "process_resources"]

#: The agent-text corpus the registry-wide env tests use, plus bidi and zero-width characters.
FUZZ_TEXT: tuple[str, ...] = ("", "x" * 100_000, "\x00\x01\x1b[31m\x7f", "\ud83d broken \udc00",
                              "<script>alert('x')</script><b>&amp;", "click[" * 50, '{"text": 1}', "\u202e\u200b")


@dataclass
class CheckResult:
    name: str
    ok: bool
    detail: str = ""


def _env(base_url: str, tasks: Sequence[Mapping[str, Any] | str] | None, **kwargs: Any) -> Any:
    return OpenEnvTextEnv(base_url=base_url, tasks=tasks, **kwargs)


def check_server(base_url: str, tasks: Sequence[Mapping[str, Any] | str] | None = None, **env_kwargs: Any) -> list[CheckResult]:
    """Run the contract checks against the server at ``base_url``; one result per check, never raising."""
    return check_envs(lambda: _env(base_url, tasks, **env_kwargs))


def check_envs(make_env: Callable[[], Any]) -> list[CheckResult]:
    """The contract, fuzz and determinism checks on envs built by ``make_env`` (a stratagym ``TextEnv`` over
    something else: an OpenEnv server, a GEM env); one result per check, never raising."""
    from gymnasium.utils.env_checker import check_env

    results: list[CheckResult] = []

    def run(name: str, fn: Any) -> None:
        try:
            detail = fn() or ""
            results.append(CheckResult(name, True, detail))
        except Exception as exc:  # report every check, then let the caller fail
            results.append(CheckResult(name, False, f"{type(exc).__name__}: {exc}"[:500]))

    def contract() -> str:
        env = make_env()
        try:
            check_env(env, skip_render_check=True)
        finally:
            env.close()
        return "gymnasium check_env passed"

    def fuzz() -> str:
        env = make_env()
        try:
            env.reset(seed=0)
            for text in FUZZ_TEXT:
                obs, reward, term, trunc, info = env.step(text)
                if not isinstance(obs, str) or not set(INFO_KEYS) <= set(info):
                    raise AssertionError(f"step({text[:20]!r}...) broke the contract")
                if term or trunc:
                    env.reset(seed=0)
        finally:
            env.close()
        return f"{len(FUZZ_TEXT)} hostile actions answered with observations"

    def determinism() -> str:
        a, b = make_env(), make_env()
        try:
            task = a.task_ids()[0]
            first = [e.reset(seed=7, options={"task_id": task}) for e in (a, b)]
            if first[0] != first[1]:
                raise AssertionError(f"two sessions reset with task {task!r}, seed 7 start differently")
        finally:
            a.close()
            b.close()
        return "two sessions, same task and seed: same observation and info"

    run("contract", contract)
    run("fuzz", fuzz)
    run("determinism", determinism)
    return results


def process_resources(pid: int) -> dict[str, float]:
    """Resident memory (MiB), threads and open files of process ``pid`` (Linux ``/proc``)."""
    status = open(f"/proc/{pid}/status", encoding="utf-8").read().splitlines()
    values = dict(line.split(":", 1) for line in status if ":" in line)
    return {"rss_mib": int(values["VmRSS"].split()[0]) / 1024, "threads": int(values["Threads"]),
            "open_files": len(os.listdir(f"/proc/{pid}/fd"))}


@dataclass
class SoakReport:
    resets: int = 0
    steps: int = 0
    failures: int = 0
    seconds: float = 0.0
    samples: list[dict[str, float]] = field(default_factory=list)  # server resources over time
    leaks: list[str] = field(default_factory=list)  # "open_files grew 12 -> 212 after the warm-up"
    errors: list[str] = field(default_factory=list)

    @property
    def peak(self) -> dict[str, float]:
        return {k: max(s[k] for s in self.samples) for k in self.samples[0]} if self.samples else {}


def soak(base_url: str, tasks: Sequence[Mapping[str, Any] | str] | None = None, *, episodes: int = 1000,
         sessions: int = 4, max_steps: int = 20, server_pid: int | None = None, **env_kwargs: Any) -> SoakReport:
    """Play ``episodes`` over ``sessions`` concurrent sessions (random admissible actions, else ``"look"``),
    sampling the server's resources; growth after the first fifth of the run is named as a leak."""
    return soak_envs(lambda: _env(base_url, tasks, max_steps=max_steps, **env_kwargs), episodes=episodes,
                     sessions=sessions, max_steps=max_steps, pid=server_pid)


def soak_envs(make_env: Callable[[], Any], *, episodes: int = 1000, sessions: int = 4, max_steps: int = 20,
              pid: int | None = None) -> SoakReport:
    """:func:`soak` over envs built by ``make_env``, one per concurrent session (a thread each), sampling the
    resources of process ``pid`` (the server, or this process for in-process envs such as GEM's). An env
    with no admissible actions but a ``random_action(rng)`` method plays those, else ``"look"``."""
    import numpy as np

    report = SoakReport()
    lock = threading.Lock()
    todo = list(range(episodes))
    total = episodes

    # Samples every `stride` episodes (taken by the worker that starts that episode) as well as every 0.2 s:
    # a fast env can play the whole run between two timed samples, which would leave no sample after the
    # warm-up to compare, whatever it leaked.
    stride = max(1, episodes // 20)

    def take_sample() -> None:  # the caller holds the lock
        report.samples.append({"done": float(total - len(todo)), **process_resources(pid)})

    def sample() -> None:
        if pid is not None:
            with lock:
                take_sample()

    def worker(index: int) -> None:
        env = make_env()
        rng = np.random.default_rng(index)
        sampler = getattr(env, "random_action", None)
        try:
            while True:
                with lock:
                    if not todo:
                        return
                    episode = todo.pop()
                    if pid is not None and (total - len(todo)) % stride == 0:
                        take_sample()
                try:
                    _, info = env.reset(seed=episode)
                    with lock:
                        report.resets += 1
                    for _ in range(max_steps):
                        actions = info.get("admissible_actions") or ([sampler(rng)] if sampler else ["look"])
                        _, _, term, trunc, info = env.step(actions[int(rng.integers(len(actions)))])
                        with lock:
                            report.steps += 1
                        if term or trunc:
                            break
                except Exception as exc:
                    with lock:
                        report.failures += 1
                        if len(report.errors) < 5:
                            report.errors.append(str(exc)[:300])
        finally:
            env.close()

    start = time.perf_counter()
    sample()
    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(sessions)]
    for t in threads:
        t.start()
    while any(t.is_alive() for t in threads):
        time.sleep(0.2)
        sample()
    for t in threads:
        t.join()
    time.sleep(0.5)  # let the server close the last sessions
    sample()
    report.seconds = time.perf_counter() - start
    report.leaks = _leaks(report.samples, episodes)
    return report


def _leaks(samples: list[dict[str, float]], episodes: int) -> list[str]:
    """Resources that grow with the episodes played after the warm-up (a fifth of the run)."""
    after = [s for s in samples if s["done"] >= episodes / 5]
    if len(after) < 2:
        return []
    first, last = after[0], after[-1]
    played = max(1.0, last["done"] - first["done"])
    leaks = []
    for key, slack in (("open_files", 8), ("threads", 8), ("rss_mib", 64.0)):
        grew = last[key] - first[key]
        if grew > slack and grew > 0.05 * played:
            leaks.append(f"{key} grew {first[key]:.0f} -> {last[key]:.0f} over {played:.0f} episodes after the warm-up")
    return leaks
