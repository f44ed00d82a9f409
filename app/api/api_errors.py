"""Errors the server answers with, in OpenAI's shape: `{"error": {"message", "type", "param",
"code"}}` with the status a client library maps to its exception (400 BadRequestError, 401
AuthenticationError, 404 NotFoundError, 413, 429 RateLimitError, 500)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(eq=False)
class ApiError(Exception):
    status: int
    message: str
    type: str = "invalid_request_error"
    code: str | None = None
    param: str | None = None

    def __str__(self) -> str:
        return self.message

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, "invalid_request_error", code, param)


def not_found(message: str, code: str = "model_not_found", param: str | None = None) -> ApiError:
    return ApiError(404, message, "invalid_request_error", code, param)


def model_not_loaded(wanted: str, loaded: str | None) -> ApiError:
    """A request named a model other than the one loaded: the server checks before it queues
    the request and the worker again when it starts it (another request may have switched)."""
    served = f"the loaded model is {loaded!r}" if loaded else "no model is loaded"
    return not_found(f"the model {wanted!r} is not loaded; {served}", param="model")


def server_error(message: str) -> ApiError:
    return ApiError(500, message, "server_error", "internal_error")


def context_exceeded(room: int, size: str, endpoint: str) -> ApiError:
    """OpenAI's words for a prompt longer than the context, which clients look for."""
    return ApiError(
        400,
        f"This model's maximum context length is {room} tokens per request; your prompt "
        f"takes {size} tokens. Shorten the messages.",
        "invalid_request_error",
        "context_length_exceeded",
        "messages" if endpoint == "chat" else "prompt",
    )
