"""N Python browser-use agents at once on service_load's read-only page, for their memory.

Run by `service_load.rs` when a Python with browser-use is found (BENCH_BROWSER_USE_PYTHON, or
the virtualenv `scripts/venv tests/benches/browser_use.txt` makes). Each agent gets its own
BrowserSession, and with it its own Chrome (browser-use runs one browser per agent), reads the
page at argv[1] and calls `done` with the code it shows, from a scripted model that answers
after BENCH_MODEL_MS. The Rust bench samples the memory of this process and its Chromes; this
script prints one JSON line: {"agents": N, "ok": agents that returned the code, "wall_s": …}.
"""

import asyncio
import json
import os
import re
import sys
import tempfile
import time

os.environ.setdefault("ANONYMIZED_TELEMETRY", "false")
os.environ.setdefault("BROWSER_USE_CLOUD_SYNC", "false")
os.environ.setdefault("BROWSER_USE_DISABLE_EXTENSIONS", "1")

from browser_use import Agent, BrowserProfile, BrowserSession  # noqa: E402
from browser_use.llm.openai.chat import ChatOpenAI  # noqa: E402
from browser_use.llm.views import ChatInvokeCompletion, ChatInvokeUsage  # noqa: E402

MODEL_SECONDS = float(os.environ.get("BENCH_MODEL_MS", "300")) / 1000
CHROME = os.environ.get("BENCH_CHROME", "/usr/bin/chromium")
CHROME_FLAGS = os.environ.get("BENCH_CHROME_FLAGS", "").split()


def page_text(messages) -> str:
    for message in reversed(messages):
        content = message.content
        parts = [content] if isinstance(content, str) else [getattr(p, "text", "") for p in content or []]
        for text in parts:
            if text and "<browser_state>" in text:
                return text[text.rfind("<browser_state>") :]
    return ""


class ReadingModel(ChatOpenAI):
    """Calls `done` with the code the page shows (service_load's stairs_brain at the top)."""

    def __init__(self):
        super().__init__(model="gpt-4.1-mini", api_key="unused")

    async def ainvoke(self, messages, output_format=None, **kwargs):
        await asyncio.sleep(MODEL_SECONDS)
        found = re.search(r"Top reached: (\w+)", page_text(messages))
        text = f"The code at the top is {found.group(1)}" if found else "no code on the page"
        value = {
            "thinking": "t",
            "evaluation_previous_goal": "ok",
            "memory": "m",
            "next_goal": "finish",
            "action": [{"done": {"text": text, "success": found is not None}}],
        }
        completion = output_format.model_validate(value) if output_format else json.dumps(value)
        usage = ChatInvokeUsage(
            prompt_tokens=1,
            prompt_cached_tokens=0,
            prompt_cache_creation_tokens=0,
            prompt_image_tokens=0,
            completion_tokens=1,
            total_tokens=2,
        )
        return ChatInvokeCompletion(completion=completion, usage=usage)


async def one_agent(url: str) -> bool:
    profile = BrowserProfile(
        executable_path=CHROME,
        headless=True,
        chromium_sandbox=False,
        args=CHROME_FLAGS,
        user_data_dir=tempfile.mkdtemp(prefix="browser-use-agents-"),
        enable_default_extensions=False,
        keep_alive=False,
    )
    session = BrowserSession(browser_profile=profile)
    agent = Agent(
        task="Report the code on the page",
        llm=ReadingModel(),
        browser_session=session,
        use_vision=False,
        initial_actions=[{"navigate": {"url": url}}],
        use_judge=False,
        calculate_cost=False,
    )
    try:
        history = await agent.run(max_steps=3)
        return "CODE" in (history.final_result() or "")
    finally:
        try:
            await session.kill()
        except Exception:
            pass


async def main():
    url, agents = sys.argv[1], int(sys.argv[2])
    started = time.perf_counter()
    results = await asyncio.gather(*(one_agent(url) for _ in range(agents)), return_exceptions=True)
    wall = time.perf_counter() - started
    for result in results:
        if isinstance(result, BaseException):
            print(f"an agent failed: {result!r}", file=sys.stderr)
    ok = sum(1 for r in results if r is True)
    print(json.dumps({"agents": agents, "ok": ok, "wall_s": wall}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
