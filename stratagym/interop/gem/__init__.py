"""GEM interop, both ways (issue 30 item 4; docs/interop.md): every stratagym env under GEM's ``gem.make``
(:func:`register_all`) and any GEM env as ``stratagym/GEM-v0``. Import-light: ``gem`` (package ``gem-llm``)
is imported only when one of them is built, because importing it costs ~1.4 s (reasoning-gym, sympy)."""

from __future__ import annotations

from stratagym.envs.registry import EnvSpec

__all__ = ["ENV_SPECS", "register_all"]

ENV_SPECS = [
    EnvSpec(
        id="stratagym/GEM-v0",
        entry_point="stratagym.interop.gem.gem_env:GEMTextEnv",
        description="Any GEM env (gem.make(gem_id)) as a stratagym env; task ids are GEM reset seeds "
                    "(default gem_id: game:GuessTheNumber-v0-easy).",
        requires=("gem",),
        extra="gem",
        reward="the GEM env's own reward (gem_id's)",
        libraries=("gem-llm", "reasoning-gym"),  # GEM's envs are its code: their versions are the behaviour
        cli="stratagym.interop.gem.cli",  # `stratagym envs check-gem`
    ),
]


def register_all() -> list[str]:
    """Register every stratagym env id with GEM's registry, so ``gem.make("stratagym/SearchQA-v0")`` works.

    Why a function: GEM 0.1.0 has no plug-in discovery (its registry is a dict filled by ``gem.register``
    calls at import), so a user calls this once after ``import gem``. Idempotent; returns the ids added.
    """
    from stratagym.interop.gem.export import register_all as _register_all  # optional: export imports gem (gem-llm)

    return _register_all()
