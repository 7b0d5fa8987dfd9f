"""Drives browserd's MCP server with the PyPI `mcp` client and prints what it saw as JSON.

Run by tests/tests/mcp.rs (which asserts on the report) with one JSON argument:
  {"transport": "http", "url": ".../mcp", "key": K, "other_key": K2, "site": "http://127.0.0.1:P"}
  {"transport": "stdio", "command": "/path/browserd", "args": [...], "env": {...}, "site": ...}
Every wait is bounded (anyio.fail_after); nothing sleeps.
"""

import asyncio
import json
import sys
import uuid

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

# Bound of any one tool call (run_task waits up to its own wait_s inside it).
CALL_LIMIT_S = 120


def dump(result):
    """A tool result as plain JSON."""
    content = []
    for block in result.content:
        if block.type == "text":
            content.append({"type": "text", "text": block.text})
        elif block.type == "image":
            content.append({"type": "image", "mime_type": block.mime_type, "bytes": len(block.data)})
        else:
            content.append({"type": block.type})
    return {"is_error": result.is_error, "structured": result.structured_content, "content": content}


async def call(session, name, arguments, progress_callback=None):
    with anyio.fail_after(CALL_LIMIT_S):
        result = await session.call_tool(name, arguments, progress_callback=progress_callback)
    return dump(result)


async def scenario(session, site, report):
    """The same conversation over either transport."""
    init = await session.initialize()
    report["server_name"] = init.server_info.name
    tools = await session.list_tools()
    report["tools"] = sorted(t.name for t in tools.tools)
    schemas = {t.name: t.input_schema for t in tools.tools}
    report["run_task_schema"] = schemas["run_task"]
    report["list_tasks_schema"] = schemas["list_tasks"]

    # A task to completion, with each step's next goal as a progress notification.
    progress = []

    async def on_progress(value, total, message):
        progress.append({"progress": value, "total": total, "message": message})

    run = await call(
        session,
        "run_task",
        {"task": "Climb the stairs and report the code at the top", "start_url": f"{site}/stairs/1?top=3", "wait_s": 90},
        on_progress,
    )
    report["run"] = run
    report["progress"] = progress
    task_id = (run["structured"] or {}).get("id")

    # Structured output: the result is the JSON the schema asked for.
    schema = {
        "type": "object",
        "properties": {"code": {"type": "string"}, "stairs": {"type": "integer"}},
        "required": ["code", "stairs"],
        "additionalProperties": False,
    }
    report["structured_run"] = await call(
        session,
        "run_task",
        {"task": "Climb and report the code as JSON", "start_url": f"{site}/stairs/1?top=2", "output_schema": schema, "wait_s": 90},
    )

    if task_id:
        report["get_task"] = await call(session, "get_task", {"id": task_id})
        report["screenshot"] = await call(session, "get_screenshot", {"id": task_id})
        report["screenshot_step_1"] = await call(session, "get_screenshot", {"id": task_id, "step": 1})
    report["list_tasks"] = await call(session, "list_tasks", {"status": "finished", "limit": 10})

    # A long task paused, resumed and stopped while run_task waits for it: the first progress
    # notification triggers the controls on the same session, and the waiting run_task returns
    # the task stopped.
    long_progress = []
    stopped = {}
    long_result = {}
    first_goal = anyio.Event()

    async def on_long_progress(value, total, message):
        long_progress.append(message)
        first_goal.set()

    async def long_run():
        long_result.update(
            await call(
                session,
                "run_task",
                {"task": "Climb a very long staircase", "start_url": f"{site}/stairs/1?top=1000", "wait_s": 90},
                on_long_progress,
            )
        )

    async def stopper():
        with anyio.fail_after(CALL_LIMIT_S):
            await first_goal.wait()
        listed = await call(session, "list_tasks", {"status": "running"})
        running = (listed["structured"] or {}).get("items", [])
        stopped["running_before"] = running
        if running:
            stopped["pause"] = await call(session, "pause_task", {"id": running[0]["id"]})
            stopped["resume"] = await call(session, "resume_task", {"id": running[0]["id"]})
            stopped["stop"] = await call(session, "stop_task", {"id": running[0]["id"]})
            stopped["stop_again"] = await call(session, "stop_task", {"id": running[0]["id"]})

    async with anyio.create_task_group() as group:
        group.start_soon(long_run)
        group.start_soon(stopper)
    report["long_run"] = long_result
    report["long_progress"] = long_progress
    report["stopped"] = stopped

    # A task over its token budget (1 050 tokens per model call) fails: a budget_exceeded error.
    report["budget_run"] = await call(
        session,
        "run_task",
        {"task": "Climb, on a budget", "start_url": f"{site}/stairs/1?top=1000", "max_tokens": 1500, "wait_s": 90},
    )

    # Errors are tool errors with the REST API's codes and messages.
    report["errors"] = {
        "unknown_model": await call(session, "run_task", {"task": "t", "model": "no-such-model"}),
        "bad_domain": await call(session, "run_task", {"task": "t", "allowed_domains": ["exa mple.com"]}),
        "not_found": await call(session, "get_task", {"id": str(uuid.uuid4())}),
        "bad_id": await call(session, "get_task", {"id": "not-a-uuid"}),
        "bad_limit": await call(session, "list_tasks", {"limit": 1000}),
    }
    return task_id


async def http_main(args, report):
    url = args["url"]
    # Requests without a valid key are refused before any MCP session exists.
    init = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}},
    }
    headers = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(timeout=30) as raw:
        wrong = await raw.post(url, json=init, headers={**headers, "Authorization": "Bearer bd_wrong"})
        missing = await raw.post(url, json=init, headers=headers)
    report["wrong_key"] = {"status": wrong.status_code, "body": wrong.json(), "session": wrong.headers.get("mcp-session-id")}
    report["missing_key"] = {"status": missing.status_code, "body": missing.json()}

    async def session_for(key, body):
        client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=CALL_LIMIT_S))
        async with client:
            async with streamable_http_client(url, http_client=client) as (read, write):
                async with ClientSession(read, write) as session:
                    return await body(session)

    task_id = await session_for(args["key"], lambda s: scenario(s, args["site"], report))

    # Another key's task does not exist for it.
    async def other(session):
        await session.initialize()
        return {
            "get": await call(session, "get_task", {"id": task_id}),
            "stop": await call(session, "stop_task", {"id": task_id}),
            "list": await call(session, "list_tasks", {}),
        }

    report["other_tenant"] = await session_for(args["other_key"], other)


async def stdio_main(args, report):
    params = StdioServerParameters(command=args["command"], args=args["args"], env=args["env"])
    with open(args["stderr"], "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await scenario(session, args["site"], report)


def main():
    args = json.loads(sys.argv[1])
    report = {}
    try:
        if args["transport"] == "http":
            asyncio.run(http_main(args, report))
        else:
            asyncio.run(stdio_main(args, report))
    except BaseException as err:  # the report says how far it got
        report["exception"] = repr(err)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
