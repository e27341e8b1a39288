"""``Idempotency-Key`` claims for POST commands.

The claim row is inserted (and committed) before the command runs, with a canonical hash of the
request. Same key + same request → the stored response; same key + different request →
``E_IDEMPOTENCY_CONFLICT``; same key while the first is still running → ``E_IDEMPOTENCY_IN_PROGRESS``
with ``Retry-After``. Responses below 500 are stored (a refused command, e.g. an illegal transition,
replays as the same answer), except invalid input (400 ``E_VALIDATION``), which — as at Stripe — never
executed and so does not consume the key; a 5xx or a crash also releases the claim so the client may
try again. A claim whose holder died is taken
over once its lock expires.

Views use it as::

    def post(self, request):
        return run_idempotent(request, scope="checkout", command=lambda: self._place(request))
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import timedelta

from django.db import IntegrityError, transaction
from rest_framework.response import Response

from . import clock
from .errors import IdempotencyConflict, IdempotencyInProgress, ValidationFailed, api_exception_handler
from .kernel import canonical_json
from .models import IdempotencyClaim

HEADER = "Idempotency-Key"
CLAIM_LOCK_SECONDS = 60
RETRY_AFTER_SECONDS = 1
MAX_KEY_LENGTH = 255


def request_hash(request) -> str:
    try:
        body = json.loads(request.body or b"{}")
    except (ValueError, UnicodeDecodeError):
        body = (request.body or b"").decode("latin-1")
    canonical = canonical_json({"method": request.method, "path": request.path, "body": body})
    return hashlib.sha256(canonical.encode()).hexdigest()


def principal_scope(request) -> str:
    principal = getattr(request, "user", None)
    return getattr(principal, "actor", None) or "anonymous"


def run_idempotent(request, *, command: Callable[[], Response], scope: str = "",
                   default_key: str | None = None) -> Response:
    """Run ``command`` at most once per (caller, key); replay its stored response afterwards."""
    key = request.headers.get(HEADER) or default_key
    if key is None:
        return command()
    key = key.strip()
    if not key or len(key) > MAX_KEY_LENGTH:
        raise ValidationFailed(f"{HEADER} must be 1..{MAX_KEY_LENGTH} characters", details={"header": HEADER})
    claim_scope = f"{principal_scope(request)}|{scope or request.path}"[:128]
    digest = request_hash(request)
    claim = _claim(claim_scope, key, digest)
    if claim.status == IdempotencyClaim.Status.COMPLETED:
        return _replay(claim)

    try:
        response = command()
    except Exception as exc:
        # Client errors are part of the answer and replay as such; anything else frees the key.
        rendered = api_exception_handler(exc, {})
        if rendered is None or rendered.status_code >= 500:
            _release(claim)
            raise
        response = rendered
    except BaseException:
        _release(claim)
        raise
    if response.status_code >= 500 or _is_invalid_input(response):
        # As Stripe does: a request refused as invalid input (or a server failure) never executed, so it
        # does not consume the key; the client may fix the body and send it again under the same key.
        _release(claim)
        return response
    _complete(claim, response)
    response["Idempotency-Key"] = key
    return response


def _claim(scope: str, key: str, digest: str) -> IdempotencyClaim:
    now = clock.now()
    lock_until = now + timedelta(seconds=CLAIM_LOCK_SECONDS)
    try:
        with transaction.atomic():
            return IdempotencyClaim.objects.create(scope=scope, key=key, request_hash=digest, locked_until=lock_until,
                                                   created_at=now)
    except IntegrityError:
        pass
    existing = IdempotencyClaim.objects.get(scope=scope, key=key)
    if existing.request_hash != digest:
        raise IdempotencyConflict(f"{HEADER} {key!r} was already used with a different request",
                                  details={"idempotency_key": key})
    if existing.status == IdempotencyClaim.Status.COMPLETED:
        return existing
    if existing.locked_until > now:
        raise IdempotencyInProgress(f"A request with {HEADER} {key!r} is still running; retry later",
                                    details={"idempotency_key": key, "retry_after_seconds": RETRY_AFTER_SECONDS},
                                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
    # The first holder died without finishing: take the claim over, exactly one taker wins.
    taken = IdempotencyClaim.objects.filter(pk=existing.pk, status=IdempotencyClaim.Status.IN_PROGRESS,
                                            locked_until=existing.locked_until).update(locked_until=lock_until)
    if not taken:
        raise IdempotencyInProgress(f"A request with {HEADER} {key!r} is still running; retry later",
                                    details={"idempotency_key": key, "retry_after_seconds": RETRY_AFTER_SECONDS},
                                    headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
    existing.locked_until = lock_until
    return existing


def _is_invalid_input(response: Response) -> bool:
    body = getattr(response, "data", None)
    code = body.get("error", {}).get("code") if isinstance(body, dict) else None
    return response.status_code == 400 and code == "E_VALIDATION"


def _complete(claim: IdempotencyClaim, response: Response) -> None:
    body = getattr(response, "data", None)
    headers = {h: response[h] for h in ("Location",) if response.has_header(h)}
    IdempotencyClaim.objects.filter(pk=claim.pk).update(
        status=IdempotencyClaim.Status.COMPLETED, response_status=response.status_code, response_body=body,
        response_headers=headers, completed_at=clock.now())


def _release(claim: IdempotencyClaim) -> None:
    IdempotencyClaim.objects.filter(pk=claim.pk, status=IdempotencyClaim.Status.IN_PROGRESS).delete()


def _replay(claim: IdempotencyClaim) -> Response:
    response = Response(claim.response_body, status=claim.response_status, headers=claim.response_headers or {})
    response["Idempotent-Replayed"] = "true"
    response["Idempotency-Key"] = claim.key
    return response
