#!/usr/bin/env python3
"""Interop suite: drives mcp-task-server with the official MCP Python SDK client.

`mcp.client.session.ClientSession` and its experimental tasks API
(`session.experimental`: call_tool_as_task, get_task, get_task_result, list_tasks,
cancel_task, poll_task), over `mcp.client.stdio` and `mcp.client.streamable_http`,
protocol 2025-11-25. Run it through run.sh, which installs the pinned SDK:

    MCP_TASK_SERVER=target/debug/mcp-task-server bash tests/interop/py/run.sh

Every check runs once per transport with a fresh client session: over stdio a fresh
server process per check, over HTTP one server for the whole transport run (started with
`--http 127.0.0.1:0`; each check opens its own MCP session, and so its own store session).
A check about an HTTP-only feature (identities) starts its own HTTP server with the flags it
needs, and over stdio is listed as N/A instead of run.
Prints one PASS/FAIL/SKIP/N/A line per check and a closing `summary: N passed, N failed, N
skipped` line; exits 1 if any check failed or was skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import logging
import os
import re
import signal
import sys
import time
import traceback
import uuid
import warnings
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, AsyncIterator, Awaitable, Callable, NamedTuple, Sequence

import anyio
import httpx  # pinned in requirements.txt (the SDK's HTTP client); for the raw requests of the identity check

# `session.experimental` warns that the experimental tasks API will go in mcp 2.0 (tasks move
# to an extension); using it is the point of this suite.
warnings.filterwarnings("ignore", message="The experimental tasks API is deprecated", category=DeprecationWarning)

import mcp.types as types  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402
from mcp.shared.exceptions import McpError  # noqa: E402
from mcp.shared.experimental.tasks.helpers import RELATED_TASK_METADATA_KEY  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
VERBOSE = bool(os.environ.get("INTEROP_VERBOSE"))

PROTOCOL = "2025-11-25"
REQUEST_TIMEOUT_S = 15.0  # per JSON-RPC request (ClientSession read timeout)
CHECK_TIMEOUT_S = 45.0  # per check, session set-up and tear-down included
START_TIMEOUT_S = 10.0  # the HTTP server must say it is serving within this
STDERR_WAIT_S = 5.0  # a log line the server must print (e.g. cancellation observed)
TTL_MS = 60_000  # ttl every task asks for (below the binary's default 24 h cap)
POLL_INTERVAL_MS = 100  # given to the server as --poll-interval; it must report it back
PAGE_SIZE = 2  # given to the server as --page-size, so tasks/list needs cursors
SERVER_FLAGS = ["--page-size", str(PAGE_SIZE), "--poll-interval", f"{POLL_INTERVAL_MS}ms"]

TERMINAL = {"completed", "failed", "cancelled"}
INVALID_PARAMS = types.INVALID_PARAMS  # -32602
METHOD_NOT_FOUND = types.METHOD_NOT_FOUND  # -32601

# taskSupport the server documents per demo tool (README "mcp-task-server", src/server/demo.rs);
# a tool without execution.taskSupport counts as "forbidden".
TASK_SUPPORT = {
    "sleep": "optional",
    "sleep_required": "required",
    "fail": "optional",
    "count": "optional",
    "echo": "forbidden",
    "ask": "required",
    "greet": "forbidden",
    "slow_compute": "optional",
    "failing_job": "required",
    "protocol_error_job": "optional",
    "confirm_delete": "required",
    "multi_input": "required",
    "test_tool_with_task": "required",
}
INPUT_PROPS = {
    "sleep": ["ms"],
    "sleep_required": ["ms"],
    "fail": ["ms"],
    "count": ["to", "ms"],
    "echo": ["text"],
    "ask": ["question"],
    "greet": ["name"],
    "slow_compute": ["seconds"],
}


class Skip(Exception):
    """A check (or part of one) the Python SDK cannot express; the reason is printed."""


# What the SDK logs at WARNING or above (e.g. "Failed to validate notification", "Failed to
# parse JSONRPC message from server"). A check fails if anything is logged while its session
# is open; what is logged while the session closes is printed as a note (the SDK logs an
# error when a server message arrives after the session closed its streams). Printed in full
# as it happens with INTEROP_VERBOSE=1.
SDK_LOG: list[logging.LogRecord] = []


class _CollectSdkLog(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        SDK_LOG.append(record)
        if VERBOSE:
            print(f"    [sdk log] {self.format(record)}", file=sys.stderr, flush=True)


logging.getLogger().setLevel(logging.WARNING)
logging.getLogger().addHandler(_CollectSdkLog(level=logging.WARNING))


def log_summary(record: logging.LogRecord) -> str:
    text = f"{record.levelname} {record.name}: {record.getMessage()}"
    if record.exc_info and record.exc_info[1] is not None:
        text += f" ({type(record.exc_info[1]).__name__})"
    return text


# ---------------------------------------------------------------------------------------
# the server's stderr


class StderrLines:
    """Collects a server's stderr lines; lets a check wait (bounded) for one."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.lines: list[str] = []
        self.closed = False
        self._changed = anyio.Event()

    def _notify(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    async def pump(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                text = line.decode("utf-8", "replace").rstrip("\r\n")
                self.lines.append(text)
                if VERBOSE:
                    print(f"    [{self.label} stderr] {text}", file=sys.stderr, flush=True)
                self._notify()
        finally:
            self.closed = True
            self._notify()

    def tail(self, n: int = 15) -> str:
        return "\n".join(self.lines[-n:])

    async def wait_for(self, pred: Callable[[str], bool], timeout: float, what: str) -> str:
        seen = 0
        try:
            with anyio.fail_after(timeout):
                while True:
                    for line in self.lines[seen:]:
                        if pred(line):
                            return line
                    seen = len(self.lines)
                    if self.closed:
                        raise AssertionError(f"server stderr ended before {what}")
                    await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"timed out after {timeout} s waiting for server stderr line: {what}") from None


async def read_pipe(fd: int) -> asyncio.StreamReader:
    """An asyncio reader over the read end of an os.pipe()."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0))
    return reader


def die_with_parent() -> None:
    """preexec_fn: the server gets SIGKILL if this process dies (Linux), so none is left behind."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


# ---------------------------------------------------------------------------------------
# sessions


@dataclass
class Session:
    client: ClientSession
    init: types.InitializeResult
    stderr: StderrLines
    env: Env
    incoming: Incoming
    http_session_id: str | None = None  # Mcp-Session-Id the server issued (HTTP only)

    @property
    def tasks(self):
        return self.client.experimental

    @property
    def transport(self) -> str:
        return self.env.transport

    def note(self, text: str) -> None:
        """Something worth reporting that is not a failure (printed under the check's line)."""
        self.env.notes.append(text)


@dataclass
class HttpServer:
    url: str
    stderr: StderrLines


@dataclass
class Env:
    server: str
    transport: str
    http: HttpServer | None = None
    stderr: StderrLines | None = None  # the current check's server stderr, for failure reports
    notes: list[str] = field(default_factory=list)  # the current check's notes
    aside: list[Aside] = field(default_factory=list)  # the current check's SDK_LOG spans not held against it


@dataclass
class Aside:
    """A span of SDK_LOG (from `start` to `end`, or on while `end` is None) that no session open
    meanwhile is failed for: a session closing (the SDK logs server messages that arrive after
    it closed its streams), or a connection the check expects to be refused. Reported as notes."""

    start: int
    why: str
    end: int | None = None


@dataclass
class Incoming:
    """What the session's message handler saw besides answers."""

    status_notifications: list[types.TaskStatusNotificationParams] = field(default_factory=list)
    errors: list[Exception] = field(default_factory=list)  # messages the SDK could not read

    async def handler(self, message: Any) -> None:
        if isinstance(message, Exception):
            self.errors.append(message)
        elif isinstance(message, types.ServerNotification) and isinstance(message.root, types.TaskStatusNotification):
            self.status_notifications.append(message.root.params)
        await anyio.lowlevel.checkpoint()


def sdk_complaints(log_mark: int, incoming: Incoming, env: Env) -> None:
    """Fails the check if, while its session was open, the SDK could not read something the
    server sent (it passes such messages to the message handler as exceptions, or logs them).
    What was logged while another session of the check closed, or while a connection the check
    expected to be refused was attempted (env.aside), is left to the notes."""
    aside = set()
    for span in env.aside:
        aside.update(range(span.start, len(SDK_LOG) if span.end is None else span.end))
    problems = [log_summary(r) for i, r in enumerate(SDK_LOG) if i >= log_mark and i not in aside]
    problems += [f"message handler got {e!r}" for e in incoming.errors]
    if problems:
        raise AssertionError("the SDK reported problems with the session:\n       " + "\n       ".join(problems))


async def relay_after_close(tg, read, env: Env):
    """Puts a relay between stdio_client's read stream and the ClientSession.

    Works around python-sdk issue #1960 (open in mcp 1.30.0): when the session closes its
    read stream, a server message still on its way (here typically the
    notifications/tasks/status of a task that just finished) makes stdio_client's
    stdout_reader fail with anyio.BrokenResourceError, which escapes stdio_client as an
    ExceptionGroup although every request was answered. The relay forwards everything to
    the session and, once the session has closed its end, keeps reading and drops what
    still comes, until stdio_client shuts down (the task group is cancelled then). What it
    drops is reported as a note under the check.
    """
    send, receive = anyio.create_memory_object_stream[Any](0)

    async def relay() -> None:
        dropped: list[str] = []
        try:
            async with send:
                async for message in read:
                    try:
                        await send.send(message)
                    except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                        root = getattr(message, "message", message)
                        root = getattr(root, "root", root)
                        dropped.append(getattr(root, "method", None) or type(root).__name__)
                        if VERBOSE:
                            print(f"    [stdio] dropped after the session closed: {message}", file=sys.stderr, flush=True)
        except (anyio.ClosedResourceError, anyio.EndOfStream):
            pass
        finally:
            if dropped:
                env.notes.append(
                    f"{len(dropped)} server message(s) arrived after the session closed, dropped "
                    f"(python-sdk #1960 workaround, not checked): {', '.join(dropped)}"
                )

    tg.start_soon(relay)
    return receive


@asynccontextmanager
async def open_session(
    env: Env,
    elicitation_callback=None,
    *,
    http: HttpServer | None = None,
    headers: dict[str, str] | None = None,
) -> AsyncIterator[Session]:
    """A fresh initialized ClientSession. HTTP only: `http` is the server to talk to (the run's
    shared one by default), `headers` extra header fields sent with every request (the SDK
    takes them on the httpx.AsyncClient it is given)."""
    incoming = Incoming()
    log_mark = len(SDK_LOG)
    kwargs: dict[str, Any] = dict(
        read_timeout_seconds=timedelta(seconds=REQUEST_TIMEOUT_S),
        message_handler=incoming.handler,
        client_info=types.Implementation(name="mcp-task-store-interop-py", version="0.1.0"),
    )
    if elicitation_callback is not None:
        kwargs["elicitation_callback"] = elicitation_callback

    if env.transport == "http":
        server = http or env.http
        assert server is not None
        env.stderr = server.stderr
        async with AsyncExitStack() as stack:
            http_client = None
            if headers is not None:
                # The SDK's own default timeouts (mcp.shared._httpx_utils.create_mcp_http_client).
                timeout = httpx.Timeout(30.0, read=300.0)
                http_client = await stack.enter_async_context(httpx.AsyncClient(headers=headers, timeout=timeout))
            read, write, session_id = await stack.enter_async_context(
                streamable_http_client(server.url, http_client=http_client)
            )
            client = await stack.enter_async_context(ClientSession(read, write, **kwargs))
            init = await client.initialize()
            yield Session(client, init, server.stderr, env, incoming, session_id())
            sdk_complaints(log_mark, incoming, env)
            closing = Aside(len(SDK_LOG), "while a session closed")
            env.aside.append(closing)
        closing.end = len(SDK_LOG)
        return
    assert http is None and headers is None, "a server and header fields are for HTTP sessions"

    # stdio: a fresh server per session; its stderr goes to a pipe we read.
    stderr = env.stderr = StderrLines("stdio server")
    r, w = os.pipe()
    errlog = os.fdopen(w, "w")
    try:
        reader = await read_pipe(r)
    except BaseException:
        errlog.close()
        os.close(r)
        raise
    async with anyio.create_task_group() as tg:
        tg.start_soon(stderr.pump, reader)
        try:
            params = StdioServerParameters(command=env.server, args=SERVER_FLAGS, cwd=HERE, env=dict(os.environ))
            async with stdio_client(params, errlog=errlog) as (read, write):
                errlog.close()  # the child holds its own copy; EOF comes when it exits
                session_read = await relay_after_close(tg, read, env)
                async with ClientSession(session_read, write, **kwargs) as client:
                    init = await client.initialize()
                    yield Session(client, init, stderr, env, incoming)
                    sdk_complaints(log_mark, incoming, env)
                    env.aside.append(Aside(len(SDK_LOG), "while the session closed"))
        finally:
            if not errlog.closed:
                errlog.close()
            # The server has exited (stdio_client waits for it, then kills it): stderr is at
            # EOF or about to be; do not wait for it.
            tg.cancel_scope.cancel()


@asynccontextmanager
async def http_server(server: str, extra_args: Sequence[str] = ()) -> AsyncIterator[HttpServer]:
    """Launches `server --http 127.0.0.1:0` (after SERVER_FLAGS and `extra_args`), waits until
    it serves, kills it at the end.

    Port 0: the kernel picks a free port, which the server logs ("serving MCP tasks at
    http://127.0.0.1:<port>/mcp"); no window in which another process could take it.
    """
    stderr = StderrLines("http server")
    proc = await asyncio.create_subprocess_exec(
        server,
        *SERVER_FLAGS,
        *extra_args,
        "--http",
        "127.0.0.1:0",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        cwd=HERE,
        preexec_fn=die_with_parent,
    )
    try:
        async with anyio.create_task_group() as tg:
            assert proc.stderr is not None
            tg.start_soon(stderr.pump, proc.stderr)
            try:
                line = await stderr.wait_for(
                    lambda s: "serving MCP tasks at http://" in s, START_TIMEOUT_S, "the HTTP server to start"
                )
                m = re.search(r"http://(127\.0\.0\.1):(\d+)/mcp", line)
                if not m:
                    raise AssertionError(f"cannot read the HTTP address from: {line}")
                host, port = m.group(1), int(m.group(2))
                # It said it is serving: it must accept a connection now.
                with anyio.fail_after(REQUEST_TIMEOUT_S):
                    conn = await anyio.connect_tcp(host, port)
                    await conn.aclose()
                yield HttpServer(f"http://{host}:{port}/mcp", stderr)
                if proc.returncode is not None:
                    raise AssertionError(f"HTTP server exited during the run (code {proc.returncode})\n{stderr.tail()}")
            finally:
                tg.cancel_scope.cancel()
    finally:
        if proc.returncode is None:
            proc.kill()
        with anyio.move_on_after(5, shield=True):
            await proc.wait()


# ---------------------------------------------------------------------------------------
# helpers


async def expect_error(awaitable: Awaitable[Any], code: int, label: str) -> McpError:
    try:
        result = await awaitable
    except McpError as e:
        if e.error.code != code:
            raise AssertionError(f"{label}: expected JSON-RPC error {code}, got {e.error.code} ({e.error.message})") from None
        return e
    raise AssertionError(f"{label}: expected JSON-RPC error {code}, got a result: {short(result)}")


def short(obj: Any, n: int = 300) -> str:
    try:
        text = obj.model_dump_json(by_alias=True, exclude_none=True)
    except AttributeError:
        text = repr(obj)
    return text if len(text) <= n else text[:n] + "..."


def text_of(result: types.CallToolResult) -> str:
    assert result.content, f"result has no content: {short(result)}"
    block = result.content[0]
    assert isinstance(block, types.TextContent), f"first content block is not text: {short(block)}"
    return block.text


def related_task_id(meta: dict[str, Any] | None) -> str | None:
    related = (meta or {}).get(RELATED_TASK_METADATA_KEY)
    return related.get("taskId") if isinstance(related, dict) else None


def assert_related(result: types.Result, task_id: str, label: str) -> None:
    got = related_task_id(result.meta)
    assert got is not None, f'{label}: missing _meta["{RELATED_TASK_METADATA_KEY}"] in {short(result)}'
    assert got == task_id, f"{label}: related-task taskId {got!r}, expected {task_id!r}"


def assert_task_shape(task: types.Task, label: str) -> None:
    # The SDK's pydantic model already enforces taskId/status/createdAt/lastUpdatedAt types
    # and a strict-int-or-null ttl; these are the values the server documents.
    assert task.taskId, f"{label}: empty taskId"
    assert task.ttl == TTL_MS, f"{label}: ttl {task.ttl}, expected the requested {TTL_MS} (below the cap)"
    assert task.pollInterval == POLL_INTERVAL_MS, f"{label}: pollInterval {task.pollInterval}, expected --poll-interval {POLL_INTERVAL_MS}"
    assert task.createdAt <= task.lastUpdatedAt, f"{label}: lastUpdatedAt before createdAt"


async def create_task(s: Session, name: str, args: dict[str, Any]) -> types.Task:
    created = await s.tasks.call_tool_as_task(name, args, ttl=TTL_MS)
    assert isinstance(created, types.CreateTaskResult)
    return created.task


async def poll_to_terminal(s: Session, task_id: str, timeout: float = 15.0) -> list[types.GetTaskResult]:
    """The SDK's own poller (it sleeps the task's pollInterval between tasks/get), bounded."""
    seen: list[types.GetTaskResult] = []
    try:
        with anyio.fail_after(timeout):
            async for status in s.tasks.poll_task(task_id):
                assert status.taskId == task_id, f"tasks/get returned task {status.taskId}, asked for {task_id}"
                seen.append(status)
    except TimeoutError:
        last = seen[-1].status if seen else "(no answer)"
        raise AssertionError(f"task {task_id} not terminal after {timeout} s of polling (last status {last})") from None
    assert seen and seen[-1].status in TERMINAL
    return seen


# ---------------------------------------------------------------------------------------
# checks: each takes a fresh Session (or the Env, when it needs its own session options)

class Check(NamedTuple):
    name: str
    fn: Callable[..., Awaitable[None]]
    wants_env: bool  # fn takes the Env (and opens its sessions itself), not a Session
    http_only: str | None  # why the check only makes sense over HTTP; over stdio it is N/A


CHECKS: list[Check] = []


def check(name: str, *, wants_env: bool = False, http_only: str | None = None):
    def register(fn):
        CHECKS.append(Check(name, fn, wants_env, http_only))
        return fn

    return register


@check("initialize negotiates 2025-11-25 and the server declares tasks.list, tasks.cancel, tasks.requests.tools.call")
async def check_initialize(s: Session) -> None:
    assert s.init.protocolVersion == PROTOCOL, f"negotiated {s.init.protocolVersion}, expected {PROTOCOL}"
    caps = s.client.get_server_capabilities()
    assert caps is not None, "no server capabilities after initialize"
    assert caps.tools is not None, "capabilities.tools missing"
    t = caps.tasks
    assert t is not None, f"capabilities.tasks missing: {short(caps)}"
    assert t.list is not None, "capabilities.tasks.list missing"
    assert t.cancel is not None, "capabilities.tasks.cancel missing"
    assert t.requests is not None and t.requests.tools is not None and t.requests.tools.call is not None, (
        "capabilities.tasks.requests.tools.call missing"
    )
    assert s.init.serverInfo.name, "serverInfo.name empty"
    if s.transport == "http":
        assert s.http_session_id, "initialize over HTTP returned no Mcp-Session-Id"


@check("tools/list shows every demo tool with its documented execution.taskSupport and inputs")
async def check_tools_list(s: Session) -> None:
    tools: dict[str, types.Tool] = {}
    cursor = None
    for _ in range(20):
        page = await s.client.list_tools(params=types.PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.update((t.name, t) for t in page.tools)
        cursor = page.nextCursor
        if not cursor:
            break
    for name, support in TASK_SUPPORT.items():
        tool = tools.get(name)
        assert tool is not None, f"tool {name} missing from tools/list (got {sorted(tools)})"
        actual = (tool.execution.taskSupport if tool.execution else None) or "forbidden"
        assert actual == support, f"tool {name}: execution.taskSupport {actual!r}, documented {support!r}"
    for name, props in INPUT_PROPS.items():
        have = set((tools[name].inputSchema or {}).get("properties", {}))
        assert set(props) <= have, f"tool {name}: inputSchema properties {sorted(have)} lack {props}"


@check("task-augmented sleep: CreateTaskResult is working with ttl and pollInterval; polling reaches completed; tasks/result returns the result with related-task _meta")
async def check_task_roundtrip(s: Session) -> None:
    ms = 300
    task = await create_task(s, "sleep", {"ms": ms})
    assert task.status == "working", f"a new task must be working, got {task.status}"
    assert_task_shape(task, "CreateTaskResult.task")

    statuses = await poll_to_terminal(s, task.taskId)
    for st in statuses:
        assert_task_shape(st, "tasks/get")
    names = [st.status for st in statuses]
    assert names[-1] == "completed", f"polling ended in {names[-1]} ({names})"
    assert set(names[:-1]) <= {"working"}, f"unexpected statuses while sleeping: {names}"

    result = await s.tasks.get_task_result(task.taskId, types.CallToolResult)
    assert text_of(result) == f"slept {ms} ms", f"tasks/result text {text_of(result)!r}"
    assert not result.isError, "sleep result must not be isError"
    assert_related(result, task.taskId, "tasks/result")
    notified = [n.status for n in s.incoming.status_notifications if n.taskId == task.taskId]
    s.note(f"notifications/tasks/status seen for the task (best effort, not checked): {notified or 'none'}")

    # a finished task answers tasks/result again, the same way
    again = await s.tasks.get_task_result(task.taskId, types.CallToolResult)
    assert text_of(again) == f"slept {ms} ms"


@check("tasks/result on a working task blocks until the task finishes (other requests still served), then returns the result")
async def check_blocking_result(s: Session) -> None:
    ms = 1500
    started = time.monotonic()
    task = await create_task(s, "sleep", {"ms": ms})
    before = await s.tasks.get_task(task.taskId)
    assert before.status == "working", f"task should still be working, got {before.status}"

    outcome: dict[str, Any] = {}

    async def wait_result() -> None:
        try:
            outcome["result"] = await s.tasks.get_task_result(task.taskId, types.CallToolResult)
        except Exception as e:  # reported below
            outcome["error"] = e

    async with anyio.create_task_group() as tg:
        tg.start_soon(wait_result)
        during = await s.tasks.get_task(task.taskId)  # served while tasks/result is outstanding
        if during.status == "working":
            assert not outcome, "tasks/result answered while the task was still working"
    elapsed_ms = (time.monotonic() - started) * 1000
    if "error" in outcome:
        raise AssertionError(f"tasks/result failed: {outcome['error']!r}")
    result = outcome["result"]
    assert elapsed_ms >= ms - 250, f"tasks/result answered after {elapsed_ms:.0f} ms, before a {ms} ms sleep could end"
    assert text_of(result) == f"slept {ms} ms"
    assert_related(result, task.taskId, "tasks/result")
    after = await s.tasks.get_task(task.taskId)
    assert after.status == "completed", f"after tasks/result the task is {after.status}"


@check("fail as a task ends failed (isError tool result), with a statusMessage; tasks/result still returns the isError result")
async def check_fail(s: Session) -> None:
    ms = 100
    task = await create_task(s, "fail", {"ms": ms})
    assert task.status == "working"
    final = (await poll_to_terminal(s, task.taskId))[-1]
    assert final.status == "failed", f"an isError tool result must end the task failed, got {final.status}"
    assert final.statusMessage, "a failed task SHOULD carry a statusMessage with diagnostics"
    result = await s.tasks.get_task_result(task.taskId, types.CallToolResult)
    assert result.isError is True, f"tasks/result must return the isError result, got {short(result)}"
    assert text_of(result) == f"failed after {ms} ms"
    assert_related(result, task.taskId, "tasks/result")


@check("protocol_error_job as a task ends failed, and tasks/result returns its JSON-RPC error (-32000)")
async def check_protocol_error(s: Session) -> None:
    task = await create_task(s, "protocol_error_job", {})
    final = (await poll_to_terminal(s, task.taskId))[-1]
    assert final.status == "failed", f"a tool that ends with a JSON-RPC error must end failed, got {final.status}"
    err = await expect_error(s.tasks.get_task_result(task.taskId, types.CallToolResult), -32000, "tasks/result of protocol_error_job")
    assert "protocol error" in err.error.message, f"error message {err.error.message!r}"


@check(f"tasks/list pages through 5 tasks with nextCursor (--page-size {PAGE_SIZE}): each task exactly once; a bad cursor is -32602")
async def check_list_paging(s: Session) -> None:
    ids = [(await create_task(s, "sleep", {"ms": 10})).taskId for _ in range(5)]
    assert len(set(ids)) == 5, f"task ids are not unique: {ids}"
    seen: list[str] = []
    sizes: list[int] = []
    cursor: str | None = None
    while True:
        assert len(sizes) < 20, "tasks/list did not end within 20 pages"
        page = await s.tasks.list_tasks(cursor)
        sizes.append(len(page.tasks))
        for t in page.tasks:
            assert t.ttl == TTL_MS and t.pollInterval == POLL_INTERVAL_MS, f"tasks/list entry {short(t)}"
            seen.append(t.taskId)
        if page.nextCursor is None:
            break
        assert page.nextCursor != cursor, "nextCursor did not advance"
        cursor = page.nextCursor
    assert all(n <= PAGE_SIZE for n in sizes), f"a page holds more than {PAGE_SIZE} tasks: {sizes}"
    assert len(sizes) > 1, f"expected several pages, got {sizes}"
    for tid in ids:
        assert seen.count(tid) == 1, f"task {tid} listed {seen.count(tid)} times (pages {sizes})"
    extra = [t for t in seen if t not in ids]
    assert not extra, f"tasks/list shows tasks this session did not create: {extra}"
    await expect_error(s.tasks.list_tasks("not-a-cursor"), INVALID_PARAMS, "tasks/list with an unknown cursor")


@check("tasks/cancel of a running task answers cancelled, the tool observes it, it stays cancelled; cancelling again and tasks/result are -32602")
async def check_cancel(s: Session) -> None:
    task = await create_task(s, "sleep", {"ms": 30_000})
    running = await s.tasks.get_task(task.taskId)
    assert running.status == "working", f"task should be working, got {running.status}"

    cancelled = await s.tasks.cancel_task(task.taskId)
    assert cancelled.taskId == task.taskId, "tasks/cancel answered for another task"
    assert cancelled.status == "cancelled", f"tasks/cancel must answer with the task cancelled, got {cancelled.status}"
    assert_task_shape(cancelled, "tasks/cancel result")

    expected = f"mcp-task-server: task {task.taskId} observed cancellation"
    await s.stderr.wait_for(lambda line: line.rstrip().endswith(expected), STDERR_WAIT_S, expected)

    after = await s.tasks.get_task(task.taskId)
    assert after.status == "cancelled", f"task must stay cancelled, got {after.status}"
    await expect_error(s.tasks.cancel_task(task.taskId), INVALID_PARAMS, "tasks/cancel of a cancelled task")
    await expect_error(
        s.tasks.get_task_result(task.taskId, types.CallToolResult), INVALID_PARAMS, "tasks/result of a cancelled task"
    )


@check("-32602 for tasks/get, tasks/result, tasks/cancel of an unknown id, and for tasks/cancel of a completed task")
async def check_unknown_and_terminal(s: Session) -> None:
    unknown = uuid.uuid4().hex
    await expect_error(s.tasks.get_task(unknown), INVALID_PARAMS, "tasks/get of an unknown id")
    await expect_error(s.tasks.get_task_result(unknown, types.CallToolResult), INVALID_PARAMS, "tasks/result of an unknown id")
    await expect_error(s.tasks.cancel_task(unknown), INVALID_PARAMS, "tasks/cancel of an unknown id")

    task = await create_task(s, "sleep", {"ms": 10})
    final = (await poll_to_terminal(s, task.taskId))[-1]
    assert final.status == "completed", f"sleep ended {final.status}"
    await expect_error(s.tasks.cancel_task(task.taskId), INVALID_PARAMS, "tasks/cancel of a completed task")
    still = await s.tasks.get_task(task.taskId)
    assert still.status == "completed", f"a refused cancel changed the task to {still.status}"


@check("plain (non-task) tools/call still works: echo, greet, and sleep (task optional) called without a task")
async def check_plain_calls(s: Session) -> None:
    r = await s.client.call_tool("echo", {"text": "hi from python"})
    assert not r.isError and text_of(r) == "hi from python", f"echo: {short(r)}"
    r = await s.client.call_tool("greet", {"name": "Py"})
    assert not r.isError and text_of(r) == "Hello, Py!", f"greet: {short(r)}"
    r = await s.client.call_tool("sleep", {"ms": 50})
    assert not r.isError and text_of(r) == "slept 50 ms", f"plain sleep: {short(r)}"
    assert related_task_id(r.meta) is None, f"a plain call's result names a task: {short(r)}"
    listing = await s.tasks.list_tasks()
    assert not listing.tasks, f"plain calls created tasks: {short(listing)}"


@check("-32601 for echo (taskSupport forbidden) called as a task, and for sleep_required (required) called without one")
async def check_task_support_errors(s: Session) -> None:
    await expect_error(s.tasks.call_tool_as_task("echo", {"text": "x"}, ttl=TTL_MS), METHOD_NOT_FOUND, "echo with params.task")
    await expect_error(s.client.call_tool("sleep_required", {"ms": 10}), METHOD_NOT_FOUND, "sleep_required without params.task")


@check("count as a task reports `step i of n` as its statusMessage while polled, then completes")
async def check_count_progress(s: Session) -> None:
    to, ms = 4, 250
    task = await create_task(s, "count", {"to": to, "ms": ms})
    statuses = await poll_to_terminal(s, task.taskId)
    assert statuses[-1].status == "completed", f"count ended {statuses[-1].status}"
    messages = [st.statusMessage for st in statuses[:-1] if st.statusMessage]
    assert messages, f"no statusMessage seen in {len(statuses)} polls over {to * ms} ms"
    for m in messages:
        assert re.fullmatch(rf"step [1-{to}] of {to}", m), f"unexpected statusMessage {m!r}"
    result = await s.tasks.get_task_result(task.taskId, types.CallToolResult)
    assert text_of(result) == f"counted to {to}"


@check("ask as a task: the client gets elicitation/create with the related-task _meta, answers, and tasks/result returns the answer", wants_env=True)
async def check_ask(env: Env) -> None:
    question = "What is 6 x 7?"
    elicitations: list[types.ElicitRequestParams] = []

    async def on_elicit(context, params):
        elicitations.append(params)
        return types.ElicitResult(action="accept", content={"answer": "42"})

    async with open_session(env, elicitation_callback=on_elicit) as s:
        task = await create_task(s, "ask", {"question": question})
        # As the spec asks of a requestor: call tasks/result at once; the server delivers the
        # elicitation while it blocks.
        result = await s.tasks.get_task_result(task.taskId, types.CallToolResult)
        assert len(elicitations) == 1, f"expected one elicitation/create, got {len(elicitations)}"
        params = elicitations[0]
        assert isinstance(params, types.ElicitRequestFormParams), f"elicitation is not a form: {short(params)}"
        assert params.message == question, f"elicitation message {params.message!r}"
        schema = params.requestedSchema
        assert schema.get("type") == "object" and schema.get("required") == ["answer"], f"requestedSchema {schema}"
        meta = params.model_dump(by_alias=True, exclude_none=True).get("_meta")
        assert related_task_id(meta) == task.taskId, f"elicitation/create _meta lacks the related task: {meta}"
        assert text_of(result) == "answer: 42" and not result.isError, f"tasks/result {short(result)}"
        assert_related(result, task.taskId, "tasks/result")
        final = await s.tasks.get_task(task.taskId)
        assert final.status == "completed", f"ask ended {final.status}"


IDENTITY_HEADER = "X-Forwarded-User"


async def raw_post(url: str, headers: list[tuple[str, str]], body: dict[str, Any]) -> httpx.Response:
    """One JSON-RPC POST outside the SDK (which cannot resume a session id it did not open),
    with the header fields a 2025-11-25 client sends plus `headers` (a list, so a field can be
    sent twice)."""
    fields = [
        ("Accept", "application/json, text/event-stream"),
        ("Content-Type", "application/json"),
        ("Mcp-Protocol-Version", PROTOCOL),
        *headers,
    ]
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as client:
        return await client.post(url, headers=fields, json=body)


def http_statuses(e: BaseException) -> list[int]:
    """The HTTP statuses of the httpx.HTTPStatusErrors among an exception's leaves."""
    return [leaf.response.status_code for leaf in leaf_errors(e) if isinstance(leaf, httpx.HTTPStatusError)]


@check(
    f"--identity-header {IDENTITY_HEADER}: an identity sees only its own tasks, its session is 404 to another identity, no identity (or two) is 401",
    wants_env=True,
    http_only="identities come from an HTTP header",
)
async def check_identities(env: Env) -> None:
    async with http_server(env.server, ["--identity-header", IDENTITY_HEADER]) as server:
        env.stderr = server.stderr
        env.notes.append(f"own server at {server.url} with --identity-header {IDENTITY_HEADER}")
        async with (
            open_session(env, http=server, headers={IDENTITY_HEADER: "alice"}) as alice,
            open_session(env, http=server, headers={IDENTITY_HEADER: "bob"}) as bob,
        ):
            assert alice.http_session_id and bob.http_session_id, "initialize over HTTP returned no Mcp-Session-Id"
            assert alice.http_session_id != bob.http_session_id, "alice and bob were given the same session"
            task = await create_task(alice, "sleep", {"ms": 60_000})
            assert task.status == "working", f"a new task must be working, got {task.status}"
            listed = await alice.tasks.list_tasks()
            assert [t.taskId for t in listed.tasks] == [task.taskId], f"alice's tasks/list: {short(listed)}"

            # Bob, in his own session, sees nothing of alice's and can do nothing to her task.
            theirs = await bob.tasks.list_tasks()
            assert not theirs.tasks, f"bob's tasks/list shows tasks he did not create: {short(theirs)}"
            await expect_error(bob.tasks.get_task(task.taskId), INVALID_PARAMS, "bob's tasks/get of alice's task")
            await expect_error(bob.tasks.cancel_task(task.taskId), INVALID_PARAMS, "bob's tasks/cancel of alice's task")

            # Bob naming alice's session id gets the 404 of an unknown session. The Python SDK's
            # streamable_http_client cannot be given a session id to resume, so this is a raw
            # POST; the same request with alice's header shows it is well formed.
            listing = {"jsonrpc": "2.0", "id": 1, "method": "tasks/list", "params": {}}
            as_alice = await raw_post(
                server.url, [(IDENTITY_HEADER, "alice"), ("Mcp-Session-Id", alice.http_session_id)], listing
            )
            assert as_alice.status_code == 200 and task.taskId in as_alice.text, (
                f"alice's own raw tasks/list in her session: HTTP {as_alice.status_code} {as_alice.text[:300]}"
            )
            hijack = await raw_post(
                server.url, [(IDENTITY_HEADER, "bob"), ("Mcp-Session-Id", alice.http_session_id)], listing
            )
            assert hijack.status_code == 404, (
                f"bob naming alice's session id: expected HTTP 404 (unknown session), got "
                f"{hijack.status_code} {hijack.text[:300]}"
            )
            assert task.taskId not in hijack.text, "the 404 answer to bob names alice's task"
            still = await alice.tasks.get_task(task.taskId)
            assert still.status == "working", f"after bob's attempts alice's task is {still.status}"

            # Without the header, and with it twice (ambiguous), nobody is named: 401.
            refused = Aside(len(SDK_LOG), "while a client without the identity header tried to connect")
            env.aside.append(refused)
            connected = False
            try:
                with anyio.fail_after(REQUEST_TIMEOUT_S):
                    async with open_session(env, http=server):
                        connected = True
            except Exception as e:
                statuses = http_statuses(e)
                if 401 not in statuses:
                    raise AssertionError(
                        f"a client without {IDENTITY_HEADER}: expected HTTP 401, got {statuses or main_error(e)!r}"
                    ) from None
            finally:
                refused.end = len(SDK_LOG)
            assert not connected, f"a client without {IDENTITY_HEADER} connected"
            initialize = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL,
                    "capabilities": {},
                    "clientInfo": {"name": "mcp-task-store-interop-py", "version": "0.1.0"},
                },
            }
            twice = await raw_post(server.url, [(IDENTITY_HEADER, "alice"), (IDENTITY_HEADER, "bob")], initialize)
            assert twice.status_code == 401, (
                f"initialize with {IDENTITY_HEADER} sent twice: expected HTTP 401, got {twice.status_code} {twice.text[:300]}"
            )

            cancelled = await alice.tasks.cancel_task(task.taskId)
            assert cancelled.status == "cancelled", f"alice's tasks/cancel answered {cancelled.status}"


# ---------------------------------------------------------------------------------------
# runner


@dataclass
class Tally:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    not_applicable: int = 0  # HTTP-only checks over stdio
    failures: list[str] = field(default_factory=list)


def leaf_errors(e: BaseException) -> list[BaseException]:
    """The leaves of anyio's (nested) exception groups (the SDK's transports and sessions run
    task groups of their own), cancellations left out."""
    if isinstance(e, BaseExceptionGroup):
        return [leaf for x in e.exceptions for leaf in leaf_errors(x)]
    if isinstance(e, anyio.get_cancelled_exc_class()):
        return []
    return [e]


def main_error(e: BaseException) -> BaseException | None:
    """The error to report: a check's own verdict (Skip, AssertionError, a JSON-RPC error, a
    timeout) before the transport noise a failed session leaves behind (e.g. the stdio
    reader's BrokenResourceError when a late answer arrives after the session closed)."""
    leaves = leaf_errors(e)
    for kind in (Skip, AssertionError, McpError, TimeoutError):
        for leaf in leaves:
            if isinstance(leaf, kind):
                return leaf
    return leaves[0] if leaves else None


def print_notes(env: Env) -> None:
    for text in env.notes:
        print(f"     note: {text}", flush=True)


async def run_check(env: Env, name: str, fn, wants_env: bool, tally: Tally, index: int) -> None:
    label = f"[{env.transport}] {index}. {name}"
    started = time.monotonic()
    verdict: BaseException | None = None  # what the check body itself raised
    env.stderr = None
    env.notes = []
    env.aside = []
    try:
        with anyio.fail_after(CHECK_TIMEOUT_S):
            if wants_env:
                await fn(env)
            else:
                async with open_session(env) as s:
                    try:
                        await fn(s)
                    except BaseException as own:
                        verdict = own
                        raise
    except BaseException as raw:
        own = main_error(verdict) if verdict is not None else None
        e = own or main_error(raw)
        if e is None or not isinstance(e, Exception):
            raise
    else:
        # What the SDK logged in the aside spans; the last one (the last session's closing) runs
        # on to the end of the check.
        why: dict[int, str] = {}
        for n, span in enumerate(env.aside):
            end = len(SDK_LOG) if span.end is None or n == len(env.aside) - 1 else span.end
            for i in range(span.start, end):
                why.setdefault(i, span.why)
        for i in sorted(why):
            env.notes.append(f"the SDK logged {why[i]} (not checked): {log_summary(SDK_LOG[i])}")
        tally.passed += 1
        print(f"PASS {label} ({time.monotonic() - started:.2f} s)", flush=True)
        print_notes(env)
        return
    if isinstance(e, Skip):
        tally.skipped += 1
        print(f"SKIP {label}: {e}", flush=True)
        return
    tally.failed += 1
    tally.failures.append(label)
    took = time.monotonic() - started
    if isinstance(e, TimeoutError) and own is None:
        reason = f"check did not finish within {CHECK_TIMEOUT_S} s"
    elif isinstance(e, AssertionError):
        reason = str(e) or "assertion failed"
    elif isinstance(e, McpError):
        reason = f"JSON-RPC error {e.error.code}: {e.error.message}"
    else:
        reason = f"{type(e).__name__}: {e}"
    print(f"FAIL {label} ({took:.2f} s)\n     {reason}", flush=True)
    print_notes(env)
    if not isinstance(e, (AssertionError, McpError, TimeoutError)):
        traceback.print_exception(e, file=sys.stdout)
    if env.stderr is not None and env.stderr.lines:
        print("     --- server stderr tail ---", flush=True)
        print("\n".join(f"     {line}" for line in env.stderr.tail().splitlines()), flush=True)


async def run_transport(server: str, transport: str, only: str | None, tally: Tally) -> None:
    selected = [(i, c) for i, c in enumerate(CHECKS, 1) if not only or only in c.name]
    if transport == "stdio":
        env = Env(server, "stdio")
        for i, c in selected:
            if c.http_only:
                tally.not_applicable += 1
                print(f"N/A  [stdio] {i}. {c.name}: HTTP only ({c.http_only}), not run over stdio", flush=True)
                continue
            await run_check(env, c.name, c.fn, c.wants_env, tally, i)
        return
    try:
        async with http_server(server) as http:
            print(f"# http: server at {http.url}", flush=True)
            env = Env(server, "http", http)
            for i, c in selected:
                await run_check(env, c.name, c.fn, c.wants_env, tally, i)
    except Exception as raw:
        e = main_error(raw) or raw
        tally.failed += 1
        tally.failures.append(f"[http] HTTP server: {e}")
        print(f"FAIL [http] HTTP server: {type(e).__name__}: {e}", flush=True)


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--transport", choices=["stdio", "http", "both"], default="both")
    ap.add_argument("--only", help="run only the checks whose name contains this text")
    args = ap.parse_args()
    server = os.environ.get("MCP_TASK_SERVER")
    if not server:
        print("interop_suite.py: MCP_TASK_SERVER must name the mcp-task-server binary", file=sys.stderr)
        return 2
    if not (os.path.isfile(server) and os.access(server, os.X_OK)):
        print(f"interop_suite.py: MCP_TASK_SERVER={server} is not an executable file", file=sys.stderr)
        return 2
    import importlib.metadata

    print(f"# mcp (Python SDK) {importlib.metadata.version('mcp')}, server {server} {' '.join(SERVER_FLAGS)}", flush=True)
    tally = Tally()
    started = time.monotonic()
    transports = ["stdio", "http"] if args.transport == "both" else [args.transport]
    for transport in transports:
        await run_transport(server, transport, args.only, tally)
    if tally.passed + tally.failed + tally.skipped == 0:
        print("no check selected" if not tally.not_applicable else "no selected check runs over this transport", flush=True)
        return 2
    print(f"# took {time.monotonic() - started:.1f} s", flush=True)
    for f in tally.failures:
        print(f"# failed: {f}", flush=True)
    na = f", {tally.not_applicable} HTTP-only not run over stdio" if tally.not_applicable else ""
    print(f"summary: {tally.passed} passed, {tally.failed} failed, {tally.skipped} skipped{na}", flush=True)
    # A skipped check is a check that did not run: the run fails, so nothing is ever
    # skipped silently by a CI that only looks at the exit code.
    return 1 if tally.failed or tally.skipped else 0


def on_sigterm(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_sigterm)
    sys.exit(anyio.run(main, backend="asyncio"))
