"""Env pools: where the envs of a rollout live (this process, worker processes, or Ray actors).

Every pool answers ``reset(jobs)`` and ``step(jobs)`` with one result per job: the env's tuple, or the
exception that job raised. Failures are contained: an env that raises, or a worker that dies, fails only
the jobs it hosted.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback
from typing import Any, Optional, Sequence

from stratagym.errors import ConfigError

__all__ = ["InProcessPool", "SubprocessPool", "RayPool", "WorkerCrashed", "make_pool"]

Result = Any  # a tuple from reset/step, or a BaseException for a failed call


def _make_env(env_id: str, env_kwargs: dict[str, Any]) -> Any:
    import gymnasium as gym

    import stratagym  # noqa: F401  (registers the envs)

    return gym.make(env_id, **env_kwargs)


class InProcessPool:
    """Envs in this process, stepped one after another (cheap envs, tests, debugging)."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None):
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        self.envs: list[Any] = []

    @classmethod
    def from_envs(cls, envs: Sequence[Any]) -> "InProcessPool":
        """A pool over envs the caller already made (it grows no further: at most ``len(envs)`` live
        episodes at a time). The caller keeps ownership: :meth:`close` does not close them."""
        pool = cls(getattr(getattr(envs[0], "spec", None), "id", "") or "", {})
        pool.envs = list(envs)
        pool._borrowed = True
        return pool

    _borrowed = False

    def ensure(self, n: int) -> None:
        if self._borrowed and n > len(self.envs):
            raise ValueError(f"this pool holds {len(self.envs)} envs; it cannot host {n} episodes at once")
        while len(self.envs) < n:
            self.envs.append(_make_env(self.env_id, self.env_kwargs))

    def task_ids(self) -> list[str]:
        self.ensure(1)
        return list(self.envs[0].unwrapped.task_ids())

    def reset(self, jobs: Sequence[tuple[int, int, dict[str, Any]]]) -> list[Result]:
        self.ensure(max((j[0] for j in jobs), default=-1) + 1)
        out: list[Result] = []
        for slot, seed, options in jobs:
            try:
                out.append(self.envs[slot].reset(seed=seed, options=options))
            except Exception as exc:  # contained: the trajectory is marked failed
                out.append(exc)
        return out

    def step(self, jobs: Sequence[tuple[int, str]]) -> list[Result]:
        out: list[Result] = []
        for slot, action in jobs:
            try:
                out.append(self.envs[slot].step(action))
            except Exception as exc:
                out.append(exc)
        return out

    def close(self) -> None:
        if not self._borrowed:
            for env in self.envs:
                try:
                    env.close()
                except Exception:
                    pass
        self.envs = []


def _worker_main(conn: Any, env_id: str, env_kwargs: dict[str, Any]) -> None:
    """Subprocess loop: hosts a dict of envs keyed by slot; answers one message per command."""
    envs: dict[int, Any] = {}
    while True:
        try:
            msg = conn.recv()
        except (EOFError, KeyboardInterrupt):
            break
        cmd = msg[0]
        try:
            if cmd == "close":
                for env in envs.values():
                    env.close()
                conn.send(("ok", None))
                break
            if cmd == "task_ids":
                env = envs.get(-1) or _make_env(env_id, env_kwargs)
                envs[-1] = env
                conn.send(("ok", list(env.unwrapped.task_ids())))
            elif cmd == "reset":
                _, slot, seed, options = msg
                if slot not in envs:
                    envs[slot] = _make_env(env_id, env_kwargs)
                conn.send(("ok", envs[slot].reset(seed=seed, options=options)))
            elif cmd == "step":
                _, slot, action = msg
                conn.send(("ok", envs[slot].step(action)))
            else:
                conn.send(("error", f"unknown command {cmd!r}"))
        except Exception as exc:
            conn.send(("error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"))


class WorkerCrashed(RuntimeError):
    """The env worker process died (or raised) while serving a trajectory."""


class SubprocessPool:
    """Envs in ``num_workers`` processes (slot s lives in worker ``s % num_workers``).

    Like gymnasium's ``AsyncVectorEnv`` (commands go to all workers first, then replies are collected,
    so slow env steps overlap), but each env gets its own reset arguments (task id, seed) and a worker
    that dies only fails the trajectories it hosts: it is restarted at the next reset.
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, *, num_workers: int = 2,
                 start_method: str = "spawn", timeout: float = 600.0):
        if num_workers < 1:
            raise ConfigError(f"num_workers must be >= 1, got {num_workers}")
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        self.ctx = mp.get_context(start_method)
        self.num_workers = num_workers
        self.timeout = timeout
        self.workers: list[Optional[tuple[Any, Any]]] = [None] * num_workers

    def _worker(self, w: int) -> tuple[Any, Any]:
        cur = self.workers[w]
        if cur is None or not cur[0].is_alive():
            if cur is not None:
                try:
                    cur[1].close()
                except Exception:
                    pass
            parent, child = self.ctx.Pipe()
            proc = self.ctx.Process(target=_worker_main, args=(child, self.env_id, self.env_kwargs), daemon=True)
            proc.start()
            child.close()
            self.workers[w] = (proc, parent)
        return self.workers[w]  # type: ignore[return-value]

    def pids(self) -> list[Optional[int]]:
        return [w[0].pid if w is not None else None for w in self.workers]

    def _roundtrip(self, msgs: Sequence[tuple[int, tuple]], respawn: bool) -> list[Result]:
        sent: list[Optional[Any]] = []
        for w, msg in msgs:
            try:
                cur = self._worker(w) if respawn else self.workers[w]
                if cur is None:
                    raise WorkerCrashed(f"env worker {w} died earlier in this rollout")
                proc, conn = cur
                if not proc.is_alive():
                    raise WorkerCrashed(f"env worker {w} (pid {proc.pid}) is not running")
                conn.send(msg)
                sent.append(conn)
            except Exception as exc:
                sent.append(exc)
        out: list[Result] = []
        for (w, _), conn in zip(msgs, sent):
            if isinstance(conn, BaseException):
                out.append(conn)
                continue
            try:
                if not conn.poll(self.timeout):
                    raise WorkerCrashed(f"env worker {w} did not answer within {self.timeout}s")
                status, value = conn.recv()
                out.append(value if status == "ok" else WorkerCrashed(value))
            except (EOFError, OSError, WorkerCrashed) as exc:
                self._kill(w)
                out.append(exc if isinstance(exc, WorkerCrashed) else WorkerCrashed(f"env worker {w} died: {exc!r}"))
        return out

    def _kill(self, w: int) -> None:
        cur = self.workers[w]
        if cur is not None:
            proc, conn = cur
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=5)
            try:
                conn.close()
            except Exception:
                pass
        self.workers[w] = None

    def task_ids(self) -> list[str]:
        (res,) = self._roundtrip([(0, ("task_ids",))], respawn=True)
        if isinstance(res, BaseException):
            raise ConfigError(f"could not build env {self.env_id!r} in a worker process: {res}")
        return res

    def reset(self, jobs: Sequence[tuple[int, int, dict[str, Any]]]) -> list[Result]:
        return self._roundtrip([(s % self.num_workers, ("reset", s, seed, opt)) for s, seed, opt in jobs], respawn=True)

    def step(self, jobs: Sequence[tuple[int, str]]) -> list[Result]:
        # one message per worker at a time would serialise; instead each worker gets its slots' commands
        # in order and answers them in order (a pipe is FIFO), so all workers run concurrently.
        return self._roundtrip([(s % self.num_workers, ("step", s, a)) for s, a in jobs], respawn=False)

    def close(self) -> None:
        for w, cur in enumerate(self.workers):
            if cur is None:
                continue
            proc, conn = cur
            try:
                if proc.is_alive():
                    conn.send(("close",))
                    conn.poll(5) and conn.recv()
            except Exception:
                pass
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
            self.workers[w] = None


class RayPool:
    """Envs as Ray actors (one per slot); a dead actor fails its trajectory and is recreated at reset.

    Optional: needs ``pip install 'stratagym[ray]'``.
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, *, num_cpus_per_env: float = 1.0):
        try:
            import ray
        except ImportError as exc:
            raise ConfigError("rollout.workers: ray needs Ray: pip install 'stratagym[ray]' (or use 'subprocess')") from exc
        self.ray = ray
        if not ray.is_initialized():
            ray.init(ignore_reinit_error=True, include_dashboard=False)

        @ray.remote(num_cpus=num_cpus_per_env)
        class _EnvActor:
            def __init__(self, env_id: str, env_kwargs: dict[str, Any]):
                self.env = _make_env(env_id, env_kwargs)

            def task_ids(self) -> list[str]:
                return list(self.env.unwrapped.task_ids())

            def reset(self, seed: int, options: dict[str, Any]) -> Any:
                return self.env.reset(seed=seed, options=options)

            def step(self, action: str) -> Any:
                return self.env.step(action)

        self._actor_cls = _EnvActor
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        self.actors: dict[int, Any] = {}

    def _actor(self, slot: int) -> Any:
        if slot not in self.actors:
            self.actors[slot] = self._actor_cls.remote(self.env_id, self.env_kwargs)
        return self.actors[slot]

    def _gather(self, slots: Sequence[int], refs: Sequence[Any]) -> list[Result]:
        out: list[Result] = []
        for slot, ref in zip(slots, refs):
            try:
                out.append(self.ray.get(ref))
            except Exception as exc:  # RayActorError, RayTaskError...
                self.actors.pop(slot, None)
                out.append(WorkerCrashed(f"ray env actor for slot {slot} failed: {exc}"))
        return out

    def task_ids(self) -> list[str]:
        return self.ray.get(self._actor(0).task_ids.remote())

    def reset(self, jobs: Sequence[tuple[int, int, dict[str, Any]]]) -> list[Result]:
        refs = [self._actor(s).reset.remote(seed, opt) for s, seed, opt in jobs]
        return self._gather([j[0] for j in jobs], refs)

    def step(self, jobs: Sequence[tuple[int, str]]) -> list[Result]:
        refs = []
        for s, a in jobs:
            actor = self.actors.get(s)
            refs.append(actor.step.remote(a) if actor is not None else None)
        out: list[Result] = []
        for (s, _), ref in zip(jobs, refs):
            out.extend([WorkerCrashed(f"no actor for slot {s}")] if ref is None else self._gather([s], [ref]))
        return out

    def close(self) -> None:
        for actor in self.actors.values():
            try:
                self.ray.kill(actor)
            except Exception:
                pass
        self.actors = {}


def make_pool(env_id: str, env_kwargs: dict[str, Any] | None = None, *, workers: str = "inprocess",
              num_workers: int = 2, start_method: str = "spawn") -> Any:
    """``workers``: ``inprocess`` | ``subprocess`` | ``ray``."""
    if workers == "inprocess":
        return InProcessPool(env_id, env_kwargs)
    if workers == "subprocess":
        return SubprocessPool(env_id, env_kwargs, num_workers=num_workers, start_method=start_method)
    if workers == "ray":
        return RayPool(env_id, env_kwargs)
    raise ConfigError(f"rollout.workers must be 'inprocess', 'subprocess' or 'ray', got {workers!r}")
