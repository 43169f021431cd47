"""OpenEnv interop, both ways: ``stratagym serve env`` (any stratagym env as an OpenEnv server) and
``stratagym/OpenEnv-v0`` (any OpenEnv server as a stratagym env). Import-light: ``openenv-core`` is
imported only when a server or an env is built."""

from stratagym.envs.registry import EnvSpec

ENV_SPECS = [
    EnvSpec(
        id="stratagym/OpenEnv-v0",
        entry_point="stratagym.interop.openenv.client_env:OpenEnvTextEnv",
        description="Any OpenEnv server as a stratagym env (base_url=, tasks=); with no URL, a loopback server "
                    "around serve_env_id (default stratagym/SearchStrata-v0).",
        requires=("openenv",),
        extra="openenv",
        cli="stratagym.interop.openenv.cli",  # `stratagym serve env`, `stratagym envs check-openenv`
    ),
]
