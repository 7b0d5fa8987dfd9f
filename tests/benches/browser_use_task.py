"""Python browser-use on one widget scenario, for `widgets_fidelity.rs`.

Usage: browser_use_task.py URL TASK MAX_STEPS MODEL_BASE_URL

Runs browser-use's Agent from URL with TASK, its model an OpenAI-compatible endpoint at
MODEL_BASE_URL (the bench's mock model: the same brain browserd's run is given, answering from
the `<browser_state>` text of each request), vision off, and prints one JSON line:
{"steps": N, "success": bool|null, "final": "..."}. Chrome: BENCH_CHROME (default
/usr/bin/chromium), its own profile, no extensions.
"""

import asyncio
import json
import os
import sys
import tempfile

os.environ.setdefault("ANONYMIZED_TELEMETRY", "false")
os.environ.setdefault("BROWSER_USE_CLOUD_SYNC", "false")
os.environ.setdefault("BROWSER_USE_DISABLE_EXTENSIONS", "1")

from browser_use import Agent, BrowserProfile, BrowserSession  # noqa: E402
from browser_use.llm.openai.chat import ChatOpenAI  # noqa: E402


async def main():
    url, task, max_steps, base_url = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    profile = BrowserProfile(
        executable_path=os.environ.get("BENCH_CHROME", "/usr/bin/chromium"),
        headless=True,
        chromium_sandbox=False,
        user_data_dir=tempfile.mkdtemp(prefix="browser-use-widgets-"),
        enable_default_extensions=False,
        keep_alive=False,
    )
    session = BrowserSession(browser_profile=profile)
    llm = ChatOpenAI(model="mock-model", api_key="unused", base_url=base_url, max_retries=0)
    agent = Agent(
        task=task,
        llm=llm,
        browser_session=session,
        use_vision=False,
        initial_actions=[{"navigate": {"url": url}}],
        use_judge=False,
        calculate_cost=False,
    )
    try:
        history = await agent.run(max_steps=max_steps)
    finally:
        try:
            await session.kill()
        except Exception:
            pass
    steps = len([h for h in history.history if h.model_output is not None])
    print(
        json.dumps({"steps": steps, "success": history.is_successful(), "final": history.final_result()}),
        flush=True,
    )


if __name__ == "__main__":
    asyncio.run(main())
