"""The console in a real browser against a real broker: every page, every action end to end (pause and resume,
purge, redrive one and by filter, search), a script in a payload shown as text, actions refused without a login
and with a bad CSRF token, a second replica seeing what the first did, and a second topic set: a routed queue shown
and acted on in its set, a moving queue shown in both sets and paused in both. The main pages are screenshotted
into docs/images/console/ for docs/guides/console.md."""

from __future__ import annotations

import re
import time

from playwright.sync_api import Page

from kmq.client import Consumer
from kmq.ops import stats
from kmq.wire import now_ms
from tests.console import scenario as sc
from tests.console.conftest import Deployment, log_in, screenshot, wait_for_text
from tests.helpers import receive_n


def _queue_url(base: str, queue: str, **params: str) -> str:
    """The queue's page (``set``: in that topic set; without it, the set the queue lives in)."""
    query = "&".join(f"{k}={v}" for k, v in {"q": queue, **params}.items())
    return f"{base}/queue?{query}"


def test_the_overview_shows_every_queue_the_trackers_and_the_charts(deployment: Deployment, page: Page) -> None:
    base = deployment.urls[0]
    log_in(page, base, "bob")  # a viewer
    page.goto(base + "/")
    rows = [[cell.inner_text() for cell in row.query_selector_all("td")[:2]]
            for row in page.query_selector_all("table.queues tbody tr")]
    assert sorted(map(tuple, rows)) == [("billing", "default"), ("emails", "default"), (sc.INVOICES, sc.LEDGER),
                                        (sc.MOVING, "default"), (sc.MOVING, sc.LEDGER), ("reports", "default")]
    assert page.query_selector_all(".chart canvas"), "uPlot drew no chart (a script blocked?)"
    wait_for_text(page, base + "/", ".health", "Healthy")
    wait_for_text(page, base + "/", "table.queues", "reports")
    screenshot(page, "overview")
    assert "Pause" not in page.content()  # a viewer sees no action
    # live: htmx fetches the page again every 5 s and swaps its live part in, charts redrawn, under the CSP
    with page.expect_response(lambda r: r.request.headers.get("hx-request") == "true", timeout=15_000) as live:
        pass
    assert live.value.status == 200
    page.wait_for_timeout(300)
    assert len(page.query_selector_all(".chart canvas")) == 3


def test_the_queue_page_lists_messages_by_state_with_paging(deployment: Deployment, page: Page) -> None:
    base = deployment.urls[0]
    log_in(page, base)
    text = wait_for_text(page, _queue_url(base, "emails"), "nav.tabs", "waiting (12)")
    assert "acked (18)" in text
    assert len(page.query_selector_all("#messages tbody tr")) == 12
    screenshot(page, "queue")
    page.goto(_queue_url(base, "billing", state="in_flight"))  # Started: 2 handed out, 3 in the consumer's buffer
    assert len(page.query_selector_all("#messages tbody tr")) == 5
    assert re.search(r":\d+", page.inner_text("#messages")), "the holder (host:pid) is shown"


def test_search_by_payload_header_and_id(deployment: Deployment, page: Page) -> None:
    base = deployment.urls[0]
    log_in(page, base, "bob")
    page.goto(_queue_url(base, "emails"))
    page.select_option("#search-form select[name=field]", "payload")
    page.fill("#search-form input[name=find]", "user21@")
    page.click("#search-form button")
    assert "1 message(s) found" in page.inner_text("#search-summary")
    page.goto(_queue_url(base, "emails", field="header", find="tenant%3Dacme"))
    assert "15 message(s) found" in page.inner_text("#search-summary")
    first = page.query_selector("#messages tbody tr td a").inner_text()
    page.goto(_queue_url(base, "emails", field="id", find=first))
    assert page.url.startswith(base + "/message") and first in page.inner_text("h1")


def test_a_script_in_a_payload_header_or_reason_is_shown_never_run(deployment: Deployment, page: Page) -> None:
    base = deployment.urls[0]
    log_in(page, base, "bob")
    first = deployment.scenario.dead[sc.XSS]
    page.goto(f"{base}/message?q=reports&id={first}")
    assert page.inner_text("#payload") == sc.XSS
    assert sc.XSS_HEADER in page.inner_text("#headers")
    assert f"refused: {sc.XSS}" in page.inner_text("#story")
    assert page.query_selector("main script") is None and page.query_selector("main img") is None
    screenshot(page, "message")
    page.goto(f"{base}/message?q=reports&id={first}&view=hex")
    assert "3c 73 63 72 69 70 74 3e" in page.inner_text("#payload")  # "<script>"
    page.goto(base + "/dead-letters?status=any")
    assert f"refused: {sc.XSS}" in page.inner_text("#letters")
    # the page fixture fails the test on any dialog (alert) or script error


def test_the_workers_page_shows_instances_groups_and_trackers(deployment: Deployment, page: Page) -> None:
    base = deployment.urls[0]
    log_in(page, base, "bob")
    default, ledger = "section[data-set=default]", f"section[data-set={sc.LEDGER}]"
    instances = wait_for_text(page, base + "/workers", f"{default} .instances", "billing")
    held = [row for row in instances.splitlines() if "billing" in row]
    assert held and re.search(r"\b5\b", held[0]), instances  # the open consumer holds 5 (2 handed out, 3 buffered)
    for section in (default, ledger):  # each set's trackers, in its own group
        trackers = page.inner_text(f"{section} .trackers")
        assert "healthy" in trackers and "nobody" not in trackers, (section, trackers)
    assert deployment.config.topic_set(sc.LEDGER).tracker_group in page.inner_text(ledger)
    assert "billing" in page.inner_text(f"{default} .groups")
    assert sc.INVOICES in page.inner_text(f"{ledger} .instances")
    screenshot(page, "workers")


def test_an_action_is_refused_without_a_login_and_with_a_bad_csrf_token(deployment: Deployment, page: Page) -> None:
    base, config = deployment.urls[0], deployment.config
    answer = page.request.post(base + "/queue/pause", form={"q": "emails", "csrf": "none"}, max_redirects=0)
    assert answer.status == 403
    log_in(page, base, "bob")
    page.goto(_queue_url(base, "emails"))
    assert page.query_selector("#pause-form") is None
    token = page.input_value("input[name=csrf]")  # the logout form's: bob's own, valid token
    answer = page.request.post(base + "/queue/pause", form={"q": "emails", "csrf": token}, max_redirects=0)
    assert answer.status == 403 and "operator" in answer.text()
    log_in(page, base, "alice")
    page.goto(_queue_url(base, "emails"))
    page.eval_on_selector("#pause-form input[name=csrf]", "field => { field.value = 'forged-token'; }")
    page.click("#pause-form button")
    assert "CSRF" in page.inner_text("#error")
    time.sleep(1)
    assert "emails" not in stats.control_state(config, config.default_topics).paused_until


def test_pause_until_resumed_then_resume_seen_by_both_replicas(deployment: Deployment, page: Page) -> None:
    first, second = deployment.urls
    log_in(page, first)
    page.goto(_queue_url(first, "emails"))
    page.click("#pause-form button")
    assert "Paused emails until resumed" in page.inner_text("#flash")
    assert stats.control_state(deployment.config, deployment.config.default_topics).paused("emails", now_ms())
    wait_for_text(page, _queue_url(first, "emails"), "#pause-state", "paused")
    # the other replica: same session secret, so the same login; it read the pause from the control topic
    wait_for_text(page, _queue_url(second, "emails"), "#pause-state", "paused until resumed")
    page.click("#resume-form button")
    assert "Resumed emails" in page.inner_text("#flash")
    wait_for_text(page, _queue_url(first, "emails"), "#pause-state", "Taking messages")
    assert not stats.control_state(deployment.config, deployment.config.default_topics).paused("emails", now_ms())


def test_redrive_one_then_all_matching_a_filter(deployment: Deployment, page: Page) -> None:
    base, config = deployment.urls[0], deployment.config
    log_in(page, base)
    wait_for_text(page, base + "/dead-letters?q=reports", "#letter-count", "6 of them wait")
    screenshot(page, "dead-letters")
    row = next(r for r in page.query_selector_all("#letters tbody tr") if sc.XSS in r.inner_text())
    row.query_selector("button[name=one]").click()
    assert "Redrove 1 dead letter" in page.inner_text("#flash")
    wait_for_text(page, base + "/dead-letters?q=reports", "#letter-count", "5 of them wait")
    page.fill("#filter-form input[name=reason]", "smtp timeout")
    page.click("#filter-form button")
    page.click("#redrive-filter-form button")
    assert "<strong>2</strong>" in page.inner_html("#confirm-count") or "2" in page.inner_text("#confirm-count")
    assert "puts 2 dead letter(s)" in page.inner_text("#confirm-count")
    page.click("#confirm-form button")
    assert "Redrove 2 dead letter" in page.inner_text("#flash")
    wait_for_text(page, base + "/dead-letters?q=reports", "#letter-count", "3 of them wait")
    # end to end: the three are on the queue again, payloads intact
    consumer = Consumer(config, "reports")
    try:
        got = receive_n(consumer, 3, timeout_s=30)
        assert sorted(m.payload.decode() for m in got) == sorted([sc.XSS, '{"report": 3}', '{"report": 4}'])
        for message in got:
            message.ack()
        consumer.flush()
    finally:
        consumer.close()


def test_purge_shows_the_count_then_purges(deployment: Deployment, page: Page) -> None:
    base = deployment.urls[0]
    log_in(page, base)
    wait_for_text(page, _queue_url(base, "emails"), "nav.tabs", "waiting (12)")
    page.click("#purge-link")
    assert "the 12 waiting message(s) of emails" in page.inner_text("#confirm-count")
    page.click("#confirm-form button")
    assert "Purged emails" in page.inner_text("#flash")
    tabs = wait_for_text(page, _queue_url(base, "emails", state="purged"), "nav.tabs", "purged (12)")
    assert "waiting" not in tabs or "waiting (0)" in tabs


def test_a_routed_queue_is_shown_and_acted_on_in_its_set(deployment: Deployment, page: Page) -> None:
    base, config = deployment.urls[0], deployment.config
    ledger = config.topic_set(sc.LEDGER)
    log_in(page, base)
    page.goto(base + "/")
    page.click(f"table.queues a[href='/queue?q={sc.INVOICES}&set={sc.LEDGER}']")
    assert f"in topic set {sc.LEDGER}" in page.inner_text("h1")
    tabs = wait_for_text(page, page.url, "nav.tabs", f"waiting ({sc.INVOICES_WAITING})")
    assert f"acked ({sc.INVOICES_ACKED})" in tabs and "dead lettered (1)" in tabs
    # a message of the set: its page names the set, and its payload is read from the set's topic
    page.click("#messages tbody tr td a")
    assert f"set={sc.LEDGER}" in page.url and '"invoice": 10' in page.inner_text("#payload")
    # pause and resume: the set's control topic, not the default set's
    page.goto(_queue_url(base, sc.INVOICES, set=sc.LEDGER))
    page.click("#pause-form button")
    assert f"Paused {sc.INVOICES} until resumed" in page.inner_text("#flash")
    assert stats.control_state(config, ledger).paused(sc.INVOICES, now_ms())
    assert sc.INVOICES not in stats.control_state(config, config.default_topics).paused_until
    wait_for_text(page, _queue_url(base, sc.INVOICES, set=sc.LEDGER), "#pause-state", "paused")
    page.click("#resume-form button")
    assert not stats.control_state(config, ledger).paused(sc.INVOICES, now_ms())
    # its dead letter: listed with its set, redriven from the set's dead-letter topic back onto the queue
    letters = wait_for_text(page, f"{base}/dead-letters?set={sc.LEDGER}", "#letters", sc.INVOICE_REASON)
    assert sc.LEDGER in letters and "smtp timeout" not in letters  # the default set's letters are filtered out
    page.click(f"#letters button[name=one][value^='{sc.LEDGER}/']")
    assert "Redrove 1 dead letter" in page.inner_text("#flash")
    wait_for_text(page, f"{base}/dead-letters?set={sc.LEDGER}", "#letter-count", "0 of them wait")
    consumer = Consumer(config, sc.INVOICES)
    try:
        got = receive_n(consumer, sc.INVOICES_WAITING + 1, timeout_s=30)
        assert sorted(m.payload.decode() for m in got) == sorted(
            ['{"invoice": 100}', '{"invoice": 101}', deployment.scenario.rejected_invoice])
        for message in got:
            message.ack()
        consumer.flush()
    finally:
        consumer.close()
    wait_for_text(page, _queue_url(base, sc.INVOICES, set=sc.LEDGER), "nav.tabs", f"acked ({sc.INVOICES_ACKED + 3})")


def test_a_moving_queue_is_shown_in_both_sets_and_paused_in_both(deployment: Deployment, page: Page) -> None:
    base, config = deployment.urls[0], deployment.config
    log_in(page, base)
    # one queue, two sets: a page each, each listing its own set's messages (their ids may be equal: the URL says
    # which set's)
    wait_for_text(page, _queue_url(base, sc.MOVING, set="default"), "nav.tabs", f"waiting ({sc.MOVED_BEFORE})")
    assert sc.LEDGER in page.inner_text("#also-in")
    page.click("#messages tbody tr td a")
    assert "set=default" in page.url and "before the move" in page.inner_text("#payload")
    wait_for_text(page, _queue_url(base, sc.MOVING, set=sc.LEDGER), "nav.tabs", f"waiting ({sc.MOVED_AFTER})")
    screenshot(page, "queue-moving")
    page.click("#messages tbody tr td a")
    assert f"set={sc.LEDGER}" in page.url and "after the move" in page.inner_text("#payload")
    # a pause holds in both sets, as kmq pause's does: consumers of both sets follow it
    page.goto(_queue_url(base, sc.MOVING, set=sc.LEDGER))
    assert "default" in page.inner_text("#control-sets")
    page.click("#pause-form button")
    assert "Written to the control topics of sets ledger, default" in page.inner_text("#flash")
    for topic_set in config.reading_sets(sc.MOVING):
        assert stats.control_state(config, topic_set).paused(sc.MOVING, now_ms()), topic_set.name
    wait_for_text(page, _queue_url(base, sc.MOVING, set="default"), "#pause-state", "paused")  # read from both sets
    wait_for_text(page, _queue_url(base, sc.MOVING, set=sc.LEDGER), "#pause-state", "paused")
    page.click("#resume-form button")
    for topic_set in config.reading_sets(sc.MOVING):
        assert not stats.control_state(config, topic_set).paused(sc.MOVING, now_ms()), topic_set.name
