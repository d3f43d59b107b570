"""The run view in a browser: textual-serve's server behind a token (`cockpit serve`).

textual-serve answers a browser's page and its websocket, and starts the app as a command (here
`cockpit attach RUN [--read-only]`) for each websocket, its screen drawn by Textual's web driver
through the command's stdout. Every request must carry the token: the page's URL as `?token=`,
which sets a cookie of this port's that the page's websocket and static files bring along. A request
with neither, or a wrong one, gets 403.

Importing this module needs textual-serve (the `serve` extra): the CLI imports it only for `serve`.
"""

from __future__ import annotations

import hmac
import logging
import shlex
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from aiohttp.typedefs import Middleware
from textual_serve.server import Server

REFUSED = (
    "this page needs the token of its URL: open the address `cockpit serve` printed, "
    "http://127.0.0.1:PORT/?token=..."
)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def attach_command(run_path: Path, *, control: bool) -> str:
    """The shell command textual-serve starts for each browser: this Python's `cockpit attach`."""
    words = [sys.executable, "-m", "cockpit", "attach", str(run_path)]
    return shlex.join(words if control else [*words, "--read-only"])


def cookie_name(port: int) -> str:
    """A cookie per port: a browser sends 127.0.0.1's cookies to every port of it."""
    return f"cockpit_serve_{port}"


def token_middleware(token: str, port: int) -> Middleware:
    """Refuses (403) a request without the token, in its query or in this port's cookie; a page
    asked for with the token in its query gets the cookie."""
    expected = token.encode()
    name = cookie_name(port)

    def matches(given: str) -> bool:
        return hmac.compare_digest(given.encode(), expected)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.query.get("token")
        if given is None:
            if not matches(request.cookies.get(name, "")):
                raise web.HTTPForbidden(text=REFUSED)
            return await handler(request)
        if not matches(given):
            raise web.HTTPForbidden(text=REFUSED)
        response = await handler(request)
        if not response.prepared:  # a websocket has long been answered
            response.set_cookie(name, token, httponly=True, samesite="Strict", path="/")
        return response

    return check


class TokenServer(Server):
    """textual-serve's server, every route behind the token; quiet but for warnings."""

    def __init__(self, command: str, host: str, port: int, token: str, title: str):
        super().__init__(command, host=host, port=port, title=title)
        self.token = token

    async def make_web_app(self) -> web.Application:
        app = await super()._make_app()
        app.middlewares.append(token_middleware(self.token, self.port))
        return app

    async def _make_app(self) -> web.Application:
        return await self.make_web_app()

    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        # the page's websocket address from the address the browser used: through `ssh -L` with
        # another local port it is not the one listened on
        self.public_url = f"{request.scheme}://{request.host}"
        response: web.StreamResponse = await super().handle_index(request)
        return response

    def initialize_logging(self) -> None:
        # aiohttp's access log would print a line for every file of every page, the token with them
        logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")

    async def on_startup(self, app: web.Application) -> None:
        """textual-serve prints its logo and an address without the token here: the CLI says it all."""
