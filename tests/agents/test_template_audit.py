"""The chat-template audit (issue 51 item 3): which templates extend what was sampled, token for token.

Hand-made templates give known answers; the real ones (SmolLM2's own, the Qwen2.5 / Qwen3 templates TRL
ships, rendered with SmolLM2's ChatML tokenizer) are pinned to what docs/gateway.md reports, and Qwen3's
verdict is cross-checked with TRL's own prefix check.
"""

from __future__ import annotations

import copy

import pytest

from stratagym.agents.template_audit import (CONVERSATIONS, audit_template, check_turn, first_divergence,
                                             load_chat_template)
from stratagym.errors import ConfigError

# ChatML that renders every message verbatim, tool calls in the Hermes format: append-only by construction
CALLS = ("{% for c in m.get('tool_calls', []) %}<tool_call>\n"
         "{{ {'name': c.function.name, 'arguments': c.function.arguments} | tojson }}\n</tool_call>{% endfor %}")
VERBATIM = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}" + CALLS + "<|im_end|>\n{% endfor %}"
            "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
# the same, but an assistant turn that is not the last message loses its <think> block (as Qwen3's does)
STRIPS_THINKING = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' and not loop.last "
                   "and '</think>' in m['content'] %}{{ m['content'].split('</think>')[-1].lstrip() }}{% else %}"
                   "{{ m['content'] }}{% endif %}" + CALLS + "<|im_end|>\n{% endfor %}"
                   "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.fixture(scope="module")
def tokenizer(smollm2_model):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2_model))


def test_first_divergence():
    assert first_divergence([1, 2, 3], [1, 2, 3, 4]) is None
    assert first_divergence([1, 2, 3], [1, 2, 9, 4]) == 2
    assert first_divergence([1, 2, 3], [1, 2]) == 2  # the next request is shorter than what was sampled
    assert first_divergence([], [5]) is None


def test_a_verbatim_template_is_append_only_everywhere_and_a_stripping_one_fails_at_the_reply(tokenizer):
    audit = audit_template(tokenizer, VERBATIM, name="verbatim")
    assert audit.share() == 1.0 and len(audit.checks) == 2 + 4 + 2 + 2
    stripped = audit_template(tokenizer, STRIPS_THINKING, name="strips")
    assert {k: stripped.share(k) for k in stripped.by_conversation()} == {
        "plain": 1.0, "tools": 1.0, "thinking": 0.0, "thinking_tools": 0.0}
    # the first thinking turn departs exactly where the reply starts: right after its prompt's tokens
    msgs = CONVERSATIONS["thinking"]
    prompt = tokenizer.apply_chat_template(msgs[:1], tokenize=False, add_generation_prompt=True, chat_template=STRIPS_THINKING)
    check = check_turn(tokenizer, msgs, 1, 3, STRIPS_THINKING, stop="<|im_end|>")
    assert check.first_diff == len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    assert check.sampled.startswith("<think>\nThe passage names the founder.") and check.rendered.startswith("Reiquy.")


def test_real_templates(tokenizer):
    """SmolLM2's template has no tool section: the tool calls the model emitted vanish from the next request
    (3 of the 4 tool turns; the fourth is the final answer). TRL's Qwen2.5 template is append-only; its Qwen3
    template is not even for plain turns (the last assistant turn gets an empty <think></think>, earlier ones
    lose theirs) and keeps reasoning only inside one tool loop; TRL's training variant of it fixes all."""
    def shares(spec: str | None) -> dict[str, float]:
        name, text = load_chat_template(spec) if spec else ("own", None)
        audit = audit_template(tokenizer, text, name=name)
        return {k: audit.share(k) for k in audit.by_conversation()}

    assert shares(None) == {"plain": 1.0, "tools": 0.25, "thinking": 1.0, "thinking_tools": 1.0}
    assert shares("trl:qwen2_5") == {"plain": 1.0, "tools": 1.0, "thinking": 1.0, "thinking_tools": 1.0}
    assert shares("trl:qwen3") == {"plain": 0.0, "tools": 0.0, "thinking": 0.0, "thinking_tools": 0.5}
    assert shares("trl:qwen3_training") == {"plain": 1.0, "tools": 1.0, "thinking": 1.0, "thinking_tools": 1.0}

    from trl.chat_template_utils import is_chat_template_prefix_preserving

    for spec, preserving in (("trl:qwen3", False), ("trl:qwen3_training", True)):
        tok = copy.deepcopy(tokenizer)
        tok.chat_template = load_chat_template(spec)[1]
        assert is_chat_template_prefix_preserving(tok) is preserving


def test_bad_template_names_are_refused_with_the_fix(tmp_path):
    with pytest.raises(ConfigError, match="TRL ships no chat template 'nope'; known: .*qwen3"):
        load_chat_template("trl:nope")
    with pytest.raises(ConfigError, match="neither a .jinja file nor trl:NAME"):
        load_chat_template(str(tmp_path / "missing.jinja"))


def test_cli_prints_the_audit_and_refuses_bad_input(capsys, smollm2_model, tmp_path):
    from tests.search_qa.test_overlap import run_main

    code, text = run_main(capsys, "check-template", str(smollm2_model), "-t", "trl:qwen3", "--json")
    assert code == 0, text
    import json

    (audit,) = json.loads(text)
    assert audit["template"] == "trl:qwen3" and audit["append_only_share"] == pytest.approx(0.1)
    code, text = run_main(capsys, "check-template", str(smollm2_model))
    assert code == 0 and "append-only 70% of turns" in text and "tools           1/4" in text
    code, text = run_main(capsys, "check-template", str(tmp_path))
    assert code == 2 and "no tokenizer could be loaded" in text and "Traceback" not in text
