"""An example of a third-party stratagym environment, registered through the ``stratagym.envs`` entry point.

Keep this module import-light: stratagym imports it on ``import stratagym`` to read ``ENV_SPECS``;
the env class itself is loaded lazily by gymnasium when someone makes the env.
"""

from stratagym.envs.registry import EnvSpec

ENV_SPECS = [
    EnvSpec(
        id="kvlookup/KVLookup-v0",
        entry_point="kv_lookup_env.env:KVLookupEnv",
        description="Answer a question about a made-up registry by looking keys up (search tool).",
        tools=("search",),
        lists_actions=True,
        # Everything stratagym needs beyond the env itself comes from the spec: the LLM prompt,
        # the metric the leaderboard ranks by, and the info keys an eval record keeps.
        prompt_template="think_action",
        primary_metric="success",
        record_info_keys=("answer",),
        agents={"oracle": "kv_lookup_env.agents:OracleAgent"},
        max_episode_steps=None,
    )
]
