"""Stripe's form encoding: ``metadata[order]=7``, ``expand[]=x``, ``items[0][price]=p``."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl

_KEY = re.compile(r"^([^\[\]]+)((?:\[[^\[\]]*\])*)$")


def decode(body: str) -> dict[str, Any]:
    """Decode a form body (or query string) into nested dicts and lists."""
    result: dict[str, Any] = {}
    for raw_key, value in parse_qsl(body, keep_blank_values=True):
        match = _KEY.match(raw_key)
        if not match:
            raise ValueError(f"Invalid parameter name: {raw_key}")
        head, tail = match.group(1), match.group(2)
        parts = [head] + re.findall(r"\[([^\[\]]*)\]", tail)
        _assign(result, parts, value)
    return _listify(result)


def _assign(target: dict[str, Any], parts: list[str], value: str) -> None:
    node = target
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "":  # "a[]": append
            part = str(len(node))
        if last:
            node[part] = value
        else:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError("Conflicting parameter shapes")
            node = child


def _listify(node: Any) -> Any:
    """A dict whose keys are 0..n-1 was sent as a list."""
    if not isinstance(node, dict):
        return node
    converted = {k: _listify(v) for k, v in node.items()}
    if converted and all(k.isdigit() for k in converted):
        keys = sorted(converted, key=int)
        if [int(k) for k in keys] == list(range(len(keys))):
            return [converted[k] for k in keys]
    return converted
