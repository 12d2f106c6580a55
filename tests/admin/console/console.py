"""Drives idem's operators' console (GET / on the admin listener) in Debian's Chromium
through Playwright, as an on-call engineer would after a port-forward: keyboard only.
Run by tests/admin/console.rs, which starts idem and checks the API afterwards.

usage: console.py SCENARIO ADMIN_URL [ARGS...]
  resolve-completed ROUTE KEY  resolve KEY as completed (201, a JSON body), confirming
  cancel ROUTE KEY             reach the confirmation, then Escape: nothing is sent
  token TOKEN                  a token is configured: asked for, refused, then accepted
  no-token                     no token configured: never asked for
  bulk ROUTE N                 "Mark all N of this route as not executed": cancel once,
                               then confirm; one real POST, dry runs aside

Fails (exit 1, with a traceback) on any broken expectation, and on any error the page
logs, such as a Content-Security-Policy violation.
"""

import os
import sys

from playwright.sync_api import expect, sync_playwright

RESOLVED_BODY = '{"id":"ch_console"}'


def active(page, prop="id"):
    return page.evaluate(f"() => document.activeElement && document.activeElement.{prop}")


def tab_to(page, label, limit=80):
    """Presses Tab until the element with aria-label `label` has the focus."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        if page.evaluate("() => document.activeElement.getAttribute('aria-label')") == label:
            return
    raise AssertionError(f"Tab never reached {label!r}")


def open_console(page, admin):
    page.goto(admin + "/")
    expect(page.locator("#summary")).not_to_have_text("Loading…")


def open_dialog(page, route, key):
    """From the top of the page, by keyboard: the row's Resolve button, Enter."""
    button = f"Resolve {key} on route {route}"
    expect(page.get_by_role("button", name=button)).to_be_visible()
    tab_to(page, button)
    page.keyboard.press("Enter")
    expect(page.locator("#resolve-dialog")).to_be_visible()
    intent = page.locator("#dialog-intent").inner_text()
    assert route in intent and key in intent, intent
    assert page.evaluate("() => document.activeElement.value") == "completed", "focus starts on the outcome"
    return button


def review(page):
    """Tab to Review, Enter: the confirmation step, focused on its text."""
    for _ in range(10):
        if active(page) == "review":
            break
        page.keyboard.press("Tab")
    assert active(page) == "review", active(page)
    page.keyboard.press("Enter")
    try:
        expect(page.locator("#step-confirm")).to_be_visible()
    except AssertionError:
        print("DEBUG error:", page.locator("#dialog-error").inner_text(), "active:", active(page),
              "open:", page.evaluate("() => document.getElementById('resolve-dialog').open"),
              "choose hidden:", page.evaluate("() => document.getElementById('step-choose').hidden"),
              file=sys.stderr)
        raise
    assert active(page) == "confirm-text", active(page)
    return page.locator("#confirm-text").inner_text()


def resolve_completed(page, admin, route, key, posts):
    open_console(page, admin)
    open_dialog(page, route, key)
    page.keyboard.press("Tab")
    assert active(page) == "status", active(page)
    page.keyboard.press("Control+A")
    page.keyboard.type("201")
    page.keyboard.press("Tab")
    assert active(page) == "content-type" and page.input_value("#content-type") == "application/json"
    page.keyboard.press("Tab")
    assert active(page) == "body", active(page)
    page.keyboard.type(RESOLVED_BODY)
    text = review(page)
    for part in (route, key, "201", "COMPLETED"):
        assert part in text, f"{part!r} not in the confirmation: {text}"
    assert posts == [], "nothing is sent before the confirmation"
    page.keyboard.press("Tab")
    assert active(page) == "confirm", active(page)
    assert page.locator("#confirm").inner_text() == "Confirm: record completed"
    page.keyboard.press("Enter")
    expect(page.locator("#notice")).to_contain_text("Recorded")
    expect(page.locator("#resolve-dialog")).to_be_hidden()
    assert active(page) == "notice", "focus lands on the result"
    assert len(posts) == 1, posts
    expect(page.get_by_role("button", name=f"Resolve {key} on route {route}")).to_have_count(0)


def cancel(page, admin, route, key, posts):
    open_console(page, admin)
    button = open_dialog(page, route, key)
    page.keyboard.press("ArrowDown")  # the other outcome: not executed
    assert page.evaluate("() => document.activeElement.value") == "not_executed"
    expect(page.locator("#completed-fields")).to_be_hidden()
    text = review(page)
    assert "NOT EXECUTED" in text and key in text, text
    page.keyboard.press("Escape")
    expect(page.locator("#resolve-dialog")).to_be_hidden()
    assert page.evaluate("() => document.activeElement.getAttribute('aria-label')") == button, "focus returns"
    # Again, then Back and Cancel with the keyboard.
    page.keyboard.press("Enter")
    expect(page.locator("#resolve-dialog")).to_be_visible()
    review(page)
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    assert active(page) == "back", active(page)
    page.keyboard.press("Enter")
    expect(page.locator("#step-choose")).to_be_visible()
    page.locator("#step-choose .cancel").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#resolve-dialog")).to_be_hidden()
    page.wait_for_timeout(300)
    assert posts == [], f"cancelled, yet sent: {posts}"
    expect(page.get_by_role("button", name=button)).to_be_visible()


def token(page, admin, secret, posts):
    open_console(page, admin)
    expect(page.locator("#token-form")).to_be_visible()
    assert active(page) == "token", "the token field has the focus"
    expect(page.locator("#routes section")).to_have_count(0)
    page.keyboard.type("wrong")
    page.keyboard.press("Enter")
    expect(page.locator("#token-why")).to_contain_text("refused")
    assert active(page) == "token"
    page.keyboard.type(secret)
    page.keyboard.press("Enter")
    expect(page.locator("#token-form")).to_be_hidden()
    expect(page.locator("#routes section")).not_to_have_count(0)
    # Kept for the tab: a reload does not ask again.
    page.reload()
    expect(page.locator("#routes section")).not_to_have_count(0)
    expect(page.locator("#token-form")).to_be_hidden()


def no_token(page, admin, posts):
    open_console(page, admin)
    expect(page.locator("#routes section")).not_to_have_count(0)
    expect(page.locator("#token-form")).to_be_hidden()


def bulk(page, admin, route, n, posts):
    open_console(page, admin)
    label = f"Mark all {n} of this route as not executed…"
    button = page.get_by_role("button", name=label)
    expect(button).to_be_visible()
    button.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#bulk-dialog")).to_be_visible()
    expect(page.locator("#bulk-text")).to_contain_text(f"all {n} unknown outcomes")
    text = page.locator("#bulk-text").inner_text()
    assert "NOT EXECUTED" in text and route in text, text
    page.keyboard.press("Escape")
    expect(page.locator("#bulk-dialog")).to_be_hidden()
    page.wait_for_timeout(300)
    assert [p for p in posts if not p.endswith(" dry")] == [], f"cancelled, yet sent: {posts}"
    assert active(page, "textContent") == label, "focus returns to the button"
    page.keyboard.press("Enter")
    expect(page.locator("#bulk-confirm")).to_be_enabled()
    assert active(page) == "bulk-text", active(page)
    page.keyboard.press("Tab")
    assert active(page) == "bulk-confirm", active(page)
    page.keyboard.press("Enter")
    expect(page.locator("#bulk-dialog")).to_be_hidden()
    expect(page.locator("#notice")).to_contain_text(f"Recorded: {n} unknown outcomes")
    assert active(page) == "notice", "focus lands on the result"
    real = [p for p in posts if not p.endswith(" dry")]
    assert len(real) == 1 and real[0].endswith("/v1/unknown/resolve"), posts
    expect(page.get_by_role("button", name=label)).to_have_count(0)


SCENARIOS = {
    "bulk": bulk,
    "resolve-completed": resolve_completed,
    "cancel": cancel,
    "token": token,
    "no-token": no_token,
}


def main():
    scenario, admin, *args = sys.argv[1:]
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=os.environ["IDEM_TEST_CHROMIUM"],
            headless=True,
            # Root in a container has no user namespaces for the sandbox.
            args=["--no-sandbox"],
        )
        page = browser.new_page()
        page.set_default_timeout(10_000)
        problems, posts = [], []
        page.on("console", lambda m: m.type == "error" and problems.append(m.text))
        page.on("pageerror", lambda e: problems.append(str(e)))
        # A bulk dry run (it only counts) is told apart from a write.
        dry = lambda r: " dry" if '"dry_run":true' in (r.post_data or "") else ""
        page.on("request", lambda r: r.method == "POST" and posts.append(r.url + dry(r)))
        SCENARIOS[scenario](page, admin, *args, posts)
        # The token scenario's 401s are expected answers, logged by Chromium.
        problems = [p for p in problems if "401" not in p]
        assert not problems, f"the page logged errors: {problems}"
        browser.close()
    print(f"ok {scenario}")


if __name__ == "__main__":
    main()
