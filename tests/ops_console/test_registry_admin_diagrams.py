"""Plug-in points (title, owner, sections, repairs, search, pages), the user command, the admin and
the diagrams generated from the rules."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.http import HttpResponse
from django.test import Client
from django.urls import reverse

from ops_console import diagrams, registry
from tests.kernel_app.models import Parcel
from workflow import kernel
from workflow.models import OutboxItem, Transition

from .conftest import make_dead_item, make_parcel, make_review_parcel

pytestmark = pytest.mark.django_db


@pytest.fixture
def parcel_registration():
    """Register Parcel like an app would, and restore the registry afterwards."""
    saved_machines, saved_pages = dict(registry._machines), dict(registry._pages)

    class DecisionForm(registry.RepairForm):
        from django import forms

        decision = forms.ChoiceField(choices=[("ship", "ship it"), ("cancel", "cancel it")])

    def resolve(req, dry_run):
        # An app's repair calls its own service; here the service is the kernel call itself.
        return kernel.apply(
            req.aggregate,
            "resolve",
            req.identity,
            {"decision": req.data["decision"]},
            actor=req.actor,
            reason=req.reason,
            dry_run=dry_run,
        )

    registry.register(
        Parcel,
        title=lambda p: f"to {p.address}",
        owner=lambda p: "carrier desk" if p.state == "manual_review" else None,
        current_attempt=lambda p: p.booking or None,
        search=lambda q: Parcel.objects.filter(booking=q),
        sections=[
            registry.Section(
                "Carrier booking",
                "kernel_app/console_booking_section.html",
                lambda p: {"booking": p.booking or "none"},
            )
        ],
        repairs=[
            registry.Repair(
                key="resolve-review",
                label="Resolve the review",
                event_type="resolve",
                form_class=DecisionForm,
                applies=lambda p: p.state == "manual_review",
                preview=lambda req: resolve(req, True),
                submit=lambda req: resolve(req, False),
            )
        ],
    )
    registry.register_page(
        "did-it-print",
        title="Did it print?",
        view=lambda request: HttpResponse("printing's own support view"),
    )
    yield
    registry._machines.clear()
    registry._machines.update(saved_machines)
    registry._pages.clear()
    registry._pages.update(saved_pages)


def test_an_app_registration_shows_title_owner_section_and_its_own_repair(parcel_registration, operator_client):
    parcel = make_review_parcel(booking="bk-1")
    html = operator_client.get(reverse("console:detail", args=["kernel_app.parcel", parcel.pk])).content.decode()
    assert "to 1 Test Street" in html and "carrier desk" in html
    assert "Carrier booking" in html and "booking: bk-1" in html
    assert "/repair/resolve-review/" in html and "/repair/event-resolve/" not in html  # replaces the generic one
    waiting = operator_client.get(reverse("console:waiting") + "?machine=kernel_app.parcel").content.decode()
    assert "to 1 Test Street" in waiting and "carrier desk" in waiting and "current attempt: bk-1" in waiting

    url = reverse("console:repair", args=["kernel_app.parcel", parcel.pk, "resolve-review"])
    operator_client.post(
        url,
        {
            "resolve-review-reason": "customer asked",
            "resolve-review-decision": "cancel",
            "action": "submit",
            "previewed_version": str(parcel.state_version),
        },
    )
    parcel.refresh_from_db()
    assert parcel.state == "cancelled"
    assert Transition.objects.get(aggregate_id=parcel.pk, event_type="resolve").reason == "customer asked"


def test_search_by_id_by_machine_and_by_business_reference(parcel_registration, support_client):
    parcel = make_review_parcel(booking="bk-1")
    by_name = support_client.get(reverse("console:search") + f"?q=parcel%23{parcel.pk}")
    assert by_name.status_code == 302
    assert by_name["Location"] == reverse("console:detail", args=["kernel_app.parcel", parcel.pk])
    by_reference = support_client.get(reverse("console:search") + "?q=bk-1")
    assert by_reference["Location"] == reverse("console:detail", args=["kernel_app.parcel", parcel.pk])


def test_a_registered_page_replaces_the_placeholder_behind_the_login(parcel_registration, support_client):
    assert support_client.get(reverse("console:did-it-print")).content == b"printing's own support view"
    assert Client().get(reverse("console:did-it-print")).status_code == 302


def test_did_it_print_placeholder_without_registration(support_client, monkeypatch):
    monkeypatch.setattr(registry, "_pages", {})
    html = support_client.get(reverse("console:did-it-print")).content.decode()
    assert 'id="did-it-print-placeholder"' in html and "register_page" in html


def test_create_console_user_command(db):
    call_command("create_console_user", "--username", "pat", "--password", "s3cret-pass", "--role", "support")
    client = Client()
    assert client.login(username="pat", password="s3cret-pass")
    assert client.get("/console/").status_code == 200
    assert client.post(reverse("console:bulk-requeue"), {"reason": "x"}).status_code == 403
    call_command(
        "create_console_user", "--username", "pat", "--password", "s3cret-pass", "--role", "operator", "--update"
    )
    assert client.login(username="pat", password="s3cret-pass")  # a new password ends old sessions
    assert client.post(reverse("console:bulk-requeue"), {"reason": "x"}).status_code == 200


def test_admin_is_read_only_for_machines_and_history(db, django_user_model):
    admin_user = django_user_model.objects.create_superuser("root", password="root-pass-123")
    client = Client()
    client.force_login(admin_user)
    item = make_dead_item(make_parcel())
    parcel = make_parcel()
    for url in (
        "/admin/workflow/outboxitem/",
        f"/admin/workflow/outboxitem/{item.pk}/change/",
        "/admin/workflow/transition/",
        "/admin/workflow/timer/",
        "/admin/workflow/outboxattempt/",
        "/admin/kernel_app/parcel/",
        f"/admin/kernel_app/parcel/{parcel.pk}/change/",
    ):
        assert client.get(url).status_code == 200, url
    page = client.get(f"/admin/workflow/outboxitem/{item.pk}/change/").content.decode()
    assert 'name="state"' not in page and "Save" not in page
    assert client.post(f"/admin/workflow/outboxitem/{item.pk}/change/", {"state": "delivered"}).status_code == 403
    assert OutboxItem.objects.get(pk=item.pk).state == "dead"
    assert client.get("/admin/workflow/transition/add/").status_code == 403


def test_diagram_is_drawn_from_the_rules_with_the_current_state_highlighted():
    source = diagrams.dot_source(Parcel, highlight="manual_review")
    for rule in Parcel.rules():
        for target in Parcel.possible_targets(rule):
            assert f'"{rule.source}" -> "{target}"' in source
    assert '"resolve (repair)", style="dashed"' in source
    svg = diagrams.svg(Parcel, "manual_review")
    assert svg.startswith("<svg") and 'id="state_manual_review"' in svg
    highlighted = svg.split('id="state_manual_review"', 1)[1].split("</g>", 1)[0]
    assert "#ffd54f" in highlighted
    assert "#ffd54f" not in svg.split('id="state_created"', 1)[1].split("</g>", 1)[0]


def test_the_ready_made_support_lookup_answers_where_and_why(support_client):
    """What printing plugs into "did it print?": search by id or reference; state, why, each transition,
    the app's facts verbatim."""
    from ops_console import lookup

    saved = dict(registry._pages)
    registry.register_page(
        "did-it-print",
        title="Did it print?",
        view=lookup.support_lookup_view(
            Parcel,
            title="Where is my parcel?",
            search=lambda q: Parcel.objects.filter(address__icontains=q),
            facts=lambda p: [("address", p.address), ("weight (verbatim)", f"{p.weight_grams} g")],
        ),
    )
    try:
        parcel = make_review_parcel(address="7 Harbour Street")
        html = support_client.get(reverse("console:did-it-print") + "?q=Harbour").content.decode()
        assert "Where is my parcel?" in html and f'data-id="{parcel.pk}"' in html
        assert "evidence conflicts" in html and "declared weight differs from the measured weight" in html
        assert "7 Harbour Street" in html and "500 g" in html
        assert html.count("<td>ship</td>") == 1 and html.count("<td>pack</td>") == 1
        by_id = support_client.get(reverse("console:did-it-print") + f"?q={parcel.pk}").content.decode()
        assert f'data-id="{parcel.pk}"' in by_id
        nothing = support_client.get(reverse("console:did-it-print") + "?q=nowhere").content.decode()
        assert "matches “nowhere”" in nothing
    finally:
        registry._pages.clear()
        registry._pages.update(saved)
