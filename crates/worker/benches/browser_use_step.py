"""Python browser-use on the step benchmark's 4-step login, for a same-run comparison.

Run by `step_overhead.rs` when BENCH_BROWSER_USE_PYTHON names a Python with `browser-use`
installed (`python -m venv /tmp/bu && /tmp/bu/bin/pip install browser-use`). It logs in on the
page the Rust bench serves (argv[1]) with a scripted model that answers after BENCH_MODEL_MS
(the same rule as the Rust bench's model: indices read from the state message), measures each
model step's wall time minus the model call, and prints one JSON line per vision mode:
{"vision": "on"|"off", "steps_ms": [...], "prompt_prefix": {...}} in run order, 4 steps per run.
`prompt_prefix` measures, over the last run's steps 2-4, how much of each prompt is an unchanged
prefix of the previous one, by the rules of browserd's `browserd_llm::cache::PromptPrefix`
(each message: its role as 1 character, its text by characters, an image as 6000 characters
that only match an identical one; `to_breakpoint`: up to the end of the last fully shared
message marked `cache=True`).
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


IMAGE_CHARS = 4 * 1500


def prompt_units(messages) -> list[tuple[str, object, bool]]:
    """(kind, value, breakpoint_after) per role / text / image, in order."""
    units = []
    for message in messages:
        units.append(("role", getattr(message, "role", type(message).__name__), False))
        content = message.content
        parts = [content] if isinstance(content, str) else list(content or [])
        for part in parts:
            if isinstance(part, str):
                units.append(("text", part, False))
            elif getattr(part, "type", "") == "image_url":
                units.append(("image", part.image_url.url, False))
            elif getattr(part, "text", None) is not None:
                units.append(("text", part.text, False))
        if getattr(message, "cache", False):
            kind, value, _ = units[-1]
            units[-1] = (kind, value, True)
    return units


def unit_size(unit) -> int:
    kind, value, _ = unit
    return 1 if kind == "role" else IMAGE_CHARS if kind == "image" else len(value)


def common_prefix(mine, theirs) -> int:
    if mine[0] != theirs[0]:
        return 0
    if mine[0] == "text":
        n = 0
        for x, y in zip(mine[1], theirs[1]):
            if x != y:
                break
            n += 1
        return n
    return unit_size(mine) if mine[1] == theirs[1] else 0


def prompt_prefix(previous, current) -> dict:
    total = sum(unit_size(u) for u in current)
    shared = to_breakpoint = 0
    for mine, theirs in zip(current, previous):
        common = common_prefix(mine, theirs)
        shared += common
        if common < unit_size(mine):
            break
        if mine[2] and theirs[2]:
            to_breakpoint = shared
    return {"total": total, "shared": shared, "to_breakpoint": to_breakpoint}


class ScriptedModel(ChatOpenAI):
    """Answers like the Rust bench's model; records how long each call took."""

    def __init__(self):
        super().__init__(model="gpt-4.1-mini", api_key="unused")
        object.__setattr__(self, "call_seconds", [])
        object.__setattr__(self, "stale", 0)
        object.__setattr__(self, "prompts", [])

    async def ainvoke(self, messages, output_format=None, **kwargs):
        started = time.perf_counter()
        page = browser_state(messages)
        self.prompts.append(prompt_units(messages))
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


LAST_PROMPTS: list = []


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
    LAST_PROMPTS[:] = model.prompts
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
        prefix = {"total": 0, "shared": 0, "to_breakpoint": 0, "calls": len(LAST_PROMPTS)}
        for previous, current in zip(LAST_PROMPTS, LAST_PROMPTS[1:]):
            for key, value in prompt_prefix(previous, current).items():
                prefix[key] += value
        result = {"vision": "on" if vision else "off", "steps_ms": steps, "prompt_prefix": prefix}
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
