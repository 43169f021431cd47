"""The OpenEnv app for a stratagym env: ``uvicorn server.app:app`` or ``python -m server.app``.

Why this file exists: OpenEnv's tooling (``openenv validate``, ``openenv serve``, ``uv run server``)
expects ``server/app.py`` with an ``app`` and a ``main()``. The app is stratagym's adapter
(:func:`stratagym.interop.openenv.server.create_server_app`, openenv-core's ``create_app`` inside), the same
one ``stratagym serve env`` runs. Configuration by environment variables, as in a container:
``STRATAGYM_ENV_ID`` (default ``stratagym/SearchQA-v0``), ``STRATAGYM_ENV_KWARGS`` (a JSON object),
``STRATAGYM_MAX_CONCURRENT_ENVS`` (default 8), ``STRATAGYM_IDLE_TIMEOUT`` (seconds, default 600).
"""

import json
import os

from stratagym.interop.openenv.server import create_server_app

app = create_server_app(
    os.environ.get("STRATAGYM_ENV_ID", "stratagym/SearchQA-v0"),
    json.loads(os.environ.get("STRATAGYM_ENV_KWARGS", "{}")),
    max_concurrent_envs=int(os.environ.get("STRATAGYM_MAX_CONCURRENT_ENVS", "8")),
    idle_timeout_s=float(os.environ.get("STRATAGYM_IDLE_TIMEOUT", "600")) or None,
)


def main(host: str = "127.0.0.1", port: int = 8000) -> None:
    """Serve until interrupted; binds 127.0.0.1 unless told otherwise (a container passes --host 0.0.0.0)."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, access_log=False)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="Serve a stratagym env as an OpenEnv server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    args = parser.parse_args()
    main(host=args.host, port=args.port)
