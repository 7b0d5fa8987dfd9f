"""browser-use-sdk 3.12.1's `client.skills.*`, unchanged, against browserd's /api/v2/skills (driven
by tests/tests/skills_clients.rs, with the scripted model and the local orders app).

Environment: BROWSERD_V2_URL (".../api/v2"), BROWSERD_KEY (an API key), SITE (the orders app's
base URL). The SDK validates every response with pydantic, so each call that returns is also a
check of the wire shapes. Prints one `ok <name>` line per check and `all ok`; any failure raises.
"""

import base64
import json
import os
import time

from browser_use_sdk import BrowserUse, BrowserUseError

BASE = os.environ["BROWSERD_V2_URL"]
KEY = os.environ["BROWSERD_KEY"]
SITE = os.environ["SITE"]

client = BrowserUse(api_key=KEY, base_url=BASE, max_retries=0)


def ok(name):
    print(f"ok {name}", flush=True)


def expect_error(status, call):
    try:
        call()
    except BrowserUseError as err:
        assert err.status_code == status, f"expected {status}, got {err.status_code}: {err}"
        return err
    raise AssertionError(f"expected a {status} error")


def until_generated(skill_id, version):
    """Polls the skill (at most 180 s) until its generation of `version` has ended."""
    deadline = time.monotonic() + 180
    while True:
        skill = client.skills.get(skill_id)
        if skill.status.value != "generating" and (skill.current_version or 0) >= version:
            return skill
        if skill.status.value in ("failed", "cancelled", "timed_out"):
            return skill
        assert time.monotonic() < deadline, f"still generating: {skill}"
        time.sleep(0.2)


created = client.skills.create(
    goal="Report the status of an order",
    agent_prompt=f"Go to {SITE}/public and Find order {{{{order=1042}}}}, then report its status",
    title="Order status",
)
skill_id = str(created.id)
skill = until_generated(skill_id, 1)
assert skill.status.value == "finished", skill
assert skill.current_version == 1, skill
assert [p.name for p in skill.parameters] == ["order"], skill.parameters
assert skill.parameters[0].type.value == "number"
assert skill.title == "Order status"
assert skill.domains == ["127.0.0.1"], skill.domains
ok("skills.create + get (generated)")

result = client.skills.execute(skill_id, parameters={"order": 2077})
assert result.success is True, result
assert result.result == "Order 2077: Delivered", result.result
assert result.error is None
assert result.latency_ms is not None and result.latency_ms >= 0
ok("skills.execute with another order")

err = expect_error(422, lambda: client.skills.execute(skill_id, parameters={"nope": 1}))
assert "nope" in str(err), err
ok("skills.execute refuses an unknown parameter")

executions = client.skills.executions(skill_id)
assert executions.total_items == 1, executions
execution = executions.items[0]
assert execution.success is True and execution.status == "completed", execution
assert execution.has_output is True
output = client.skills.execution_output(skill_id, str(execution.id))
prefix = "data:application/json;base64,"
assert output.download_url.startswith(prefix), output.download_url
assert json.loads(base64.b64decode(output.download_url[len(prefix):])) == "Order 2077: Delivered"
ok("skills.executions + execution_output")

listed = client.skills.list(page_size=10, page_number=1)
assert listed.total_items == 1 and str(listed.items[0].id) == skill_id, listed
updated = client.skills.update(skill_id, title="Order status desk")
assert updated.title == "Order status desk"
ok("skills.list + update")

client.skills.refine(skill_id, feedback="Read the status from the order's own page.")
refined = until_generated(skill_id, 2)
assert refined.status.value == "finished" and refined.current_version == 2, refined
rolled = client.skills.rollback(skill_id)
assert rolled.current_version == 1, rolled
ok("skills.refine + rollback")

client.skills.delete(skill_id)
expect_error(404, lambda: client.skills.get(skill_id))
ok("skills.delete")
print("all ok", flush=True)
