"""Python browser-use on the step benchmark's 4-step login, for a same-run comparison.

Run by `step_overhead.rs` when BENCH_BROWSER_USE_PYTHON names a Python with `browser-use`
installed (`python -m venv /tmp/bu && /tmp/bu/bin/pip install browser-use`). It logs in on the
page the Rust bench serves (argv[1]) with a scripted model that answers after BENCH_MODEL_MS
(the same rule as the Rust bench's model: indices read from the state message), measures each
model step's wall time minus the model call, and prints one JSON line per vision mode:
{"vision": "on"|"off", "steps_ms": [...]} in run order, 4 steps per run.
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

# The Chrome flags browserd launches with (minus the two browser-use sets itself), handed over by
# the Rust bench as one space-separated string.
CHROME_FLAGS = os.environ.get("BENCH_CHROME_FLAGS", "").split()
MODEL_SECONDS = float(os.environ.get("BENCH_MODEL_MS", "200")) / 1000
# "login" (the 4-step login) or "async" (three "Add to cart" clicks whose API answers late).
SCENARIO = os.environ.get("BENCH_SCENARIO", "login")
TASKS = {
    "login": "Log in as alice and report the balance.",
    "async": "Add the three monitors to the cart.",
}


def index_of(page: str, tag: str, pattern: str) -> int:
    found = re.search(r"\[(\d+)\]<" + tag + r"\b[^\n]*" + pattern, page)
    if not found:
        raise RuntimeError(f"no <{tag}> {pattern} in the state message")
    return int(found.group(1))


def first_add_button(page: str) -> int:
    found = re.search(r"\[(\d+)\]<button id=add-\d[^\n]*\n\s*Add to cart", page)
    if not found:
        raise RuntimeError("no Add to cart button in the state message")
    return int(found.group(1))


def browser_state(messages) -> str:
    for message in reversed(messages):
        content = message.content
        parts = [content] if isinstance(content, str) else [getattr(p, "text", "") for p in content or []]
        for text in parts:
            if text and "<browser_state>" in text:
                return text[text.rfind("<browser_state>") :]
    return ""


class ScriptedModel(ChatOpenAI):
    """Answers like the Rust bench's model; records how long each call took."""

    def __init__(self):
        super().__init__(model="gpt-4.1-mini", api_key="unused")
        object.__setattr__(self, "call_seconds", [])
        object.__setattr__(self, "stale", 0)

    async def ainvoke(self, messages, output_format=None, **kwargs):
        started = time.perf_counter()
        page = browser_state(messages)
        turn = len(self.call_seconds) + 1
        await asyncio.sleep(MODEL_SECONDS)
        if SCENARIO == "async":
            if turn <= 3:
                if page.count("Added") != turn - 1:
                    # The capture predates the previous click's answer: note it (the same
                    # button is clicked again, as a real model would).
                    object.__setattr__(self, "stale", self.stale + 1)
                action = [{"click": {"index": first_add_button(page)}}]
            else:
                action = [{"done": {"text": "finished", "success": "3 items" in page}}]
        elif turn == 1:
            action = [{"input": {"index": index_of(page, "input", "name=username"), "text": "alice"}}]
        elif turn == 2:
            secret = "<secret>password</secret>"
            action = [{"input": {"index": index_of(page, "input", "type=password"), "text": secret}}]
        elif turn == 3:
            action = [{"click": {"index": index_of(page, "button", "signin")}}]
        else:
            action = [{"done": {"text": "Balance 42", "success": "Welcome alice" in page}}]
        value = {
            "thinking": "t",
            "evaluation_previous_goal": "ok",
            "memory": "m",
            "next_goal": "g",
            "action": action,
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
        self.call_seconds.append(time.perf_counter() - started)
        return ChatInvokeCompletion(completion=completion, usage=usage)


async def one_run(url: str, vision: bool) -> list[float]:
    profile = BrowserProfile(
        executable_path=os.environ.get("BENCH_CHROME", "/usr/bin/chromium"),
        headless=True,
        chromium_sandbox=False,
        args=CHROME_FLAGS,
        user_data_dir=tempfile.mkdtemp(prefix="browser-use-bench-"),
        enable_default_extensions=False,
        keep_alive=False,
    )
    session = BrowserSession(browser_profile=profile)
    model = ScriptedModel()
    agent = Agent(
        task=TASKS[SCENARIO],
        llm=model,
        browser_session=session,
        use_vision=vision,
        sensitive_data={"password": "s3cret-pw"} if SCENARIO == "login" else None,
        initial_actions=[{"navigate": {"url": url}}],
        use_judge=False,
        calculate_cost=False,
    )
    try:
        history = await agent.run(max_steps=6)
    finally:
        try:
            await session.kill()
        except Exception:
            pass
    if model.stale:
        print(f"browser-use saw a stale page in {model.stale} step(s)", file=sys.stderr)
    if not history.is_successful() and SCENARIO == "login":
        raise RuntimeError(f"the login did not succeed: {history.final_result()}")
    model_steps = [h for h in history.history if h.model_output is not None and h.metadata.step_number >= 1]
    if len(model_steps) != 4:
        raise RuntimeError(f"expected 4 model steps, browser-use took {len(model_steps)}")
    return [
        (h.metadata.step_end_time - h.metadata.step_start_time - model) * 1000
        for h, model in zip(model_steps, model.call_seconds)
    ]


async def main():
    url = sys.argv[1]
    runs = int(os.environ.get("BENCH_RUNS", "15"))
    modes = {"on": [True], "off": [False]}.get(os.environ.get("BENCH_VISION", ""), [True, False])
    for vision in modes:
        await one_run(url, vision)  # warm-up
        steps: list[float] = []
        for _ in range(runs):
            steps.extend(await one_run(url, vision))
        print(json.dumps({"vision": "on" if vision else "off", "steps_ms": steps}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
