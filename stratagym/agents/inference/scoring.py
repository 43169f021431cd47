"""The scoring layouts of an LLM policy: sequence log-probs of (prompt, response) rows under a causal LM.

Moved out of the policy's room (:mod:`stratagym.agents.llm`) into the inference engine's sub-package: what
``LLMPolicy.sequence_log_probs`` computes is one thing (each response token's temperature-scaled
log-prob, and optionally its entropy); how the rows are laid out for the forward is speed machinery,
and lives here. :meth:`LayoutScorer.score` picks one of three layouts, each the maths of scoring every
row on its own (log-probs and gradients equal up to float rounding):

* whole rows (right-padded, causal, per-row ``logits_to_keep``; left-padded with a mask on older
  transformers);
* shared prompts (:meth:`LayoutScorer.shared_prompts`: each distinct prompt run once, its keys/values
  copied to the rows sharing it: a GRPO group's G copies);
* history hosts (:meth:`LayoutScorer.history_hosts`: a multi-turn trajectory's earlier turns read out of
  its last turn's forward);

each with the fused forward of :mod:`~stratagym.agents.inference.fused_score` where it covers the model
(:meth:`LayoutScorer.fused_scorer`), else the model's own (LoRA models: peft replaces the linear layers).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import torch

from stratagym.agents.inference.kv_cache import returned_cache
from stratagym.agents.policy import SequenceLogProbs, pad_right, unwrap_model
from stratagym.ops import token_logprobs

__all__ = ["LayoutScorer", "per_row_logits_to_keep"]


def per_row_logits_to_keep() -> bool:
    """Whether transformers accepts a (B, T) integer ``logits_to_keep`` (per-row positions)."""
    try:
        from transformers.modeling_utils import slice_logits_to_keep  # noqa: F401
    except ImportError:
        return False
    return True


class LayoutScorer:
    """The scoring layouts over an :class:`~stratagym.agents.llm.LLMPolicy`'s model, tokenizer and config
    (read from the policy on every call, so a swapped model or a changed option is seen)."""

    def __init__(self, policy: Any):
        self.policy = policy

    @property
    def model(self) -> Any:
        return self.policy.model

    @property
    def tokenizer(self) -> Any:
        return self.policy.tokenizer

    @property
    def config(self) -> Any:
        return self.policy.config

    @property
    def device(self) -> torch.device:
        return self.policy.device

    def shared_prompts(self, payloads: Sequence[Any]) -> Optional[tuple[list[torch.Tensor], list[int]]]:
        """The distinct prompts of ``payloads`` and each row's index into them, when scoring through
        a shared prompt pass pays off (rows share prompts, the model runs unwrapped with a KV cache and
        per-row ``logits_to_keep``); else None."""
        if not self.config.shared_prompt_scoring or len(payloads) < 2 or not per_row_logits_to_keep():
            return None
        if self.model is not unwrap_model(self.model) or self.config.gradient_checkpointing:
            return None
        first: dict[tuple[int, ...], int] = {}
        expand = [first.setdefault(tuple(p["prompt_ids"].tolist()), len(first)) for p in payloads]
        uniq = list(first)
        saved = sum(len(payloads[i]["prompt_ids"]) - 1 for i in range(len(payloads))) - sum(len(u) - 1 for u in uniq)
        total = sum(int(p["prompt_ids"].numel() + p["response_ids"].numel()) for p in payloads)
        # a shared pass costs a padding mask (no causal fast path) and one more forward: worth it when it
        # skips a real share of the tokens (a group rollout's G copies of a prompt)
        if saved * 8 < total:
            return None
        return [torch.tensor(u, dtype=torch.long) for u in uniq], expand

    def fused_scorer(self) -> Any:
        """The fused training forward over the model (:mod:`stratagym.agents.inference.fused_score`), or None: off,
        a wrapped model (DDP/FSDP expect their own forward), gradient checkpointing, or a model it does
        not cover (then the transformers forward runs)."""
        if not self.config.fused_scoring or self.config.gradient_checkpointing:
            return None
        if getattr(self.policy, "autocast_dtype", None) is not None:
            return None  # fp32 master weights under autocast: the transformers forward, as the sampler runs it
        if self.model is not unwrap_model(self.model):
            return None
        from stratagym.agents.inference.fused_score import fused_scorer_for  # lazy: the fused kernels load only when used

        return fused_scorer_for(self.model)

    def history_hosts(self, payloads: Sequence[Any], shared: Optional[tuple[list[torch.Tensor], list[int]]]) -> Optional[list[int]]:
        """For each row, the index of a row whose tokens (prompt + response) begin with this row's whole
        prompt + response (itself when none does): a multi-turn trajectory's earlier turns lie inside its
        last turn's prompt when the history is kept verbatim. None when scoring the host rows alone
        would not skip at least a quarter of the padded tokens of the other layouts."""
        if not self.config.shared_history_scoring or len(payloads) < 2:
            return None
        seqs = [tuple(p["prompt_ids"].tolist()) + tuple(p["response_ids"].tolist()) for p in payloads]
        host_of = list(range(len(seqs)))
        hosts: list[int] = []
        for i in sorted(range(len(seqs)), key=lambda j: -len(seqs[j])):
            s = seqs[i]
            for h in hosts:
                if seqs[h][: len(s)] == s:
                    host_of[i] = h
                    break
            else:
                hosts.append(i)
        if len(hosts) == len(seqs):
            return None
        cost = len(hosts) * max(len(seqs[h]) for h in hosts)
        other = len(seqs) * max(map(len, seqs))  # every row whole, right-padded
        if shared is not None:
            prompts, _ = shared
            other = min(other, len(prompts) * max(len(p) for p in prompts)
                        + len(seqs) * max(int(p["response_ids"].numel()) for p in payloads))
        return host_of if cost * 4 <= other * 3 else None

    def score(self, payloads: Sequence[Any], with_entropy: bool) -> SequenceLogProbs:
        scorer = self.fused_scorer()
        shared = self.shared_prompts(payloads)
        hosts = self.history_hosts(payloads, shared) if scorer is not None or per_row_logits_to_keep() else None
        if hosts is not None:
            return self._score_in_hosts(payloads, with_entropy, hosts, scorer)
        if shared is not None:
            return self._score_shared(payloads, with_entropy, *shared, scorer=scorer)
        device = self.device
        B = len(payloads)
        plen = torch.tensor([int(p["prompt_ids"].numel()) for p in payloads])
        rlen = torch.tensor([int(p["response_ids"].numel()) for p in payloads])
        if int(rlen.min()) < 1:
            raise ValueError("every payload needs at least one response token")
        total = plen + rlen
        L, T = int(total.max()), int(rlen.max())
        if scorer is not None and not scorer.fits(B, L, L):
            scorer = None  # long rows: a float mask this large is not worth it; the transformers forward
        pad = self.tokenizer.pad_token_id
        ids = torch.full((B, L), pad, dtype=torch.long)
        cols = torch.arange(T, device=device)
        rl = rlen.to(device)
        mask = cols[None, :] < rl[:, None]
        if scorer is not None or per_row_logits_to_keep():
            # RIGHT-padded, no attention mask: causal attention alone is exact for every real token (pads
            # come after them), positions are 0..L-1 as for an unpadded sequence, and SDPA takes its
            # causal fast path instead of a (B, 1, L, L) padding mask. Logits are taken only at the T
            # positions of each row that predict its response tokens, left-aligned already.
            for i, p in enumerate(payloads):
                n_p, n_r = int(plen[i]), int(rlen[i])
                ids[i, :n_p] = p["prompt_ids"]
                ids[i, n_p : n_p + n_r] = p["response_ids"]
            ids = ids.to(device)
            keep = ((plen.to(device) - 1)[:, None] + cols[None, :]).clamp(max=L - 2)
            if scorer is not None:
                logits = scorer.whole_rows(ids, keep)
            else:
                logits = self.model(input_ids=ids, use_cache=False, logits_to_keep=keep).logits
            labels = ids.gather(1, keep + 1)
            idx = None
        else:  # older transformers: LEFT-padded with a mask, logits at the last T positions
            attn = torch.zeros((B, L), dtype=torch.long)
            for i, p in enumerate(payloads):
                seq = torch.cat([p["prompt_ids"], p["response_ids"]])
                ids[i, L - seq.numel() :] = seq
                attn[i, L - seq.numel() :] = 1
            pos = (attn.cumsum(-1) - 1).clamp(min=0)
            ids, attn, pos = ids.to(device), attn.to(device), pos.to(device)
            out = self.model(input_ids=ids, attention_mask=attn, position_ids=pos, use_cache=False, logits_to_keep=T + 1)
            labels = ids[:, L - T :]
            idx = ((T - rl)[:, None] + cols[None, :]).clamp(max=T - 1)  # right-aligned -> left-aligned
            logits = out.logits[:, :-1]
        return self._log_probs(payloads, logits, labels, mask, with_entropy, idx)

    def _log_probs(self, payloads: Sequence[Any], logits: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor,
                   with_entropy: bool, idx: Optional[torch.Tensor] = None) -> SequenceLogProbs:
        """The scoring layouts' common end: temperature-scaled log-probs (and entropies) of ``labels`` under
        ``logits``, re-ordered by ``idx`` (B, T) when given, zero where ``mask`` is off."""
        res = token_logprobs(logits.float(), labels, temperature=self.config.temperature, with_entropy=with_entropy,
                             chunk_size=self.config.logprob_chunk)
        lp, ent = (res if with_entropy else (res, None))
        if idx is not None:
            lp = lp.gather(1, idx)
            ent = ent.gather(1, idx) if ent is not None else None
        lp = lp.masked_fill(~mask, 0.0)
        if ent is not None:
            ent = ent.masked_fill(~mask, 0.0)
        samp = pad_right([p["sampling_logprobs"] for p in payloads], 0.0, torch.float32).to(mask.device)
        return SequenceLogProbs(lp, mask, ent, samp)

    def _score_in_hosts(self, payloads: Sequence[Any], with_entropy: bool, host_of: list[int],
                        scorer: Any) -> SequenceLogProbs:
        """:meth:`score` with every row read out of its host row's forward (:meth:`history_hosts`): the
        host rows run whole (right-padded, causal), and row b's logits are taken at the positions of its
        own response inside host ``host_of[b]``. A token's logits depend only on the tokens before it, at
        the same positions, so this is the maths of scoring every row on its own (log-probs and gradients
        equal up to float rounding) with each trajectory's shared history run once. The hosts run through
        the fused forward, or through the model's own where there is none (LoRA: :meth:`_host_logits`)."""
        device = self.device
        hosts = sorted(set(host_of))
        slot = {h: k for k, h in enumerate(hosts)}
        rows = torch.tensor([slot[h] for h in host_of], dtype=torch.long, device=device)
        plen = torch.tensor([int(p["prompt_ids"].numel()) for p in payloads])
        rlen = torch.tensor([int(p["response_ids"].numel()) for p in payloads])
        if int(rlen.min()) < 1:
            raise ValueError("every payload needs at least one response token")
        hlen = [int(plen[h] + rlen[h]) for h in hosts]
        L, T = max(hlen), int(rlen.max())
        ids = torch.full((len(hosts), L), self.tokenizer.pad_token_id, dtype=torch.long)
        for k, h in enumerate(hosts):
            ids[k, : int(plen[h])] = payloads[h]["prompt_ids"]
            ids[k, int(plen[h]) : hlen[k]] = payloads[h]["response_ids"]
        ids = ids.to(device)
        cols = torch.arange(T, device=device)
        keep = ((plen.to(device) - 1)[:, None] + cols[None, :]).clamp(max=L - 2)
        logits = scorer.whole_rows(ids, keep, rows=rows) if scorer is not None else self._host_logits(ids, keep, rows)
        labels = ids[rows[:, None], keep + 1]
        mask = cols[None, :] < rlen.to(device)[:, None]
        return self._log_probs(payloads, logits, labels, mask, with_entropy)

    def _host_logits(self, ids: torch.Tensor, keep: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """What ``FusedScorer.whole_rows(ids, keep, rows=rows)`` returns, through the model's own forward: for
        models the fused forward does not cover, LoRA ones above all (peft replaces the linear layers).
        Each host row keeps the logits at the union of its members' positions (per-row ``logits_to_keep``),
        and every member reads its own positions out of that list."""
        per_host = [torch.unique(keep[rows == k]) for k in range(ids.shape[0])]  # sorted
        K = max(len(p) for p in per_host)
        host_keep = torch.stack([torch.cat([p, p[-1:].expand(K - len(p))]) for p in per_host])  # pad: repeat the last
        L_run = int(host_keep.max()) + 1  # later positions feed no kept output (causal)
        logits = self.model(input_ids=ids[:, :L_run], use_cache=False, logits_to_keep=host_keep).logits  # (hosts, K, V)
        where = torch.searchsorted(host_keep[rows].contiguous(), keep.contiguous())  # each kept position's index
        return logits[rows[:, None], where]

    def _score_shared(self, payloads: Sequence[Any], with_entropy: bool, prompts: list[torch.Tensor],
                      expand: list[int], scorer: Any = None) -> SequenceLogProbs:
        """:meth:`score` with each distinct prompt run once. Pass 1 runs the prompts without their last
        token (left-padded, with their mask) and keeps their keys/values; the cache rows are then copied to
        the rows sharing each prompt (an index, so gradients of every row flow into the one prompt pass).
        Pass 2 runs each row's last prompt token + response (right-padded) on top of its cache row, at
        positions that continue its own prompt; its first T outputs predict the T response tokens."""
        device = self.device
        B, U = len(payloads), len(prompts)
        pre_len = torch.tensor([int(p.numel()) - 1 for p in prompts])
        P = int(pre_len.max())
        pad = self.tokenizer.pad_token_id
        pre_ids = torch.full((U, P), pad, dtype=torch.long)
        pre_attn = torch.zeros((U, P), dtype=torch.long)
        for u, p in enumerate(prompts):
            n = int(pre_len[u])
            if n:
                pre_ids[u, P - n :] = p[:-1]
                pre_attn[u, P - n :] = 1
        rlen = torch.tensor([int(p["response_ids"].numel()) for p in payloads])
        if int(rlen.min()) < 1:
            raise ValueError("every payload needs at least one response token")
        T = int(rlen.max())
        if scorer is not None and not scorer.fits(B, T, P + T):
            scorer = None  # long rows: a float mask this large is not worth it; the transformers forward
        idx = torch.tensor(expand, dtype=torch.long)
        suf = torch.full((B, T + 1), pad, dtype=torch.long)
        for i, p in enumerate(payloads):
            suf[i, 0] = prompts[expand[i]][-1]
            suf[i, 1 : 1 + int(rlen[i])] = p["response_ids"]
        pre_pos = (pre_attn.cumsum(-1) - 1).clamp(min=0)
        # trailing pads of a short response are ones in the mask: causal attention keeps real queries off them
        attn = torch.cat([pre_attn[idx], torch.ones((B, T + 1), dtype=torch.long)], dim=1)
        pos = pre_len[idx][:, None] + torch.arange(T + 1)[None, :]
        pre_ids, pre_attn, pre_pos = pre_ids.to(device), pre_attn.to(device), pre_pos.to(device)
        cols = torch.arange(T, device=device)
        if scorer is not None:  # the last suffix token predicts nothing that is scored: not run
            logits = scorer.shared_prompts(pre_ids, pre_attn, idx.to(device), suf[:, :T].to(device), pos[:, :T].to(device))
        else:
            out = self.model(input_ids=pre_ids, attention_mask=pre_attn, position_ids=pre_pos, use_cache=True,
                             logits_to_keep=1)
            cache_kw, cache = returned_cache(out)
            cache.batch_select_indices(idx.to(device))
            keep = cols[None, :].expand(B, T)
            logits = self.model(input_ids=suf.to(device), attention_mask=attn.to(device), position_ids=pos.to(device),
                                **{cache_kw: cache}, use_cache=True, logits_to_keep=keep).logits
        labels = suf[:, 1:].to(device)
        mask = cols[None, :] < rlen.to(device)[:, None]
        return self._log_probs(payloads, logits, labels, mask, with_entropy)
