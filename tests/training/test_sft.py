"""SFT on demonstrations (``stratagym.training.sft``) with TRL's SFTTrainer, end to end on a tiny model.

Checks what a researcher relies on: the examples are the policy's own prompts with the loss on the
expert's turns only; the export loads in the trainer and the eval path; runs are deterministic (so the
committed checkpoint can be rebuilt) and resumable; bad inputs stop before training with a message that
names the problem; a failed write keeps the previous checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from stratagym.agents.prompts import SEARCH_R1, THINK_ACTION
from stratagym.agents.small_lm import (build_model, check_tokenizer_for_template, save_model_atomic, template_tags,
                                       train_tokenizer)
from stratagym.errors import ConfigError
from stratagym.provenance import read_provenance
from stratagym.training.demos import collect_demos, read_demos, write_demos
from stratagym.training.sft import build_examples, complete_checkpoints, load_sft_recipe, run_sft

ENV = "stratagym/SearchQA-v0"
SHORT = "Search with <search> query </search>, answer with <answer> answer </answer>. Question: {question}\n"
KW = {"split": "train", "topk": 3, "max_turns": 4, "prompt_template": SHORT}


def _recipe(tmp: Path, demos: Path, **sft) -> Path:
    data = {
        "name": "sft-test",
        "env": {"id": ENV, "kwargs": KW, "eval_kwargs": {**KW, "split": "test"}},
        "demos": {"path": str(demos)},
        "policy": {"memory_k": 4, "max_new_tokens": 24},
        "tokenizer": {"vocab_size": 600},
        "model": {"hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
                  "intermediate_size": 64},
        "sft": {"max_steps": 4, "batch_size": 4, "save_steps": 2, "warmup_steps": 0, "logging_steps": 1, **sft},
        "eval": {"n": 0},
        "output_dir": str(tmp / "run"),
    }
    path = tmp / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def demos_file(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("demos")
    recs = collect_demos(ENV, "scripted:oracle", split="train", n=16,
                         env_kwargs={k: v for k, v in KW.items() if k != "split"}, memory_k=4)
    return write_demos(recs, tmp / "demos.jsonl")


@pytest.fixture(scope="module")
def trained(tmp_path_factory, demos_file) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("sft")
    recipe = load_sft_recipe(_recipe(tmp, demos_file))
    meta = run_sft(recipe, progress=False, echo=lambda *_: None)
    return tmp, meta


def _weights_hash(folder: Path) -> str:
    return hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()


def test_template_tags_come_from_the_templates():
    assert template_tags(SEARCH_R1) == ("<think>", "</think>", "<search>", "</search>", "<information>",
                                        "</information>", "<answer>", "</answer>")
    assert set(template_tags(THINK_ACTION)) == {"<think>", "</think>", "<action>", "</action>"}


def test_tokenizer_holds_tags_and_refuses_one_without():
    tok = train_tokenizer(["hello <search> world </search> again"] * 20, vocab_size=300, tags=template_tags(SEARCH_R1))
    check_tokenizer_for_template(tok, SEARCH_R1)  # no error
    # tags survive the decode the generation backends use (skip_special_tokens=True)
    ids = tok("<search> x </search>", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids, skip_special_tokens=True) == "<search> x </search>"
    bare = train_tokenizer(["hello <search> world </search> again"] * 20, vocab_size=300, tags=())
    with pytest.raises(ConfigError, match=r"add_tokens\(.*resize_token_embeddings"):
        check_tokenizer_for_template(bare, THINK_ACTION)


def test_examples_are_the_policy_prompts_with_loss_on_the_expert(demos_file):
    from stratagym.agents.llm import LLMConfig, LLMPolicy
    from stratagym.training.demos import read_demos

    recs = read_demos(demos_file)
    texts = [m["content"] for r in recs for t in r["turns"] for m in t["prompt"]] + [t["completion"] for r in recs for t in r["turns"]]
    tok = train_tokenizer(texts, vocab_size=600, tags=template_tags(SEARCH_R1))
    policy = LLMPolicy(build_model(tok), tok, LLMConfig(model="x", memory_k=4))
    examples = build_examples(recs, policy)
    # memory_k 4 >= every episode's length: each episode is one sequence (Search-R1's growing turn)
    assert len(examples) == len(recs)
    for rec, ex in zip(recs, examples):
        ids, mask = ex["input_ids"], ex["completion_mask"]
        # every turn's prompt, rendered and tokenised as the policy does in RL, is a prefix of the sequence
        # ending exactly where that turn's completion (mask 1) starts
        spans = []
        i = 0
        while i < len(mask):
            if mask[i]:
                j = i
                while j < len(mask) and mask[j]:
                    j += 1
                spans.append((i, j))
                i = j
            else:
                i += 1
        assert len(spans) == len(rec["turns"])
        for (a, b), turn in zip(spans, rec["turns"]):
            assert policy.prompt_ids([policy.render(turn["prompt"])])[0] == ids[:a]
            assert tok.decode(ids[a:b]) == turn["completion"]


def test_export_loads_in_policy_trainer_and_eval(trained):
    tmp, meta = trained
    export = tmp / "run" / "final"
    assert meta["steps"] == 4 and (export / "sft_meta.json").exists()
    saved = json.loads((export / "stratagym_policy.json").read_text())
    assert saved["memory_k"] == 4 and saved["max_new_tokens"] == 24
    from stratagym.training.config import load_recipe
    from stratagym.training.trainer import Trainer

    rl = tmp / "rl.yaml"
    rl.write_text(yaml.safe_dump({
        "name": "rl", "policy": {"model": str(export), "memory_k": 4, "max_new_tokens": 24},
        "env": {"id": ENV, "kwargs": KW}, "rollout": {"group_size": 2, "tasks_per_step": 1},
        "algorithm": {"estimator": "grpo"}, "optim": {"lr": 1.0e-4},
        "train": {"total_steps": 1, "output_dir": str(tmp / "rl"), "save_every": 1, "progress": False, "tensorboard": False},
    }))
    trainer = Trainer(load_recipe(rl))
    try:
        rows = trainer.train()
    finally:
        trainer.close()
    assert rows[-1]["step"] == 1
    # the RL policy's provenance: the SFT stage it started from, then the one task it drew (issue 50 item 5)
    sft_sets = read_provenance(export)["training_sets"]
    rl_sets = read_provenance(tmp / "rl" / "checkpoints" / "step-00000001" / "policy")["training_sets"]
    assert rl_sets[:-1] == sft_sets and rl_sets[-1]["stage"] == "rl" and rl_sets[-1]["split"] == "train"
    assert len(rl_sets[-1]["task_ids"]) == 1 and rl_sets[-1]["task_ids"][0].startswith("sqa-train-")
    # each stage names the recipe that ran it (an RL export names it nowhere else)
    assert rl_sets[-1]["recipe"] == "rl" and {s["recipe"] for s in sft_sets} == {"sft-test"}
    from stratagym.training.sft import evaluate_checkpoint

    ev = evaluate_checkpoint(export, ENV, {**KW, "split": "test"}, n=2, batch_size=2)
    assert ev["n"] == 2 and all(t.startswith("sqa-test-") for t in ev["task_ids"])


def test_export_names_the_tasks_its_demonstrations_played(trained, demos_file):
    """training_data.json (issue 50 item 5): the SFT stage's tasks are exactly the demonstrations' tasks, with
    the demonstration file's sha256 and the env's data kwargs (the bundled data: nothing to hash)."""
    tmp, meta = trained
    (ts,) = read_provenance(tmp / "run" / "final")["training_sets"]
    demo_tasks = sorted({r["task_id"] for r in read_demos(demos_file)})
    assert ts["stage"] == "sft" and ts["env_id"] == ENV and ts["split"] == "train"
    assert ts["task_ids"] == demo_tasks and len(demo_tasks) == 16
    assert ts["demos_sha256"] == meta["demos"]["sha256"] and ts["data_kwargs"] == {} and ts["data_sha256"] == {}


def test_rebuild_is_deterministic_and_resume_continues(tmp_path, trained, demos_file):
    tmp, meta = trained
    again = load_sft_recipe(_recipe(tmp_path, demos_file))
    run_sft(again, progress=False, echo=lambda *_: None)
    assert _weights_hash(tmp_path / "run" / "final") == _weights_hash(tmp / "run" / "final")
    # resume: two more steps from the newest complete checkpoint (step 4), not from scratch
    more = load_sft_recipe(_recipe(tmp_path, demos_file), {"sft.max_steps": 6})
    meta6 = run_sft(more, resume=True, progress=False, echo=lambda *_: None)
    assert meta6["steps"] == 6
    assert [int(p.name.split("-")[1]) for p in complete_checkpoints(tmp_path / "run" / "trainer")] == [4, 6]
    state = json.loads((tmp_path / "run" / "trainer" / "checkpoint-6" / "trainer_state.json").read_text())
    logged_steps = [row["step"] for row in state["log_history"] if "loss" in row]
    assert logged_steps == [1, 2, 3, 4, 5, 6]


def test_gradient_checkpointing_off_trains_the_same_weights(tmp_path, trained, demos_file):
    """``sft.gradient_checkpointing: false`` keeps the activations instead of recomputing them in the backward
    pass (the drift pins' small runs use it: a third less time per step on SmolLM2): the same arithmetic, so the
    same losses and, bit for bit, the same exported weights as the default (TRL's: on)."""
    tmp, meta = trained
    assert load_sft_recipe(_recipe(tmp_path, demos_file)).sft.gradient_checkpointing is True
    off = load_sft_recipe(_recipe(tmp_path, demos_file, gradient_checkpointing=False))
    assert off.sft.gradient_checkpointing is False
    meta_off = run_sft(off, progress=False, echo=lambda *_: None)
    assert meta_off["loss_curve"] == meta["loss_curve"]
    assert _weights_hash(tmp_path / "run" / "final") == _weights_hash(tmp / "run" / "final")


def test_checkpoint_cut_short_is_not_resumed_from(tmp_path, demos_file):
    """A checkpoint folder without the COMPLETE marker (a save cut short by a full disk or a kill) is
    skipped: resume starts from the previous complete one and the partial folder is removed."""
    recipe = load_sft_recipe(_recipe(tmp_path, demos_file, max_steps=2))
    run_sft(recipe, progress=False, echo=lambda *_: None)
    trainer_dir = tmp_path / "run" / "trainer"
    partial = trainer_dir / "checkpoint-4"
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"\x00" * 10)  # half-written
    assert [p.name for p in complete_checkpoints(trainer_dir)] == ["checkpoint-2"]
    meta = run_sft(load_sft_recipe(_recipe(tmp_path, demos_file, max_steps=4)), resume=True, progress=False,
                   echo=lambda *_: None)
    assert meta["steps"] == 4
    state = json.loads((trainer_dir / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4


def test_disk_full_during_export_keeps_the_previous_checkpoint(tmp_path, trained):
    """The write really fails: a child process with RLIMIT_FSIZE (the kernel refuses writes past the
    limit with EFBIG, as it refuses them on a full disk with ENOSPC) re-exports over the folder."""
    tmp, _ = trained
    export = tmp_path / "ckpt"
    import shutil

    shutil.copytree(tmp / "run" / "final", export)
    before = _weights_hash(export)
    code = textwrap.dedent(f"""
        import resource, signal, sys
        from pathlib import Path
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from stratagym.agents.small_lm import save_model_atomic
        model = AutoModelForCausalLM.from_pretrained({str(export)!r})
        tok = AutoTokenizer.from_pretrained({str(export)!r})
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (20000, 20000))
        try:
            save_model_atomic({str(export)!r}, lambda d: (tok.save_pretrained(d), model.save_pretrained(d)))
        except Exception as exc:  # OSError from Python, a plain Exception from the tokenizers library
            print("write failed:", exc)
            sys.exit(3)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert _weights_hash(export) == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ckpt")]  # no debris
    from stratagym.agents.llm import LLMPolicy

    LLMPolicy.from_pretrained(export)  # still loads


def test_save_model_atomic_replaces_when_it_succeeds(tmp_path):
    out = tmp_path / "m"
    save_model_atomic(out, lambda d: (d / "a.txt").write_text("1"))
    save_model_atomic(out, lambda d: (d / "b.txt").write_text("2"))
    assert sorted(p.name for p in out.iterdir()) == ["b.txt"]


def test_bad_demos_file_names_the_line_and_does_not_train(tmp_path, demos_file):
    lines = demos_file.read_text().splitlines(keepends=True)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(lines[0] + lines[1] + "{not json\n" + lines[2])
    recipe = _recipe(tmp_path, bad)
    proc = subprocess.run([sys.executable, "-m", "stratagym.cli", "sft", "--config", str(recipe), "-q"],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert "line 3" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "run" / "trainer").exists()


def test_model_without_template_tags_refused_at_load(tmp_path, demos_file):
    """The tiny test model's tokenizer was not trained for the Search-R1 tags: SFT from it is refused
    before training, with the fix."""
    from stratagym.agents.tiny_lm import tiny_lm_path

    path = tiny_lm_path()
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    if all(len(tok(t, add_special_tokens=False)["input_ids"]) == 1 for t in template_tags(SEARCH_R1)):
        pytest.skip("this tiny model happens to hold every tag as one token")
    recipe = _recipe(tmp_path, demos_file)
    data = yaml.safe_load(recipe.read_text())
    data["model"] = {"path": str(path)}
    recipe.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"single tokens.*stratagym sft"):
        run_sft(load_sft_recipe(recipe), progress=False, echo=lambda *_: None)
    assert not (tmp_path / "run" / "trainer").exists()


def test_recipe_errors():
    from stratagym.training.config import build_dataclass
    from stratagym.training.sft import SFTRecipe

    with pytest.raises(ConfigError, match=r"unknown key\(s\) \['sfft'\] in the SFT recipe"):
        build_dataclass(SFTRecipe, {"sfft": {}}, root="the SFT recipe")
    with pytest.raises(ConfigError, match="does not exist"):
        load_sft_recipe("no/such/recipe.yaml")


def test_sft_checkpoint_for_another_env_refused_at_load(trained, tmp_path):
    """A SearchQA SFT checkpoint put on an ALFWorld/WebShop recipe (think/action template): its tokenizer
    has no <action> token, so the trainer and the eval path refuse it at load with the fix."""
    from stratagym.agents.llm import LLMPolicy
    from stratagym.training.config import load_recipe
    from stratagym.agents.env_fit import check_policy_for_env
    from stratagym.training.trainer import Trainer

    tmp, _ = trained
    export = tmp / "run" / "final"
    policy = LLMPolicy.from_pretrained(export)
    check_policy_for_env(policy, ENV)  # its own env: fine
    with pytest.raises(ConfigError, match=r"<action>.*stratagym sft"):
        check_policy_for_env(policy, "stratagym/WebShop-v0")
    rl = tmp_path / "rl.yaml"
    rl.write_text(yaml.safe_dump({
        "name": "rl", "policy": {"model": str(export), "memory_k": 4, "template": "think_action"},
        "env": {"id": ENV, "kwargs": KW}, "rollout": {"group_size": 2, "tasks_per_step": 1},
        "train": {"total_steps": 1, "output_dir": str(tmp_path / "rl"), "progress": False, "tensorboard": False},
    }))
    with pytest.raises(ConfigError, match=r"<action>"):
        Trainer(load_recipe(rl))
    # `stratagym eval <folder> --env <webshop>` goes through the same check (the eval layer's loader)
    from stratagym.eval.agents import AgentSpecError, build_agent, parse_agent_spec

    with pytest.raises(AgentSpecError, match=r"<action>.*stratagym sft"):
        build_agent(parse_agent_spec(str(export)), "stratagym/WebShop-v0", None)
    assert build_agent(parse_agent_spec(str(export)), ENV, None) is not None


def test_lora_sft_does_not_depend_on_what_ran_before_in_the_process(trained, tmp_path, demos_file):
    """The adapter's A matrices are drawn when the LoRA is built, before TRL's Trainer seeds: the run seeds
    itself first, so two runs after different RNG use give the same adapter (the second loss of the ALFWorld
    planner drift pin varied 2.200-2.213 with the order of the tests before it)."""
    import random

    import torch

    tmp, _ = trained
    hashes = []
    for n, before in enumerate((1, 2)):
        (tmp_path / str(n)).mkdir()
        path = _recipe(tmp_path / str(n), demos_file, max_steps=2, lr=1.0e-2)
        data = yaml.safe_load(path.read_text())
        data["model"] = {"path": str(tmp / "run" / "final")}
        data["policy"]["lora"] = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
        path.write_text(yaml.safe_dump(data))
        torch.manual_seed(before), random.seed(before), torch.rand(before * 7)  # different state, different draws
        meta = run_sft(load_sft_recipe(path), progress=False, echo=lambda *_: None)
        export = tmp_path / str(n) / "run" / "final"
        hashes.append((meta["loss_curve"], hashlib.sha256((export / "adapter_model.safetensors").read_bytes()).hexdigest()))
    assert hashes[0] == hashes[1]


def test_lora_sft_on_a_pretrained_folder_exports_the_adapter_alone(trained, tmp_path, demos_file):
    """policy.lora with model.path (how a real pretrained model is tuned, issue 28): only the adapter trains,
    the export is the adapter (no base weights) naming its base, and it loads back as a LoRA policy."""
    tmp, _ = trained
    base = tmp / "run" / "final"
    path = _recipe(tmp_path, demos_file, max_steps=2, lr=1.0e-2)
    data = yaml.safe_load(path.read_text())
    data["model"] = {"path": str(base)}
    data["policy"]["lora"] = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    path.write_text(yaml.safe_dump(data))
    meta = run_sft(load_sft_recipe(path), progress=False, echo=lambda *_: None)
    export = tmp_path / "run" / "final"
    assert meta["steps"] == 2
    assert (export / "adapter_config.json").exists() and not (export / "model.safetensors").exists()
    assert json.loads((export / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base)
    assert json.loads((export / "stratagym_policy.json").read_text())["lora"] is None
    from stratagym.agents.llm import LLMPolicy

    policy = LLMPolicy.from_pretrained(export)
    assert hasattr(policy.model, "disable_adapter")
    lora = {n: p for n, p in policy.model.named_parameters() if "lora_B" in n}
    assert lora and any(p.abs().sum() > 0 for p in lora.values())  # B starts at zero: it trained


def test_export_from_a_trainer_checkpoint_keeps_its_adapter_and_says_where_it_stopped(trained, tmp_path, demos_file):
    """`stratagym sft --export-from <trainer checkpoint>`: a LoRA run cut short (a leased GPU's time limit) or whose
    export was lost keeps its last complete checkpoint. The export holds that checkpoint's adapter tensors
    unchanged, loads as a policy, and its sft_meta.json names the checkpoint, the step reached and the steps the
    run had planned, so a mid-run adapter is not mistaken for the finished recipe. Bad inputs are refused."""
    from safetensors.torch import load_file

    from stratagym.agents.llm import LLMPolicy
    from stratagym.training.sft import export_trainer_checkpoint

    tmp, _ = trained
    path = _recipe(tmp_path, demos_file, max_steps=4, save_steps=2, lr=1.0e-2)
    data = yaml.safe_load(path.read_text())
    data["model"] = {"path": str(tmp / "run" / "final")}
    data["policy"]["lora"] = {"r": 4, "alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    data["sft"]["keep_last"] = 2
    data["export"] = str(tmp_path / "exported")
    path.write_text(yaml.safe_dump(data))
    recipe = load_sft_recipe(path)
    finished = run_sft(recipe, progress=False, echo=lambda *_: None)
    step2 = tmp_path / "run" / "trainer" / "checkpoint-2"
    assert finished["steps"] == 4 and step2.is_dir()

    meta = export_trainer_checkpoint(recipe, step2, echo=lambda *_: None)
    out = tmp_path / "exported"
    got, want = load_file(str(out / "adapter_model.safetensors")), load_file(str(step2 / "adapter_model.safetensors"))
    assert set(got) == set(want) and all(bool((got[k] == want[k]).all()) for k in want)
    final = load_file(str(tmp_path / "run" / "trainer" / "checkpoint-4" / "adapter_model.safetensors"))
    assert not all(bool((got[k] == final[k]).all()) for k in got)  # step 2's adapter, not the final one
    written = json.loads((out / "sft_meta.json").read_text())
    assert (written["steps"], written["planned_steps"], written["exported_from"]) == (2, 4, str(step2))
    assert written["loss_curve"] == finished["loss_curve"][:2] and meta["final_loss"] == finished["loss_curve"][1]
    assert read_provenance(out)  # training_data.json names the demonstrations, as run_sft's export does
    assert hasattr(LLMPolicy.from_pretrained(out).model, "disable_adapter")

    with pytest.raises(ConfigError, match="trainer_state.json"):
        export_trainer_checkpoint(recipe, tmp_path, echo=lambda *_: None)
    (tmp_path / "full").mkdir()
    full = load_sft_recipe(_recipe(tmp_path / "full", demos_file))  # a from-scratch model: no adapter to export
    with pytest.raises(ConfigError, match="LoRA recipe"):
        export_trainer_checkpoint(full, step2, echo=lambda *_: None)


def test_export_from_refuses_an_adapter_of_another_shape(trained, tmp_path, demos_file):
    """A checkpoint trained with another policy.lora (here r 8 against the recipe's r 4) is a clear error, not a
    traceback from peft."""
    from stratagym.training.sft import export_trainer_checkpoint

    tmp, _ = trained
    path = _recipe(tmp_path, demos_file, max_steps=2, save_steps=2, lr=1.0e-2)
    data = yaml.safe_load(path.read_text())
    data["model"] = {"path": str(tmp / "run" / "final")}
    data["policy"]["lora"] = {"r": 8, "alpha": 16, "target_modules": ["q_proj", "v_proj"]}
    path.write_text(yaml.safe_dump(data))
    run_sft(load_sft_recipe(path), progress=False, echo=lambda *_: None)
    data["policy"]["lora"]["r"] = 4
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="another policy.lora"):
        export_trainer_checkpoint(load_sft_recipe(path), tmp_path / "run" / "trainer" / "checkpoint-2", echo=lambda *_: None)
