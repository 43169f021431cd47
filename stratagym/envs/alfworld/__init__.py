"""ALFWorld on the real TextWorld-PDDL engine: ``stratagym/ALFWorld-v0``.

Plays real ALFWorld games when ``$ALFWORLD_DATA/json_2.1.1`` is present and otherwise the bundled
offline-generated games (``data/alfworld``; all six task types, train / in-distribution /
out-of-distribution splits, each game verified solvable by the planner). Scripted agents: the PDDL
planner expert (``planner``), alfworld's hand-coded expert (``handcoded``) and the searching expert
(``searcher``: the planner held to what the agent has seen). See
``docs/envs/alfworld.md``.

This ``__init__`` stays import-light: alfworld/textworld load only when the env is made.
"""

from stratagym.envs.registry import EnvSpec

ENV_SPECS = [
    EnvSpec(
        cli="stratagym.envs.alfworld.cli",
        id="stratagym/ALFWorld-v0",
        entry_point="stratagym.envs.alfworld.env:ALFWorldEnv",
        description="ALFWorld household tasks on the real TextWorld-PDDL engine (6 task types, 50-step episodes).",
        requires=("alfworld", "textworld", "fast_downward"),
        extra="alfworld",
        lists_actions=True,
        prompt_template="think_action",
        record_info_keys=("task_type", "split"),
        behaviour_version=1,  # bump with every change to what the env does (docs/protocol.md)
        neutral_kwargs=("expert", "fast", "disk_cache"),  # an expert hint in info, same transcripts
        data_kwargs=("data_path",),
        reward="won (1 when the game's goal holds)",
        libraries=("alfworld", "textworld", "fast_downward_textworld"),
        board_columns=("turns", "valid_ratio"),
        agents={
            "planner": "stratagym.envs.alfworld.agents:PlannerExpertAgent",
            "handcoded": "stratagym.envs.alfworld.agents:HandCodedExpertAgent",
            "searcher": "stratagym.envs.alfworld.agents:SearchingExpertAgent",
        },
    ),
]

__all__ = ["ENV_SPECS"]
