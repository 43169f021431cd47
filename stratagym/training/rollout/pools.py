"""Env pools: where the envs of a rollout live (this process, worker processes, or Ray actors).

Every pool answers ``reset(jobs)`` and ``step(jobs)`` with one result per job: the env's tuple, or the
exception that job raised. Failures are contained: an env that raises, or a worker that dies, fails only
the jobs it hosted.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from typing import Any, Optional, Sequence

from stratagym.errors import ConfigError

__all__ = ["InProcessPool", "SubprocessPool", "RayPool", "WorkerCrashed", "make_pool"]

Result = Any  # a tuple from reset/step, or a BaseException for a failed call


def _make_env(env_id: str, env_kwargs: dict[str, Any]) -> Any:
    import gymnasium as gym

    # the stratagym ids are registered: the stratagym package, imported before this module, registered them
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


class _EnvHost:
    """The body of a Ray env actor: hosts a dict of envs keyed by slot, like a subprocess worker.

    Every method answers ``("ok", value)`` or ``("error", text)``: an env that raises fails only its own
    job and leaves the actor (and the other envs it hosts) running. Only the actor's death raises on the
    driver (``RayActorError``), which fails every job the actor held.
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], niceness: Optional[int] = None):
        self.env_id, self.env_kwargs = env_id, env_kwargs
        self.envs: dict[int, Any] = {}
        # Ray starts its workers at niceness 15 (its ``worker_niceness``), so that the driver and Ray's
        # daemons win the CPU. An env actor is the rollout's work, not a background task: at nice 15 it
        # gets a few percent of a core next to any nice-0 process it is scheduled against (the same
        # session under Linux's autogroup, everything without it). Measured with 2 busy nice-0 processes
        # in the driver's session: ALFWorld through 2 actors at nice 15, 7-13 steps/s; at nice 0, 40-57.
        # Come back to the driver's niceness where permitted (root, CAP_SYS_NICE, RLIMIT_NICE).
        if niceness is not None and os.getpriority(os.PRIO_PROCESS, 0) > niceness:
            try:
                os.setpriority(os.PRIO_PROCESS, 0, niceness)
            except OSError:
                pass

    def pid(self) -> int:
        return os.getpid()

    def niceness(self) -> int:
        """This actor's scheduling niceness (the tests check it matches the driver's)."""
        return os.getpriority(os.PRIO_PROCESS, 0)

    def _call(self, fn: Any) -> tuple[str, Any]:
        try:
            return "ok", fn()
        except Exception as exc:
            return "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}"

    def task_ids(self) -> tuple[str, Any]:
        def run() -> list[str]:
            if -1 not in self.envs:
                self.envs[-1] = _make_env(self.env_id, self.env_kwargs)
            return list(self.envs[-1].unwrapped.task_ids())

        return self._call(run)

    def reset(self, slot: int, seed: Any, options: dict[str, Any]) -> tuple[str, Any]:
        def run() -> Any:
            if slot not in self.envs:
                self.envs[slot] = _make_env(self.env_id, self.env_kwargs)
            return self.envs[slot].reset(seed=seed, options=options)

        return self._call(run)

    def step(self, slot: int, action: str) -> tuple[str, Any]:
        return self._call(lambda: self.envs[slot].step(action))

    # One call per actor per turn, covering all the slots it hosts: a Ray call costs about a millisecond
    # of scheduling and serialisation, as much as a step of a fast text env.
    def reset_many(self, jobs: list[tuple[int, Any, dict[str, Any]]]) -> list[tuple[str, Any]]:
        return [self.reset(slot, seed, options) for slot, seed, options in jobs]

    def step_many(self, jobs: list[tuple[int, str]]) -> list[tuple[str, Any]]:
        return [self.step(slot, action) for slot, action in jobs]

    def close(self) -> None:
        for env in self.envs.values():
            try:
                env.close()
            except Exception:
                pass
        self.envs = {}


# When a pool started the Ray runtime (ray.init), every pool opened on that runtime is listed here and
# the last one to close shuts it down (a trainer's train and eval pools share it). A runtime that was
# already up (a test fixture, the user's own ray.init) is never shut down by a pool.
_RAY_STARTED_BY_POOL = False
_RAY_POOLS: set[int] = set()


class RayPool:
    """Envs in ``num_workers`` Ray actors (slot s lives in actor ``s % num_workers``), local or on a cluster.

    The same contract as :class:`SubprocessPool`: commands go to every actor before any reply is awaited
    (an actor runs one caller's calls in submission order, so each env sees its own commands in order);
    an actor that dies fails only the trajectories it hosts, and is recreated at the next reset.

    ``address`` goes to ``ray.init`` when no Ray runtime is up in this process: ``None`` follows Ray's own
    lookup (``RAY_ADDRESS``, then the latest ``ray start`` on this machine, else a new local instance),
    ``"auto"`` requires an existing cluster, ``"local"`` always starts a private one. Each actor reserves
    ``num_cpus_per_worker`` CPUs of the cluster for its lifetime, so ``num_workers`` actors need that many
    free; a call that gets no answer within ``timeout`` seconds fails like a dead actor. Actors run at
    the driver's niceness, not the 15 Ray gives its workers (a runtime the pool starts is told so; in a
    joined one each actor lowers its own where permitted): at nice 15 any nice-0 process starves them.

    Optional: needs ``pip install 'stratagym[dist]'``.
    """

    def __init__(self, env_id: str, env_kwargs: dict[str, Any] | None = None, *, num_workers: int = 2,
                 address: Optional[str] = None, num_cpus_per_worker: float = 1.0, timeout: float = 600.0):
        if num_workers < 1:
            raise ConfigError(f"num_workers must be >= 1, got {num_workers}")
        try:
            import ray
        except ImportError as exc:
            raise ConfigError("rollout.workers: ray needs Ray: pip install 'stratagym[dist]' (or use 'subprocess')") from exc
        global _RAY_STARTED_BY_POOL
        self.ray = ray
        self._niceness = os.getpriority(os.PRIO_PROCESS, 0)
        if not ray.is_initialized():
            # A runtime this pool starts spawns its workers at the driver's niceness, not Ray's default
            # 15 (see _EnvHost.__init__); this needs no privilege. The raylet reads it at start.
            own_env = "RAY_worker_niceness" not in os.environ
            if own_env:
                os.environ["RAY_worker_niceness"] = str(self._niceness)
            try:
                ray.init(address=address, include_dashboard=False)
            except ConnectionError as exc:
                raise ConfigError(f"rollout.ray_address {address!r}: no Ray cluster to connect to ({exc}); "
                                  "start one with `ray start --head`, or leave ray_address unset") from None
            finally:
                if own_env:
                    os.environ.pop("RAY_worker_niceness", None)
            _RAY_STARTED_BY_POOL = True
        if _RAY_STARTED_BY_POOL:
            _RAY_POOLS.add(id(self))
        self._actor_cls = ray.remote(num_cpus=num_cpus_per_worker)(_EnvHost)
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})
        self.num_workers, self.timeout = int(num_workers), float(timeout)
        self.workers: list[Optional[Any]] = [None] * self.num_workers

    def _worker(self, w: int) -> Any:
        if self.workers[w] is None:
            self.workers[w] = self._actor_cls.remote(self.env_id, self.env_kwargs, self._niceness)
        return self.workers[w]

    def actors(self) -> list[Optional[Any]]:
        """The live actor handles by worker index (``None`` where one died and is not yet recreated)."""
        return list(self.workers)

    def pids(self) -> list[Optional[int]]:
        """Process ids of the actors (the tests kill one to check that only its trajectories fail)."""
        return [None if a is None else self.ray.get(a.pid.remote(), timeout=self.timeout) for a in self.workers]

    def _roundtrip(self, method: str, jobs: Sequence[tuple], respawn: bool) -> list[Result]:
        """Send each actor ONE ``method`` call with the jobs of its slots (all actors before any reply is
        awaited), then split the answers back into job order. An actor that died fails all its jobs."""
        by_worker: dict[int, list[int]] = {}
        for i, job in enumerate(jobs):
            by_worker.setdefault(int(job[0]) % self.num_workers, []).append(i)
        refs: dict[int, Any] = {}
        for w, idx in by_worker.items():
            actor = self._worker(w) if respawn else self.workers[w]
            refs[w] = None if actor is None else getattr(actor, method).remote([tuple(jobs[i]) for i in idx])
        out: list[Result] = [None] * len(jobs)
        for w, idx in by_worker.items():
            if refs[w] is None:
                for i in idx:
                    out[i] = WorkerCrashed(f"ray env actor {w} died earlier in this rollout")
                continue
            try:
                answers = self.ray.get(refs[w], timeout=self.timeout)
                for i, (status, value) in zip(idx, answers):
                    out[i] = value if status == "ok" else WorkerCrashed(value)
            except Exception as exc:  # RayActorError (the actor died), GetTimeoutError, ...
                self._drop(w)
                for i in idx:
                    out[i] = WorkerCrashed(f"ray env actor {w} failed: {type(exc).__name__}: {exc}")
        return out

    def _drop(self, w: int) -> None:
        actor = self.workers[w]
        if actor is not None:
            try:
                self.ray.kill(actor)
            except Exception:
                pass
        self.workers[w] = None

    def task_ids(self) -> list[str]:
        try:
            status, value = self.ray.get(self._worker(0).task_ids.remote(), timeout=self.timeout)
        except Exception as exc:
            self._drop(0)
            status, value = "error", f"{type(exc).__name__}: {exc}"
        if status != "ok":
            raise ConfigError(f"could not build env {self.env_id!r} in a Ray actor: {value}")
        return value

    def reset(self, jobs: Sequence[tuple[int, int, dict[str, Any]]]) -> list[Result]:
        return self._roundtrip("reset_many", jobs, respawn=True)

    def step(self, jobs: Sequence[tuple[int, str]]) -> list[Result]:
        return self._roundtrip("step_many", jobs, respawn=False)

    def close(self) -> None:
        closing = [a.close.remote() for a in self.workers if a is not None]
        try:
            self.ray.wait(closing, num_returns=len(closing), timeout=10)
        except Exception:
            pass
        dying = [a for a in self.workers if a is not None]
        for w in range(self.num_workers):
            self._drop(w)
        for actor in dying:  # ray.kill is asynchronous: wait until Ray reports each actor dead
            try:
                self.ray.get(actor.pid.remote(), timeout=10)
            except Exception:
                pass
        global _RAY_STARTED_BY_POOL
        if id(self) in _RAY_POOLS:
            _RAY_POOLS.discard(id(self))
            if not _RAY_POOLS:
                _RAY_STARTED_BY_POOL = False
                if self.ray.is_initialized():
                    self.ray.shutdown()


def make_pool(env_id: str, env_kwargs: dict[str, Any] | None = None, *, workers: str = "inprocess",
              num_workers: int = 2, start_method: str = "spawn", ray_address: Optional[str] = None) -> Any:
    """``workers``: ``inprocess`` | ``subprocess`` | ``ray`` (``ray_address`` is Ray's ``ray.init`` address)."""
    if workers == "inprocess":
        return InProcessPool(env_id, env_kwargs)
    if workers == "subprocess":
        return SubprocessPool(env_id, env_kwargs, num_workers=num_workers, start_method=start_method)
    if workers == "ray":
        return RayPool(env_id, env_kwargs, num_workers=num_workers, address=ray_address)
    raise ConfigError(f"rollout.workers must be 'inprocess', 'subprocess' or 'ray', got {workers!r}")
