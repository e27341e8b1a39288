"""Repairs: a reason is required, the preview writes nothing, the submission goes through the kernel
with actor user:<username> and the reason, shows in the timeline, and a moved record is previewed again."""

from __future__ import annotations

import pytest
from django.urls import reverse

from workflow.models import OutboxItem, Transition

from .conftest import make_dead_item, make_parcel, make_review_parcel

pytestmark = pytest.mark.django_db


def resolve_url(parcel):
    return reverse("console:repair", args=["kernel_app.parcel", parcel.pk, "event-resolve"])


def test_preview_answers_without_writing(operator_client):
    parcel = make_review_parcel()
    before = Transition.objects.count()
    response = operator_client.post(
        resolve_url(parcel),
        {
            "event-resolve-reason": "carrier re-weighed it: 500 g",
            "event-resolve-payload": '{"decision": "ship"}',
            "action": "preview",
        },
    )
    html = response.content.decode()
    assert response.status_code == 200
    assert "Dry run" in html and "applied" in html and "<b>shipped</b>" in html
    assert f'name="previewed_version" value="{parcel.state_version}"' in html
    assert 'now <span class="badge state">manual_review</span>' in html  # the stored state, not the dry run's
    parcel.refresh_from_db()
    assert parcel.state == "manual_review" and Transition.objects.count() == before


def test_a_reason_is_required(operator_client):
    parcel = make_review_parcel()
    for action in ("preview", "submit"):
        response = operator_client.post(
            resolve_url(parcel),
            {
                "event-resolve-reason": "   ",
                "event-resolve-payload": "{}",
                "action": action,
                "previewed_version": str(parcel.state_version),
            },
        )
        assert response.status_code == 400 and "required" in response.content.decode()
    parcel.refresh_from_db()
    assert parcel.state == "manual_review"


def test_bad_payload_json_is_refused(operator_client):
    parcel = make_review_parcel()
    response = operator_client.post(
        resolve_url(parcel),
        {"event-resolve-reason": "x", "event-resolve-payload": "{not json", "action": "preview"},
    )
    assert response.status_code == 400 and "Not valid JSON" in response.content.decode()


def test_submit_applies_through_the_kernel_and_shows_in_the_timeline(operator_client):
    parcel = make_review_parcel()
    response = operator_client.post(
        resolve_url(parcel),
        {
            "event-resolve-reason": "carrier re-weighed it: 500 g",
            "event-resolve-payload": '{"decision": "ship"}',
            "action": "submit",
            "previewed_version": str(parcel.state_version),
        },
    )
    assert response.status_code == 200 and "applied" in response.content.decode()
    parcel.refresh_from_db()
    assert parcel.state == "shipped"
    record = Transition.objects.filter(
        aggregate_type="kernel_app.parcel", aggregate_id=parcel.pk, event_type="resolve"
    ).get()
    assert record.actor == "user:olga-operator" and record.reason == "carrier re-weighed it: 500 g"
    assert record.result == "applied" and record.event_identity == "console:event-resolve:v3"
    page = operator_client.get(reverse("console:detail", args=["kernel_app.parcel", parcel.pk])).content.decode()
    assert "carrier re-weighed it: 500 g" in page and "user:olga-operator" in page


def test_double_submit_is_already_applied_not_twice(operator_client):
    parcel = make_review_parcel()
    data = {
        "event-resolve-reason": "checked",
        "event-resolve-payload": '{"decision": "ship"}',
        "action": "submit",
        "previewed_version": str(parcel.state_version),
    }
    operator_client.post(resolve_url(parcel), data)
    second = operator_client.post(resolve_url(parcel), data)
    # The record moved on: the repair is no longer offered from "shipped" (409), nothing written twice.
    assert second.status_code == 409
    assert Transition.objects.filter(aggregate_id=parcel.pk, event_type="resolve").count() == 1


def test_a_record_that_moved_since_the_preview_is_previewed_again(operator_client):
    parcel = make_parcel()
    url = reverse("console:repair", args=["kernel_app.parcel", parcel.pk, "event-resolve"])
    assert operator_client.get(url).status_code == 409  # not in manual_review: no such repair offered
    review = make_review_parcel()
    stale_version = review.state_version - 1
    response = operator_client.post(
        resolve_url(review),
        {
            "event-resolve-reason": "x",
            "event-resolve-payload": "{}",
            "action": "submit",
            "previewed_version": str(stale_version),
        },
    )
    html = response.content.decode()
    assert "changed since the preview" in html and "Dry run" in html
    review.refresh_from_db()
    assert review.state == "manual_review"


def test_requeue_a_dead_item_with_preview_then_delivery_state(operator_client):
    item = make_dead_item(make_parcel())
    url = reverse("console:repair", args=["workflow.outboxitem", item.pk, "requeue"])
    preview = operator_client.post(url, {"requeue-reason": "provider is back", "action": "preview"})
    assert "<b>pending</b>" in preview.content.decode()
    assert OutboxItem.objects.get(pk=item.pk).state == "dead"
    operator_client.post(
        url,
        {
            "requeue-reason": "provider is back",
            "action": "submit",
            "previewed_version": str(item.state_version),
        },
    )
    item.refresh_from_db()
    assert item.state == "pending" and item.max_attempts > item.attempts
    record = Transition.objects.get(aggregate_type="workflow.outboxitem", aggregate_id=item.pk, event_type="requeue")
    assert (record.actor, record.reason) == ("user:olga-operator", "provider is back")


def test_bulk_requeue_previews_a_count_and_refuses_a_changed_count(operator_client):
    items = [make_dead_item(make_parcel()) for _ in range(2)]
    url = reverse("console:bulk-requeue")
    preview = operator_client.post(url, {"reason": "provider outage is over", "action": "preview"}).content.decode()
    assert "2 dead items would be requeued" in preview and 'name="expected_count" value="2"' in preview
    assert OutboxItem.objects.filter(state="dead").count() == 2
    third = make_dead_item(make_parcel())
    refused = operator_client.post(
        url, {"reason": "provider outage is over", "action": "submit", "expected_count": "2"}
    ).content.decode()
    assert "3 dead items now, 2 were previewed" in refused
    assert OutboxItem.objects.filter(state="dead").count() == 3
    done = operator_client.post(
        url, {"reason": "provider outage is over", "action": "submit", "expected_count": "3"}
    ).content.decode()
    assert "Requeued 3 items" in done
    assert OutboxItem.objects.filter(pk__in=[i.pk for i in [*items, third]], state="pending").count() == 3
    assert (
        Transition.objects.filter(
            event_type="requeue", actor="user:olga-operator", reason="provider outage is over"
        ).count()
        == 3
    )


def test_bulk_requeue_needs_a_reason(operator_client):
    make_dead_item(make_parcel())
    response = operator_client.post(
        reverse("console:bulk-requeue"), {"reason": "", "action": "submit", "expected_count": "1"}
    )
    assert response.status_code == 400
    assert OutboxItem.objects.filter(state="dead").count() == 1
