"""Just enough IPP (RFC 8010/8011) to ask CUPS how a job ended, with the standard library only.

``lpstat`` tells whether a job is still queued, but not whether a finished job *completed*, was
*canceled* or *aborted*. The station needs that difference to report ``completed`` or ``failed`` with
a reason, so it asks the scheduler with Get-Job-Attributes (and Get-Jobs, to find a job by its name
after a crash). It talks to the same server ``lp`` uses: ``CUPS_SERVER`` if set (a socket path or
``host[:port]``), else the local socket, else ``localhost:631``.
"""

from __future__ import annotations

import getpass
import http.client
import os
import socket
import struct
from typing import Any

OP_GET_JOB_ATTRIBUTES = 0x0009
OP_GET_JOBS = 0x000A

TAG_OPERATION = 0x01
TAG_JOB = 0x02
TAG_END = 0x03
TAG_INTEGER = 0x21
TAG_BOOLEAN = 0x22
TAG_ENUM = 0x23
TAG_KEYWORD = 0x44
TAG_URI = 0x45
TAG_CHARSET = 0x47
TAG_LANGUAGE = 0x48
TAG_NAME = 0x42

JOB_STATES = {
    3: "pending",
    4: "held",
    5: "processing",
    6: "stopped",
    7: "canceled",
    8: "aborted",
    9: "completed",
}
DEFAULT_SOCKETS = ("/run/cups/cups.sock", "/var/run/cups/cups.sock")


class IppError(Exception):
    pass


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


def _connection(timeout: float) -> http.client.HTTPConnection:
    server = os.environ.get("CUPS_SERVER", "")
    if server.startswith("/"):
        return _UnixHTTPConnection(server, timeout)
    if server:
        host, _, port = server.partition(":")
        return http.client.HTTPConnection(host, int(port or 631), timeout=timeout)
    for path in DEFAULT_SOCKETS:
        if os.path.exists(path):
            return _UnixHTTPConnection(path, timeout)
    return http.client.HTTPConnection("localhost", 631, timeout=timeout)


def _attr(tag: int, name: str, values: list[bytes]) -> bytes:
    out = b""
    for i, value in enumerate(values):
        label = name.encode() if i == 0 else b""
        out += struct.pack(">BH", tag, len(label)) + label + struct.pack(">H", len(value)) + value
    return out


def _request(operation: int, attributes: bytes, request_id: int = 1) -> bytes:
    header = struct.pack(">BBHI", 2, 0, operation, request_id)
    common = _attr(TAG_CHARSET, "attributes-charset", [b"utf-8"]) + _attr(
        TAG_LANGUAGE, "attributes-natural-language", [b"en"]
    )
    return header + bytes([TAG_OPERATION]) + common + attributes + bytes([TAG_END])


def _decode(tag: int, value: bytes) -> Any:
    if tag in (TAG_INTEGER, TAG_ENUM) and len(value) == 4:
        return struct.unpack(">i", value)[0]
    if tag == TAG_BOOLEAN and len(value) == 1:
        return bool(value[0])
    if 0x40 <= tag <= 0x4F:
        return value.decode("utf-8", "replace")
    return value


def _parse(body: bytes) -> tuple[int, list[dict[str, Any]]]:
    """Answer status and the attribute groups (one dict per group; multi-valued attributes as lists)."""
    if len(body) < 8:
        raise IppError("short IPP response")
    _, _, status, _ = struct.unpack(">BBHI", body[:8])
    pos, groups, current, last_name = 8, [], None, None
    while pos < len(body):
        tag = body[pos]
        pos += 1
        if tag == TAG_END:
            break
        if tag < 0x10:  # a group delimiter
            current = {"__group__": tag}
            groups.append(current)
            continue
        (name_len,) = struct.unpack(">H", body[pos : pos + 2])
        pos += 2
        name = body[pos : pos + name_len].decode()
        pos += name_len
        (value_len,) = struct.unpack(">H", body[pos : pos + 2])
        pos += 2
        value = _decode(tag, body[pos : pos + value_len])
        pos += value_len
        if current is None:
            current = {"__group__": 0}
            groups.append(current)
        if name:
            last_name = name
            current[name] = value
        elif last_name:  # an additional value of the previous attribute
            previous = current.get(last_name)
            current[last_name] = (previous if isinstance(previous, list) else [previous]) + [value]
    return status, groups


def _call(operation: int, attributes: bytes, timeout: float) -> list[dict[str, Any]]:
    conn = _connection(timeout)
    try:
        path = "/jobs/" if operation == OP_GET_JOB_ATTRIBUTES else "/"
        conn.request(
            "POST", path, body=_request(operation, attributes), headers={"Content-Type": "application/ipp"}
        )
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise IppError(f"CUPS answered HTTP {response.status}")
    except (OSError, http.client.HTTPException) as exc:
        raise IppError(f"cannot reach CUPS: {exc}") from exc
    finally:
        conn.close()
    status, groups = _parse(body)
    if status >= 0x0400:
        raise IppError(f"CUPS answered IPP status 0x{status:04x}")
    return groups


def _user() -> bytes:
    try:
        return getpass.getuser().encode()
    except Exception:  # noqa: BLE001 - no user name in a minimal container: CUPS accepts any
        return b"station"


def job_attributes(cups_job_id: int, timeout: float = 10.0) -> dict[str, Any]:
    """job-state (name), job-state-reasons, job-state-message, job-name of one CUPS job."""
    attrs = (
        _attr(TAG_URI, "job-uri", [f"ipp://localhost/jobs/{cups_job_id}".encode()])
        + _attr(TAG_NAME, "requesting-user-name", [_user()])
        + _attr(
            TAG_KEYWORD,
            "requested-attributes",
            [b"job-state", b"job-state-reasons", b"job-state-message", b"job-name", b"job-id"],
        )
    )
    groups = _call(OP_GET_JOB_ATTRIBUTES, attrs, timeout)
    for group in groups:
        if group.get("__group__") == TAG_JOB:
            return _normalise(group)
    raise IppError(f"CUPS returned no attributes for job {cups_job_id}")


def find_jobs(queue: str, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Every job (finished ones too) CUPS still remembers on ``queue``."""
    attrs = (
        _attr(TAG_URI, "printer-uri", [f"ipp://localhost/printers/{queue}".encode()])
        + _attr(TAG_NAME, "requesting-user-name", [_user()])
        + _attr(TAG_KEYWORD, "which-jobs", [b"all"])
        + _attr(
            TAG_KEYWORD,
            "requested-attributes",
            [b"job-id", b"job-name", b"job-state", b"job-state-reasons", b"job-state-message"],
        )
    )
    groups = _call(OP_GET_JOBS, attrs, timeout)
    return [_normalise(g) for g in groups if g.get("__group__") == TAG_JOB]


def _normalise(group: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in group.items() if k != "__group__"}
    if isinstance(out.get("job-state"), int):
        out["job-state"] = JOB_STATES.get(out["job-state"], str(out["job-state"]))
    reasons = out.get("job-state-reasons")
    if reasons is not None and not isinstance(reasons, list):
        out["job-state-reasons"] = [reasons]
    return out
