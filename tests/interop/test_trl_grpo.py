"""A real TRL ``GRPOTrainer(environment_factory=SearchQATRLEnv)`` run on CPU with the tiny model, end to
end (issue 30 item 3): two optimizer steps, and every rollout of a group started from its task's one
observation. The tiny model gets TRL's own Qwen2.5 chat template, which renders tool calls and which
TRL knows how to parse (the tiny model's ChatML template has no tool section)."""

from __future__ import annotations

from pathlib import Path

import trl  # a dev dependency (`make test` installs it)
from datasets import Dataset
from transformers import AutoModelForCausalLM, AutoTokenizer

from stratagym.agents.tiny_lm import tiny_lm_path
from stratagym.interop.trl.search_qa import SearchQATRLEnv


def test_grpo_trainer_runs_with_the_searchqa_environment_factory(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, GRPOTrainer

    path = tiny_lm_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()
    model = AutoModelForCausalLM.from_pretrained(path)
    probe = SearchQATRLEnv()
    task_ids = list(probe._env.unwrapped.task_ids())[:2]
    probe._close()
    rows = [{"prompt": [{"role": "user", "content": "Answer the question; use the tools."}], "task_id": t, "seed": 0}
            for t in task_ids]
    starts: list[tuple[str, str]] = []

    class Recording(SearchQATRLEnv):
        def reset(self, **row):
            observation = super().reset(**row)
            starts.append((row["task_id"], observation))
            return observation

    config = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_steps=2,
                        max_completion_length=24, learning_rate=1e-4, logging_steps=1, report_to="none", use_cpu=True,
                        save_strategy="no", bf16=False, seed=0, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, train_dataset=Dataset.from_list(rows),
                          environment_factory=Recording)
    result = trainer.train()
    assert result.global_step == 2
    assert any("rewards/Recording/mean" in entry for entry in trainer.state.log_history)  # get_reward was the reward
    assert {t for t, _ in starts} == set(task_ids) and len(starts) == 8  # 2 steps x 4 rollouts
    for task_id in task_ids:
        assert len({obs for t, obs in starts if t == task_id}) == 1, "a group's rollouts must share their start"
