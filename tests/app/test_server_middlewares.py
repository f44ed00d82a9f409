"""The API server's middlewares on a bare aiohttp app: no model, no worker, milliseconds.

The server's own tests (test_api_server.py) run them behind a loaded model;
here each is checked alone, as the factories in app.api.middlewares make it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from app.api.api_errors import ApiError
from app.api.middlewares import (
    USAGE_WORDS,
    auth_middleware,
    cors_middleware,
    error_middleware,
)

KEY = "s3cret"
ORIGIN = "http://localhost:5173"


async def ok(request: web.Request) -> web.Response:
    await request.read()  # as the server's routes do: past the size limit, this raises
    request[USAGE_WORDS] = "prompt 3 (0 cached) completion 2 tokens,"
    return web.json_response({"ok": True})


async def refused(_request: web.Request) -> web.Response:
    raise ApiError(409, "not now", code="busy")


async def broken(_request: web.Request) -> web.Response:
    raise RuntimeError("a bug")


def served(
    check: Callable[[TestClient[web.Request, web.Application]], Awaitable[None]],
) -> None:
    """Run `check` against the middlewares in the server's order, on routes of our own."""
    app = web.Application(
        client_max_size=1024,
        middlewares=[error_middleware(1024), cors_middleware((ORIGIN,)), auth_middleware(KEY)],
    )
    app.router.add_post("/v1/ok", ok)
    app.router.add_get("/v1/refused", refused)
    app.router.add_get("/v1/broken", broken)
    app.router.add_get("/health", ok)

    async def run() -> None:
        async with TestClient(TestServer(app)) as client:
            await check(client)

    asyncio.run(run())


async def status_and_body(response: Any) -> tuple[int, dict[str, Any]]:
    return response.status, await response.json()


def test_every_failure_is_an_openai_error_and_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bearer = {"Authorization": f"Bearer {KEY}"}

    async def check(client: TestClient[web.Request, web.Application]) -> None:
        status, body = await status_and_body(await client.get("/v1/refused", headers=bearer))
        assert (status, body["error"]["code"]) == (409, "busy")
        status, body = await status_and_body(await client.get("/v1/broken", headers=bearer))
        assert (status, body["error"]["message"]) == (500, "internal server error")
        status, body = await status_and_body(await client.get("/v1/nowhere", headers=bearer))
        assert status == 404 and "no such endpoint: GET /v1/nowhere" in body["error"]["message"]
        status, body = await status_and_body(await client.get("/v1/ok", headers=bearer))
        assert status == 405 and body["error"]["code"] == "method_not_allowed"
        big = await client.post("/v1/ok", data=b"x" * 4096, headers=bearer)
        assert (await status_and_body(big))[0] == 413
        assert (await client.post("/v1/ok", headers=bearer)).status == 200

    with caplog.at_level(logging.INFO, logger="shardchat.api"):
        served(check)
    lines = [r.getMessage() for r in caplog.records if r.name == "shardchat.api"]
    assert any(line.startswith("GET /v1/refused 409 ") for line in lines)
    assert any(line.startswith("POST /v1/ok 200 prompt 3 (0 cached)") for line in lines)
    assert [r.getMessage() for r in caplog.records if r.exc_info] == ["GET /v1/broken failed"]


def test_the_key_guards_every_route_but_health_and_cors_answers_listed_origins() -> None:
    async def check(client: TestClient[web.Request, web.Application]) -> None:
        status, body = await status_and_body(await client.post("/v1/ok"))
        assert (status, body["error"]["code"]) == (401, "invalid_api_key")
        wrong = await client.post("/v1/ok", headers={"Authorization": "Bearer nope"})
        assert wrong.status == 401
        assert (await client.post("/v1/ok", headers={"Authorization": f"bearer {KEY}"})).ok
        assert (await client.get("/health")).ok  # a load balancer's probe has no key
        listed = await client.options("/v1/ok", headers={"Origin": ORIGIN})
        assert listed.status == 204 and listed.headers["Access-Control-Allow-Origin"] == ORIGIN
        other = await client.get("/health", headers={"Origin": "http://evil.example"})
        assert "Access-Control-Allow-Origin" not in other.headers

    served(check)


def test_an_authorization_header_that_is_not_utf8_is_a_wrong_key() -> None:
    """Raw header bytes that are not UTF-8 (a fuzzer's, a broken client's) are a wrong key:
    401 like any other, not a 400 about the header's encoding."""

    async def check(client: TestClient[web.Request, web.Application]) -> None:
        for header in (b"Bearer \xff\xfe", b"\xff\xfe\xfd", b"Bearer " + KEY.encode() + b"\xff"):
            reader, writer = await asyncio.open_connection(client.host, client.port)
            writer.write(
                b"POST /v1/ok HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                b"Connection: close\r\nAuthorization: " + header + b"\r\n\r\n"
            )
            await writer.drain()
            answer = await reader.read()
            writer.close()
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 401 "), (header, answer)
            assert b'"invalid_api_key"' in body

    served(check)
