"""Access rules on every console page and every repair POST: anonymous users are sent to the login,
support reads but is refused every repair (403, also for a forged POST), operators repair."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from workflow.models import OutboxItem, Transition

from .conftest import make_dead_item, make_parcel, make_review_parcel

pytestmark = pytest.mark.django_db


@pytest.fixture
def records():
    review = make_review_parcel()
    dead = make_dead_item(make_parcel())
    return {"review": review, "dead": dead}


def read_pages(records) -> list[str]:
    review, dead = records["review"], records["dead"]
    return [
        reverse("console:dashboard"),
        reverse("console:waiting"),
        reverse("console:waiting") + "?classification=evidence_conflicts&sort=-age",
        reverse("console:search") + "?q=no-such-thing",
        reverse("console:diagrams"),
        reverse("console:diagram-svg", args=["kernel_app.parcel"]),
        reverse("console:dead-letters"),
        reverse("console:did-it-print"),
        reverse("console:detail", args=["kernel_app.parcel", review.pk]),
        reverse("console:detail", args=["workflow.outboxitem", dead.pk]),
    ]


def repair_posts(records) -> list[tuple[str, dict]]:
    review, dead = records["review"], records["dead"]
    return [
        (
            reverse("console:repair", args=["kernel_app.parcel", review.pk, "event-resolve"]),
            {
                "event-resolve-reason": "carrier re-weighed it",
                "event-resolve-payload": '{"decision": "ship"}',
                "action": "submit",
                "previewed_version": str(review.state_version),
            },
        ),
        (
            reverse("console:repair", args=["workflow.outboxitem", dead.pk, "requeue"]),
            {
                "requeue-reason": "provider is back",
                "action": "submit",
                "previewed_version": str(dead.state_version),
            },
        ),
        (
            reverse("console:bulk-requeue"),
            {"reason": "provider is back", "action": "submit", "expected_count": "1"},
        ),
    ]


def test_anonymous_is_sent_to_login_on_every_page_and_repair(records):
    client = Client()
    for url in read_pages(records):
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/console/login/?next="), url
    for url, data in repair_posts(records):
        response = client.post(url, data)
        assert response.status_code == 302 and "/console/login/" in response["Location"], url
    assert not Transition.objects.filter(actor__startswith="user:").exists()


def test_support_reads_every_page(support_client, records):
    for url in read_pages(records):
        assert support_client.get(url).status_code == 200, url


def test_support_is_refused_every_repair_even_a_forged_post(support_client, records):
    for url, data in repair_posts(records):
        assert support_client.post(url, data).status_code == 403, url
        assert support_client.get(url).status_code == 403, url
    records["review"].refresh_from_db()
    assert records["review"].state == "manual_review"
    assert OutboxItem.objects.get(pk=records["dead"].pk).state == "dead"
    assert not Transition.objects.filter(actor__startswith="user:").exists()


def test_support_sees_no_repair_forms(support_client, records):
    page = support_client.get(reverse("console:detail", args=["kernel_app.parcel", records["review"].pk]))
    html = page.content.decode()
    assert "Preview (dry run)" not in html and "/repair/" not in html
    assert "ask an operator" in html


def test_user_without_a_console_role_is_refused(db, django_user_model, records):
    client = Client()
    client.force_login(django_user_model.objects.create_user("mallory", password="x" * 12))
    for url in read_pages(records):
        assert client.get(url).status_code == 403, url


def test_operator_reads_every_page_and_sees_repair_forms(operator_client, records):
    for url in read_pages(records):
        assert operator_client.get(url).status_code == 200, url
    html = operator_client.get(
        reverse("console:detail", args=["kernel_app.parcel", records["review"].pk])
    ).content.decode()
    assert "Preview (dry run)" in html and "/repair/event-resolve/" in html


def test_operator_repairs_pass_the_role_check(operator_client, records):
    for url, data in repair_posts(records):
        assert operator_client.post(url, data).status_code == 200, url
    assert Transition.objects.filter(actor="user:olga-operator").count() == 2


def test_csrf_is_enforced_on_repairs(operator_user, records):
    client = Client(enforce_csrf_checks=True)
    client.force_login(operator_user)
    url, data = repair_posts(records)[1]
    assert client.post(url, data).status_code == 403
    assert OutboxItem.objects.get(pk=records["dead"].pk).state == "dead"


def test_login_with_password_then_logout(support_user):
    client = Client(enforce_csrf_checks=False)
    response = client.post(reverse("console:login"), {"username": "sam-support", "password": "wrong"})
    assert response.status_code == 200 and "Wrong username or password" in response.content.decode()
    response = client.post(reverse("console:login"), {"username": "sam-support", "password": "correct horse battery"})
    assert response.status_code == 302 and response["Location"] == "/console/"
    assert client.get("/console/").status_code == 200
    client.post(reverse("console:logout"))
    assert client.get("/console/").status_code == 302
