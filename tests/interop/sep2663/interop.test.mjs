// SEP-2663 (tasks extension, protocol 2026-07-28) interop test: drives `mcp-task-server` over stdio
// with the official requester library @modelcontextprotocol/ext-tasks on top of the official
// TypeScript client @modelcontextprotocol/client (both pinned in package-lock.json).
//
// Server under test: $MCP_TASK_SERVER (spawned with no arguments), default
// ../../../target/debug/mcp-task-server relative to this file.
//
// Every exchange goes through the library's own API (Client.connect with a pinned 2026-07-28 era,
// createTaskSessionFromClient, session.callTool, execution.settle/cancel, session.task(id)).
// The only hand-written wire code is the "raw dispatch" coordinator that ext-tasks requires the
// host to supply for 2026-07-28 task traffic (tools/call, tasks/*): it sends the request the
// library built, on the same stdio transport, under its own id namespace, and hands the raw
// response back. It also records every raw exchange so the tests can assert on the wire.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import path from "node:path";
import fs from "node:fs";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";
import { createTaskSessionFromClient } from "@modelcontextprotocol/ext-tasks/client";

const here = path.dirname(fileURLToPath(import.meta.url));
const SERVER = process.env.MCP_TASK_SERVER ?? path.resolve(here, "../../../target/debug/mcp-task-server");
const PROTOCOL_VERSION = "2026-07-28";
const EXT = "io.modelcontextprotocol/tasks";
const CLIENT_INFO = { name: "mcp-task-store-sep2663-interop", version: "0.0.0" };
// Capabilities the client declares. ext-tasks adds extensions[EXT] = {} to every tools/call and tasks/* request.
const CLIENT_CAPABILITIES = { elicitation: { form: {} } };
const VERBOSE = process.env.INTEROP_VERBOSE === "1";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
async function until(what, fn, timeoutMs = 10_000, everyMs = 50) {
  const t0 = Date.now();
  let last;
  while (Date.now() - t0 < timeoutMs) {
    last = await fn();
    if (last.done) return last.value;
    await sleep(everyMs);
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last observation: ${JSON.stringify(last?.value)}`);
}

// ------------------------------------------------------------------ raw dispatch coordinator
// ext-tasks' contract (dist/client/sdk-client-adapter.js, port.d.ts):
//   rawDispatch(request: {method, params}, {signal?, context?}) -> Promise<{kind:"result", result} | {kind:"error", error}>
// "rawDispatch must use the host coordinator that owns request IDs and response matching."
function createRawCoordinator(transport, wire) {
  let seq = 0;
  const pending = new Map();
  const sdkOnMessage = transport.onmessage; // installed by Client.connect()
  if (typeof sdkOnMessage !== "function") throw new Error("transport.onmessage not installed; connect the Client first");
  transport.onmessage = (message, extra) => {
    if (message && typeof message === "object" && !("method" in message) && pending.has(message.id)) {
      const p = pending.get(message.id);
      pending.delete(message.id);
      wire.push({ dir: "<-", id: message.id, method: p.method, message });
      if (VERBOSE) console.error(`<- ${JSON.stringify(message)}`);
      p.resolve(message.error !== undefined ? { kind: "error", error: message.error } : { kind: "result", result: message.result });
      return;
    }
    sdkOnMessage.call(transport, message, extra);
  };
  const prevOnClose = transport.onclose;
  transport.onclose = (...args) => {
    for (const p of pending.values()) p.reject(new Error("transport closed while a raw request was pending"));
    pending.clear();
    prevOnClose?.(...args);
  };
  return async function rawDispatch(request, options = {}) {
    const id = `ext-tasks-raw-${++seq}`; // string ids: disjoint from the SDK's numeric ids
    const message = { jsonrpc: "2.0", id, method: request.method, ...(request.params === undefined ? {} : { params: request.params }) };
    wire.push({ dir: "->", id, method: request.method, message, headers: options.context?.headers });
    if (VERBOSE) console.error(`-> ${JSON.stringify(message)}`);
    const timeoutMs = options.context?.requestTimeoutMs ?? 30_000;
    return await new Promise((resolve, reject) => {
      const timer = setTimeout(() => { pending.delete(id); reject(new Error(`raw ${request.method} timed out after ${timeoutMs} ms`)); }, timeoutMs);
      const done = (f) => (v) => { clearTimeout(timer); f(v); };
      pending.set(id, { method: request.method, resolve: done(resolve), reject: done(reject) });
      options.signal?.addEventListener("abort", () => { if (pending.delete(id)) done(reject)(options.signal.reason ?? new Error("aborted")); }, { once: true });
      transport.send(message).catch((e) => { if (pending.delete(id)) done(reject)(e); });
    });
  };
}

// ------------------------------------------------------------------ connection per test
const inputLog = []; // every onInputRequest call: {request, context}
let answerFor = () => ({ action: "decline" });

async function connect() {
  if (!fs.existsSync(SERVER)) throw new Error(`server binary ${SERVER} not found (build it, or set MCP_TASK_SERVER)`);
  const wire = [];
  const stderr = [];
  const transport = new StdioClientTransport({ command: SERVER, args: [], stderr: "pipe" });
  transport.stderr?.on("data", (d) => { stderr.push(String(d)); if (VERBOSE) process.stderr.write(`[server] ${d}`); });
  const client = new Client(CLIENT_INFO, {
    // The client's own requests (subscriptions/listen) declare the extension too: a task
    // subscription needs it.
    capabilities: { ...CLIENT_CAPABILITIES, extensions: { [EXT]: {} } },
    versionNegotiation: { mode: { pin: PROTOCOL_VERSION }, probe: { timeoutMs: 10_000 } },
  });
  try {
    await client.connect(transport);
  } catch (e) {
    await transport.close().catch(() => {});
    throw new Error(
      `could not open a ${PROTOCOL_VERSION} session with ${SERVER}: ${e?.message ?? e}\n` +
      `  (the client pins protocol ${PROTOCOL_VERSION}: it sends server/discover first and needs ` +
      `supportedVersions to contain "${PROTOCOL_VERSION}"; a 2025-11-25-only server fails here)` +
      (stderr.length ? `\n  server stderr:\n${stderr.join("").replace(/^/gm, "    | ")}` : ""),
      { cause: e });
  }
  assert.equal(client.getProtocolEra(), "modern", "negotiated era");
  assert.equal(client.getNegotiatedProtocolVersion(), PROTOCOL_VERSION);
  const ext = client.getServerCapabilities()?.extensions?.[EXT];
  assert.deepEqual(ext, {}, `server/discover must advertise capabilities.extensions["${EXT}"] = {} (got ${JSON.stringify(client.getServerCapabilities())})`);

  const rawDispatch = createRawCoordinator(transport, wire);
  const errors = [];
  const session = createTaskSessionFromClient(client, {
    endpointId: "mcp-task-server-stdio",
    rawDispatch,
    v2RequestFraming: { protocolVersion: PROTOCOL_VERSION, clientInfo: CLIENT_INFO, clientCapabilities: CLIENT_CAPABILITIES },
    onInputRequest: async (request, context) => {
      inputLog.push({ request, context });
      return answerFor(request, context);
    },
    onError: (e) => { errors.push(e); if (VERBOSE) console.error("ext-tasks background error:", e); },
  });
  assert.equal(session.capabilities?.execution ?? true, true);
  return {
    client, session, wire, errors, stderr,
    async close() {
      await session.close().catch(() => {});
      await client.close().catch(() => {});
    },
  };
}

let conn;
before(async () => { conn = await connect(); });
after(async () => { await conn?.close(); });

const sent = (method, pred = () => true) => conn.wire.filter((w) => w.dir === "->" && w.method === method && pred(w.message));
const received = (method, pred = () => true) => conn.wire.filter((w) => w.dir === "<-" && w.method === method && pred(w.message));

function assertFramed(message) {
  const meta = message.params?._meta ?? {};
  assert.equal(meta["io.modelcontextprotocol/protocolVersion"], PROTOCOL_VERSION, `${message.method}: _meta protocolVersion`);
  assert.deepEqual(meta["io.modelcontextprotocol/clientCapabilities"]?.extensions?.[EXT], {}, `${message.method}: tasks extension declared per request`);
}

async function snapshotUntil(taskId, pred, what, timeoutMs = 10_000) {
  return until(what, async () => {
    const view = await conn.session.task(taskId).snapshot();
    return { done: pred(view), value: { status: view.status, raw: view.raw } };
  }, timeoutMs, 100).then(() => conn.session.task(taskId).snapshot());
}

// ------------------------------------------------------------------ tests
test("input_required: ask{question} creates a task, polls to input_required, answers via tasks/update, completes", async () => {
  const question = "What is six times seven?";
  answerFor = (request) => {
    assert.equal(request.kind, "elicitation");
    return { action: "accept", content: { answer: "42" } };
  };
  const before = inputLog.length;
  const execution = await conn.session.callTool("ask", { question });
  assert.ok(execution.handle?.taskId, `ask must be answered with a CreateTaskResult (resultType "task"); got an immediate result`);
  const taskId = execution.handle.taskId;

  const events = [];
  const { outcome } = await execution.settle({ onEvent: (e) => { events.push(e); } });
  assert.equal(outcome.status, "completed", `outcome: ${JSON.stringify(outcome, (k, v) => (v instanceof Error ? v.message : v))}`);
  const textOut = outcome.result?.content?.map((c) => c.text).join(" ") ?? "";
  assert.match(textOut, /42/, `completed result should carry the answer; got ${JSON.stringify(outcome.result)}`);

  // The library asked the application exactly once, through the task-update path.
  const asked = inputLog.slice(before);
  assert.equal(asked.length, 1, `onInputRequest calls: ${asked.length}`);
  assert.equal(asked[0].context.scope, "task");
  assert.equal(asked[0].context.delivery, "task-update");
  assert.equal(asked[0].context.taskId, taskId);
  assert.match(JSON.stringify(asked[0].request.params), /six times seven/);
  const inputKey = asked[0].context.inputId;

  // Wire: tools/call framed with the extension, CreateTaskResult flat, a tasks/get showing
  // input_required + inputRequests[key], a tasks/update answering that key, a completed tasks/get.
  const call = sent("tools/call", (m) => m.params?.name === "ask").at(-1);
  assertFramed(call.message);
  const created = conn.wire.find((w) => w.dir === "<-" && w.id === call.id).message.result;
  assert.equal(created.resultType, "task");
  assert.equal(created.taskId, taskId);
  const ir = received("tasks/get", (m) => m.result?.taskId === taskId && m.result?.status === "input_required");
  assert.ok(ir.length >= 1, "a tasks/get response with status input_required was observed");
  assert.ok(ir[0].message.result.inputRequests?.[inputKey], `inputRequests carries key ${inputKey}`);
  assert.equal(ir[0].message.result.inputRequests[inputKey].method, "elicitation/create");
  const upd = sent("tasks/update", (m) => m.params?.taskId === taskId);
  assert.equal(upd.length, 1, "exactly one tasks/update");
  assertFramed(upd[0].message);
  assert.deepEqual(upd[0].message.params.inputResponses, { [inputKey]: { action: "accept", content: { answer: "42" } } });
  assert.equal(upd[0].headers?.["Mcp-Name"], taskId, "library routes tasks/* with Mcp-Name = taskId");
  const updAck = conn.wire.find((w) => w.dir === "<-" && w.id === upd[0].id).message;
  assert.deepEqual(updAck.result, { resultType: "complete" }, "tasks/update ack is an empty complete result");
  assert.ok(received("tasks/get", (m) => m.result?.taskId === taskId && m.result?.status === "completed").length >= 1);
  assert.ok(events.some((e) => e.type === "task" && e.task.status === "input_required"),
    `execution events include an input_required snapshot: ${events.map((e) => e.type === "task" ? e.task.status : e.type).join(",")}`);
});

test("input_required: confirm_delete{filename} elicitation answered through tasks/update, completes", async () => {
  answerFor = () => ({ action: "accept", content: { confirm: true } });
  const before = inputLog.length;
  const execution = await conn.session.callTool("confirm_delete", { filename: "interop.txt" });
  assert.ok(execution.handle?.taskId, "confirm_delete must create a task");
  const { outcome } = await execution.settle();
  assert.equal(outcome.status, "completed", JSON.stringify(outcome));
  assert.ok(Array.isArray(outcome.result?.content), "completed result inlined with content[]");
  assert.equal(inputLog.length - before, 1, "one input request answered");
  const upd = sent("tasks/update", (m) => m.params?.taskId === execution.handle.taskId);
  assert.equal(upd.length, 1);
});

test("cancel: sleep{ms:600000} is cancelled through tasks/cancel and settles to cancelled", async () => {
  const execution = await conn.session.callTool("sleep", { ms: 600_000 });
  assert.ok(execution.handle?.taskId, "sleep{ms:600000} must create a task");
  const taskId = execution.handle.taskId;
  const first = await conn.session.task(taskId).snapshot();
  assert.equal(first.status, "working");
  assert.equal(typeof first.createdAt, "string");
  assert.ok(first.ttl === null || Number.isInteger(first.ttl), `ttlMs integer or null (got ${first.ttl})`);

  await execution.cancel();
  const cancel = sent("tasks/cancel", (m) => m.params?.taskId === taskId);
  assert.equal(cancel.length, 1, "one tasks/cancel sent");
  assertFramed(cancel[0].message);
  assert.deepEqual(conn.wire.find((w) => w.dir === "<-" && w.id === cancel[0].id).message.result, { resultType: "complete" });
  const { outcome } = await execution.settle();
  assert.equal(outcome.status, "cancelled", "local outcome after the cancel ack");
  // Cancellation is eventually consistent: poll the server until it reports cancelled.
  const view = await snapshotUntil(taskId, (v) => v.status !== "working", "task to leave working after tasks/cancel");
  assert.equal(view.status, "cancelled", `server-side status after cancel: ${view.status}`);
});

test("failure semantics: fail{ms} (tool error, isError) ends completed with the result inline", async () => {
  const execution = await conn.session.callTool("fail", { ms: 200 });
  assert.ok(execution.handle?.taskId, "fail{ms} must create a task");
  const { outcome } = await execution.settle();
  assert.equal(outcome.status, "completed", `a tool error is NOT a failed task under SEP-2663; outcome=${JSON.stringify(outcome, (k, v) => (v instanceof Error ? v.message : v))}`);
  assert.equal(outcome.result?.isError, true, "result.isError");
  const view = await conn.session.task(execution.handle.taskId).snapshot();
  assert.equal(view.status, "completed");
  assert.equal(view.raw.result?.isError, true, "tasks/get inlines result with isError:true");
  assert.equal(view.raw.error, undefined, "no error on a completed task");
});

test("failure semantics: protocol_error_job (JSON-RPC error) ends failed with the error inline", async () => {
  const execution = await conn.session.callTool("protocol_error_job", {});
  assert.ok(execution.handle?.taskId, "protocol_error_job must create a task");
  const { outcome } = await execution.settle();
  assert.equal(outcome.status, "failed", JSON.stringify(outcome));
  assert.equal(typeof outcome.error?.code, "number", "failed outcome carries the JSON-RPC error code");
  const view = await conn.session.task(execution.handle.taskId).snapshot();
  assert.equal(view.status, "failed");
  assert.equal(typeof view.raw.error?.code, "number", "tasks/get inlines error.code");
  assert.equal(typeof view.raw.error?.message, "string", "tasks/get inlines error.message");
  assert.equal(view.raw.result, undefined, "no result on a failed task");
});

// subscriptions/listen (2026-07-28) with notifications.taskIds: the official client's listen()
// opens the subscription; the server acknowledges the task, pushes its full state
// (notifications/tasks, which ext-tasks parses and applies to the execution), and ends the
// subscription gracefully (its result) once the task ended.
function recordInbound() {
  const transport = conn.client.transport;
  const inbound = [];
  const onmessage = transport.onmessage;
  transport.onmessage = (message, extra) => { inbound.push(message); onmessage.call(transport, message, extra); };
  return { inbound, restore: () => { transport.onmessage = onmessage; } };
}

const SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId";

test("listen: task states are pushed on the official client's subscription until the task ends", async () => {
  const execution = await conn.session.callTool("sleep", { ms: 600_000 });
  const taskId = execution.handle?.taskId;
  assert.ok(taskId, "sleep{ms:600000} must create a task");
  const { inbound, restore } = recordInbound();
  try {
    const subscription = await conn.client.listen({ taskIds: [taskId] });
    const ack = inbound.find((m) => m.method === "notifications/subscriptions/acknowledged");
    assert.ok(ack, "the acknowledgement came first");
    const listenId = ack.params._meta[SUBSCRIPTION_ID];
    assert.match(String(listenId), /^listen:/, "subscriptionId is the listen request's id");
    assert.deepEqual(ack.params.notifications, { taskIds: [taskId] }, "the task is agreed");
    const pushed = () => inbound.filter((m) => m.method === "notifications/tasks" && m.params?._meta?.[SUBSCRIPTION_ID] === listenId);
    await until("the task's current state", async () => ({ done: pushed().length >= 1, value: pushed() }));
    assert.equal(pushed()[0].params.taskId, taskId);
    assert.equal(pushed()[0].params.status, "working");

    await execution.cancel();
    const how = await Promise.race([subscription.closed, sleep(10_000).then(() => "timed out")]);
    assert.equal(how, "graceful", "the server ends the subscription with its result once the task ended");
    const last = pushed().at(-1);
    assert.equal(last.params.status, "cancelled", `last state pushed: ${JSON.stringify(last)}`);
    const result = inbound.find((m) => m.id === listenId && "result" in m);
    assert.deepEqual(result.result, { resultType: "complete", _meta: { [SUBSCRIPTION_ID]: listenId } });
  } finally {
    restore();
  }
});

test("listen: a subscription the client closes gets nothing more", async () => {
  const execution = await conn.session.callTool("sleep", { ms: 600_000 });
  const taskId = execution.handle.taskId;
  const { inbound, restore } = recordInbound();
  try {
    const first = await conn.client.listen({ taskIds: [taskId] });
    const firstId = inbound.find((m) => m.method === "notifications/subscriptions/acknowledged").params._meta[SUBSCRIPTION_ID];
    await first.close(); // notifications/cancelled for the listen id
    assert.equal(await first.closed, "local");
    await execution.cancel();
    await snapshotUntil(taskId, (v) => v.status === "cancelled", "the task to be cancelled");
    // A new subscription to the ended task: its state, then its result.
    const second = await conn.client.listen({ taskIds: [taskId] });
    assert.equal(await Promise.race([second.closed, sleep(10_000).then(() => "timed out")]), "graceful");
    const afterClose = inbound.filter((m) => m.params?._meta?.[SUBSCRIPTION_ID] === firstId && m.params?.status === "cancelled");
    assert.deepEqual(afterClose, [], "nothing for the closed subscription");
  } finally {
    restore();
  }
});

test("no background errors reported by ext-tasks", () => {
  assert.deepEqual(conn.errors.map((e) => String(e?.message ?? e)), []);
});
