"""The console in a real browser: Debian's Chromium driven by Playwright (never `playwright install`).

An operator logs in, finds a dead outbox item and a parcel in manual_review, repairs each with a reason
after a dry-run preview, and sees the repair in the timeline; a support user sees no repair buttons
and a forged POST is refused. Screenshots of each main page go to test-artifacts/ (gitignored).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from ops_console.services import console_user_create
from workflow.models import OutboxItem, Transition

from .conftest import PASSWORD, make_dead_item, make_parcel, make_retrying_item, make_review_parcel

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

# Playwright's sync API runs an event loop in this thread; the ORM calls in the test body are plain
# synchronous calls made between browser steps, never from inside the loop.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not shutil.which(CHROMIUM) and not Path(CHROMIUM).exists():
        pytest.fail("Debian's chromium is missing: run `make system-deps` (scripts/ensure_system_deps.sh)")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield browser
        browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"console-{name}.png"), full_page=True)


def log_in(page, live_server, username: str) -> None:
    page.goto(f"{live_server.url}/console/")
    assert "/console/login/" in page.url
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/console/")


@pytest.fixture
def scenario(transactional_db):
    operator = console_user_create(username="olga-operator", password=PASSWORD, role="operator")
    support = console_user_create(username="sam-support", password=PASSWORD, role="support")
    make_parcel()
    make_retrying_item(make_parcel())
    dead = make_dead_item(make_parcel(address="22 Dock Road"))
    review = make_review_parcel(address="5 Mill Lane")
    return {"operator": operator, "support": support, "dead": dead, "review": review}


def test_operator_requeues_a_dead_outbox_item_and_sees_the_timeline_entry(page, live_server, scenario):
    dead = scenario["dead"]
    log_in(page, live_server, "olga-operator")
    assert page.locator("[data-kpi=dead] b").inner_text() == "1"
    shot(page, "01-dashboard")

    # Find it the way support would: the waiting list filtered to "automatic retries exhausted".
    page.click("[data-kpi=retries_exhausted]")
    rows = page.locator("#waiting tr[data-classification=retries_exhausted]")
    assert rows.count() == 2  # the dead item and the parcel that owes it
    shot(page, "02-waiting-exhausted")
    page.click(f"#waiting tr[data-machine='workflow.outboxitem'][data-id='{dead.pk}'] a")
    assert page.locator("#current-state").inner_text() == "dead"
    assert "503 Service Unavailable" in page.inner_text("main")
    assert page.inner_text("#why").startswith("Automatic retries exhausted")
    shot(page, "03-outbox-item-detail")

    page.fill("#repair-requeue textarea[name=requeue-reason]", "provider status page says the outage is over")
    page.click("#repair-requeue button[type=submit]")
    assert "would answer" in page.inner_text("#preview") and "pending" in page.inner_text("#preview")
    assert OutboxItem.objects.get(pk=dead.pk).state == "dead"  # the preview wrote nothing
    shot(page, "04-requeue-preview")
    page.click("#confirm")
    assert "applied" in page.inner_text("#repair-result")
    page.click("#back-to-record")
    assert page.locator("#current-state").inner_text() == "pending"
    entry = page.locator("#timeline tr[data-event=requeue]")
    assert entry.count() == 1
    assert "user:olga-operator" in entry.inner_text()
    assert "provider status page says the outage is over" in entry.inner_text()
    shot(page, "05-outbox-item-after-requeue")


def test_operator_resolves_a_manual_review_parcel(page, live_server, scenario):
    review = scenario["review"]
    log_in(page, live_server, "olga-operator")
    page.fill("header form.find input[name=q]", f"parcel#{review.pk}")
    page.click("header form.find button")
    assert page.locator("#current-state").inner_text() == "manual_review"
    assert page.locator("#classification").inner_text() == "evidence conflicts"
    assert "declared weight differs from the measured weight" in page.inner_text("#why")
    assert page.locator("svg.diagram #state_manual_review").count() == 1
    shot(page, "06-parcel-manual-review-detail")

    page.fill(
        "#repair-event-resolve textarea[name=event-resolve-reason]",
        "carrier re-weighed the parcel: 500 g, our figure was right",
    )
    page.fill("#repair-event-resolve textarea[name=event-resolve-payload]", '{"decision": "ship"}')
    page.click("#repair-event-resolve button[type=submit]")
    assert re.search(r"applied\s+manual_review → shipped", page.inner_text("#preview"))
    shot(page, "07-resolve-preview")
    page.click("#confirm")
    page.click("#back-to-record")
    assert page.locator("#current-state").inner_text() == "shipped"
    entry = page.locator("#timeline tr[data-event=resolve]")
    assert "user:olga-operator" in entry.inner_text() and "carrier re-weighed" in entry.inner_text()
    # the rejected evidence stays visible in the same timeline
    assert page.locator("#timeline tr[data-result=needs_review]").count() == 1
    record = Transition.objects.get(aggregate_id=review.pk, aggregate_type="kernel_app.parcel", event_type="resolve")
    assert record.actor == "user:olga-operator"
    shot(page, "08-parcel-after-resolve")


def test_support_sees_no_repair_buttons_and_a_forged_post_is_refused(page, live_server, scenario):
    review, dead = scenario["review"], scenario["dead"]
    log_in(page, live_server, "sam-support")
    page.goto(f"{live_server.url}/console/kernel_app.parcel/{review.pk}/")
    assert page.locator("#current-state").inner_text() == "manual_review"
    assert page.locator("form[action*='/repair/']").count() == 0
    assert page.get_by_role("button", name="Preview (dry run)").count() == 0
    assert "ask an operator" in page.inner_text("main")
    shot(page, "09-support-view-of-review-parcel")

    # A forged POST from the support user's own browser session, with a valid CSRF token.
    status = page.evaluate(
        """async ([url, reason]) => {
        const token = document.querySelector('input[name=csrfmiddlewaretoken]').value;
        const body = new URLSearchParams({csrfmiddlewaretoken: token, 'event-resolve-reason': reason,
            'event-resolve-payload': '{"decision": "cancel"}', action: 'submit', previewed_version: '3'});
        const r = await fetch(url, {method: 'POST', body, credentials: 'same-origin'});
        return r.status;
    }""",
        [f"/console/kernel_app.parcel/{review.pk}/repair/event-resolve/", "forged"],
    )
    assert status == 403
    forged_bulk = page.evaluate("""async () => {
        const token = document.querySelector('input[name=csrfmiddlewaretoken]').value;
        const body = new URLSearchParams({csrfmiddlewaretoken: token, reason: 'forged', action: 'submit',
                                          expected_count: '1'});
        return (await fetch('/console/outbox/dead/requeue/', {method: 'POST', body})).status;
    }""")
    assert forged_bulk == 403
    review.refresh_from_db()
    assert review.state == "manual_review"
    assert OutboxItem.objects.get(pk=dead.pk).state == "dead"
    assert not Transition.objects.filter(reason="forged").exists()

    page.goto(f"{live_server.url}/console/outbox/dead/")
    assert page.locator("#bulk-requeue").count() == 0
    shot(page, "10-support-dead-letters")


def test_main_pages_render_for_support(page, live_server, scenario):
    log_in(page, live_server, "sam-support")
    for name, path in [
        ("11-waiting-all", "/console/waiting/?sort=classification"),
        ("12-diagrams", "/console/diagrams/"),
        ("13-did-it-print", "/console/did-it-print/"),
        ("14-dashboard-support", "/console/"),
    ]:
        page.goto(live_server.url + path)
        assert page.locator("header.top").count() == 1
        shot(page, name)
    page.goto(live_server.url + "/console/did-it-print/")
    assert page.locator("#lookup").count() == 1  # printing's registered page


def test_support_answers_did_it_print_and_an_operator_settles_the_unknown_job(page, live_server, scenario):
    from .test_integrations import unknown_print_job

    job = unknown_print_job()
    log_in(page, live_server, "sam-support")
    page.click("header >> text=Did it print?")
    page.fill("#lookup input[name=q]", "A-1842")
    page.click("#lookup button")
    result = page.locator(f".lookup-result[data-id='{job.pk}']")
    assert result.count() == 1
    text = result.inner_text()
    assert "unknown" in text and "front-desk" in text and "silence_deadline_passed" in text
    shot(page, "15-did-it-print-lookup")
    page.click("header >> text=Log out")

    log_in(page, live_server, "olga-operator")
    page.goto(f"{live_server.url}/console/printing.printjob/{job.pk}/")
    shot(page, "16-print-job-unknown-detail")
    page.fill("#repair-settle-unknown textarea[name=settle-unknown-reason]", "walked to the printer: no page")
    page.select_option("#repair-settle-unknown select[name=settle-unknown-outcome]", "failed")
    page.click("#repair-settle-unknown button[type=submit]")
    assert "failed" in page.inner_text("#preview")
    page.click("#confirm")
    page.click("#back-to-record")
    assert page.locator("#current-state").inner_text() == "failed"
    entry = page.locator("#timeline tr[data-event=operator_settled]")
    assert "user:olga-operator" in entry.inner_text() and "walked to the printer" in entry.inner_text()


def test_operator_retries_the_dead_refund_of_a_refund_pending_order(page, live_server, scenario):
    from .test_integrations import order_with_dead_refund

    order, item = order_with_dead_refund()
    log_in(page, live_server, "olga-operator")
    page.goto(f"{live_server.url}/console/waiting/?machine=orders.order&classification=retries_exhausted")
    row = page.locator(f"#waiting tr[data-machine='orders.order'][data-id='{order.pk}']")
    assert "refund_pending" in row.inner_text() and "503" in row.inner_text()
    shot(page, "17-waiting-orders-exhausted")
    row.locator("a").first.click()
    assert page.locator("#current-state").inner_text() == "refund_pending"
    assert page.inner_text("#why").startswith("Automatic retries exhausted")
    shot(page, "18-order-refund-dead-detail")
    page.fill("#repair-retry-refund textarea[name=retry-refund-reason]", "provider outage over (status page)")
    page.click("#repair-retry-refund button[type=submit]")
    assert "pending" in page.inner_text("#preview")
    page.click("#confirm")
    page.click("#back-to-record")
    entry = page.locator("#outbox .item-repair[data-event=requeue]")
    assert "user:olga-operator" in entry.inner_text() and "provider outage over" in entry.inner_text()
    item.refresh_from_db()
    assert item.state == "pending"
    shot(page, "19-order-after-refund-retry")
