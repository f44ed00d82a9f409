"""What every request of the API server passes through before its route: errors, CORS, the key.

Each middleware is made by a small factory from the one setting it needs, so
the server assembles them from its configuration and none of them reaches
back into the server. Outermost first: `error_middleware` turns whatever a
route or an inner middleware raises into an OpenAI-style JSON error and logs
one line per request; `cors_middleware` answers the origins the user listed;
`auth_middleware` refuses a request without the API key (except /health).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler, Middleware

from app.api.api_errors import ApiError, server_error

log = logging.getLogger("shardchat.api")

USAGE_WORDS = web.RequestKey("usage_words", str)  # what the request log says of the tokens


class _MalformedRequestsInOneLine(logging.Filter):
    """aiohttp logs a request its parser refuses (a bad request line, a flood of headers) as
    an ERROR with a traceback, though it answers it with a 400 itself: that is the client's
    mistake, one WARNING line. Records of other failures pass unchanged."""

    def filter(self, record: logging.LogRecord) -> bool:
        problem = record.exc_info[1] if record.exc_info else None
        if isinstance(problem, HttpProcessingError):
            where = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
            words = " ".join(str(problem.message or type(problem).__name__).split())[:200]
            record.msg, record.args = "refused a malformed request from %s: %s", (where, words)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = record.exc_text = None
        return True


_MALFORMED_REQUESTS = _MalformedRequestsInOneLine()


def quiet_malformed_requests() -> None:
    """Log requests aiohttp's parser refuses in one line; once per process is enough (the
    logger's filters are a set), calling it again changes nothing."""
    logging.getLogger("aiohttp.server").addFilter(_MALFORMED_REQUESTS)


def error_middleware(max_body_bytes: int) -> Middleware:
    """Every failure as an OpenAI-style JSON error, and one log line per request with its
    status, tokens (set by the route under USAGE_WORDS) and time."""

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except ApiError as exc:
            status = exc.status
            return web.json_response(exc.body(), status=exc.status)
        except web.HTTPRequestEntityTooLarge:
            status = 413
            limit = max_body_bytes // 2**20
            error = ApiError(413, f"the request body is larger than {limit} MB", code="too_large")
            return web.json_response(error.body(), status=413)
        except web.HTTPException as exc:
            status = exc.status
            error = _routing_error(request, exc)
            headers = {k: v for k, v in exc.headers.items() if k.lower() != "content-type"}
            return web.json_response(error.body(), status=exc.status, headers=headers)
        except asyncio.CancelledError:
            status = 499  # the client went away
            raise
        except Exception:
            log.exception("%s %s failed", request.method, request.path)
            return web.json_response(server_error("internal server error").body(), status=500)
        finally:
            tokens = request.get(USAGE_WORDS, "")
            log.info(
                "%s %s %d %s%.2f s", request.method, request.path, status,
                f"{tokens} " if tokens else "", time.perf_counter() - started,
            )  # fmt: skip

    return errors


def cors_middleware(origins: tuple[str, ...]) -> Middleware:
    """CORS headers for the listed origins ("*": any) and their preflight requests; other
    origins get no header, so a browser keeps their pages from reading the replies."""

    @web.middleware
    async def cors(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        allowed = origin is not None and (origin in origins or "*" in origins)
        if request.method == "OPTIONS" and allowed:
            response: web.StreamResponse = web.Response(status=204)
        else:
            response = await handler(request)
        if allowed and not response.prepared:
            response.headers["Access-Control-Allow-Origin"] = origin or "*"
            response.headers["Access-Control-Allow-Headers"] = "Authorization, Content-Type"
            response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
        return response

    return cors


def auth_middleware(api_key: str | None) -> Middleware:
    """Without the key no request is served, /health excepted (a load balancer's probe);
    compared in constant time. No key: every request passes."""

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        guarded = bool(api_key) and request.path != "/health"
        if guarded and not hmac.compare_digest(_bearer_token(request), (api_key or "").encode()):
            raise ApiError(
                401, "invalid API key: send it as 'Authorization: Bearer KEY'",
                "invalid_request_error", "invalid_api_key",
            )  # fmt: skip
        return await handler(request)

    return auth


def _bearer_token(request: web.Request) -> bytes:
    """The key in `Authorization: Bearer KEY`; the scheme is case-insensitive (RFC 7235), and
    a bare key is taken as it always was.

    aiohttp keeps header bytes that are not UTF-8 as lone surrogates; encoded back as they
    are ("surrogatepass"), they never equal a key, so such a header is a wrong key like any
    other (401)."""
    header = request.headers.get("Authorization", "").strip()
    scheme, _, token = header.partition(" ")
    given = token.strip() if scheme.lower() == "bearer" else header
    return given.encode("utf-8", "surrogatepass")


def _routing_error(request: web.Request, exc: web.HTTPException) -> ApiError:
    if isinstance(exc, web.HTTPMethodNotAllowed):
        allowed = ", ".join(sorted(exc.allowed_methods))
        message = f"{request.method} is not allowed on {request.path}; use {allowed}"
        return ApiError(exc.status, message, code="method_not_allowed")
    if isinstance(exc, web.HTTPNotFound):
        message = (
            f"no such endpoint: {request.method} {request.path} (served: /v1/chat/completions, "
            "/v1/completions, /v1/responses, /v1/models, /health)"
        )
        return ApiError(exc.status, message, code="not_found")
    return ApiError(exc.status, exc.reason, code=None)
