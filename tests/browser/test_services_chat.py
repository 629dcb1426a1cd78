"""Services in the browser: the list, and the chat playground streaming a reply from the tiny
generation model through ``/api/v1/services/{name}/openai/...``."""

from __future__ import annotations

import json

from browser_support import CHAT_SERVICE, UI_TIMEOUT_MS, Screenshots, Web, sign_in
from e2e_support import eventually
from playwright.sync_api import Page, expect

LOAD_TIMEOUT = 180.0  # a model server's start on a loaded 2-core machine

# Notes, in the page, whether `chat-streaming` was ever shown (and the lengths the reply had).
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
    expect(page.get_by_test_id("embed-input")).to_have_count(0)  # a text-generation model
    page.get_by_test_id("chat-input").fill("Tell me a story about GPUs.")
    with page.expect_response(lambda r: "/openai/chat/completions" in r.url) as answered:
        page.get_by_test_id("chat-send").click()
    answer = answered.value
    messages = page.get_by_test_id("chat-messages")
    expect(messages.locator('[data-testid="chat-message"][data-role="user"]')).to_contain_text(
        "GPUs", timeout=UI_TIMEOUT_MS
    )
    reply = messages.locator('[data-testid="chat-message"][data-role="assistant"]').last
    expect(reply).not_to_have_text("", timeout=UI_TIMEOUT_MS)
    expect(page.get_by_test_id("chat-streaming")).to_have_count(0, timeout=UI_TIMEOUT_MS)
    seen = page.evaluate("window.__kibanChat")
    assert seen["streamingSeen"], "chat-streaming never appeared while the reply came"
    # The page asked for a stream and got server-sent events of OpenAI chunks; what it shows
    # is their deltas put together (the tiny model is quick: they may come in one read).
    assert answer.headers["content-type"].startswith("text/event-stream")
    events = [line[5:].strip() for line in answer.text().splitlines() if line.startswith("data:")]
    assert events[-1] == "[DONE]", events
    chunks = [json.loads(event) for event in events[:-1]]
    assert len(chunks) >= 2 and {c["object"] for c in chunks} == {"chat.completion.chunk"}
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert content.strip(), "the model streamed no text"
    expect(reply).to_contain_text(content.strip())
    shot(page, "chat")
