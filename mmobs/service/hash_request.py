"""What a ``POST /v1/hash`` asks for: parsed, bounded and validated, before any image is decoded.

Kept free of Starlette, prometheus_client and structlog: the reference
service calls it in its own process for small JSON bodies, and a decode
worker (:mod:`mmobs.service.decode_worker`) calls it for large ones, where parsing
runs under the request's CPU and memory budget instead of on the event loop.

Every client input that cannot be keyed is a :class:`RequestError` (a 4xx
with a code and a message naming what to fix), never an exception that would
become a 500. Beyond JSON syntax that means bounds on what parsing and keying
can cost: the number of JSON values in a body, integer literals' digits, the
size, depth and values of ``mm_processor_kwargs`` (every leaf is keyed through
``np.array``, so an integer outside int64/uint64 would key by object pointer)
and strings that cannot be encoded as UTF-8 (a lone surrogate such as
``"\\ud800"`` is valid JSON but has no UTF-8 form, and the key is built from
UTF-8).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mmobs.errors import InvalidOptionError
from mmobs.keys.from_bytes import VERIFY_MODES
from mmobs.keys.hashing import ALGORITHMS
from mmobs.keys.loader import ImageMediaIO
from mmobs.keys.raw_bytes import check_front_end

#: (param, URL) for every image a request names: a data: URL or a remote http(s) URL.
Source = tuple[str, str]

_MAX_INT_DIGITS = 40
# A JSON string, with its escapes; the unrolled form keeps long payloads fast.
_JSON_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


class RequestError(Exception):
    """A malformed request (not a bad image): answered with ``status`` and a JSON error."""

    def __init__(self, status: int, code: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.param = status, code, message, param

    def __reduce__(self) -> tuple[Any, ...]:  # crosses the process boundary from a decode worker
        return (RequestError, (self.status, self.code, self.message, self.param))


@dataclass(frozen=True)
class RequestLimits:
    """Bounds on one request's structure (the service's ``--max-*`` options feed the first one)."""

    max_images: int = 64
    #: JSON values (arrays, objects, members, scalars) in one body: far above any real request,
    #: far below the millions of empty lists a 60 MiB body can hold.
    max_json_values: int = 100_000
    max_option_depth: int = 16
    #: Values in ``mm_processor_kwargs`` (each one is keyed with every image).
    max_option_values: int = 10_000
    #: Characters of all strings in ``mm_processor_kwargs`` together.
    max_option_chars: int = 65_536
    max_model_id_chars: int = 512


@dataclass(frozen=True)
class HashOptions:
    """The validated options of a request: how to key, how to decode, what else enters the key."""

    algorithm: str = "blake3"
    io_options: dict[str, Any] = field(default_factory=dict)  # image_mode, rgba_background_color
    extras: dict[str, Any] = field(default_factory=dict)  # model_id, mm_processor_kwargs
    verify: str = "header"  # POST /v1/keys only (mmobs.keys.from_bytes.key_image's)
    #: Whose key: vLLM's Python front end's (``python``) or its Rust front end's (``rust``: the bytes' digest).
    front_end: str = "python"


@dataclass(frozen=True)
class ParsedRequest:
    """A JSON request: its options and the image URLs it names, in order."""

    options: HashOptions
    sources: list[Source]


# -- JSON bodies -------------------------------------------------------------------


def count_json_values(body: bytes) -> int:
    """An upper bound on the number of JSON values in ``body``, cheap to compute.

    Every value but the first follows a ``,`` or opens a container, and a
    member value follows its object's ``{`` or a ``,``: so commas plus twice
    the containers plus one bounds the count. The bytes are counted at memory
    speed (NumPy compares a quarter-MiB piece at a time, a quarter of the cost
    of three ``bytes.count`` passes over a base64 image; the pieces bound the
    temporary to 256 KiB); only when that bound is over the limit are strings
    (whose commas and brackets are text) cut out and the count redone.
    """
    if len(body) < _NUMPY_COUNT_FROM:
        return body.count(b",") + 2 * (body.count(b"[") + body.count(b"{")) + 1
    data = np.frombuffer(body, np.uint8)
    total = 1
    for start in range(0, len(data), _COUNT_PIECE):
        piece = data[start : start + _COUNT_PIECE]
        commas, arrays, objects = (int(np.count_nonzero(piece == byte)) for byte in _STRUCTURAL)
        total += commas + 2 * (arrays + objects)
    return total


_STRUCTURAL = tuple(b",[{")  # the bytes count_json_values counts, in its formula's order
_COUNT_PIECE = 256 * 1024
_NUMPY_COUNT_FROM = 16 * 1024  # below, three bytes.count passes cost less than NumPy's set-up


def _count_outside_strings(body: bytes) -> int:
    return count_json_values(_JSON_STRING.sub(b'""', body))


def _parse_int(text: str) -> int:
    # int() is quadratic in the digits (CPython caps it at 4,300 digits, which still
    # costs ~0.2 ms each): refuse long literals before converting them.
    if len(text) > _MAX_INT_DIGITS:
        raise RequestError(
            400, "invalid_json", f"the JSON body has an integer literal of more than {_MAX_INT_DIGITS} digits"
        )
    return int(text)


def parse_json_body(body: bytes, limits: RequestLimits) -> ParsedRequest:
    """Parse and validate a JSON ``{"images": [...]}`` or ``{"messages": [...]}`` request."""
    if not body.strip():
        raise RequestError(400, "invalid_json", "the request body is empty; send a JSON object")
    if count_json_values(body) > limits.max_json_values and _count_outside_strings(body) > limits.max_json_values:
        raise RequestError(
            400,
            "invalid_json",
            f"the JSON body holds more than {limits.max_json_values} values (array elements, object members); "
            "a hash request needs a few per image",
        )
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise RequestError(
            400,
            "invalid_json",
            f"the body is not UTF-8 text (byte 0x{body[error.start]:02x} at offset {error.start}); "
            "send a UTF-8 JSON object, or an image with its image/* Content-Type",
        ) from None
    try:
        document = json.loads(text, parse_int=_parse_int)
    except RecursionError:
        raise RequestError(400, "invalid_json", "the JSON body is nested too deeply") from None
    except ValueError as error:
        raise RequestError(400, "invalid_json", f"the body is not valid JSON: {str(error)[:200]}") from None
    if not isinstance(document, dict):
        raise RequestError(400, "invalid_request", "the JSON body must be an object")
    has_images, has_messages = "images" in document, "messages" in document
    if has_images == has_messages:
        raise RequestError(400, "invalid_request", "send exactly one of 'images' (a list of URLs) or 'messages'")
    sources = _image_list(document["images"]) if has_images else _message_images(document["messages"])
    return ParsedRequest(hash_options(document, len(sources), limits), sources)


def _image_list(images: Any) -> list[Source]:
    if not isinstance(images, list) or not images:
        raise RequestError(400, "invalid_request", "'images' must be a non-empty list of URL strings", "images")
    sources: list[Source] = []
    for index, url in enumerate(images):
        if isinstance(url, dict) and isinstance(url.get("url"), str):
            url = url["url"]
        if not isinstance(url, str):
            raise RequestError(400, "invalid_request", "each image must be a URL string", f"images[{index}]")
        sources.append((f"images[{index}]", url))
    return sources


def _message_images(messages: Any) -> list[Source]:
    if not isinstance(messages, list) or not messages:
        raise RequestError(400, "invalid_request", "'messages' must be a non-empty list", "messages")
    sources: list[Source] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise RequestError(400, "invalid_request", "each message must be an object", f"messages[{i}]")
        content = message.get("content")
        if content is None or isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise RequestError(
                400, "invalid_request", "message content must be a string or a list of parts", f"messages[{i}].content"
            )
        for j, part in enumerate(content):
            param = f"messages[{i}].content[{j}]"
            if not isinstance(part, dict):
                raise RequestError(400, "invalid_request", "each content part must be an object", param)
            if part.get("type") != "image_url":
                continue
            image_url = part.get("image_url")
            url = image_url.get("url") if isinstance(image_url, dict) else image_url
            if not isinstance(url, str):
                raise RequestError(
                    400, "invalid_request", "an image_url part needs image_url.url (a string)", f"{param}.image_url"
                )
            sources.append((f"{param}.image_url", url))
    if not sources:
        raise RequestError(400, "invalid_request", "the messages hold no image_url content part", "messages")
    return sources


# -- options -----------------------------------------------------------------------


def hash_options(options: dict[str, Any], images: int, limits: RequestLimits, *, query: bool = False) -> HashOptions:
    """Validate a request's options; ``query`` when they came as text (query string, form fields)."""
    if images > limits.max_images:
        raise RequestError(400, "too_many_images", f"{images} images sent; the limit is {limits.max_images}")
    algorithm = options.get("algorithm", "blake3")
    if algorithm not in ALGORITHMS:
        raise RequestError(400, "invalid_option", f"algorithm must be one of {', '.join(ALGORITHMS)}", "algorithm")
    io_options: dict[str, Any] = {}
    if "image_mode" in options:
        io_options["image_mode"] = options["image_mode"]
    if "rgba_background_color" in options:
        color = options["rgba_background_color"]
        if query and isinstance(color, str):  # "r,g,b" from a query string or form field
            color = [int(c) if c.strip().isascii() and c.strip().isdigit() else c for c in color.split(",")]
        io_options["rgba_background_color"] = color
    try:
        validated = ImageMediaIO(**io_options)
    except InvalidOptionError as error:
        raise RequestError(400, "invalid_option", error.message[:300], error.param) from None
    verify = options.get("verify", "header")
    if verify not in VERIFY_MODES:
        raise RequestError(400, "invalid_option", f"verify must be one of {', '.join(VERIFY_MODES)}", "verify")
    if "image_mode" in io_options:
        io_options["image_mode"] = validated.image_mode
    if "rgba_background_color" in io_options:
        io_options["rgba_background_color"] = validated.rgba_background_color
    extras: dict[str, Any] = {}
    if "model_id" in options:
        model_id = options["model_id"]
        if not isinstance(model_id, str) or len(model_id) > limits.max_model_id_chars:
            raise RequestError(
                400,
                "invalid_option",
                f"model_id must be a string of at most {limits.max_model_id_chars} characters",
                "model_id",
            )
        if not _utf8(model_id):
            raise RequestError(400, "invalid_option", _NOT_UTF8.format(what="model_id"), "model_id")
        extras["model_id"] = model_id
    if "mm_processor_kwargs" in options:
        kwargs = options["mm_processor_kwargs"]
        if not isinstance(kwargs, dict):
            raise RequestError(
                400,
                "invalid_option",
                f"mm_processor_kwargs must be an object nested at most {limits.max_option_depth} deep",
                "mm_processor_kwargs",
            )
        _check_processor_kwargs(kwargs, limits)
        extras["mm_processor_kwargs"] = kwargs
    front_end = options.get("front_end", "python")
    try:
        check_front_end(front_end, algorithm, extras)
    except InvalidOptionError as error:
        raise RequestError(400, "invalid_option", error.message[:300], error.param) from None
    return HashOptions(algorithm, io_options, extras, verify, front_end)


_NOT_UTF8 = "{what} holds a string that cannot be encoded as UTF-8 (a lone surrogate such as \\ud800)"
_INT_RANGE = (-(2**63), 2**64 - 1)  # what np.array keys as int64/uint64 rather than as an object pointer


def _utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_processor_kwargs(kwargs: dict[str, Any], limits: RequestLimits) -> None:
    """Bound ``mm_processor_kwargs`` before it is keyed (every leaf goes through ``np.array``)."""

    def refuse(message: str) -> RequestError:
        return RequestError(400, "invalid_option", f"mm_processor_kwargs {message}", "mm_processor_kwargs")

    values = chars = 0
    stack: list[tuple[Any, int]] = [(kwargs, 1)]
    while stack:
        value, depth = stack.pop()
        values += 1
        if values > limits.max_option_values:
            raise refuse(f"holds more than {limits.max_option_values} values")
        if isinstance(value, dict):
            if depth > limits.max_option_depth:
                raise refuse(f"must be an object nested at most {limits.max_option_depth} deep")
            for key, item in value.items():
                chars += len(key)
                if not _utf8(key):
                    raise refuse("has a key that cannot be encoded as UTF-8 (a lone surrogate such as \\ud800)")
                stack.append((item, depth + 1))
        elif isinstance(value, list):
            if depth > limits.max_option_depth:
                raise refuse(f"must be an object nested at most {limits.max_option_depth} deep")
            stack.extend((item, depth + 1) for item in value)
        elif isinstance(value, str):
            chars += len(value)
            if not _utf8(value):
                raise refuse("holds a string that cannot be encoded as UTF-8 (a lone surrogate such as \\ud800)")
        elif isinstance(value, int) and not isinstance(value, bool) and not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            raise refuse("holds an integer outside the 64-bit range, which cannot be keyed deterministically")
        if chars > limits.max_option_chars:
            raise refuse(f"holds more than {limits.max_option_chars} characters of text")
