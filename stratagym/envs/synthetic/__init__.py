"""Small synthetic text envs with *known* structure, for controlled algorithm studies.

Each env isolates one structural property that a group-relative RL algorithm claims to handle:

* ``stratagym/SearchStrata-v0`` -- a search agent whose trajectories fall into strata by search count
  with different reward distributions; the better strategy needs more searches (Stratified GRPO).
* ``stratagym/DifficultyMix-v0`` -- one-step binary-reward tasks, a mix of easy (2 options) and hard
  (10 options) prompts with known difficulty (HA-DW).
* ``stratagym/CueCorridor-v0`` -- a long-horizon maze where the same junction state is reached through
  different histories and the right exit depends on a cue seen a fixed number of steps earlier
  (context inconsistency: GiGPO vs HGPO).

Variants that carry each paper's *mechanism* (added after the first studies found the three above lack
it; see ``docs/studies.md``):

* ``stratagym/ValueCorridor-v0`` -- CueCorridor with ``valued=True``: the histories that meet at the fork
  have different values (HGPO's context inconsistency as a biased pooled baseline).
* ``stratagym/SearchArchives-v0`` -- search-count strata forced by an archive the policy cannot pick
  well, with a reward offset between strata whatever the answer (Stratified GRPO's cross-stratum bias).
* ``stratagym/DifficultyShared-v0`` -- easy and hard tasks on shared features whose gradients compete
  (HA-DW's reweighting can change the direction of the shared update).

All are pure Python (thousands of steps per second), list their admissible actions, and can put the
optimal action in ``info["oracle_action"]`` (``oracle_info=True``) for the oracle agent. See
``docs/envs/synthetic.md`` for the structure and the optimal policy of each.
"""

from stratagym.envs.metric_spec import MetricSpec
from stratagym.envs.registry import EnvSpec

#: The protocol fingerprint (docs/protocol.md): tasks are the code, so the behaviour version is the data;
#: ``oracle_info`` only adds the optimal action to ``info``.
_PROTOCOL = dict(behaviour_version=1, neutral_kwargs=("oracle_info",), board_columns=("turns",))

_AGENTS = {
    "oracle": "stratagym.envs.synthetic.agents:OracleAgent",
}

ENV_SPECS = [
    EnvSpec(
        id="stratagym/SearchStrata-v0",
        entry_point="stratagym.envs.synthetic.search_strata:SearchStrataEnv",
        description="Synthetic search agent: reward strata by search count; more (relevant) searches win more.",
        tools=("search",),
        lists_actions=True,
        **_PROTOCOL,
        agents={**_AGENTS, "no_search": "stratagym.envs.synthetic.agents:NoSearchAgent"},
    ),
    EnvSpec(
        id="stratagym/DifficultyMix-v0",
        entry_point="stratagym.envs.synthetic.difficulty:DifficultyMixEnv",
        description="Synthetic one-step binary tasks, easy (1 in 2) and hard (1 in 10) prompts of known difficulty.",
        lists_actions=True,
        **_PROTOCOL,
        agents=dict(_AGENTS),
    ),
    EnvSpec(
        id="stratagym/CueCorridor-v0",
        entry_point="stratagym.envs.synthetic.cue_corridor:CueCorridorEnv",
        description="Synthetic long-horizon maze: same junction state, different histories; exit depends on an earlier cue.",
        lists_actions=True,
        **_PROTOCOL,
        agents={**_AGENTS, "blind_doors": "stratagym.envs.synthetic.agents:BlindDoorsAgent"},
    ),
    EnvSpec(
        id="stratagym/ValueCorridor-v0",
        entry_point="stratagym.envs.synthetic.cue_corridor:CueCorridorEnv",
        description="CueCorridor whose merged histories differ in value: every fork pays by lamp (gold high, grey low).",
        kwargs={"valued": True},
        lists_actions=True,
        # forks where the best door was taken (0..segments): per fork, where `won` needs every fork right
        record_info_keys=("best_doors",),
        # the LLM study's registered metric (docs/studies.md section 9) beside success on the board
        metrics=(MetricSpec("best_doors", "mean"),),
        **{**_PROTOCOL, "board_columns": ("best_doors", "turns")},
        agents={**_AGENTS, "blind_doors": "stratagym.envs.synthetic.agents:BlindDoorsAgent"},
    ),
    EnvSpec(
        id="stratagym/SearchArchives-v0",
        entry_point="stratagym.envs.synthetic.search_archives:SearchArchivesEnv",
        description="Search strata forced by a random archive, with a reward offset between strata whatever the answer.",
        tools=("search",),
        lists_actions=True,
        **_PROTOCOL,
        agents=dict(_AGENTS),
    ),
    EnvSpec(
        id="stratagym/DifficultyShared-v0",
        entry_point="stratagym.envs.synthetic.difficulty_shared:DifficultySharedEnv",
        description="Easy (1 in 2) and hard (1 in 10) one-step tasks on shared features whose gradients compete.",
        lists_actions=True,
        **_PROTOCOL,
        agents=dict(_AGENTS),
    ),
]

__all__ = ["ENV_SPECS"]
