"""What every HTTP server stratagym runs shares: security headers and serving an app from a thread.

The servers: the OpenEnv server, the MCP server, the Search-R1 retrieval server (ASGI, FastAPI) and the
WebShop site (WSGI, Flask). One module, so each is served and hardened the same way.

* **Security headers.** These servers echo agent and user text (queries, actions, purchased options)
  inside JSON and HTML. ``X-Content-Type-Options: nosniff`` stops a browser from sniffing such a JSON body
  as HTML or script, and a restrictive Content-Security-Policy stops any markup that slipped through from
  running script.
* **Batching behind one worker** (:class:`QueueWorker`): the retrieval server and the policy gateway merge
  concurrent requests into calls of a backend that must not run twice at once; the queue, the loop task and
  the one worker thread are started and stopped the same way, each server writes its own batching loop.
* **Serving from a thread** (:func:`serve_in_thread`): tests, benchmarks, notebooks and the envs that start
  their own loopback server (``stratagym/OpenEnv-v0`` without a URL, the WebShop browser env). 127.0.0.1 and
  a free port by default; it returns once the server listens. ASGI apps run under uvicorn, WSGI apps (Flask)
  under werkzeug's threaded server, the one Flask's own ``app.run`` uses.
"""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

__all__ = ["JSON_CSP", "LoopbackServer", "QueueWorker", "SecurityHeaders", "add_flask_security_headers",
           "safe_validation_error", "serve_in_thread"]

#: Anything that is not an HTML page: nothing may load from it or frame it.
JSON_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"


class SecurityHeaders:
    """ASGI middleware: ``X-Content-Type-Options: nosniff`` and a CSP on every HTTP response
    (``html_csp`` on ``text/html`` ones, :data:`JSON_CSP` on the rest).

    Pure ASGI rather than Starlette's ``BaseHTTPMiddleware``: responses are not buffered, and WebSocket
    traffic passes through untouched (a client that hangs up first is not logged as a server error).
    """

    def __init__(self, app: Callable[..., Any], html_csp: str = JSON_CSP):
        self.app, self.html_csp = app, html_csp.encode()

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope.get("type") == "websocket":
            from starlette.websockets import WebSocketDisconnect

            try:
                await self.app(scope, receive, send)
            except WebSocketDisconnect:  # a close sent after the client had gone: not an error
                pass
            return
        if scope.get("type") != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: dict[str, Any]) -> None:
            if message.get("type") == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", [])
                           if k.lower() not in (b"x-content-type-options", b"content-security-policy")]
                ctype = next((v for k, v in headers if k.lower() == b"content-type"), b"")
                csp = self.html_csp if ctype.startswith(b"text/html") else JSON_CSP.encode()
                headers += [(b"x-content-type-options", b"nosniff"), (b"content-security-policy", csp)]
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def add_flask_security_headers(app: Any, html_csp: str) -> None:
    """The same headers on every response of a Flask app (``html_csp`` on HTML pages)."""

    @app.after_request
    def _security_headers(response: Any) -> Any:
        response.headers["X-Content-Type-Options"] = "nosniff"
        html = (response.mimetype or "") == "text/html"
        response.headers["Content-Security-Policy"] = html_csp if html else JSON_CSP
        return response


class LoopbackServer:
    """A server running in a daemon thread: its ``url`` (``http://host:port`` plus ``path``), and
    :meth:`stop`, which ends it, joins the thread and then runs ``on_stop`` (e.g. closing the envs it served)."""

    def __init__(self, stop_serving: Callable[[], None], thread: threading.Thread, host: str, port: int, *,
                 path: str = "", on_stop: Callable[[], None] | None = None):
        self._stop_serving, self.thread, self.host, self.port = stop_serving, thread, host, int(port)
        self.url = f"http://{host}:{self.port}{path}"
        self._on_stop = on_stop

    def stop(self, timeout: float = 10.0) -> None:
        self._stop_serving()
        self.thread.join(timeout)
        if self._on_stop is not None:
            self._on_stop()


def serve_in_thread(app: Any, host: str = "127.0.0.1", port: int = 0, *, name: str = "stratagym-server",
                    timeout: float = 30.0, path: str = "", on_stop: Callable[[], None] | None = None) -> LoopbackServer:
    """Serve ``app`` from a daemon thread named ``name``; ``port=0`` picks a free port. Returns once it
    listens, or raises RuntimeError naming the address when it has not within ``timeout`` seconds.

    A WSGI app (one with ``wsgi_app``, i.e. Flask) runs under werkzeug's threaded server; anything else is
    taken as ASGI and runs under uvicorn (lifespan on, no access log). ``path`` is appended to the URL
    (``/mcp`` for an MCP server)."""
    if hasattr(app, "wsgi_app"):
        return _serve_wsgi(app, host, port, name=name, path=path, on_stop=on_stop)
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                                           lifespan="on"))
    thread = threading.Thread(target=server.run, name=name, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"{name} did not start on {host}:{port}")
        time.sleep(0.01)
    bound_host, bound_port = server.servers[0].sockets[0].getsockname()[:2]

    def stop_serving() -> None:
        server.should_exit = True

    return LoopbackServer(stop_serving, thread, bound_host, bound_port, path=path, on_stop=on_stop)


def _serve_wsgi(app: Any, host: str, port: int, *, name: str, path: str,
                on_stop: Callable[[], None] | None) -> LoopbackServer:
    from werkzeug.serving import WSGIRequestHandler, make_server

    class QuietHandler(WSGIRequestHandler):
        def log_request(self, *args: Any, **kwargs: Any) -> None:  # no per-request lines on stderr
            pass

    server = make_server(host, port, app, threaded=True, request_handler=QuietHandler)  # listens on return
    thread = threading.Thread(target=server.serve_forever, name=name, daemon=True)
    thread.start()

    def stop_serving() -> None:
        server.shutdown()
        server.server_close()

    return LoopbackServer(stop_serving, thread, host, server.server_port, path=path, on_stop=on_stop)


def safe_validation_error(err: dict[str, Any]) -> dict[str, Any]:
    """A pydantic validation error as JSON-safe data: location, message and type, text made encodable.

    FastAPI's default 422 handler echoes each error's input; NaN, 1e400 or a lone surrogate there makes the
    422 itself fail to encode (a 500). This says where and what, never the value."""

    def clean(x: Any) -> Any:
        if isinstance(x, int) and not isinstance(x, bool):
            return x
        return str(x).encode("utf-8", "backslashreplace").decode("utf-8")[:200]

    return {"loc": [clean(p) for p in err.get("loc", ())], "msg": clean(err.get("msg", "invalid")), "type": clean(err.get("type", ""))}


class QueueWorker(ABC):
    """An asyncio queue drained by :meth:`_run` (the subclass's batching loop), with one worker thread for
    the blocking calls: started and stopped with the app (its lifespan)."""

    def __init__(self, thread_name: str):
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)

    async def start(self) -> None:
        self._queue = asyncio.Queue()
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        self._executor.shutdown(wait=False)

    @abstractmethod
    async def _run(self) -> None:
        """Take requests from ``self._queue`` forever, batch them and answer their futures."""
