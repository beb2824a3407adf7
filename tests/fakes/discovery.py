"""Google's discovery documents as the schema of what the stand-ins receive and answer.

The documents ship inside the PyPI package google-api-python-client
(googleapiclient/discovery_cache/documents/<api>.<version>.json). A discovery schema is a
small JSON-Schema dialect (https://developers.google.com/discovery/v1/type-format):
`type` object/array/string/integer/number/boolean/any, `$ref` to a named schema,
`properties`, `additionalProperties` (a map), `items`, `enum`, and `format`. 64-bit
integers (format int64/uint64) travel as decimal strings in JSON. Unknown fields are
rejected here: the real API answers 400 "Invalid JSON payload received. Unknown name".
"""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from typing import Any

_INT64 = re.compile(r"^-?[0-9]+$")
_UINT64 = re.compile(r"^[0-9]+$")
_INT32_RANGE = {"int32": (-(2**31), 2**31 - 1), "uint32": (0, 2**32 - 1)}
# Query parameters every Google API accepts (the document's top-level `parameters`) are
# read from the document; these are what the REST clients add on top.
_CLIENT_QUERY = {"$alt", "alt", "prettyPrint"}


class DiscoveryError(ValueError):
    """A body or parameter the discovery document does not allow; `path` says where."""


@cache
def document(api: str, version: str) -> dict[str, Any]:
    """The discovery document of one API, e.g. document("compute", "v1")."""
    root = resources.files("googleapiclient") / "discovery_cache" / "documents"
    return json.loads((root / f"{api}.{version}.json").read_text())


def method(api: str, version: str, name: str) -> dict[str, Any]:
    """A method by its dotted name, e.g. "instances.insert" or "zoneOperations.wait"."""
    *resource_path, verb = name.split(".")
    node = document(api, version)
    for resource in resource_path:
        node = node["resources"][resource]
    return node["methods"][verb]


def validate(api: str, version: str, schema: dict[str, Any] | str, value: Any) -> None:
    """Raise DiscoveryError when `value` does not fit `schema` (a dict or a schema name)."""
    spec = {"$ref": schema} if isinstance(schema, str) else schema
    _check(document(api, version)["schemas"], spec, value, "$")


def validate_call(
    api: str,
    version: str,
    name: str,
    query: dict[str, str],
    body: Any,
) -> None:
    """Check a request: known query parameters, enum values, and the body's schema."""
    spec = method(api, version, name)
    allowed = {**document(api, version).get("parameters", {}), **spec.get("parameters", {})}
    for key, value in query.items():
        if key in _CLIENT_QUERY:
            continue
        param = allowed.get(key)
        if param is None or param.get("location") != "query":
            raise DiscoveryError(f"{name}: unknown query parameter {key!r}")
        _check(document(api, version)["schemas"], param, _typed(param, value), f"?{key}")
    request = spec.get("request")
    if request is None:
        if body not in (None, {}):
            raise DiscoveryError(f"{name}: takes no body")
        return
    if body is None:
        raise DiscoveryError(f"{name}: a {request['$ref']} body is required")
    _check(document(api, version)["schemas"], request, body, "$")


def validate_response(api: str, version: str, name: str, body: Any) -> None:
    """Check a 200 answer against the method's response schema."""
    response = method(api, version, name).get("response")
    if response is not None:
        _check(document(api, version)["schemas"], response, body, "$")


def _typed(param: dict[str, Any], raw: str) -> Any:
    """A query string value as the parameter's JSON type (query strings are all text)."""
    if param.get("type") == "integer":
        return int(raw) if re.match(r"^-?[0-9]+$", raw) else raw
    if param.get("type") == "boolean":
        return {"true": True, "false": False}.get(raw, raw)
    return raw


def _check(schemas: dict[str, Any], spec: dict[str, Any], value: Any, path: str) -> None:
    if "$ref" in spec:
        spec = schemas[spec["$ref"]]
    kind = spec.get("type", "any")
    if kind == "any":
        return
    checker = _CHECKERS.get(kind)
    if checker is None:
        raise DiscoveryError(f"{path}: schema type {kind!r} unknown to this validator")
    checker(schemas, spec, value, path)


def _object(schemas: dict[str, Any], spec: dict[str, Any], value: Any, path: str) -> None:
    if not isinstance(value, dict):
        raise DiscoveryError(f"{path}: expected an object, got {type(value).__name__}")
    properties = spec.get("properties", {})
    extra = spec.get("additionalProperties")
    for key, item in value.items():
        if key in properties:
            _check(schemas, properties[key], item, f"{path}.{key}")
        elif extra is not None:
            _check(schemas, extra, item, f"{path}[{key!r}]")
        else:
            raise DiscoveryError(f"{path}: unknown field {key!r}")


def _array(schemas: dict[str, Any], spec: dict[str, Any], value: Any, path: str) -> None:
    if not isinstance(value, list):
        raise DiscoveryError(f"{path}: expected an array, got {type(value).__name__}")
    for index, item in enumerate(value):
        _check(schemas, spec.get("items", {}), item, f"{path}[{index}]")


def _string(schemas: dict[str, Any], spec: dict[str, Any], value: Any, path: str) -> None:
    if not isinstance(value, str):
        raise DiscoveryError(f"{path}: expected a string, got {value!r}")
    fmt = spec.get("format")
    if fmt == "int64" and not _INT64.match(value):
        raise DiscoveryError(f"{path}: {value!r} is not an int64 in decimal")
    if fmt == "uint64" and not _UINT64.match(value):
        raise DiscoveryError(f"{path}: {value!r} is not a uint64 in decimal")
    enum = spec.get("enum")
    if enum is not None and value not in enum:
        raise DiscoveryError(f"{path}: {value!r} is not one of {enum}")


def _integer(schemas: dict[str, Any], spec: dict[str, Any], value: Any, path: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise DiscoveryError(f"{path}: expected an integer, got {value!r}")
    low, high = _INT32_RANGE.get(spec.get("format", "int32"), (None, None))
    if low is not None and not low <= value <= high:
        raise DiscoveryError(f"{path}: {value} is out of range for {spec.get('format')}")


def _number(schemas: dict[str, Any], spec: dict[str, Any], value: Any, path: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise DiscoveryError(f"{path}: expected a number, got {value!r}")


def _boolean(schemas: dict[str, Any], spec: dict[str, Any], value: Any, path: str) -> None:
    if not isinstance(value, bool):
        raise DiscoveryError(f"{path}: expected true or false, got {value!r}")


_CHECKERS = {
    "object": _object,
    "array": _array,
    "string": _string,
    "integer": _integer,
    "number": _number,
    "boolean": _boolean,
}
