"""ApiError: an OpenAI error object `{"error": {message, type, param, code}}` with its HTTP status."""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def event_error(value: Any) -> ApiError:
    """The ApiError of an ("error", value) engine event: an ApiError as is (the drain's), else a failure."""
    if isinstance(value, ApiError):
        return value
    return ApiError(500, f"generation failed: {value}", "server_error", code="generation_failed")


def too_large(size: int | None, limit: int) -> ApiError:
    got = f"{size} bytes" if size is not None else "more"
    return ApiError(413, f"the request body is {got}; the limit is {limit} bytes", code="request_too_large")


def unknown_model(name: Any, served: str) -> ApiError:
    return ApiError(
        404,
        f"The model '{name}' does not exist; this server serves '{served}'",
        param="model",
        code="model_not_found",
    )
