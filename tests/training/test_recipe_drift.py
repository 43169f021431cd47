"""Drift tests (issue 50 item 4): each SFT recipe that built a committed checkpoint, run small, gives the
answers it gave when its checkpoint was committed.

The 3.5M two-epoch rebuild drifted from its first build (EM 0.266 -> 0.332 on ``test``) and nothing
noticed. Here every SFT recipe behind a checkpoint in ``data/checkpoints/`` runs its whole pipeline (its
own demonstrator on its own data, its tokenizer or base model, its template and LoRA settings) at a size
that takes seconds: 2 optimizer steps of batch 1 on 4 demonstrations, float32, 1 thread. Then the export
answers the first turn of its eval split's first two tasks greedily (16 tokens). Pinned: a digest of the
demonstrations (tasks and turns), the two losses (3 decimals) and both replies. A change anywhere in that pipeline (demonstrations, rendering, tokenization, loss masking,
LoRA, the export, the policy's parsing) moves one of them; a deliberate change re-records the pins here,
in the commit that makes it, with the reason.

Each RL recipe behind a committed RL adapter is pinned the same way (:data:`RL_DRIFT`): its first step, run
small from the committed adapter it starts from (1 task, 4 copies, or 2 where :data:`RL_EXTRA` says, float32,
1 thread), with what that step sampled (tokens, return, searches) and computed (loss, gradient norm, how far the
LoRA weights moved). A change in sampling, the env, the prompt, the estimator, the loss or the optimizer moves one
of them. The WebShop RL recipes share one small rollout and pin each recipe's advantages
(:data:`WEBSHOP_RL_ADVANTAGES`), and a last test checks that every adapter in ``data/checkpoints`` was built by a
recipe pinned here.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Optional

import pytest

from tests.helpers import load_script

REPO = Path(__file__).resolve().parents[2]

#: how many tokens of each first reply are pinned
REPLY_TOKENS = 16
#: recipe -> (sha256 of the demonstrations' tasks and turns, first 12 hex; the two losses; the first greedy reply to each of the
#: eval split's first two tasks), recorded 2026-12-02 (second LoRA losses 2026-12-03). Every pin was re-recorded
#: 2026-12-05 when the small run went from batch 2 to batch 1, to cut the suite's time (these runs took 32-52 s
#: each on the long-prompt recipes, now 12-33 s): the demonstrations' digests stayed, the losses and 4 of the 22
#: replies moved
DRIFT: dict[str, tuple[str, list[float], list[str]]] = {
    # the 0.64M from-scratch model: 2 steps leave it answering newlines
    "sft-searchqa.yaml": ("5dff12e06f47", [7.65, 7.039], ["\n" * 16, "\n" * 16]),
    # the bundled-world 3.5M model (the 0.64M recipe's demonstrations, a 3.5M Llama), recorded 2026-12-06 when it was
    # rebuilt a third time and committed
    "sft-searchqa-4m.yaml": ("5dff12e06f47", [7.67, 6.915], ["\n" * 16, "\n" * 16]),
    # the 0.49M ALFWorld clone (the hand-coded expert's won train games), recorded 2026-12-06 when it was rebuilt:
    # its 2 steps leave it answering newlines too, so the digest and the losses carry this pin
    "sft-alfworld.yaml": ("b70f9e68608c", [6.391, 5.99], ["\n" * 16, "\n" * 16]),
    # the 13-world 3.5M model (TWO_STAGE; it read in its first build, not in its rebuild): 13 worlds' oracle
    # demonstrations (the first 4 are the bundled world's, hence the SmolLM2 recipe's digest); its second stage trains
    # on from the first's small run. Recorded 2026-12-06
    "sft-searchqa-multiworld-4m.yaml": ("d2714dabf743", [7.746, 7.036], ["\n" * 16, "\n" * 16]),
    "sft-searchqa-multiworld-4m-epoch2.yaml": ("d2714dabf743", [6.595, 6.783], ["<think>" * 16, "<think>" * 16]),
    "sft-smollm2-lora-searchqa.yaml": ("d2714dabf743", [1.784, 1.682], [
        "Saefan Rulei joined the Guild of the Knights of the Golden Lion,",
        "Trou Drilath invented a device called a \"Trou Drilath"]),
    # the planning oracle's demonstrations (issue 48 item 8), recorded 2026-12-05
    "sft-smollm2-lora-searchqa-plan.yaml": ("6065015ea086", [1.792, 1.851], [
        "Saefan Rulei joined the Guild of the Order of the Golden Chalice",
        "The answer to this question is: \"The invention of the Trou Drilath"]),
    # the tools protocol (fallback system message, <tool_call> turns), recorded 2026-12-03
    "sft-smollm2-lora-searchqa-tools.yaml": ("d7f194119a82", [0.949, 0.912], [
        "The answer to this question is Saefan Rulei. The guild that Sa",
        "The answer to this question is:\n\nThe answer to this question is:"]),
    # the same demonstrations rendered with TRL's Qwen2.5 template (issue 51's comparison), recorded 2026-12-03
    "sft-smollm2-lora-searchqa-tools-qwen25.yaml": ("d7f194119a82", [0.879, 0.859], [
        "The answer to this question is:\n\nSaefan Rulei joined the",
        "The answer to this question is:\n\nThe answer to this question is:"]),
    "sft-smollm2-lora-webshop.yaml": ("0487887e615b", [2.166, 1.87], ["I'm ready to assist you. What's your next question?"] * 2),
    "sft-smollm2-lora-webshop-reasons.yaml": ("21a64e143604", [1.971, 1.747], [
        "I'm ready to assist you. Please go ahead and present the current situation.",
        "I'm ready to assist you. Please go ahead and provide the information you need"]),
    "sft-smollm2-lora-webshop-rich.yaml": ("3057125c0243", [2.123, 1.865], [
        "I'm ready to assist you. What's your current situation?",
        "I'm ready to assist you. What's your next question?"]),
    "sft-smollm2-lora-valuecorridor.yaml": ("a995f8cabde6", [2.766, 2.105], ["I'm ready to assist you. What's your next question?"] * 2),
    # planner demonstrations on 4 generated pick-and-place games (the alfworld_games fixture), recorded 2026-12-02.
    # Its second loss once varied between processes (2.200, 2.210, 2.213): the LoRA A matrices were drawn from
    # the RNG state earlier tests left. run_sft now seeds before building the model, so every LoRA recipe's
    # second loss was re-recorded 2026-12-03 (the two SearchQA/WebShop ones moved: 1.544 -> 1.536, 2.517 -> 2.503)
    "sft-smollm2-lora-alfworld-planner.yaml": ("08ec298aaaf4", [1.96, 1.645], [
        "I'm ready to assist you. What's your next question?",
        "I'm ready to assist you. Please go ahead and present the current situation."]),
    # the searching expert's demonstrations on the same 4 games, recorded 2026-12-04 (its checkpoint was built on a
    # lent GPU in bf16 from this recipe; the small run here is float32 on the CPU, as for every pin)
    "sft-smollm2-lora-alfworld-searcher.yaml": ("b2cca90a9bc5", [1.96, 2.231], [
        "I'm ready to assist you. What's your next question?",
        "I'm ready to assist you. Please go ahead and present the current situation."]),
    # the hand-coded expert's demonstrations on the bundled train games (issue 28 item 7), recorded 2026-12-07 before
    # its adapter (lost with its runs/ folder) is rebuilt and committed (issue 50 item 4)
    "sft-smollm2-lora-alfworld.yaml": ("b70f9e68608c", [1.967, 2.12], [
        "I'm ready to assist you. What's your next question?", "I'm ready to assist you. What's your task?"]),
}

SMALL = {"sft.max_steps": 2, "sft.batch_size": 1, "sft.warmup_steps": 0, "sft.save_steps": 1000,
         "sft.logging_steps": 1, "sft.threads": 1, "sft.gradient_checkpointing": False, "eval.n": 0,
         "policy.dtype": "float32"}


@pytest.fixture(scope="module")
def worlds(tmp_path_factory) -> Path:
    """The 13-world training data the SmolLM2 SearchQA recipe reads (scripts/make_search_qa_worlds.py)."""
    out = tmp_path_factory.mktemp("multi13")
    module = load_script(REPO / "scripts" / "make_search_qa_worlds.py", "make_search_qa_worlds")
    module.make_worlds(out, list(module.DEFAULT_SEEDS))
    return out


@pytest.fixture(scope="module")
def alfworld_games(tmp_path_factory) -> Path:
    """A small stand-in for the ALFWorld planner recipe's 240 generated train games (build/alfworld-planner-sft):
    the first 4 pick-and-place games the same command makes (seed 100, seen rooms, evaluation games left out)."""
    from stratagym.envs.alfworld import generator as g
    from stratagym.envs.alfworld.games import eval_exclusions, logic_files

    root = tmp_path_factory.mktemp("alfworld-planner-sft")
    held_out, (domain, grammar) = eval_exclusions(), logic_files()
    task = "pick_and_place_simple"
    for record in g.generate_games(task, 4, seed=100, floor_plans=g.floor_plans_for(task, unseen=False),
                                   exclude_combos=held_out.combos, exclude_problems=held_out.problems):
        g.write_game_folder(record, root / "json_2.1.1" / "train", domain, grammar)
    return root


def _small_recipe(name: str, tmp: Path, model: Optional[Path], worlds: Path, alfworld_games: Path):
    """The recipe's small run (:data:`SMALL`); a recipe that starts from a ``model.path`` starts from ``model``."""
    from stratagym.training.sft import load_sft_recipe

    raw = ((REPO / "recipes" / "cpu" / name).read_text().replace("runs/search_qa_worlds/multi13", str(worlds))
           .replace("build/alfworld-planner-sft", str(alfworld_games)))
    path = tmp / name
    path.write_text(raw)
    over = {**SMALL, "output_dir": str(tmp / f"run-{name}"), "export": str(tmp / f"export-{name}")}
    recipe = load_sft_recipe(path)
    over["demos.n"] = 2 if recipe.demos.episodes_per_task else 4
    if recipe.demos.episodes_per_task:
        over["demos.episodes_per_task"] = 2
    if "path" in recipe.model:
        assert model is not None, f"{name} starts from a model.path: give its small run one"
        over["model.path"] = str(model)
    return load_sft_recipe(path, over)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sft-searchqa.yaml", "sft-smollm2-lora-searchqa.yaml", "sft-smollm2-lora-searchqa-tools.yaml",
                                  "sft-smollm2-lora-searchqa-plan.yaml",
                                  "sft-smollm2-lora-searchqa-tools-qwen25.yaml",
                                  "sft-smollm2-lora-webshop.yaml", "sft-smollm2-lora-webshop-reasons.yaml",
                                  "sft-smollm2-lora-webshop-rich.yaml",
                                  "sft-smollm2-lora-valuecorridor.yaml", "sft-smollm2-lora-alfworld-planner.yaml",
                                  "sft-smollm2-lora-alfworld-searcher.yaml", "sft-smollm2-lora-alfworld.yaml",
                                  "sft-alfworld.yaml", "sft-searchqa-4m.yaml"])
def test_sft_recipe_gives_its_recorded_answers(name, tmp_path, smollm2_model, worlds, alfworld_games):
    recipe = _small_recipe(name, tmp_path, smollm2_model, worlds, alfworld_games)
    _check_small_sft_run(name, recipe)


#: a second stage's recipe -> its first stage's: the second trains on from the first's export (its ``model.path``),
#: so its small run starts from the first stage's small run, not from SmolLM2
TWO_STAGE = {"sft-searchqa-multiworld-4m-epoch2.yaml": "sft-searchqa-multiworld-4m.yaml"}


@pytest.mark.slow
@pytest.mark.parametrize("second", sorted(TWO_STAGE))
def test_two_stage_sft_recipes_give_their_recorded_answers(second, tmp_path, worlds, alfworld_games):
    """The 13-world 3.5M model (docs/llm-learning.md, "Small models that read"): one epoch from scratch, then a
    second from that checkpoint. Both stages' small runs are pinned, the second from the first's export."""
    first = _small_recipe(TWO_STAGE[second], tmp_path, None, worlds, alfworld_games)
    _check_small_sft_run(TWO_STAGE[second], first)
    _check_small_sft_run(second, _small_recipe(second, tmp_path, first.export_dir, worlds, alfworld_games))


def _check_small_sft_run(name: str, recipe) -> None:
    """Run ``recipe`` (a small run) and compare its demonstrations, losses and first greedy replies with ``DRIFT``."""
    import gymnasium as gym

    from stratagym.agents.llm import LLMPolicy
    from stratagym.agents.policy import GenerationRequest
    from stratagym.envs.core import EpisodeKey
    from stratagym.training.demos import read_demos
    from stratagym.training.sft import run_sft

    meta = run_sft(recipe, progress=False, echo=lambda *_: None)
    policy = LLMPolicy.from_pretrained(str(recipe.export_dir), max_new_tokens=REPLY_TOKENS)
    env = gym.make(recipe.env.id, **dict(recipe.env.eval_kwargs or recipe.env.kwargs))
    try:
        requests = []
        for task in [str(t) for t in env.unwrapped.task_ids()][:2]:
            obs, info = env.reset(seed=0, options={"task_id": task})
            requests.append(GenerationRequest(obs, info, (), recipe.env.id, EpisodeKey(task, 0, 0)))
    finally:
        env.close()
    # the demonstrations by what they show (task and turns): the file also records where the data lay
    shown = [(r["task_id"], r["turns"]) for r in read_demos(meta["demos"]["path"])]
    digest = hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()[:12]
    got = (digest, [round(x, 3) for x in meta["loss_curve"]],
           [g.text for g in policy.generate(requests, greedy=True)])
    if name not in DRIFT:
        pytest.fail(f"no pin for {name}; recorded now: {json.dumps(got)}")
    digest, losses, replies = DRIFT[name]
    assert got == (digest, losses, replies), f"recorded now: {json.dumps(got)}"


#: recipes written down from a run of another recipe with overrides (issue 50 item 4: overrides go into a
#: recipe): variant -> (the recipe it was run from, the keys it may change). The small drift run above sets
#: these keys itself (float32, one thread, its own paths), so the base recipe's pin covers the variant.
VARIANTS = {
    "sft-smollm2-lora-searchqa-bf16.yaml": ("sft-smollm2-lora-searchqa.yaml",
                                            {"name", "policy.dtype", "sft.threads", "output_dir", "export"}),
    "grpo-smollm2-lora-kl-searchqa-bf16.yaml": ("grpo-smollm2-lora-kl-searchqa.yaml",
                                                {"name", "policy.dtype", "train.output_dir"}),
    # the searcher clone trained to convergence on a GPU (issue 48 item 5): only the budget differs
    "gpu/sft-smollm2-lora-alfworld-searcher.yaml": ("sft-smollm2-lora-alfworld-searcher.yaml",
                                                    {"name", "sft.epochs", "sft.max_steps", "sft.save_steps",
                                                     "sft.logging_steps", "output_dir", "export"}),
    # the same with the searcher's reasons as think text (not yet run: no adapter rests on it); the reasoned
    # demonstrations' prompts and actions are the plain ones' (tests/alfworld/test_searcher.py)
    "gpu/sft-smollm2-lora-alfworld-searcher-reasons.yaml": ("gpu/sft-smollm2-lora-alfworld-searcher.yaml",
                                                            {"name", "demos.reasons", "policy.max_new_tokens",
                                                             "output_dir", "export"}),
    # the KL coefficient is not set by the small drift run: this variant has its own pin in RL_DRIFT
    # issue 48 item 2's second WebShop recipe: reasons as think text, WebShop's rich text mode, no memory
    "sft-smollm2-lora-webshop-reasons.yaml": ("sft-smollm2-lora-webshop.yaml",
                                              {"name", "env.kwargs", "env.eval_kwargs", "demos.reasons", "policy.memory_k",
                                               "sft.threads", "sft.save_steps", "output_dir", "export"}),
    "sft-smollm2-lora-webshop-rich.yaml": ("sft-smollm2-lora-webshop-reasons.yaml",
                                           {"name", "demos.reasons", "output_dir", "export"}),
    # issue 48 item 2's fourth WebShop recipe: the first on twice the demonstrations (the drift run is small and uses
    # 4 demonstrations either way, so the first recipe's pin covers this one's pipeline)
    "sft-smollm2-lora-webshop-180.yaml": ("sft-smollm2-lora-webshop.yaml",
                                          {"name", "demos.n", "sft.threads", "output_dir", "export"}),
    "grpo-smollm2-lora-nokl-lr5e-5-searchqa.yaml": ("grpo-smollm2-lora-kl-searchqa.yaml",
                                                    {"name", "loss.kl_coef", "train.output_dir"}),
    # issue 48 item 8: the same RL from the planning-oracle SFT adapter
    "grpo-smollm2-lora-kl-searchqa-plan.yaml": ("grpo-smollm2-lora-kl-searchqa-bf16.yaml",
                                                {"name", "policy.model", "train.output_dir"}),
    # issue 48 item 8's demonstrations candidate: another demonstrator (its think text), so its small run is not
    # the base's and it has its own pin in DRIFT
    "sft-smollm2-lora-searchqa-plan.yaml": ("sft-smollm2-lora-searchqa-bf16.yaml",
                                            {"name", "demos.agent", "output_dir", "export"}),
    # its second build: another training seed only (the one setting the base's small run does not exercise: it
    # draws the LoRA initialisation and the batch order; the demonstrations and the pipeline are the base's)
    "sft-smollm2-lora-searchqa-plan-s1.yaml": ("sft-smollm2-lora-searchqa-plan.yaml",
                                               {"name", "sft.seed", "output_dir", "export"}),
    # issue 48 item 3's other two WebShop RL arms: the estimator (and for HGPO K=2 the env's context_k, which moves
    # no observation) alone differ from GiGPO's; each has its own advantages pinned (WEBSHOP_RL_ADVANTAGES). GRPO's
    # also raises rollout.parity_max (its seed 0 stops at step 2 on one bf16-rounded token; the recipe's header),
    # which decides only whether a run stops, not any figure it computes
    "grpo-smollm2-lora-webshop.yaml": ("gigpo-smollm2-lora-webshop.yaml",
                                       {"name", "algorithm.estimator", "algorithm.estimator_kwargs", "rollout.parity_max",
                                        "train.output_dir"}),
    "hgpo2-smollm2-lora-webshop.yaml": ("gigpo-smollm2-lora-webshop.yaml",
                                        {"name", "algorithm.estimator", "algorithm.estimator_kwargs", "env.kwargs",
                                         "train.output_dir"}),
    # the +5-point target's next lever (registered in docs/llm-learning.md before any run): GiGPO's recipe with a 4x
    # learning rate and twice the steps; the small drift run takes one step, so GiGPO's pin covers its pipeline
    "gigpo-lr2e-4-smollm2-lora-webshop.yaml": ("gigpo-smollm2-lora-webshop.yaml",
                                               {"name", "optim.lr", "train.total_steps", "train.output_dir"}),
}


def _flat(data: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict) and key in ("policy", "sft", "train", "env", "demos", "model", "rollout", "loss", "optim",
                                               "algorithm", "eval"):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_a_recipe_variant_changes_only_what_its_run_overrode(variant):
    import yaml

    base, allowed = VARIANTS[variant]
    a, b = (_flat(yaml.safe_load((REPO / "recipes" / (n if "/" in n else f"cpu/{n}")).read_text())) for n in (base, variant))
    changed = {k for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    assert changed <= allowed, f"{variant} differs from {base} in {sorted(changed - allowed)}"
    assert "name" in changed and len(changed) > 1



# ---- the RL recipes behind committed RL adapters ---------------------------------------------------------------

#: the HGPO corridor study's HGPO K=4 arm (its GiGPO arm is llm-study-valuecorridor-sft-lora.yaml as it stands): the
#: rebuilt runs' adapters are data/checkpoints/study-corridor-{gigpo,hgpo-k-4}-smollm2-lora-valuecorridor-s*
CORRIDOR_HGPO_ARM = "llm-study-valuecorridor-sft-lora.yaml, hgpo-smollm2-corridor-mixed's HGPO K=4 arm"

#: recipe -> its first step's (sampled tokens, mean return, mean searches, loss, gradient norm, LoRA weight
#: change's L2 norm), the floats to 4 significant digits, recorded 2026-12-03 (1 task, group of 4, float32).
#: The losses were re-recorded the same day when ``loss/*`` became the mini-batch's loss rather than the
#: unweighted mean of its micro-batches' (tests/trainer/test_update_metrics.py); nothing else moved
RL_DRIFT: dict[str, tuple[int, float, float, float, float, float]] = {
    "grpo-smollm2-lora-kl-searchqa.yaml": (276, 0.5, 1.5, -0.1883, 0.1934, 0.0677),
    # the tools protocol's long prompts made its step 60-90 s with 4 copies: re-recorded 2026-12-06 with 2 copies and
    # train seed 3 (RL_EXTRA), whose two copies differ (one answers right), so the update is still exercised; with 4
    # copies and seed 0 it was (459, 0.5, 1.5, 0.1151, 0.3356, 0.06777)
    "grpo-smollm2-lora-kl-searchqa-tools.yaml": (253, 0.5, 3.0, 0.1537, 0.28, 0.06774),
    # re-recorded 2026-12-06 with 2 copies from train seed 5 (RL_EXTRA; seeds 1-4 and 6 drew two lost copies, no update);
    # with 4 copies and seed 0 it was (480, 0.25, 1.5, 0.2208, 0.1879, 0.06767)
    "grpo-smollm2-lora-kl-searchqa-tools-qwen25.yaml": (276, 0.5, 2.5, 0.1742, 0.268, 0.06773),
    "hops-stratified-fp32-smollm2-lora-searchqa.yaml": (366, 0.25, 2.0, 0.02903, 0.1393, 0.06761),
    # every copy loses its 3-hop question (as with 2 tasks: 615 tokens, 1.75 searches, all lost), so no
    # advantage and no update: this pin covers sampling and the env only; the other four cover the update
    "hop3-grpo-smollm2-lora-searchqa.yaml": (260, 0.0, 1.5, 0.0, 0.0, 0.0),
    # the same start, seed and samples as the GRPO tools recipe: only the estimator moves the loss and grad norm
    # (re-recorded with the GRPO tools pin; it was (459, 0.5, 1.5, 0.05316, 0.155, 0.06766))
    "stratified-smollm2-lora-kl-searchqa-tools.yaml": (253, 0.5, 3.0, 0.08696, 0.1584, 0.06765),
    # through the gateway, each call generated alone (the note below), recorded 2026-12-04 as (701, 0.5, 2.25, 0.3126,
    # 0.202, 0.0677); re-recorded the same evening: in a .venv built fresh that day the step samples otherwise, 3 runs
    # of 3, also at the commit the pin was recorded at (so a dependency the program's requests pass through moved,
    # not stratagym; openai 3.57 instead of 3.60 gives the same; which one is not identified). The other pins held.
    # Re-recorded 2026-12-05 with a group of 2 (RL_EXTRA), to cut the suite's time (its step was the suite's slowest
    # test, 140 s: each call generated alone): (410, 0.5, 3.0, 0.376, 0.1815, 0.06769), two runs of two alike; one
    # copy answers right, so the update is still exercised
    "grpo-smollm2-lora-kl-searchqa-program.yaml": (410, 0.5, 3.0, 0.376, 0.1815, 0.06769),
    # the same start, seed and samples as the GRPO recipe above, recorded 2026-12-04 when its adapters were rebuilt
    "stratified-smollm2-lora-kl-searchqa.yaml": (276, 0.5, 1.5, -0.08696, 0.08934, 0.06754),
    # the KL ablation, recorded 2026-12-04. Not the KL recipe's samples, though the figures look so: building the KL
    # reference (LLMPolicy.frozen_copy loads the start adapter a second time, and peft initialises the new LoRA
    # weights before loading them) draws from the global RNG, so with the KL term on, sampling starts from another
    # state. Here two of the 10 responses differ (31 and 29 tokens where the KL run sampled 30 and 30), which leaves
    # the token count and, with advantages +-0.866, the token-mean loss equal; the gradient is another batch's.
    "grpo-smollm2-lora-nokl-lr5e-5-searchqa.yaml": (276, 0.5, 1.5, -0.1883, 0.07151, 0.06748),
    # issue 48 item 8: GRPO + KL from the planning-oracle SFT adapter, recorded 2026-12-05
    "grpo-smollm2-lora-kl-searchqa-plan.yaml": (282, 0.75, 1.75, -0.1596, 0.1113, 0.06755),
    # the first SmolLM2 RL recipes (lr 1e-4, no KL), behind the first runs' adapters and the hops studies' nine,
    # recorded 2026-12-05. Without the KL term they sample as the KL ablation above (same tokens, loss and gradient
    # for GRPO); twice its learning rate moves the weights twice as far in Adam's first step
    "grpo-smollm2-lora-searchqa.yaml": (276, 0.5, 1.5, -0.1883, 0.07151, 0.135),
    "stratified-smollm2-lora-searchqa.yaml": (276, 0.5, 1.5, -0.08696, 0.03303, 0.1343),
    "grpo-smollm2-lora-searchqa.yaml, hadw-smollm2-hops's GRPO + HA-DW arm": (276, 0.5, 1.5, -0.2447, 0.09296, 0.1351),
    # the HGPO corridor study's two arms (ValueCorridor: no searches), recorded 2026-12-07 when its seed-0 runs were
    # rebuilt and committed; a group of 2 (RL_EXTRA). The same samples in both: only the estimator moves the loss
    "llm-study-valuecorridor-sft-lora.yaml": (663, 0.5, 0.0, 0.02072, 0.1494, 0.1353),
    CORRIDOR_HGPO_ARM: (663, 0.5, 0.0, 0.03374, 0.08933, 0.135),
}
# The program recipe (the openai-SDK program through the gateway) runs its small step with
# rollout.batch_invariant (RL_EXTRA). Without it, 5 of 6 runs of this step (seeded sessions, 2026-12-03) drew
# 698 tokens and one drew 701: which copies' calls shared a batch, and prefix-cache hits, moved the logits in
# their last bits and flipped a sample. Generating each call alone, 4 of 4 runs (separate processes, the
# machine loaded by a study, 2026-12-04) gave the figures pinned above: those of the one odd run (701 tokens,
# loss 0.3126, grad norm 0.202), whose calls had probably each found the gateway idle and run alone

#: what a recipe's small first step adds to :data:`RL_SMALL`: the program recipe's gateway generates each call
#: alone (``rollout.batch_invariant``), so what a copy samples does not depend on which copies' calls arrived
#: together; the committed run batched them, which changes float rounding only. That makes its step the slowest,
#: so it samples a group of 2 rather than 4. The three tools recipes sample a group of 2 too, from a train seed whose
#: two copies differ (3, and 5 for the Qwen2.5 template): their long prompts made each step 60-90 s, and with seed 0
#: two copies end alike (no update to pin); the train seed draws the task and the samples, nothing in the pipeline
#: pinned
_TOOLS_SMALL = {"rollout.group_size": 2, "train.seed": 3}
RL_EXTRA: dict[str, dict] = {"grpo-smollm2-lora-kl-searchqa-program.yaml": {"rollout.batch_invariant": True,
                                                                            "rollout.group_size": 2},
                             "grpo-smollm2-lora-kl-searchqa-tools.yaml": _TOOLS_SMALL,
                             "stratified-smollm2-lora-kl-searchqa-tools.yaml": _TOOLS_SMALL,
                             "grpo-smollm2-lora-kl-searchqa-tools-qwen25.yaml": {**_TOOLS_SMALL, "train.seed": 5},
                             # the HGPO corridor study's arms: 12 turns an episode, so a group of 2 (the copies differ)
                             "llm-study-valuecorridor-sft-lora.yaml": {"rollout.group_size": 2},
                             CORRIDOR_HGPO_ARM: {"rollout.group_size": 2}}

#: a study arm that is its study's recipe with an override (suites/studies/llm/*.yaml ``arms``), pinned like a recipe:
#: name -> (the recipe, the arm's overrides). The HA-DW study's GRPO + HA-DW arm built three committed adapters
#: (data/checkpoints/study-hops-hadw-*); its GRPO arm is grpo-smollm2-lora-searchqa.yaml as it stands, and the
#: Stratified study's arm is stratified-smollm2-lora-searchqa.yaml's estimator (both pinned above)
HADW_ARM = "grpo-smollm2-lora-searchqa.yaml, hadw-smollm2-hops's GRPO + HA-DW arm"
STUDY_ARMS: dict[str, tuple[str, dict]] = {
    HADW_ARM: ("grpo-smollm2-lora-searchqa.yaml", {"algorithm.estimator": "grpo+hadw"}),
    CORRIDOR_HGPO_ARM: ("llm-study-valuecorridor-sft-lora.yaml",
                        {"algorithm.estimator": "hgpo", "algorithm.estimator_kwargs": {"gamma": 0.95}}),
}

RL_SMALL = {"rollout.group_size": 4, "rollout.tasks_per_step": 1, "train.total_steps": 1, "train.save_every": 0,
            "train.eval_every": 0, "train.progress": False, "train.tensorboard": False, "policy.dtype": "float32"}


def _sig(x: float) -> float:
    return float(f"{x:.4g}")


def _lora_weights(model) -> dict:
    return {k: v.detach().float().clone() for k, v in model.named_parameters() if "lora_" in k}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["grpo-smollm2-lora-kl-searchqa.yaml", "grpo-smollm2-lora-kl-searchqa-tools.yaml",
                                  "grpo-smollm2-lora-kl-searchqa-tools-qwen25.yaml", "hop3-grpo-smollm2-lora-searchqa.yaml",
                                  "hops-stratified-fp32-smollm2-lora-searchqa.yaml", "stratified-smollm2-lora-kl-searchqa-tools.yaml",
                                  "grpo-smollm2-lora-kl-searchqa-program.yaml", "stratified-smollm2-lora-kl-searchqa.yaml",
                                  "grpo-smollm2-lora-nokl-lr5e-5-searchqa.yaml", "grpo-smollm2-lora-kl-searchqa-plan.yaml",
                                  "grpo-smollm2-lora-searchqa.yaml", "stratified-smollm2-lora-searchqa.yaml",
                                  HADW_ARM, "llm-study-valuecorridor-sft-lora.yaml", CORRIDOR_HGPO_ARM])
def test_rl_recipe_first_step_gives_its_recorded_figures(name, tmp_path, smollm2_model, worlds):
    import torch

    from stratagym.training.config import load_recipe, read_yaml_mapping
    from stratagym.training.trainer import Trainer
    from tests.helpers import adapter_on_base

    source, arm = STUDY_ARMS.get(name, (name, {}))
    path = tmp_path / source
    path.write_text((REPO / "recipes" / "cpu" / source).read_text().replace("runs/search_qa_worlds/multi13", str(worlds)))
    start = adapter_on_base(REPO / read_yaml_mapping(path)["policy"]["model"], smollm2_model, tmp_path)
    recipe = load_recipe(path, {**RL_SMALL, **RL_EXTRA.get(name, {}), **arm, "train.output_dir": str(tmp_path / "run"),
                                "policy.model": str(start)})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    trainer = Trainer(recipe)
    try:
        before = _lora_weights(trainer.policy.model)
        row = trainer.train_step()
        moved = math.sqrt(sum(float((p - before[k]).pow(2).sum()) for k, p in _lora_weights(trainer.policy.model).items()))
    finally:
        trainer.close()
        torch.set_num_threads(threads)
    got = (int(row["rollout/tokens"]), _sig(row["rollout/return"]), _sig(row.get("rollout/search_count", 0.0)),
           _sig(row["loss/loss"]), _sig(row["optim/grad_norm"]), _sig(moved))
    if name not in RL_DRIFT:
        pytest.fail(f"no pin for {name}; recorded now: {json.dumps(got)}")
    assert got == RL_DRIFT[name], f"recorded now: {json.dumps(got)}"


# ---- the runs of benchmarks/llm_learning.py's comparisons -------------------------------------------------------

#: benchmarks/llm_learning.py trains every arm of a comparison from one recipe with the method's estimator set (its
#: METHODS), from the committed full SFT model the recipe names (no adapter). Three comparisons' runs are committed:
#: the 0.64M SearchQA model's nine (grpo-tiny-searchqa.yaml, rebuilt 2026-12-05:
#: data/checkpoints/<method>-searchqa-0.64m-s<seed>), the 0.49M ALFWorld clone's four (gigpo-sft-alfworld.yaml,
#: rebuilt 2026-12-06: data/checkpoints/<method>-alfworld-0.49m-s<seed>) and the 3.5M SearchQA model's nine from its
#: third SFT build (grpo-4m-searchqa.yaml, 2026-12-06: data/checkpoints/<method>-searchqa-3.5m-s<seed>; the benchmark
#: ran them as grpo-tiny-searchqa.yaml with --sft data/checkpoints/sft-searchqa-4m --set optim.lr=1.0e-4, which is
#: grpo-4m-searchqa.yaml but for the name, output folder and saving / mid-run eval / logging, which the benchmark sets
#: anyway). So each arm's first step is pinned like a recipe: RL_SMALL's one task x G = 4, float32, one thread;
#: tokens, return, searches, loss, grad norm and weight change. The SearchQA recipe's DAPO dynamic sampling stays on (a tied group is redrawn, up to 4 draws).
TINY_METHODS = ("grpo", "stratified", "stratified+hadw")  # the benchmark's SEARCHQA_METHODS; METHODS gives the estimator
ALFWORLD_METHODS = ("gigpo", "hgpo")  # the ALFWorld comparison's (docs/llm-learning.md, "ALFWorld")


def _bench_arm(recipe: str, method: str) -> str:
    return f"{recipe} with benchmarks/llm_learning.py's {method} estimator"


def _tiny_arm(method: str) -> str:
    return _bench_arm("grpo-tiny-searchqa.yaml", method)


def _alfworld_arm(method: str) -> str:
    return _bench_arm("gigpo-sft-alfworld.yaml", method)


def _searchqa_4m_arm(method: str) -> str:
    return _bench_arm("grpo-4m-searchqa.yaml", method)


BENCH_ARMS: dict[str, tuple[str, str]] = {
    **{_tiny_arm(m): ("grpo-tiny-searchqa.yaml", m) for m in TINY_METHODS},
    **{_alfworld_arm(m): ("gigpo-sft-alfworld.yaml", m) for m in ALFWORLD_METHODS},
    **{_searchqa_4m_arm(m): ("grpo-4m-searchqa.yaml", m) for m in TINY_METHODS},
}

#: The 0.64M model's first step is the one pin here that depends on the CPU. torch's float32 kernels are picked by the
#: CPU's vector level (``torch.backends.cpu.get_cpu_capability()``: "AVX2", "AVX512"), they add in different orders,
#: so the logits differ in their last bits, and at temperature 1 one of this rollout's 4 samples comes out differently
#: on AVX512 (return 0.75 and 706 tokens, against 0.5 and 704 on AVX2), which moves the loss, gradient and weights.
#: It is ATen's own kernels: on an AVX512 machine, ``ATEN_CPU_CAPABILITY=avx2`` gives the AVX2 set, while holding MKL
#: and oneDNN to AVX2 (``MKL_ENABLE_INSTRUCTIONS``, ``ONEDNN_MAX_CPU_ISA``) leaves the AVX512 one (checked 2026-12-06).
#: CI's machines have been of both levels (its run of 2026-12-06 failed on AVX512 against the AVX2 pins), so these arms
#: are pinned per level, each set as that level gives it; a level with no set here fails with its figures. The other
#: arms gave the same figures on both levels.
TINY_DRIFT_BY_CPU_LEVEL: dict[str, dict[str, tuple[int, float, float, float, float, float]]] = {
    # recorded 2026-12-05 on AVX2-only machines (where the runs in data/checkpoints/<method>-searchqa-0.64m-s<seed>
    # were built)
    "AVX2": {
        _tiny_arm("grpo"): (704, 0.5, 3.0, 0.0, 0.3745, 0.1453),
        _tiny_arm("stratified"): (704, 0.5, 3.0, 0.0, 0.4325, 0.1461),
        _tiny_arm("stratified+hadw"): (704, 0.5, 3.0, 0.0, 0.5622, 0.1476),
    },
    # recorded 2026-12-06 on an AVX512-BF16 machine without AMX (and the same figures in CI's failed run that day)
    "AVX512": {
        _tiny_arm("grpo"): (706, 0.75, 3.0, 0.0159, 0.6548, 0.1526),
        _tiny_arm("stratified"): (706, 0.75, 3.0, 0.01836, 0.7561, 0.1532),
        _tiny_arm("stratified+hadw"): (706, 0.75, 3.0, 0.02387, 0.9829, 0.1543),
    },
}


def _cpu_level() -> str:
    """The vector level torch's CPU kernels dispatch on here ("AVX2", "AVX512", ...)."""
    import torch

    return torch.backends.cpu.get_cpu_capability()


BENCH_RL_DRIFT: dict[str, tuple[int, float, float, float, float, float]] = {
    # recorded 2026-12-06 from the rebuilt data/checkpoints/sft-alfworld: the same 4 copies of one train game for both
    # arms, all lost (return 0), so every advantage comes from the invalid-command penalty through the estimator's
    # step groups, and the estimators alone move the loss, the gradient and the weights
    _alfworld_arm("gigpo"): (2659, 0.0, 0.0, 0.002077, 0.04227, 0.1326),
    _alfworld_arm("hgpo"): (2659, 0.0, 0.0, 0.04843, 0.1316, 0.1364),
    # recorded 2026-12-06 from the committed data/checkpoints/sft-searchqa-4m (its third build): one question's 4
    # samples, half right, so the three estimators give the same rollout different losses and gradients
    _searchqa_4m_arm("grpo"): (565, 0.5, 2.0, -0.2887, 1.597, 0.1861),
    _searchqa_4m_arm("stratified"): (565, 0.5, 2.0, -0.1333, 0.7378, 0.1857),
    _searchqa_4m_arm("stratified+hadw"): (565, 0.5, 2.0, -0.1733, 0.9591, 0.1861),
}


@pytest.mark.parametrize("name", list(BENCH_ARMS))
def test_benchmark_rl_arm_first_step_gives_its_recorded_figures(name, tmp_path):
    import torch

    from stratagym.training.config import load_recipe
    from stratagym.training.trainer import Trainer

    bench = load_script(REPO / "benchmarks" / "llm_learning.py", "llm_learning_bench")
    assert tuple(bench.SEARCHQA_METHODS) == TINY_METHODS
    recipe_name, method = BENCH_ARMS[name]
    estimator, kwargs = bench.METHODS[method]  # the arm as the benchmark builds it, not a copy of it
    recipe = load_recipe(REPO / "recipes" / "cpu" / recipe_name,
                         {**RL_SMALL, "algorithm.estimator": estimator, "algorithm.estimator_kwargs": kwargs,
                          "train.output_dir": str(tmp_path / "run")})
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    trainer = Trainer(recipe)
    try:
        before = {k: v.detach().clone() for k, v in trainer.policy.model.named_parameters()}
        row = trainer.train_step()
        moved = math.sqrt(sum(float((p.detach() - before[k]).pow(2).sum()) for k, p in trainer.policy.model.named_parameters()))
    finally:
        trainer.close()
        torch.set_num_threads(threads)
    # a loss that is a token mean of advantages that cancel (SearchQA's samples here all have the same length) is
    # float noise around 0 (-5.5e-09), so a loss that small is pinned to 6 decimals, not to 4 significant digits
    loss = row["loss/loss"]
    got = (int(row["rollout/tokens"]), _sig(row["rollout/return"]), _sig(row["rollout/search_count"]),
           round(loss, 6) + 0.0 if abs(loss) < 1e-4 else _sig(loss), _sig(row["optim/grad_norm"]), _sig(moved))
    pins = {**BENCH_RL_DRIFT, **TINY_DRIFT_BY_CPU_LEVEL.get(_cpu_level(), {})}
    if name not in pins:
        pytest.fail(f"no pin for {name} on this CPU's {_cpu_level()} kernels; recorded now: {json.dumps(got)}")
    assert got == pins[name], f"recorded now on {_cpu_level()} kernels: {json.dumps(got)}"


def test_tiny_arms_are_pinned_on_every_cpu_level_and_only_there():
    """Each CPU level pins the same three 0.64M arms, and no arm is pinned both per level and for every CPU."""
    assert all(set(pins) == {_tiny_arm(m) for m in TINY_METHODS} for pins in TINY_DRIFT_BY_CPU_LEVEL.values())
    assert not set(BENCH_RL_DRIFT) & {_tiny_arm(m) for m in TINY_METHODS}


# ---- the WebShop RL recipes (issue 48 item 3) ------------------------------------------------------------------

#: GiGPO, GRPO and HGPO K=2 on WebShop differ only in how a step's advantage is computed, so one small rollout
#: pins all three: the GiGPO recipe's first step from the 180-goal SFT adapter, 1 train goal x 4 copies,
#: float32, 1 thread, episodes cut at 3 turns (the fewest in which a purchase fits: search, click, buy; one copy
#: bought and earned 0.75). Its tokens, mean return and searches, then each recipe's advantage for every sample
#: (3 decimals). The update is not run: a WebShop turn row is ~700 prompt tokens, and the step's update in float32
#: would take minutes here; the SearchQA pins above cover the update path these recipes share. The rollout runs
#: with the env's ``context_k`` at 2 (HGPO K=2's), which moves no observation and so no sample, only the context
#: hashes HGPO reads (``context_k`` is fingerprint-neutral: stratagym/envs/fingerprint.py). Recorded 2026-12-05.
WEBSHOP_RL_ROLLOUT = (568, 0.1875, 1.0)
WEBSHOP_RL_ADVANTAGES: dict[str, list[float]] = {
    "gigpo-smollm2-lora-webshop.yaml": [-0.357, -0.188, -0.375, -0.357, -0.188, -0.375, 1.07, 0.562, 1.125,
                                        -0.357, -0.188, -0.375],
    "grpo-smollm2-lora-webshop.yaml": [-0.5] * 6 + [1.5] * 3 + [-0.5] * 3,
    # the second turn (each copy's own results page: their queries differed) is in no step group of two or more:
    # GiGPO gives it the episode's advantage alone (its step term is 0 there), HGPO, with no episode level, none
    "hgpo2-smollm2-lora-webshop.yaml": [-0.577, 0.0, -0.577, -0.577, 0.0, -0.577, 1.732, 0.0, 1.732, -0.577, 0.0,
                                        -0.577],
}


@pytest.mark.slow
def test_webshop_rl_recipes_first_rollout_gives_its_recorded_advantages(tmp_path, smollm2_model):
    import torch

    from stratagym.training.config import load_recipe, read_yaml_mapping
    from stratagym.training.distributed import estimate_advantages
    from stratagym.training.rollout import shape_rewards, to_advantage_batch
    from stratagym.training.trainer import Trainer
    from tests.helpers import adapter_on_base

    names = sorted(WEBSHOP_RL_ADVANTAGES)
    first = REPO / "recipes" / "cpu" / "gigpo-smollm2-lora-webshop.yaml"
    start = adapter_on_base(REPO / read_yaml_mapping(first)["policy"]["model"], smollm2_model, tmp_path)
    over = {**RL_SMALL, "env.kwargs.max_steps": 3, "env.kwargs.context_k": 2, "train.output_dir": str(tmp_path / "run"),
            "policy.model": str(start)}
    recipes = {n: load_recipe(REPO / "recipes" / "cpu" / n, over) for n in names}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    trainer = Trainer(recipes["gigpo-smollm2-lora-webshop.yaml"])
    try:
        batch = trainer.rollout()
    finally:
        trainer.close()
        torch.set_num_threads(threads)
    m = batch.metrics()
    got_rollout = (int(m["rollout/tokens"]), _sig(m["rollout/return"]), _sig(m["rollout/search_count"]))
    penalties = {r.algorithm.invalid_action_penalty for r in recipes.values()}
    assert len(penalties) == 1  # the reward is shaped once for all three
    shape_rewards(batch, invalid_action_penalty=penalties.pop())
    got = {}
    for name, recipe in recipes.items():
        estimator = recipe.validate_and_build().estimator
        rows, sample_row, _ = to_advantage_batch(batch, estimator.level)
        got[name] = [round(float(a), 3) for a in estimate_advantages(estimator, rows)[sample_row]]
    assert (got_rollout, got) == (WEBSHOP_RL_ROLLOUT, WEBSHOP_RL_ADVANTAGES), f"recorded now: {json.dumps([got_rollout, got])}"


# ---- every committed adapter's recipe is pinned ------------------------------------------------------------------

#: the committed RL adapters (data/checkpoints) -> the recipe (or study arm) that built them. RL exports made before
#: 2026-12-05 do not name their recipe (an SFT export does, in sft_meta.json), so each is listed here; a later one
#: names it in its provenance's last stage (``recipe``), which serves unless an entry here says otherwise (a study
#: arm runs under its base recipe's name)
RL_ADAPTERS: dict[str, str] = {
    "gigpo-smollm2-lora-webshop-s0": "gigpo-smollm2-lora-webshop.yaml",
    "gigpo-smollm2-lora-webshop-s1": "gigpo-smollm2-lora-webshop.yaml",
    "grpo-kl-smollm2-lora-searchqa-s0": "grpo-smollm2-lora-kl-searchqa.yaml",
    "grpo-kl-smollm2-lora-searchqa-s1": "grpo-smollm2-lora-kl-searchqa.yaml",
    "grpo-kl-smollm2-lora-searchqa-bf16-s0": "grpo-smollm2-lora-kl-searchqa-bf16.yaml",
    "grpo-kl-smollm2-lora-searchqa-plan-s0": "grpo-smollm2-lora-kl-searchqa-plan.yaml",
    "grpo-kl-smollm2-lora-searchqa-program-qwen25-s0": "grpo-smollm2-lora-kl-searchqa-program.yaml",
    "grpo-kl-smollm2-lora-searchqa-tools-bf16-s0": "grpo-smollm2-lora-kl-searchqa-tools.yaml",
    "grpo-kl-smollm2-lora-searchqa-tools-qwen25-s0": "grpo-smollm2-lora-kl-searchqa-tools-qwen25.yaml",
    "grpo-nokl-lr5e-5-smollm2-lora-searchqa-s0": "grpo-smollm2-lora-nokl-lr5e-5-searchqa.yaml",
    "grpo-nokl-lr5e-5-smollm2-lora-searchqa-s1": "grpo-smollm2-lora-nokl-lr5e-5-searchqa.yaml",
    "grpo-smollm2-lora-searchqa": "grpo-smollm2-lora-searchqa.yaml",
    "hop3-grpo-smollm2-lora-searchqa-bf16-s0": "hop3-grpo-smollm2-lora-searchqa.yaml",
    "hops-stratified-fp32-smollm2-lora-searchqa-s0": "hops-stratified-fp32-smollm2-lora-searchqa.yaml",
    "stratified-kl-smollm2-lora-searchqa-s0": "stratified-smollm2-lora-kl-searchqa.yaml",
    "stratified-kl-smollm2-lora-searchqa-s1": "stratified-smollm2-lora-kl-searchqa.yaml",
    "stratified-kl-smollm2-lora-searchqa-tools-bf16-s0": "stratified-smollm2-lora-kl-searchqa-tools.yaml",
    "stratified-smollm2-lora-searchqa": "stratified-smollm2-lora-searchqa.yaml",
    **{f"study-hops-grpo-smollm2-lora-searchqa-s{s}": "grpo-smollm2-lora-searchqa.yaml" for s in range(3)},
    **{f"study-hops-stratified-smollm2-lora-searchqa-s{s}": "stratified-smollm2-lora-searchqa.yaml" for s in range(3)},
    **{f"study-hops-hadw-smollm2-lora-searchqa-s{s}": HADW_ARM for s in range(3)},
    **{f"study-corridor-gigpo-smollm2-lora-valuecorridor-s{s}": "llm-study-valuecorridor-sft-lora.yaml" for s in range(3)},
    **{f"study-corridor-hgpo-k-4-smollm2-lora-valuecorridor-s{s}": CORRIDOR_HGPO_ARM for s in range(3)},
    **{f"{m.replace('+', '-')}-searchqa-0.64m-s{s}": _tiny_arm(m) for s in range(3) for m in TINY_METHODS},
    **{f"{m}-alfworld-0.49m-s{s}": _alfworld_arm(m) for s in range(2) for m in ALFWORLD_METHODS},
    **{f"{m.replace('+', '-')}-searchqa-3.5m-s{s}": _searchqa_4m_arm(m) for s in range(3) for m in TINY_METHODS},
}


def _recipes_by_name() -> dict[str, list[str]]:
    """Each recipe ``name:`` -> the files (relative to recipes/cpu, or gpu/...) that carry it."""
    import yaml

    found: dict[str, list[str]] = {}
    for p in sorted((REPO / "recipes").glob("*/*.yaml")):
        key = p.name if p.parent.name == "cpu" else f"{p.parent.name}/{p.name}"
        found.setdefault(yaml.safe_load(p.read_text())["name"], []).append(key)
    return found


def test_every_committed_adapter_was_built_by_a_pinned_recipe():
    """Issue 50 item 4: each recipe behind a committed checkpoint has a drift pin, its own or (a variant) its base's."""
    from stratagym.provenance import read_provenance

    pinned = (set(DRIFT) | set(RL_DRIFT) | set(BENCH_RL_DRIFT) | set(TINY_DRIFT_BY_CPU_LEVEL["AVX2"])
              | set(WEBSHOP_RL_ADVANTAGES))
    by_name = _recipes_by_name()
    unpinned = []
    for folder in sorted(p for p in (REPO / "data" / "checkpoints").iterdir() if p.is_dir()):
        meta = folder / "sft_meta.json"
        stages = (read_provenance(folder) or {}).get("training_sets", [])
        if folder.name in RL_ADAPTERS:
            recipe = RL_ADAPTERS[folder.name]
        else:
            name = (json.loads(meta.read_text())["recipe"]["name"] if meta.exists()
                    else stages[-1].get("recipe") if stages and stages[-1]["stage"] == "rl" else None)
            assert name, f"{folder.name}: its provenance names no recipe; name the one that built it in RL_ADAPTERS"
            files = by_name.get(name, [])
            assert len(files) == 1, f"{folder.name}: {len(files)} recipe files are named {name!r}: {files}"
            recipe = files[0]
        seen = {recipe}
        while recipe not in pinned and recipe in VARIANTS:  # a variant is covered by its base's pin
            recipe = VARIANTS[recipe][0]
            assert recipe not in seen
            seen.add(recipe)
        if recipe not in pinned:
            unpinned.append(f"{folder.name} ({recipe})")
    assert not unpinned, f"committed adapters whose recipe has no drift pin: {unpinned}"
