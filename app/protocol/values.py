"""What a value may hold, stated once: the rules every value from a client meets at the boundary,
and the cleaning of values that enter a run from elsewhere.

Each boundary rule is a validator and the JSON Schema that says it, side by side in one annotated
type, so the OpenAPI document and the server's validation cannot part ways. Values a store cannot
hold (a NUL character, a number outside 64 bits, nesting without bound) are refused there, with
the field that holds them; non-finite numbers and lone surrogates are not JSON and never get past
the body's parser.

Values from a model or a tool cannot be refused that way: they are cleaned where they enter a run
(`clean_text`, `clean_json`), so every store sees the same values and a run behaves the same on
all three. A NUL or a lone surrogate becomes U+FFFD, a non-finite number null, an integer is kept
within 64 bits.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

import annotated_types
from pydantic import AfterValidator, BeforeValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

SESSION_ID_PATTERN = r"^[A-Za-z0-9._:-]{1,200}$"
"""Session ids; matched whole, so a trailing newline does not pass."""
_SESSION_ID = re.compile(r"[A-Za-z0-9._:-]{1,200}")

MAX_JSON_DEPTH = 32
"""How deep arrays and objects may nest in a client's JSON value (`input`, a tool `result`)."""

MAX_JSON_NUMBER = 9 * 10**18
"""The largest magnitude of a number in a client's JSON value. Every store holds an integer up to
it exactly (it is below 2^63), and it is a double exactly, so a check that compares numbers as
doubles (as many JSON Schema validators do) draws the same line as this one, which compares
them exactly: 2^63 - 1 itself rounds up to 2^63 as a double."""

MAX_SEQUENCE = 2**63 - 1
"""The largest integer every store holds (a signed 64-bit column): the largest stream sequence
a client may name, and what a larger integer from a model or a tool is clamped to."""

NO_NUL_PATTERN = r"^[^\u0000]*$"
"""Strings without a NUL character (PostgreSQL cannot store one)."""

IDEMPOTENCY_KEY_PATTERN = r"^[\x21-\x7E](?:[\x20-\x7E]{0,198}[\x21-\x7E])?$"
"""Idempotency keys: 1 to 200 printable ASCII characters, no space at either end (what an HTTP
header carries unchanged)."""

JSON_VALUE_REF = "#/components/schemas/JsonValue"
"""Where the OpenAPI document defines `JSON_VALUE_SCHEMA`."""

JSON_VALUE_SCHEMA: dict[str, Any] = {
    "title": "JsonValue",
    "description": (
        f"Any JSON value a store can hold: strings and keys without NUL (\\u0000), numbers "
        f"between -{MAX_JSON_NUMBER} and {MAX_JSON_NUMBER}, arrays and objects nested at most "
        f"{MAX_JSON_DEPTH} levels deep."
    ),
    "anyOf": [
        {"type": "null"},
        {"type": "boolean"},
        {"type": "number", "minimum": -MAX_JSON_NUMBER, "maximum": MAX_JSON_NUMBER},
        {"type": "string", "pattern": NO_NUL_PATTERN},
        {"type": "array", "items": {"$ref": JSON_VALUE_REF}},
        {
            "type": "object",
            "propertyNames": {"pattern": NO_NUL_PATTERN},
            "additionalProperties": {"$ref": JSON_VALUE_REF},
        },
    ],
}
"""The JSON Schema of `JsonValue`, recursive through `JSON_VALUE_REF`."""


def _unsupported(where: str, what: str) -> PydanticCustomError:
    if len(where) > 120:
        where = where[:117] + "..."
    return PydanticCustomError(
        "unsupported_value", "{where}: {what}", {"where": where, "what": what}
    )


def check_json_value(value: Any) -> Any:
    """`value` if it is JSON a store can hold (see `JSON_VALUE_SCHEMA`), else a validation error
    naming where in it the first offending value is."""
    stack: list[tuple[Any, int, str]] = [(value, 0, "$")]
    while stack:
        item, depth, where = stack.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise _unsupported(where, "strings may not contain NUL (\\u0000)")
        elif item is None or isinstance(item, bool):
            continue
        elif isinstance(item, int | float):
            finite = isinstance(item, int) or math.isfinite(item)
            if not (finite and -MAX_JSON_NUMBER <= item <= MAX_JSON_NUMBER):
                raise _unsupported(where, f"numbers must be finite and within ±{MAX_JSON_NUMBER}")
        elif isinstance(item, dict | list):
            if depth >= MAX_JSON_DEPTH:
                raise _unsupported(where, f"nested more than {MAX_JSON_DEPTH} levels deep")
            if isinstance(item, list):
                stack.extend((v, depth + 1, f"{where}[{i}]") for i, v in enumerate(item))
                continue
            for key, child in item.items():
                if not isinstance(key, str) or "\x00" in key:
                    raise _unsupported(where, "keys may not contain NUL (\\u0000)")
                stack.append((child, depth + 1, f"{where}.{key}"))
        else:
            raise _unsupported(where, f"{type(item).__name__} is not a JSON value")
    return value


def _check_text(value: str) -> str:
    if "\x00" in value:
        raise PydanticCustomError("unsupported_value", "strings may not contain NUL (\\u0000)")
    return value


def _check_session_id(value: str) -> str:
    if not _SESSION_ID.fullmatch(value):
        raise PydanticCustomError(
            "invalid_session_id",
            "session ids match {pattern}",
            {"pattern": SESSION_ID_PATTERN},
        )
    return value


def _sequence_digits(value: Any) -> Any:
    # Decimal digits only, and few enough to be a 64-bit number: what `int()` would also take
    # ("+5", "5_000", 4,300 digits and more) is no sequence a server ever sent.
    if isinstance(value, str):
        digits = value.strip()
        if not digits.isascii() or not digits.isdigit() or len(digits) > 19:
            raise PydanticCustomError(
                "int_parsing",
                "a sequence number is 1 to 19 decimal digits, at most {max}",
                {"max": MAX_SEQUENCE},
            )
        return int(digits)
    return value


# Inline rather than a bare `$ref`: pydantic resolves a `$ref` that a field's description sits
# beside, and the document's components are not pydantic's to resolve.
JsonValue = Annotated[Any, AfterValidator(check_json_value), WithJsonSchema(JSON_VALUE_SCHEMA)]
"""A JSON value from a client that every store can hold."""

JsonObject = Annotated[
    dict[str, Any],
    AfterValidator(check_json_value),
    WithJsonSchema(
        {
            "type": "object",
            "propertyNames": {"pattern": NO_NUL_PATTERN},
            "additionalProperties": {"$ref": JSON_VALUE_REF},
        }
    ),
]
"""A JSON object from a client that every store can hold."""

Text = Annotated[
    str, AfterValidator(_check_text), WithJsonSchema({"type": "string", "pattern": NO_NUL_PATTERN})
]
"""A string from a client: any text without a NUL character."""

SessionId = Annotated[
    str,
    AfterValidator(_check_session_id),
    WithJsonSchema(
        {"type": "string", "pattern": SESSION_ID_PATTERN, "minLength": 1, "maxLength": 200}
    ),
]
"""A session id from a client (matched whole: `SESSION_ID_PATTERN`)."""

SequenceNumber = Annotated[
    int,
    BeforeValidator(_sequence_digits),
    annotated_types.Ge(0),
    annotated_types.Le(MAX_SEQUENCE),
    WithJsonSchema({"type": "integer", "minimum": 0, "maximum": MAX_SEQUENCE}),
]
"""A stream sequence number from a client: 0 to `MAX_SEQUENCE`."""


# -- cleaning values from models and tools -----------------------------------------------------

REPLACEMENT = "\ufffd"
"""What a character no store can hold becomes."""

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """`text` without NUL characters or lone surrogates (each becomes U+FFFD)."""
    # `isascii` is O(1) on CPython's strings, and an ASCII string holds no surrogate.
    if "\x00" in text:
        text = text.replace("\x00", REPLACEMENT)
    if text.isascii():
        return text
    return _SURROGATE.sub(REPLACEMENT, text)


def is_clean(value: Any) -> bool:
    """Whether `value` (JSON data) already is what `clean_json` would make of it."""
    if isinstance(value, str):
        return "\x00" not in value and (value.isascii() or _SURROGATE.search(value) is None)
    if isinstance(value, bool) or value is None:
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int):
        return -MAX_SEQUENCE - 1 <= value <= MAX_SEQUENCE
    if isinstance(value, dict):
        return all(is_clean(key) and is_clean(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return all(is_clean(item) for item in value)
    return True


def clean_json(value: Any) -> Any:
    """`value` (JSON data) with every string cleaned (keys too), non-finite numbers as null and
    integers clamped to 64 bits; the value itself when it needs nothing."""
    if is_clean(value):
        return value
    return _cleaned(value)


def _cleaned(value: Any) -> Any:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int):
        return max(-MAX_SEQUENCE - 1, min(value, MAX_SEQUENCE))
    if isinstance(value, dict):
        return {_cleaned(key): _cleaned(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_cleaned(item) for item in value]
    return value
