"""In a real browser: the operator's key leaves the browser's history before anything is drawn, so
neither the address bar, a copied link nor Back (five times, on a projector) ever shows it again."""

import pytest

from .conftest import wait_for_app

pytestmark = pytest.mark.e2e


def _run_button(page):
    return page.get_by_role("button", name="Run your kernel", exact=True)


@pytest.mark.parametrize("path", ["", "your_kernel"])
def test_the_key_never_shows_again_in_the_address_bar_or_going_back(page, app_url, app_token, path):
    seen = []  # every address the tab shows: loads, pushState/replaceState, Back
    page.on("framenavigated", lambda frame: seen.append(frame.url) if frame == page.main_frame else None)
    page.goto(f"{app_url}/{path}?backend=sim&token={app_token}")
    wait_for_app(page)
    assert app_token not in page.url and "token" not in page.url, page.url
    if path == "your_kernel":  # the link's page, with code on: the key was taken
        assert page.get_by_role("heading", name="Your kernel").count() == 1
        assert _run_button(page).is_enabled()
    assert seen[0].endswith(f"token={app_token}")  # what was typed, once
    after = seen[1:]
    assert after and not any(app_token in url for url in after), after
    entries = page.evaluate("history.length")  # the blank tab, then the app's entries
    for _ in range(entries - 2):  # Back to the app's first entry, the one that carried the key
        page.go_back(wait_until="commit")
        page.wait_for_timeout(700)  # Streamlit reruns on Back and may rewrite the entry
        assert app_token not in page.url, page.url
    page.wait_for_timeout(1500)
    assert not any(app_token in url for url in seen[1:]), seen


def test_a_wrong_key_leaves_the_history_too_and_code_stays_off(page, app_url):
    wrong = "not-the-key-" + "x" * 30
    page.goto(f"{app_url}/your_kernel?backend=sim&token={wrong}")
    wait_for_app(page)
    assert wrong not in page.url
    assert "not this server's" in page.get_by_test_id("stMain").inner_text()
    assert _run_button(page).is_disabled()
