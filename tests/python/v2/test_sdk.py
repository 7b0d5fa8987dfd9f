"""browser-use-sdk 3.12.1, unchanged, against browserd's /api/v2 (driven by tests/tests/api_v2.rs).

Environment: BROWSERD_V2_URL (".../api/v2"), BROWSERD_KEY (an API key), SITE (the local
site's base URL). The SDK validates every response with pydantic, so each call that returns is
also a check of the wire shapes. Prints one `ok <name>` line per check; any failure raises.
"""

import datetime
import json
import os
import sys
import time
import uuid

from pydantic import BaseModel

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


def run_plain():
    result = client.run("Read the page and report", start_url=f"{SITE}/v2/plain", max_steps=5)
    assert result.status.value == "finished", result
    assert result.output == "plain page read", result.output
    assert result.is_success is True
    assert len(result.steps) == 1, result.steps
    assert result.task.session_id is not None
    assert result.finished_at.tzinfo is not None
    assert result.cost is not None
    ok("client.run")
    return result


def create_wait_steps_stream():
    created = client.tasks.create(
        "Climb the stairs and report the code",
        start_url=f"{SITE}/v2/stairs/1?top=3",
        max_steps=10,
        metadata={"suite": "v2"},
        flash_mode=False,
        vision=True,
        system_prompt_extension="Be brief.",
        allowed_domains=["127.0.0.1"],
        some_future_field="ignored",
    )
    task = client.tasks.wait(str(created.id), timeout=120, interval=0.5)
    assert task.status.value == "finished", task
    assert task.output == "The code at the top is CODE3X", task.output
    assert task.metadata == {"suite": "v2"}, task.metadata
    assert task.session_id == created.session_id
    numbers = [s.number for s in task.steps]
    assert numbers == [1, 2, 3], numbers
    clicks = [json.loads(a) for a in task.steps[0].actions]
    assert list(clicks[0].keys()) == ["click"], clicks
    assert task.steps[0].url.endswith("/v2/stairs/1?top=3"), task.steps[0].url
    assert task.steps[0].next_goal == "climb one stair"
    assert task.steps[0].screenshot_url, "steps carry screenshot URLs"
    import httpx

    shot = httpx.get(task.steps[0].screenshot_url, headers={"X-Browser-Use-API-Key": KEY})
    assert shot.status_code == 200 and shot.headers["content-type"].startswith("image/"), shot
    status = client.tasks.status(str(created.id))
    assert status.status.value == "finished" and status.is_success is True
    logs = client.tasks.logs(str(created.id))
    history = httpx.get(logs.download_url, headers={"X-Browser-Use-API-Key": KEY}).json()
    assert len(history["history"]) >= 3, history
    ok("tasks.create + wait + steps + status + logs")

    stream = client.stream("Climb again", start_url=f"{SITE}/v2/stairs/1?top=3", max_steps=10)
    seen = [step.number for step in stream]
    assert seen == [1, 2, 3], seen
    assert stream.result.output == "The code at the top is CODE3X"
    ok("stream")
    return created


def list_with_filters(first):
    before_all = datetime.datetime.now(datetime.timezone.utc)
    page = client.tasks.list(page_size=2, page_number=1)
    assert page.total_items >= 3 and len(page.items) == 2, page
    assert page.page_size == 2 and page.page_number == 1
    page2 = client.tasks.list(page_size=2, page_number=2)
    assert {t.id for t in page.items}.isdisjoint({t.id for t in page2.items})
    finished = client.tasks.list(filter_by="finished", page_size=100)
    assert all(t.status.value == "finished" for t in finished.items)
    assert any(t.id == first.id for t in finished.items)
    by_session = client.tasks.list(session_id=str(first.session_id))
    assert [t.id for t in by_session.items] == [first.id], by_session
    none_after = client.tasks.list(after=before_all)
    assert none_after.total_items == 0, none_after
    older = client.tasks.list(before=before_all, page_size=100)
    assert older.total_items == finished.total_items, (older.total_items, finished.total_items)
    ok("tasks.list with pageSize/pageNumber, filterBy, sessionId, after, before")


def stop_running():
    created = client.tasks.create("Wait forever", start_url=f"{SITE}/v2/wait", max_steps=50)
    deadline = time.monotonic() + 60
    while client.tasks.status(str(created.id)).status.value != "started":
        assert time.monotonic() < deadline, "task never started"
        time.sleep(0.2)
    # One step done: the agent has written progress.txt (and keeps waiting).
    while not client.tasks.get(str(created.id)).steps:
        assert time.monotonic() < deadline, "no step finished"
        time.sleep(0.2)
    stopped = client.tasks.stop(str(created.id))
    assert stopped.status.value == "stopped", stopped.status
    again = client.tasks.stop(str(created.id))
    assert again.status.value == "stopped"
    final = client.tasks.wait(str(created.id), timeout=60, interval=0.5)
    assert final.status.value == "stopped"
    # What the workspace held when the agent stopped is kept (stored right after the stop).
    deadline = time.monotonic() + 60
    while not final.output_files:
        assert time.monotonic() < deadline, "the stopped task's files never appeared"
        time.sleep(0.2)
        final = client.tasks.get(str(created.id))
    assert [f.file_name for f in final.output_files] == ["progress.txt"], final.output_files
    ok("tasks.stop")


class Product(BaseModel):
    name: str
    price: int


def structured_output():
    result = client.run("Read the product", output_schema=Product, start_url=f"{SITE}/v2/product")
    assert isinstance(result.output, Product), result.output
    assert result.output == Product(name="Widget", price=42), result.output
    ok("structured output with a pydantic model")


def session_reuse():
    session = client.sessions.create()
    assert session.status.value == "active" and session.live_url is None
    first = client.run("Set the cookie", session_id=str(session.id), start_url=f"{SITE}/v2/cookie")
    assert first.output == "cookie set", first.output
    assert first.session_id == session.id
    # No start URL: the second task starts in the first task's tab, with its cookie.
    second = client.run("Report the cookie", session_id=str(session.id))
    assert second.output == "cookie=v2-cookie-value", second.output
    view = client.sessions.get(str(session.id))
    assert [t.id for t in view.tasks] == [first.id, second.id], view.tasks
    listed = client.sessions.list(filter_by="active")
    assert any(s.id == session.id for s in listed.items)
    stopped = client.sessions.stop(str(session.id))
    assert stopped.status.value == "stopped"
    err = expect_error(400, lambda: client.tasks.create("again", session_id=str(session.id)))
    assert "stopped" in err.message, err.message
    # The stopped session stays (the driver checks its cookies are sealed); delete another.
    other = client.sessions.create(keep_alive=False)
    assert other.keep_alive is False
    client.sessions.delete(str(other.id))
    expect_error(404, lambda: client.sessions.get(str(other.id)))
    ok("session reuse (cookie and tab of the first task seen by the second)")


def errors():
    bad = BrowserUse(api_key="bd_not-a-key", base_url=BASE, max_retries=0)
    err = expect_error(401, lambda: bad.tasks.list())
    assert err.message == "Invalid API key", err.message
    err = expect_error(404, lambda: client.tasks.get(str(uuid.uuid4())))
    assert err.message == "Task not found", err.message
    expect_error(404, lambda: client.sessions.get(str(uuid.uuid4())))
    err = expect_error(422, lambda: client.tasks.create(""))
    assert err.detail["detail"][0]["loc"] == ["body", "task"], err.detail
    err = expect_error(422, lambda: client.tasks.create("x", max_steps=0))
    assert err.detail["detail"][0]["loc"] == ["body", "maxSteps"], err.detail
    err = expect_error(422, lambda: client.tasks.create("x", llm="no-such-model"))
    assert err.detail["detail"][0]["loc"] == ["body", "llm"], err.detail
    # Flat secrets (the SDK's shape) need allowed_domains (they are then bound to them).
    err = expect_error(422, lambda: client.tasks.create("x", secrets={"pw": "s3cr3t"}))
    assert err.detail["detail"][0]["loc"] == ["body", "secrets"], err.detail
    assert "allowedDomains" in err.detail["detail"][0]["msg"], err.detail
    assert "s3cr3t" not in str(err.detail), err.detail
    err = expect_error(422, lambda: client.tasks.get("task_123"))
    assert err.detail["detail"][0]["type"] == "uuid_parsing", err.detail
    err = expect_error(501, lambda: client.billing.account())
    assert "Not implemented" in err.message, err.message
    expect_error(501, lambda: client.tasks.create("x", judge=True))
    ok("401, 404, 422, 501 as BrowserUseError")


def output_files():
    import httpx

    created = client.tasks.create(
        "Write the report",
        start_url=f"{SITE}/v2/report",
        max_steps=5,
        secrets={"token": "s3cr3t-value-42"},
        allowed_domains=["127.0.0.1"],
    )
    task = client.tasks.wait(str(created.id), timeout=120, interval=0.5)
    assert task.status.value == "finished", task
    assert task.output == "report written", task.output
    files = {f.file_name: f for f in task.output_files}
    assert sorted(files) == ["data.csv", "report.md"], task.output_files
    got = client.files.task_output(str(created.id), str(files["report.md"].id))
    assert got.id == files["report.md"].id and got.file_name == "report.md", got
    # The link is signed: a plain GET without the key downloads it (as the cloud's presigned URL).
    report = httpx.get(got.download_url)
    assert report.status_code == 200, report.text
    assert report.headers["content-type"] == "text/markdown; charset=utf-8", report.headers
    assert report.headers["content-disposition"] == 'attachment; filename="report.md"'
    assert report.text == "# Report\nThe token is <secret>token</secret>.", report.text
    data = httpx.get(client.files.task_output(str(created.id), str(files["data.csv"].id)).download_url)
    assert data.status_code == 200 and data.text == "name,price\nWidget,42\n", data.text
    assert data.headers["content-type"] == "text/csv; charset=utf-8"
    tampered = httpx.get(got.download_url.replace("signature=", "signature=00"))
    assert tampered.status_code == 403, tampered.text
    err = expect_error(404, lambda: client.files.task_output(str(created.id), str(uuid.uuid4())))
    assert err.message == "Output file not found", err.message
    other = client.run("Read the page and report", start_url=f"{SITE}/v2/plain", max_steps=5)
    assert other.task.output_files == [], other.task.output_files
    expect_error(
        404, lambda: client.files.task_output(str(other.task.id), str(files["report.md"].id))
    )
    v1 = httpx.get(
        BASE.replace("/api/v2", f"/v1/tasks/{created.id}/files"),
        headers={"Authorization": f"Bearer {KEY}"},
    ).json()
    assert [f["file_name"] for f in v1["items"]] == ["data.csv", "report.md"], v1
    ok("output files")


def profiles():
    created = client.profiles.create(name="shop login", user_id="user-7")
    assert created.name == "shop login" and created.user_id == "user-7", created
    assert created.created_at.tzinfo is not None
    got = client.profiles.get(str(created.id))
    assert got.id == created.id and got.name == "shop login", got
    renamed = client.profiles.update(str(created.id), name="shop")
    assert renamed.name == "shop" and renamed.user_id == "user-7", renamed
    listed = client.profiles.list(page_size=10, page_number=1, query="sho")
    assert [p.id for p in listed.items] == [created.id], listed
    assert listed.total_items == 1 and listed.page_number == 1 and listed.page_size == 10, listed
    none = client.profiles.list(query="no such profile")
    assert none.items == [] and none.total_items == 0, none
    client.profiles.delete(str(created.id))
    err = expect_error(404, lambda: client.profiles.get(str(created.id)))
    assert err.message == "Profile not found", err.message
    ok("profiles.create/get/update/list/delete")


def v1_and_v2_share_tasks(first):
    import httpx

    v1 = httpx.get(
        BASE.replace("/api/v2", f"/v1/tasks/{first.id}"),
        headers={"Authorization": f"Bearer {KEY}"},
    )
    assert v1.status_code == 200 and v1.json()["status"] == "finished", v1.text
    ok("a v2 task is visible on /v1")


def main():
    errors()
    run_plain()
    first = create_wait_steps_stream()
    list_with_filters(first)
    v1_and_v2_share_tasks(first)
    structured_output()
    session_reuse()
    output_files()
    profiles()
    stop_running()
    print("all ok", flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception:
        import traceback

        traceback.print_exc()
        sys.exit(1)
