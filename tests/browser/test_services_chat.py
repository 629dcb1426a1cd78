"""Services in the browser: the list, and the chat playground streaming a reply from the tiny
generation model through ``/api/v1/services/{name}/openai/...``."""

from __future__ import annotations

from browser_support import CHAT_SERVICE, UI_TIMEOUT_MS, Screenshots, Web, sign_in
from e2e_support import eventually
from playwright.sync_api import Page, expect

LOAD_TIMEOUT = 180.0  # a model server's start on a loaded 2-core machine

# Notes, in the page, what streaming looks like: whether `chat-streaming` was ever shown, and
# every distinct length the assistant's reply had while it grew.
WATCH_STREAMING = """
window.__kibanChat = {streamingSeen: false, lengths: []};
new MutationObserver(() => {
  const seen = window.__kibanChat;
  if (document.querySelector('[data-testid="chat-streaming"]')) seen.streamingSeen = true;
  const replies = document.querySelectorAll(
    '[data-testid="chat-message"][data-role="assistant"]');
  if (replies.length) {
    const length = replies[replies.length - 1].textContent.length;
    if (!seen.lengths.includes(length)) seen.lengths.push(length);
  }
}).observe(document, {subtree: true, childList: true, characterData: true});
"""


def test_the_chat_playground_streams_a_reply_from_the_tiny_model(
    page: Page, web: Web, shot: Screenshots
) -> None:
    def ready() -> bool:
        with web.api() as api:
            return bool(api.get(f"/api/v1/services/{CHAT_SERVICE}").json()["state"] == "Ready")

    eventually(ready, timeout=LOAD_TIMEOUT, interval=0.5, what="the chat service to be Ready")
    page.add_init_script(WATCH_STREAMING)
    sign_in(page, web.admin_token)
    page.get_by_test_id("nav-services").click()
    row = page.locator(f'[data-testid="service-row"][data-service="{CHAT_SERVICE}"]')
    expect(row).to_be_visible(timeout=UI_TIMEOUT_MS)
    shot(page, "services")
    page.goto(f"/services/{CHAT_SERVICE}")
    expect(page.get_by_test_id("service-revisions")).to_be_visible(timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("service-replicas")).to_be_visible()
    page.get_by_test_id("chat-input").fill("Tell me a story about GPUs.")
    page.get_by_test_id("chat-send").click()
    messages = page.get_by_test_id("chat-messages")
    expect(messages.locator('[data-testid="chat-message"][data-role="user"]')).to_contain_text(
        "GPUs", timeout=UI_TIMEOUT_MS
    )
    reply = messages.locator('[data-testid="chat-message"][data-role="assistant"]').last
    expect(reply).not_to_have_text("", timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("chat-streaming")).to_have_count(0, timeout=UI_TIMEOUT_MS)
    seen = page.evaluate("window.__kibanChat")
    assert seen["streamingSeen"], "chat-streaming never appeared while the reply came"
    grown = [n for n in seen["lengths"] if n > 0]
    assert len(grown) >= 2, f"the reply came in one piece, not streamed: lengths {grown}"
    shot(page, "chat")
