"""Writers of the console: repairs (through the app's service or ``workflow.kernel.apply``) and users."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from workflow import outbox
from workflow.errors import ValidationFailed
from workflow.machine import StateMachine

from .registry import Repair, RepairRequest
from .roles import OPERATOR, ROLES, SUPPORT


@dataclasses.dataclass
class RepairAnswer:
    """A preview or a submission, in the words the page shows."""

    dry_run: bool
    outcomes: list[Any]
    observed_version: int

    @property
    def ok(self) -> bool:
        return all(getattr(o, "result", None) in ("applied", "already_applied") for o in self.outcomes)

    @property
    def outcome(self):
        return self.outcomes[0] if len(self.outcomes) == 1 else None


def _request(
    aggregate: StateMachine,
    repair: Repair,
    data: dict[str, Any],
    actor: str,
    reason: str,
    observed_version: int,
) -> RepairRequest:
    body = {k: v for k, v in data.items() if k != "reason"}
    body["_repair_key"] = repair.key
    return RepairRequest(aggregate=aggregate, data=body, actor=actor, reason=reason, observed_version=observed_version)


def _as_list(value) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def repair_preview(
    *, aggregate: StateMachine, repair: Repair, data: dict[str, Any], actor: str, reason: str
) -> RepairAnswer:
    """The dry run: what the repair would answer now. Writes nothing."""
    if not reason.strip():
        raise ValidationFailed("a repair needs a reason", details={"field": "reason"})
    version = aggregate.state_version
    req = _request(aggregate, repair, data, actor, reason, version)
    return RepairAnswer(dry_run=True, outcomes=_as_list(repair.preview(req)), observed_version=version)


def repair_submit(
    *,
    aggregate: StateMachine,
    repair: Repair,
    data: dict[str, Any],
    actor: str,
    reason: str,
    previewed_version: int,
) -> RepairAnswer:
    """Apply the repair previewed at ``previewed_version``. If the aggregate moved since the preview the
    caller must preview again (``ValidationFailed`` with field ``version``): nobody repairs blind."""
    if not reason.strip():
        raise ValidationFailed("a repair needs a reason", details={"field": "reason"})
    if aggregate.state_version != previewed_version:
        raise ValidationFailed(
            "the record changed since the preview; preview again",
            details={"field": "version", "current": aggregate.state_version},
        )
    req = _request(aggregate, repair, data, actor, reason, previewed_version)
    return RepairAnswer(dry_run=False, outcomes=_as_list(repair.submit(req)), observed_version=previewed_version)


def outbox_bulk_requeue(
    *, actor: str, reason: str, effect_type: str | None, dry_run: bool, expected_count: int | None = None
) -> list[Any]:
    """Requeue every dead item (of one effect type, or all) with one reason. A real run must name the
    count the operator previewed: if more items died meanwhile, they are not requeued unseen."""
    if not reason.strip():
        raise ValidationFailed("a repair needs a reason", details={"field": "reason"})
    if dry_run:
        return outbox.outbox_requeue_dead(actor=actor, reason=reason, effect_type=effect_type, dry_run=True)
    with transaction.atomic():
        preview = outbox.outbox_requeue_dead(actor=actor, reason=reason, effect_type=effect_type, dry_run=True)
        if expected_count is not None and len(preview) != expected_count:
            raise ValidationFailed(
                f"{len(preview)} dead items now, {expected_count} were previewed; preview again",
                details={"field": "expected_count", "current": len(preview)},
            )
        return outbox.outbox_requeue_dead(actor=actor, reason=reason, effect_type=effect_type)


def roles_ensure() -> None:
    for role in ROLES:
        Group.objects.get_or_create(name=role)


@transaction.atomic
def console_user_create(*, username: str, password: str, role: str):
    """Create (or update) a console user with exactly one role."""
    if role not in (SUPPORT, OPERATOR):
        raise ValidationFailed(f"role must be one of {', '.join(ROLES)}", details={"field": "role"})
    if not username or not password:
        raise ValidationFailed("username and password are required")
    roles_ensure()
    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(username=username)
    user.set_password(password)
    user.is_active = True
    user.save()
    user.groups.remove(*Group.objects.filter(name__in=ROLES))
    user.groups.add(Group.objects.get(name=role))
    return user
