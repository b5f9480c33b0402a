"""Typed settings from named sources: values gathered from flags and environment variables are validated by
their pydantic model in one call, and a refusal names where each bad value came from ("argument --port",
"OVSERVE_PORT='eighty'"), every bad value at once. The runtime's flags (flags.py) and the operator's settings
(ovserve_operator.settings) both go through it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


class ConfigError(ValueError):
    """A value refused, said as the user wrote it."""


def validate(model: type[M], values: Mapping[str, Any], source: Mapping[str, str]) -> M:
    """`model` from `values` (field -> raw value); `source` says where each field's value came from."""
    try:
        return model.model_validate(dict(values))
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = str(err["loc"][0]) if err["loc"] else ""
            msg = err["msg"].removeprefix("Value error, ")
            msg = msg[:1].lower() + msg[1:]
            if field in source:
                said = repr(err["input"])
                got = "" if said in source[field] or said in msg else f", got {said}"  # the value once
                problems.append(f"{source[field]}: {msg}{got}")
            else:  # a rule over several fields: its message names them
                problems.append(msg)
        raise ConfigError("; ".join(problems)) from None


def env_value(environ: Mapping[str, str], name: str) -> tuple[str, str] | None:
    """(stripped value, source text) of an environment variable; None when unset or empty."""
    raw = environ.get(name)
    if raw is None or not raw.strip():
        return None
    return raw.strip(), f"{name}={raw!r}"
