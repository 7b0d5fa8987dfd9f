"""Expected element set of a fixture page as browser-use prints it (tests/capture.rs compares).

Runs browser-use 0.13.14 (no LLM) on /usr/bin/chromium headless with browserd's Chrome flags
at browser-use's default 1920x1080 viewport, serves tests/fixtures over local HTTP, opens the
page, takes browser-use's browser state (DOM state + selector map) and writes
tests/golden/browser_use_<name>.json: every indexed element's tag and identity attributes, and
the serialized text with indices renumbered by first appearance (as the Rust goldens are).

    python3 -m venv /tmp/bu && /tmp/bu/bin/pip install browser-use==0.13.14
    /tmp/bu/bin/python crates/browser/tests/golden/browser_use_elements.py rustdoc/std/index.html std_index
"""

import asyncio
import functools
import http.server
import json
import pathlib
import re
import sys
import threading

from browser_use import BrowserProfile, BrowserSession

HERE = pathlib.Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures"
# browserd's CHROME_FLAGS (crates/browser/src/pool.rs).
FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
# Attributes that identify an element across the two implementations (raw DOM attributes, the
# same page in both); the Rust test reads the same list from this file's output.
IDENTITY_ATTRIBUTES = ["id", "class", "href", "src", "name", "type", "role", "aria-label", "title", "alt"]


def renumber(text: str) -> str:
    seen: dict[str, int] = {}

    def sub(m: re.Match) -> str:
        return "[%d]" % seen.setdefault(m.group(1), len(seen) + 1)

    return re.sub(r"\[(\d+)\]", sub, text)


async def main(page: str, name: str) -> None:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    handler = functools.partial(Quiet, directory=str(FIXTURES))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/{page}"

    profile = BrowserProfile(
        executable_path="/usr/bin/chromium",
        headless=True,
        args=FLAGS,
        chromium_sandbox=False,
        enable_default_extensions=False,
        viewport={"width": 1920, "height": 1080},
        highlight_elements=False,
        dom_highlight_elements=False,
    )
    session = BrowserSession(browser_profile=profile)
    await session.start()
    try:
        await session.navigate_to(url)
        state = await session.get_browser_state_summary(include_screenshot=False)
        origin = f"http://127.0.0.1:{server.server_address[1]}"

        def unport(value: str) -> str:
            return value.replace(origin, "http://127.0.0.1:PORT")

        elements = []
        for index, node in sorted(state.dom_state.selector_map.items()):
            attrs = node.attributes or {}
            elements.append(
                {
                    "tag": node.tag_name.lower(),
                    "attributes": {k: unport(attrs[k]) for k in IDENTITY_ATTRIBUTES if k in attrs},
                }
            )
        out = {
            "generator": "crates/browser/tests/golden/browser_use_elements.py",
            "browser_use": "0.13.14",
            "page": page,
            "viewport": [1920, 1080],
            "identity_attributes": IDENTITY_ATTRIBUTES,
            "elements": elements,
            "text": unport(renumber(state.dom_state.llm_representation())),
        }
        path = HERE / f"browser_use_{name}.json"
        path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
        print(f"{len(elements)} elements -> {path}")
    finally:
        await session.kill()
        server.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
