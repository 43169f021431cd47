"""Training configuration: TRL-style dataclasses, read from YAML recipes with ``yaml.safe_load``.

A recipe has one section per dataclass::

    name: grpo-tiny-searchqa
    policy:    {model: build/tiny-models/..., max_new_tokens: 48, memory_k: 2}   # LLMConfig
    env:       {id: stratagym/SearchQA-v0, kwargs: {max_steps: 4}}
    rollout:   {group_size: 4, tasks_per_step: 2, workers: inprocess}
    algorithm: {estimator: stratified+hadw, estimator_kwargs: {alpha: 0.6}, invalid_action_penalty: 0.1}
    loss:      {clip_low: 0.2, kl_coef: 0.001, agg: token-mean}
    optim:     {lr: 1.0e-6, max_grad_norm: 1.0, micro_batch_size: 8}
    train:     {total_steps: 200, seed: 0, output_dir: runs/x, save_every: 10}
    critic:    {lr: 1.0e-5, cliprange_value: 0.5}      # only for estimators that read values (gae)

Bad configuration fails at load time with a :class:`~stratagym.envs.core.ConfigError` that names the
key and says how to fix it: unknown keys (with the valid ones listed), wrong types, out-of-range values,
an unknown estimator. ``policy.model: tiny`` resolves to the locally built tiny test model.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Optional, Union

import yaml

from stratagym.agents.tiny_lm import tiny_lm_path
from stratagym.algorithms.losses import AGG_MODES, KL_TYPES
from stratagym.algorithms.off_policy import OffPolicyCorrection
from stratagym.algorithms.registry import get_estimator, get_policy_loss
from stratagym.envs.hints import unknown_env_message, valid_env_kwargs
from stratagym.envs.registry import register_all
from stratagym.errors import ConfigError
from stratagym.training.rollout.program import check_program, is_program

__all__ = [
    "EnvConfig",
    "RolloutConfig",
    "AlgorithmConfig",
    "LossConfig",
    "OffPolicyConfig",
    "OptimConfig",
    "CriticConfig",
    "TrainConfig",
    "RecipeConfig",
    "BuiltAlgorithm",
    "load_recipe",
    "build_dataclass",
    "read_yaml_mapping",
]


@dataclass
class EnvConfig:
    """``id``: a registered gymnasium id; ``kwargs``: ``gymnasium.make`` kwargs for training envs;
    ``eval_kwargs``: kwargs for evaluation envs (e.g. another split); default = ``kwargs``.
    ``tasks``: train on a slice of the training split's task ids, written ``"start:stop"`` like a Python
    slice (``"1500:"`` = all but the first 1,500). RL from an SFT checkpoint uses it to train on questions
    the demonstrations did not contain (``stratagym demos collect --n N`` takes the first N)."""

    id: str = ""
    kwargs: dict[str, Any] = field(default_factory=dict)
    eval_kwargs: Optional[dict[str, Any]] = None
    tasks: Optional[str] = None

    def task_slice(self) -> slice:
        """``tasks`` parsed; a ConfigError names the expected form."""
        if self.tasks is None:
            return slice(None)
        parts = str(self.tasks).split(":")
        try:
            if len(parts) != 2:
                raise ValueError
            start, stop = (int(p) if p.strip() else None for p in parts)
        except ValueError:
            raise ConfigError(f"env.tasks must be a slice 'start:stop' of task indexes, e.g. '1500:' or '0:100', "
                              f"got {self.tasks!r}") from None
        return slice(start, stop)


@dataclass
class RolloutConfig:
    """``group_size`` G envs per task; ``tasks_per_step`` tasks per training step (batch = tasks x G
    episodes); ``workers``: ``inprocess`` | ``subprocess`` | ``ray``; ``max_turns`` safety cap.
    ``ray_address``: ``ray.init``'s address (``auto`` = an existing ``ray start`` cluster; unset = Ray's
    own lookup, else a new local instance; docs/scale.md)."""

    group_size: int = 8
    tasks_per_step: int = 4
    workers: str = "inprocess"
    num_workers: int = 2
    start_method: str = "spawn"
    ray_address: Optional[str] = None
    max_turns: int = 100
    filter_groups: bool = False  # DAPO dynamic sampling: keep drawing until tasks_per_step groups carry signal
    max_filter_rounds: int = 4  # at most this many draws per step (then train on what was found)
    # log-prob parity of sampler and trainer (stratagym/training/parity.py): stop at a token whose
    # |engine - trainer| log-prob exceeds parity_max, or at a step whose mean exceeds parity_mean_max;
    # auto: the bounds of the policy's compute dtype (parity.DEFAULT_BOUNDS); null: off (log parity/* only);
    # parity_tol: frac_over's bound
    parity_max: "Optional[float | str]" = "auto"
    parity_mean_max: "Optional[float | str]" = "auto"
    parity_tol: float = 0.1
    # agent programs (env.id: program:..., docs/gateway.md): stop the run at a step where fewer than this
    # share of the programs' calls extend their session's earlier prompt + sampled ids (null: off; the
    # share is logged as program/append_only either way)
    append_only_min: Optional[float] = None
    # agent programs: the gateway generates each request alone from its whole prompt, so a copy's seeded
    # samples do not depend on which copies' requests arrive together (GatewayLimits.batch_invariant;
    # slower: no batching, no prefix-cache reuse). Env rollouts batch in a fixed order and need no such option
    batch_invariant: bool = False
    # asynchronous rollouts (stratagym/training/async_rollout.py, docs/async.md): ``async_workers`` Ray
    # actors, each with a policy copy, generate while the learner trains; a step's groups are trained at
    # most ``max_staleness`` policy versions after they were sampled (0 = the synchronous trainer, exactly)
    mode: str = "sync"
    max_staleness: int = 0
    async_workers: int = 1


@dataclass
class AlgorithmConfig:
    """``estimator``: a registry name (``grpo``, ``dr_grpo``, ``rloo``, ``stratified``, ``gigpo``,
    ``hgpo``, ``remax``, ``gae`` (PPO with a critic, see :class:`CriticConfig`), any ``+hadw``;
    ``list_estimators()``); ``estimator_kwargs`` its options (``hadw_*`` for HA-DW). Reward shaping:
    ``invalid_action_penalty`` per rejected action, ``format_reward`` for all-well-formed episodes,
    ``reward_scale`` on env rewards."""

    estimator: str = "grpo"
    estimator_kwargs: dict[str, Any] = field(default_factory=dict)
    invalid_action_penalty: float = 0.0
    format_reward: float = 0.0
    reward_scale: float = 1.0


#: The recipe's ``loss.off_policy`` section is the correction itself: its fields (``tis``, ``tis_cap``, ``mis``,
#: ``mis_high``, ``mis_low``) are the YAML keys, and a bad value is a ConfigError naming the key
#: (:func:`build_dataclass` names the section of a ValueError the dataclass raises). Kept under its old name.
OffPolicyConfig = OffPolicyCorrection


@dataclass
class LossConfig:
    """Arguments of :func:`stratagym.algorithms.losses.policy_loss` (see its docstring).

    ``name``: a registered policy loss (``vanilla``, ``gspo``, ``cispo``, ``sapo``, ``geo_mean``,
    ``gpg``, ``clip_cov``, ``kl_cov``, ``dppo_tv``, ``dppo_kl``; ``list_policy_losses()``);
    ``options``: its own options (e.g. ``{tau_neg: 1.1}`` for ``sapo``).  ``clip_low`` /
    ``clip_high`` / ``clip_c`` go to the losses that declare them.  The rest are shared by every loss;
    ``off_policy`` is the importance correction of stale or mismatched samples
    (:class:`~stratagym.algorithms.off_policy.OffPolicyCorrection`: TIS / MIS, off by default).

    Whether the importance ratio is per token or per sequence is the loss's own (its registry entry's
    ``ratio``: ``gspo`` is the sequence-level one). ``ratio_level`` is no option: its only value is
    ``token``, kept so that the recipe written into checkpoints and result records stays as it was;
    ``ratio_level: sequence``, the older spelling of ``name: gspo``, is refused with that fix."""

    name: str = "vanilla"
    options: dict[str, Any] = field(default_factory=dict)
    clip_low: float = 0.2
    clip_high: Optional[float] = None
    clip_c: Optional[float] = None
    ratio_level: str = "token"
    agg: str = "token-mean"
    loss_scale_factor: Optional[float] = None
    kl_coef: float = 0.0
    kl_type: str = "k3"
    kl_is_correction: bool = False
    entropy_coef: float = 0.0
    off_policy: OffPolicyCorrection = field(default_factory=OffPolicyCorrection)

    def loss_options(self) -> dict[str, Any]:
        """The chosen loss's options: the clip fields it declares, then ``options``."""
        declared = get_policy_loss(self.name).defaults
        if self.clip_c is not None and "clip_c" not in declared:
            raise ConfigError(f"loss.clip_c is not an option of loss {self.name!r}; "
                              f"its options: {sorted(declared)}")
        clip = {k: getattr(self, k) for k in ("clip_low", "clip_high", "clip_c") if k in declared}
        if self.clip_c is None:
            clip.pop("clip_c", None)  # the loss's own default (off for vanilla/gspo, 3 for DPPO's cap, as verl)
        return {**clip, **dict(self.options)}


@dataclass
class CriticConfig:
    """The value model of PPO with a critic, used when the estimator reads critic values (``gae``):
    :func:`stratagym.agents.critic.build_critic` picks it from the policy (a scorer critic for the scorer,
    an LLM body with a value head for an LLM policy); ``options`` are its model options (scorer:
    ``hidden``, ``init_std``; LLM: ``model``). It has its own AdamW: ``lr`` (unset = ``optim.lr``),
    ``weight_decay``, ``max_grad_norm`` (unset = no clipping). ``cliprange_value``: PPO's value clip
    around the rollout's values (verl ``critic.cliprange_value``, default 0.5; unset = no clip). The
    critic trains on the same mini-batches and epochs as the policy. Ignored by estimators without
    values."""

    options: dict[str, Any] = field(default_factory=dict)
    lr: Optional[float] = None
    weight_decay: float = 0.0
    max_grad_norm: Optional[float] = 1.0
    cliprange_value: Optional[float] = 0.5


@dataclass
class OptimConfig:
    """AdamW and the update schedule. ``micro_batch_size`` samples per forward/backward (gradients
    accumulate over the mini-batch); ``mini_batches`` optimizer steps per rollout; ``ppo_epochs``
    passes over the rollout. With one update per rollout the old log-probs are the current ones
    (detached), which saves a forward pass."""

    lr: float = 1e-6
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    max_grad_norm: Optional[float] = 1.0
    scheduler: str = "constant"
    warmup_steps: int = 0
    micro_batch_size: int = 8
    mini_batches: int = 1
    ppo_epochs: int = 1


@dataclass
class TrainConfig:
    """Run control: steps, seed, output, checkpoints, evaluation and logging."""

    total_steps: int = 10
    seed: int = 0
    output_dir: str = "runs/stratagym"
    save_every: int = 10
    keep_last: int = 2
    eval_every: int = 0
    eval_tasks: int = 8
    eval_greedy: bool = True
    log_every: int = 1
    tensorboard: bool = True
    wandb: bool = False
    wandb_project: str = "stratagym"
    progress: bool = True
    mixed_precision: str = "no"
    deterministic: bool = True
    #: keep freed memory in the process heap (glibc ``mallopt``; see :mod:`stratagym.training.allocator`):
    #: CPU steps stop re-faulting their activations' pages (0-10 % less time per phase). Opt-in, because it
    #: changes malloc for the whole host process (a notebook, an app embedding the trainer) and resident
    #: memory stays at its peak. False (the default): the opposite, freed big blocks always go back to the OS
    #: (glibc's mmap threshold pinned at 128 KiB), because a long run otherwise holds more every step
    retain_heap: bool = False


class BuiltAlgorithm(NamedTuple):
    """What :meth:`RecipeConfig.validate_and_build` built: the advantage estimator and the policy loss
    (:class:`~stratagym.algorithms.registry.PolicyLoss`)."""

    estimator: Any
    loss_fn: Any


@dataclass
class RecipeConfig:
    """A whole training run. ``policy`` is an :class:`~stratagym.agents.llm.LLMConfig` mapping, or a
    mapping with ``class: "module:Class"`` (plus that class's options) for other policies, e.g. the
    synthetic-env scorer."""

    name: str = "run"
    policy: dict[str, Any] = field(default_factory=dict)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)

    # ---- validation -------------------------------------------------------------------------------
    def validate(self) -> "RecipeConfig":
        """Check every section; a :class:`ConfigError` names the bad key and how to fix it. Returns the recipe."""
        self.validate_and_build()
        return self

    def validate_and_build(self) -> "BuiltAlgorithm":
        """:meth:`validate`, returning the estimator and the policy loss it built to check the
        ``algorithm`` and ``loss`` sections: the trainer trains with these, so neither is built twice. The
        estimator is a new one on every call (it may hold state, e.g. HA-DW's difficulty anchors)."""
        if not self.env.id:
            raise ConfigError("env.id is missing: name a registered env, e.g. env: {id: stratagym/SearchQA-v0}")
        self.env.task_slice()
        if is_program(self.env.id):  # an agent program: imported and checked now, so a bad name fails before the model loads
            check_program(self.env.id, self.env.kwargs)
            if self.train.eval_every and self.train.eval_greedy:
                raise ConfigError("train.eval_every evaluates greedily, but an agent program samples as its own "
                                  "requests say: set train.eval_greedy: false (the program picks its temperature)")
        else:
            check_env(self.env.id, {"env.kwargs": self.env.kwargs, "env.eval_kwargs": self.env.eval_kwargs or {}})
        if not self.policy:
            raise ConfigError("policy is missing: e.g. policy: {model: tiny} (the local tiny model) or a HF model folder")
        _positive("rollout.group_size", self.rollout.group_size)
        _positive("rollout.tasks_per_step", self.rollout.tasks_per_step)
        _positive("rollout.max_turns", self.rollout.max_turns)
        _positive("rollout.max_filter_rounds", self.rollout.max_filter_rounds)
        for name in ("parity_max", "parity_mean_max"):
            value = getattr(self.rollout, name)
            if value is None or value == "auto":
                continue
            try:
                ok = float(value) > 0
            except (TypeError, ValueError):
                ok = False
            if not ok:
                raise ConfigError(f"rollout.{name} must be > 0, auto (the dtype's bound) or null (off), got {value!r}")
        aom = self.rollout.append_only_min
        if aom is not None and not (isinstance(aom, (int, float)) and 0.0 <= float(aom) <= 1.0):
            raise ConfigError(f"rollout.append_only_min must be a share in [0, 1] or null (off), got {aom!r}")
        if self.rollout.batch_invariant and not is_program(self.env.id):
            raise ConfigError("rollout.batch_invariant is for agent programs (env.id: program:...): an env rollout's "
                              "batches are already composed in a fixed order; remove it")
        if self.rollout.batch_invariant and self.rollout.mode != "sync":
            raise ConfigError("rollout.batch_invariant is supported with rollout.mode: sync (the async actors' "
                              "gateways batch as requests arrive); use mode: sync or drop batch_invariant")
        if not float(self.rollout.parity_tol) > 0:
            raise ConfigError(f"rollout.parity_tol must be > 0, got {self.rollout.parity_tol!r}")
        self._validate_async()
        if self.rollout.workers not in ("inprocess", "subprocess", "ray"):
            raise ConfigError(f"rollout.workers must be inprocess, subprocess or ray, got {self.rollout.workers!r}")
        try:
            estimator = get_estimator(self.algorithm.estimator, **dict(self.algorithm.estimator_kwargs))
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"algorithm.estimator / estimator_kwargs: {exc}") from exc
        if self.loss.agg not in AGG_MODES:
            raise ConfigError(f"loss.agg must be one of {AGG_MODES}, got {self.loss.agg!r}")
        if self.loss.kl_type not in KL_TYPES:
            raise ConfigError(f"loss.kl_type must be one of {sorted(KL_TYPES)}, got {self.loss.kl_type!r}")
        if self.loss.ratio_level == "sequence":
            raise ConfigError("loss.ratio_level: sequence, the older spelling of GSPO, is no longer read: write "
                              "loss: {name: gspo} and drop ratio_level (a loss's ratio level is its own)")
        if self.loss.ratio_level != "token":
            raise ConfigError(f"loss.ratio_level must be token or left out, got {self.loss.ratio_level!r}: a loss's "
                              "ratio level is its own (loss: {name: gspo} is the sequence-level ratio)")
        # looked up and validated once (its options, and what the update needs to know of it: ``per_sequence``,
        # ``ratio``); each micro-batch calls it, never a name. A ConfigError names the valid ones
        loss_fn = get_policy_loss(self.loss.name, **self.loss.loss_options())
        if self.loss.clip_c is not None and self.loss.clip_c <= 1:
            raise ConfigError(f"loss.clip_c (dual clip) must be > 1, got {self.loss.clip_c}")
        if self.loss.kl_coef < 0:
            raise ConfigError(f"loss.kl_coef must be >= 0, got {self.loss.kl_coef}")
        if self.optim.lr <= 0:
            raise ConfigError(f"optim.lr must be > 0, got {self.optim.lr}")
        if self.critic.lr is not None and self.critic.lr <= 0:
            raise ConfigError(f"critic.lr must be > 0 (or unset to use optim.lr), got {self.critic.lr}")
        if self.critic.cliprange_value is not None and self.critic.cliprange_value <= 0:
            raise ConfigError(f"critic.cliprange_value must be > 0 (or unset for no value clipping), got {self.critic.cliprange_value}")
        if self.critic.max_grad_norm is not None and self.critic.max_grad_norm <= 0:
            raise ConfigError(f"critic.max_grad_norm must be > 0 (or unset for no clipping), got {self.critic.max_grad_norm}")
        if self.optim.scheduler not in ("constant", "linear", "cosine"):
            raise ConfigError(f"optim.scheduler must be constant, linear or cosine, got {self.optim.scheduler!r}")
        _positive("optim.micro_batch_size", self.optim.micro_batch_size)
        _positive("optim.mini_batches", self.optim.mini_batches)
        _positive("optim.ppo_epochs", self.optim.ppo_epochs)
        _positive("train.total_steps", self.train.total_steps)
        _positive("train.keep_last", self.train.keep_last)
        if self.train.save_every < 0 or self.train.eval_every < 0:
            raise ConfigError("train.save_every / train.eval_every must be >= 0 (0 = never)")
        if self.train.mixed_precision not in ("no", "bf16", "fp16"):
            raise ConfigError(f"train.mixed_precision must be no, bf16 or fp16, got {self.train.mixed_precision!r}")
        check_output_dir("train.output_dir", self.train.output_dir)
        return BuiltAlgorithm(estimator, loss_fn)

    def _validate_async(self) -> None:
        """``rollout.mode`` / ``max_staleness`` / ``async_workers``."""
        rc = self.rollout
        if rc.mode not in ("sync", "async"):
            raise ConfigError(f"rollout.mode must be sync or async, got {rc.mode!r}")
        if rc.max_staleness < 0:
            raise ConfigError(f"rollout.max_staleness must be >= 0 (0 = synchronous), got {rc.max_staleness}")
        _positive("rollout.async_workers", rc.async_workers)
        if rc.mode == "sync" and rc.max_staleness:
            raise ConfigError(f"rollout.max_staleness is {rc.max_staleness}, but rollout.mode is sync: set "
                              "rollout.mode: async to train on stale groups, or max_staleness: 0")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "RecipeConfig":
        if not isinstance(data, dict):
            raise ConfigError(f"a recipe must be a YAML mapping with sections {[f.name for f in dataclasses.fields(cls)]}")
        cfg = build_dataclass(cls, data)
        policy = dict(cfg.policy)
        if policy.get("model") == "tiny":
            policy["model"] = str(tiny_lm_path())
        cfg.policy = policy
        return cfg.validate()


def check_env(env_id: str, kwarg_sets: dict[str, dict[str, Any]]) -> None:
    """Refuse an unknown env id or env keyword argument now, with the close matches / valid names, rather
    than after the policy (possibly a multi-GB model) is loaded, when the first env is made."""
    import difflib

    import gymnasium as gym

    register_all()
    if env_id not in gym.registry:
        raise ConfigError(f"env.id: {unknown_env_message(env_id)}")
    valid = valid_env_kwargs(env_id)
    if valid is None:  # a constructor taking **kwargs: gymnasium.make will say
        return
    allowed = set(valid) | {"max_episode_steps", "disable_env_checker"}  # gymnasium.make's own options
    for name, kwargs in kwarg_sets.items():
        bad = sorted(set(kwargs) - allowed)
        if bad:
            close = difflib.get_close_matches(bad[0], valid, n=1)
            maybe = f" (did you mean {close[0]!r}?)" if close else ""
            what = f"argument {bad[0]!r}{maybe}" if len(bad) == 1 else f"arguments {bad}"
            raise ConfigError(f"{name}: {env_id} has no {what}; valid ones: {', '.join(valid)}")


def check_output_dir(name: str, path: str | Path) -> None:
    """Refuse an output folder that cannot be one: it, or a folder above it, is an existing file."""
    p = Path(path).expanduser()
    for q in (p, *p.parents):
        if q.exists():
            if not q.is_dir():
                where = "is a file" if q == p else f"is inside {str(q)!r}, which is a file"
                raise ConfigError(f"{name} {str(path)!r} {where}; give a folder path (it is created if missing)")
            return


def _positive(name: str, value: int) -> None:
    if value < 1:
        raise ConfigError(f"{name} must be >= 1, got {value}")


def _check_type(value: Any, tp: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is Any:
        return value
    if origin is Union:
        if value is None and type(None) in args:
            return None
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _check_type(value, arg, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: expected {tp}, got {value!r}")
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where}: expected a number, got {value!r} (YAML needs 1.0e-6, not 1e-6)")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return dict(value)
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_check_type(v, args[0], where) for v in value] if args else list(value)
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise ConfigError(f"{where}: expected a list of {len(args)} values, got {value!r}")
        return tuple(_check_type(v, a, where) for v, a in zip(value, args))
    if dataclasses.is_dataclass(tp):
        return build_dataclass(tp, value, where)
    return value


def build_dataclass(cls: type, data: Any, prefix: str = "", *, root: str = "recipe") -> Any:
    """``cls(**data)`` with every field type-checked (nested dataclasses too); an unknown key or a wrong
    type is a :class:`ConfigError` naming the dotted key (``root`` names the top level) and the valid keys.
    The one validator for every YAML config of the trainer and SFT."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{prefix or root}: expected a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(data) - set(names))
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown} in {prefix or root}; valid keys: {names}")
    kwargs = {k: _check_type(v, hints[k], f"{prefix}.{k}" if prefix else k) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ValueError as exc:  # a dataclass that checks its own values (__post_init__), e.g. loss.off_policy
        raise ConfigError(f"{prefix or root}: {exc}") from None


def read_yaml_mapping(path: str | Path, overrides: Optional[dict[str, Any]] = None, *, examples: str = "recipes/") -> dict[str, Any]:
    """A YAML file read with ``yaml.safe_load`` as a mapping, with dotted ``overrides``
    (``{"train.total_steps": 3}``) applied; a missing, non-UTF-8, invalid or non-mapping file is a
    :class:`ConfigError` (``examples`` says where working files are)."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"recipe {str(p)!r} does not exist; see {examples} for examples")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:  # a file that is not UTF-8 is not a recipe either
        raise ConfigError(f"recipe {str(p)!r} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"recipe {str(p)!r} must be a YAML mapping")
    for key, value in (overrides or {}).items():
        node = data
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return data


def load_recipe(path: str | Path, overrides: Optional[dict[str, Any]] = None) -> RecipeConfig:
    """Read a YAML recipe (``yaml.safe_load``), apply dotted ``overrides`` (``{"train.total_steps": 3}``)
    and validate it."""
    return RecipeConfig.from_dict(read_yaml_mapping(path, overrides))
