"""A small neural scorer policy: a softmax over the admissible actions, trainable on CPU in seconds.

It implements :class:`stratagym.agents.policy.Policy`, so it trains through the same trainer,
advantage estimators and policy losses as the LLM path; only the model differs. For each live
episode it scores every admissible action ``c`` given the context ``x`` (current observation plus the
last ``memory`` turns of observations and actions, as hashed bag-of-words features, see
the :class:`Featurizer` below):

    score(x, c) = w . tanh(E_x(x) + E_c(c) + b)

``E_x`` and ``E_c`` are sums of feature embeddings (``nn.EmbeddingBag``), so this is a one-hidden-layer
MLP over the concatenated sparse features: it can learn interactions (this task's code; this cue means
that door). ``w`` starts at zero, so every run starts from the uniform policy over admissible actions.
A sample's "sequence" is one token (``T = 1``): its log-prob is ``log softmax(scores)[chosen]``.

Features are hashed (CRC32, stable across processes, unlike ``hash()``) unigrams and bigrams: the envs
are open-vocabulary text, and a fixed number of buckets keeps the model small with no vocabulary pass.
A saved policy therefore scores the same text the same way after reloading. Every text's feature ids
are cached: the synthetic envs repeat a few hundred distinct strings millions of times.

It is a general policy for any env that lists admissible actions (the synthetic envs, ALFWorld,
WebShop): the controlled studies and the quick bench suite (``make demo``) train it. Recipes name it
``policy: {class: stratagym.agents.scorer:ScorerPolicy, hidden: 64, memory: 4}``.
"""

from __future__ import annotations

import copy
import json
import os
import re
import zlib
from dataclasses import asdict, dataclass
from functools import lru_cache
from typing import Any, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from stratagym.agents.policy import Generation, GenerationRequest, Policy, SequenceLogProbs, unwrap_model
from stratagym.atomic import atomic_write, atomic_write_with
from stratagym.errors import ConfigError

__all__ = ["Featurizer", "ScorerConfig", "ScorerNet", "ScorerPolicy", "ScorerPayload", "fill_placeholders", "goal_text"]

CONFIG_NAME = "scorer_config.json"
WEIGHTS_NAME = "model.safetensors"
_TOKEN = re.compile(r"[a-z0-9]+")
_PLACEHOLDER = re.compile(r"<[^<>]{1,40}>")
_INSTRUCTION = re.compile(r"instruction:\s*(?:\[sep\]\s*)?(.+?)\s*(?:\[sep\]|$)", re.IGNORECASE | re.DOTALL)
_ALFWORLD_TASK = re.compile(r"your task is to:\s*(.+?)\s*(?:\n|$)", re.IGNORECASE)


def fill_placeholders(action: str, task_text: str) -> str:
    """A scorer cannot write free text, so a template action such as WebShop's
    ``search[<your query>]`` is filled with the task's own words: the text after ``Instruction:`` in
    the episode's first observation if there is one (WebShop), else that whole observation."""
    if not _PLACEHOLDER.search(action):
        return action
    m = _INSTRUCTION.search(task_text)
    query = " ".join((m.group(1) if m else task_text).split())[:200]
    return _PLACEHOLDER.sub(lambda _: query, action)


def goal_text(task_text: str) -> str:
    """The goal an episode's first observation states: ALFWorld's ``Your task is to: ...`` line,
    WebShop's ``Instruction: ...``, else the whole observation (the synthetic envs state their cue there)."""
    m = _ALFWORLD_TASK.search(task_text) or _INSTRUCTION.search(task_text)
    return " ".join((m.group(1) if m else task_text).split())


@lru_cache(maxsize=1 << 16)
def tokens(text: str) -> tuple[str, ...]:
    """Lower-case alphanumeric tokens of ``text``."""
    return tuple(_TOKEN.findall(text.lower()))


def _bucket(feature: str, buckets: int) -> int:
    return zlib.crc32(feature.encode("utf-8")) % buckets


class Featurizer:
    """Maps texts to arrays of hashed feature ids (unigrams and bigrams, with a role prefix).

    Roles: ``o`` current observation, ``h`` a history turn's observation, ``a`` a history turn's
    action, ``c`` the candidate action, ``m`` a candidate token that also occurs in the current
    observation (the "does this action mention what I see" signal every text game needs), ``g`` the
    episode's goal and ``n`` a candidate token that also occurs in it (both only with ``goal``).
    """

    def __init__(self, buckets: int = 1 << 13):
        self.buckets = int(buckets)
        self._cache: dict[tuple[str, str], np.ndarray] = {}

    def text(self, role: str, text: str) -> np.ndarray:
        key = (role, text)
        out = self._cache.get(key)
        if out is None:
            toks = tokens(text)
            feats = [f"{role}:{t}" for t in toks] + [f"{role}:{a}_{b}" for a, b in zip(toks, toks[1:])]
            feats.append(f"{role}:<bias>")
            out = np.fromiter((_bucket(f, self.buckets) for f in feats), dtype=np.int64, count=len(feats))
            if len(self._cache) > 200_000:
                self._cache.clear()
            self._cache[key] = out
        return out

    def overlap(self, candidate: str, observation: str) -> np.ndarray:
        """``m:`` features: the candidate's tokens that the current observation also holds."""
        return self._shared("m", candidate, observation)

    def goal_overlap(self, candidate: str, goal: str) -> np.ndarray:
        """``n:`` features: the candidate's tokens that the goal names ("take the mug the task asks for")."""
        return self._shared("n", candidate, goal)

    def _shared(self, role: str, candidate: str, reference: str) -> np.ndarray:
        key = (role, candidate + "\x00" + reference)
        out = self._cache.get(key)
        if out is None:
            seen = set(tokens(reference))
            shared = [t for t in tokens(candidate) if t in seen]
            feats = [f"{role}:{t}" for t in shared] + [f"{role}:<any>"] * len(shared)
            out = np.fromiter((_bucket(f, self.buckets) for f in feats), dtype=np.int64, count=len(feats))
            self._cache[key] = out
        return out

    def context(self, observation: str, history: Sequence[tuple[str, str]]) -> np.ndarray:
        """Features of the current observation plus the given (observation, action) history turns."""
        parts = [self.text("o", observation)]
        for obs, act in history:
            parts.append(self.text("h", obs))
            parts.append(self.text("a", act))
        return np.concatenate(parts)

    def candidate(self, candidate: str, observation: str) -> np.ndarray:
        return np.concatenate([self.text("c", candidate), self.overlap(candidate, observation)])


@dataclass
class ScorerConfig:
    """Size of the scorer. ``memory``: history turns the policy sees (0 = memoryless). ``goal``: the
    context also holds the episode's goal (:func:`goal_text` of the first observation) at every turn, and
    each candidate the goal's words it repeats. ALFWorld states the goal only in the first observation, so
    without it a scorer with a short memory forgets what it was asked after ``memory`` turns. Off by
    default: the studies run before it existed keep their features, bit for bit."""

    buckets: int = 1 << 13
    hidden: int = 64
    memory: int = 4
    init_std: float = 0.1
    goal: bool = False


@dataclass
class ScorerPayload:
    """What ``sequence_log_probs`` needs to score a sample again: feature ids, candidates, choice."""

    context: np.ndarray
    candidates: tuple[np.ndarray, ...]
    chosen: int
    logprob: float


class ScorerNet(nn.Module):
    """Scores flattened candidates; ``forward`` returns one score per candidate."""

    def __init__(self, config: ScorerConfig):
        super().__init__()
        self.config = config
        self.ctx = nn.EmbeddingBag(config.buckets, config.hidden, mode="sum")
        self.cand = nn.EmbeddingBag(config.buckets, config.hidden, mode="sum")
        self.bias = nn.Parameter(torch.zeros(config.hidden))
        self.out = nn.Parameter(torch.zeros(config.hidden))
        nn.init.normal_(self.ctx.weight, std=config.init_std)
        nn.init.normal_(self.cand.weight, std=config.init_std)

    def forward(
        self,
        ctx_ids: torch.Tensor,
        ctx_offsets: torch.Tensor,
        cand_ids: torch.Tensor,
        cand_offsets: torch.Tensor,
        cand_owner: torch.Tensor,
    ) -> torch.Tensor:
        x = self.ctx(ctx_ids, ctx_offsets)  # (B, H)
        c = self.cand(cand_ids, cand_offsets)  # (C, H)
        return torch.tanh(x[cand_owner] + c + self.bias) @ self.out  # (C,)


def _flat(arrays: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = np.fromiter((a.shape[0] for a in arrays), dtype=np.int64, count=len(arrays))
    offsets = np.zeros(len(arrays), dtype=np.int64)
    np.cumsum(lengths[:-1], out=offsets[1:])
    ids = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    return torch.from_numpy(ids), torch.from_numpy(offsets)


class ScorerPolicy(Policy):
    """Softmax over admissible actions scored by :class:`ScorerNet` (the :class:`Policy` protocol, whose
    optional hooks it leaves at their defaults: no tokenizer, no generation cache, nothing to close).

    Needs ``info["admissible_actions"]`` (every synthetic env, ALFWorld and WebShop list them); an env
    without them cannot be played by a scorer, and ``generate`` says so.
    """

    def __init__(
        self, config: ScorerConfig | None = None, *, seed: int = 0, sample_seed: int | None = None, **overrides: Any
    ):
        self.config = config or ScorerConfig(**overrides)
        if config is not None and overrides:
            self.config = ScorerConfig(**{**asdict(config), **overrides})
        # the initial weights are a function of ``seed`` only, whatever the global RNG state
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seed))
            self.model: nn.Module = ScorerNet(self.config)
        self.featurizer = Featurizer(self.config.buckets)
        # sampling uses torch's global generator (the trainer seeds and checkpoints it, so resumed runs
        # continue bit for bit) unless a private ``sample_seed`` is given (evaluation copies)
        self.generator = torch.Generator().manual_seed(int(sample_seed)) if sample_seed is not None else None

    @classmethod
    def from_config(cls, options: dict[str, Any]) -> "ScorerPolicy":
        """Build from a recipe's ``policy:`` mapping (``class: stratagym.agents.scorer:ScorerPolicy``
        plus ``seed``, ``sample_seed`` and any :class:`ScorerConfig` field)."""
        options = dict(options)
        seed = int(options.pop("seed", 0))
        sample_seed = options.pop("sample_seed", None)
        known = set(ScorerConfig.__dataclass_fields__)
        unknown = sorted(set(options) - known)
        if unknown:
            raise ConfigError(f"unknown ScorerPolicy option(s) {unknown}; valid: {sorted(known | {'seed', 'sample_seed'})}")
        return cls(ScorerConfig(**options), seed=seed, sample_seed=sample_seed)

    def sampling_copy(self, sample_seed: int) -> "ScorerPolicy":
        """A frozen copy that samples with its own generator: evaluating with it leaves the training
        run's random stream untouched."""
        clone = self.frozen_copy()
        clone.generator = torch.Generator().manual_seed(int(sample_seed))
        return clone

    # ---- protocol: parameters / modes ----------------------------------------------------------
    def parameters(self) -> Iterator[nn.Parameter]:
        return self.model.parameters()

    def train(self) -> "ScorerPolicy":
        self.model.train()
        return self

    def eval(self) -> "ScorerPolicy":
        self.model.eval()
        return self

    # ---- featurising ----------------------------------------------------------------------------
    def _encode(self, request: GenerationRequest) -> tuple[np.ndarray, tuple[np.ndarray, ...], list[str]]:
        actions = request.info.get("admissible_actions")
        if not actions:
            raise ValueError(
                f"ScorerPolicy needs info['admissible_actions'] (env {request.env_id or '?'} gave none); "
                "use an env that lists its admissible actions (synthetic, ALFWorld, WebShop) or an LLM policy"
            )
        k = self.config.memory
        turns = list(request.history)[-k:] if k > 0 else []
        ctx = self.featurizer.context(request.observation, [(t.observation, t.action) for t in turns])
        task_text = request.history[0].observation if request.history else request.observation
        actions = [fill_placeholders(a, task_text) for a in actions]
        cands = tuple(self.featurizer.candidate(a, request.observation) for a in actions)
        if self.config.goal:
            goal = goal_text(task_text)
            ctx = np.concatenate([ctx, self.featurizer.text("g", goal)])
            cands = tuple(np.concatenate([c, self.featurizer.goal_overlap(a, goal)]) for c, a in zip(cands, actions))
        return ctx, cands, actions

    def _scores(self, model: nn.Module, contexts: Sequence[np.ndarray], cands: Sequence[Sequence[np.ndarray]]):
        """Padded (B, Cmax) scores with -inf on padding, through ``model`` (so DDP hooks fire)."""
        counts = [len(c) for c in cands]
        ctx_ids, ctx_off = _flat(contexts)
        flat_cands = [a for c in cands for a in c]
        cand_ids, cand_off = _flat(flat_cands)
        owner = torch.repeat_interleave(torch.arange(len(cands)), torch.tensor(counts, dtype=torch.long))
        flat = model(ctx_ids, ctx_off, cand_ids, cand_off, owner)
        width = max(counts)
        col = torch.arange(len(flat)) - torch.repeat_interleave(
            torch.tensor(np.concatenate([[0], np.cumsum(counts)[:-1]]), dtype=torch.long),
            torch.tensor(counts, dtype=torch.long),
        )
        scores = flat.new_full((len(cands), width), float("-inf"))
        scores = scores.index_put((owner, col), flat)
        return scores

    # ---- protocol: acting -----------------------------------------------------------------------
    def generate(self, requests: Sequence[GenerationRequest], *, greedy: bool = False) -> list[Generation]:
        if not requests:
            return []
        encoded = [self._encode(r) for r in requests]
        with torch.no_grad():
            logp = torch.log_softmax(self._scores(self.model, [e[0] for e in encoded], [e[1] for e in encoded]), -1)
            if greedy:
                choice = logp.argmax(-1)
            else:
                choice = torch.multinomial(logp.exp(), 1, generator=self.generator).squeeze(-1)
        out = []
        for i, (ctx, cands, actions) in enumerate(encoded):
            j = int(choice[i])
            payload = ScorerPayload(ctx, cands, j, float(logp[i, j]))
            out.append(Generation(action=actions[j], payload=payload, text=actions[j], format_ok=True, num_tokens=1))
        return out

    def sequence_log_probs(self, payloads: Sequence[ScorerPayload], *, with_entropy: bool = False) -> SequenceLogProbs:
        n = len(payloads)
        if n == 0:
            z = torch.zeros((0, 1))
            return SequenceLogProbs(z, z.bool(), z if with_entropy else None, z)
        logp = torch.log_softmax(self._scores(self.model, [p.context for p in payloads], [p.candidates for p in payloads]), -1)
        chosen = torch.tensor([p.chosen for p in payloads], dtype=torch.long)
        lp = logp.gather(1, chosen[:, None])  # (B, 1)
        entropy = None
        if with_entropy:
            probs = logp.exp()
            entropy = -(probs * torch.where(torch.isfinite(logp), logp, torch.zeros_like(logp))).sum(-1, keepdim=True)
        sampling = torch.tensor([[p.logprob] for p in payloads], dtype=lp.dtype)
        return SequenceLogProbs(lp, torch.ones_like(lp, dtype=torch.bool), entropy, sampling)

    # ---- protocol: persistence ------------------------------------------------------------------
    def save_pretrained(self, directory: str) -> None:
        from safetensors.torch import save_file

        os.makedirs(directory, exist_ok=True)
        module = unwrap_model(self.model)
        state = {k: v.detach().contiguous() for k, v in module.state_dict().items()}
        atomic_write_with(os.path.join(directory, WEIGHTS_NAME), lambda p: save_file(state, str(p)))
        atomic_write(os.path.join(directory, CONFIG_NAME), json.dumps({"type": "scorer", **asdict(self.config)}, indent=1))

    @classmethod
    def from_pretrained(cls, directory: str, **kwargs: Any) -> "ScorerPolicy":
        from safetensors.torch import load_file

        path = os.path.join(directory, CONFIG_NAME)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{directory} has no {CONFIG_NAME}: not a saved ScorerPolicy")
        with open(path) as f:
            cfg = json.load(f)
        cfg.pop("type", None)
        policy = cls(ScorerConfig(**cfg), seed=int(kwargs.get("seed", 0)))
        policy.model.load_state_dict(load_file(os.path.join(directory, WEIGHTS_NAME)))
        return policy

    def frozen_copy(self) -> "ScorerPolicy":
        clone = copy.copy(self)
        clone.model = copy.deepcopy(unwrap_model(self.model))
        for p in clone.model.parameters():
            p.requires_grad_(False)
        clone.model.eval()
        clone.generator = None
        return clone
