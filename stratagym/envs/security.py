"""Security headers for every HTTP server stratagym runs (OpenEnv server, retrieval server, WebShop site).

Why: these servers echo agent and user text (queries, actions, purchased options) inside JSON and HTML.
``X-Content-Type-Options: nosniff`` stops a browser from sniffing such a JSON body as HTML or script, and
a restrictive Content-Security-Policy stops any markup that slipped through from running script.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["JSON_CSP", "SecurityHeaders", "add_flask_security_headers"]

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
