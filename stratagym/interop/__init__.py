"""Interop: stratagym's envs under other projects' standards, and theirs under stratagym's.

One layer above :mod:`stratagym.envs` (which never imports it), beside :mod:`stratagym.agents`:

* :mod:`.openenv` -- any stratagym env as an OpenEnv server (``stratagym serve env``, openenv-core's
  ``create_app``), and any OpenEnv server as ``stratagym/OpenEnv-v0``;
* :mod:`.gem` -- every stratagym env under GEM's ``gem.make``, and any GEM env as ``stratagym/GEM-v0``;
* :mod:`.mcp` -- an env's tools as an MCP server (``stratagym serve mcp``);
* :mod:`.trl` -- the families as TRL ``environment_factory`` classes.

The two envs it provides register through the ``stratagym.envs`` entry-point group (pyproject.toml), as a
third-party package's would. Each adapter imports its own package (openenv-core, gem-llm, fastmcp, trl) only
when used. docs/interop.md has the commands and what each adapter guarantees.
"""
