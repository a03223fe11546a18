#!/usr/bin/env node
// Throwaway SEP-2663 (tasks extension, protocol 2026-07-28) reference server used ONLY to
// self-test the harnesses in tests/conformance and tests/interop/sep2663 before the Rust
// server speaks SEP-2663. It is written from what those harnesses check, as an executable
// companion to tests/conformance/README.md; it is not the product and not tuned.
//
//   node mock-task-server.mjs                       # stdio, newline-delimited JSON-RPC
//   node mock-task-server.mjs --http 127.0.0.1:PORT # Streamable HTTP (stateless), POST /mcp
//
// Node >= 20, no dependencies.
import http from "node:http";
import readline from "node:readline";
import { randomBytes } from "node:crypto";

const EXT = "io.modelcontextprotocol/tasks";
const PV = "2026-07-28";
const META_PV = "io.modelcontextprotocol/protocolVersion";
const META_CAPS = "io.modelcontextprotocol/clientCapabilities";
const POLL_MS = 100;
const TTL_MS = 3_600_000;

const rpcError = (code, message, data) => Object.assign(new Error(message), { rpc: { code, message, ...(data === undefined ? {} : { data }) } });
const missingCap = () => rpcError(-32021, "Missing required client capability: io.modelcontextprotocol/tasks",
  { requiredCapabilities: { extensions: { [EXT]: {} } } });
const text = (t, isError) => ({ resultType: "complete", content: [{ type: "text", text: t }], ...(isError ? { isError: true } : {}) });
const sleep = (ms, signal) => new Promise((resolve) => {
  const t = setTimeout(resolve, ms);
  signal?.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
});
const elicit = (message, properties, required) => ({
  method: "elicitation/create",
  params: { mode: "form", message, requestedSchema: { type: "object", properties, ...(required ? { required } : {}) } },
});

// ---------------------------------------------------------------- task store
const tasks = new Map();
let keySeq = 0;
const now = () => new Date().toISOString();

function newTask() {
  const t = {
    taskId: randomBytes(16).toString("hex"), status: "working", createdAt: now(), lastUpdatedAt: now(),
    ttlMs: TTL_MS, pollIntervalMs: POLL_MS, abort: new AbortController(), pending: new Map(), waiters: new Map(),
  };
  tasks.set(t.taskId, t);
  return t;
}
function envelope(t) {
  const o = { taskId: t.taskId, status: t.status, createdAt: t.createdAt, lastUpdatedAt: t.lastUpdatedAt, ttlMs: t.ttlMs, pollIntervalMs: t.pollIntervalMs };
  if (t.statusMessage) o.statusMessage = t.statusMessage;
  return o;
}
function detailed(t) {
  const o = envelope(t);
  if (t.status === "input_required") o.inputRequests = Object.fromEntries(t.pending);
  if (t.status === "completed") o.result = t.result;
  if (t.status === "failed") o.error = t.error;
  return o;
}
function settle(t, patch) {
  if (["completed", "failed", "cancelled"].includes(t.status)) return;
  Object.assign(t, patch, { lastUpdatedAt: now() });
}
// Ask for input from inside a running task: parks the task in input_required until answered.
function ask(t, request) {
  const key = `input-${++keySeq}`;
  t.pending.set(key, request);
  settle(t, { status: "input_required" });
  return new Promise((resolve, reject) => {
    t.waiters.set(key, resolve);
    t.abort.signal.addEventListener("abort", () => reject(new Error("cancelled")), { once: true });
  });
}
function answer(t, responses) {
  for (const [key, value] of Object.entries(responses ?? {})) {
    if (!t.pending.has(key)) continue; // not outstanding: ignore silently
    t.pending.delete(key);
    const w = t.waiters.get(key); t.waiters.delete(key);
    if (t.pending.size === 0 && t.status === "input_required") settle(t, { status: "working" });
    w?.(value);
  }
}
function spawnTask(run) {
  const t = newTask(); // stored before we answer: tasks/get works immediately
  (async () => {
    try {
      const result = await run(t, t.abort.signal);
      if (t.abort.signal.aborted) return;
      settle(t, { status: "completed", result });
    } catch (e) {
      if (t.abort.signal.aborted) return;
      const error = e.rpc ?? { code: -32603, message: String(e.message ?? e) };
      settle(t, { status: "failed", error, statusMessage: error.message });
    }
  })();
  return { resultType: "task", ...envelope(t) };
}

// ---------------------------------------------------------------- tools
// task: "forbidden" | "optional" | "required"
const tools = {
  greet: { task: "forbidden", props: { name: { type: "string" } }, sync: (a) => text(`Hello, ${a.name}!`) },
  echo: { task: "forbidden", props: { text: { type: "string" } }, sync: (a) => text(String(a.text ?? "")) },
  slow_compute: {
    task: "optional", props: { seconds: { type: "number" }, label: { type: "string" } },
    sync: async (a) => { await sleep((a.seconds ?? 0) * 1000); return text(`computed ${a.label ?? ""}`); },
    run: async (t, signal, a) => { await sleep((a.seconds ?? 0) * 1000, signal); return text(`computed ${a.label ?? ""}`); },
  },
  sleep: {
    task: "optional", props: { ms: { type: "integer" } },
    sync: async (a) => { await sleep(a.ms ?? 0); return text(`slept ${a.ms ?? 0} ms`); },
    run: async (t, signal, a) => { await sleep(a.ms ?? 0, signal); return text(`slept ${a.ms ?? 0} ms`); },
  },
  sleep_required: { task: "required", props: { ms: { type: "integer" } }, run: async (t, signal, a) => { await sleep(a.ms ?? 0, signal); return text(`slept ${a.ms ?? 0} ms`); } },
  fail: {
    task: "optional", props: { ms: { type: "integer" } },
    sync: async (a) => { await sleep(a.ms ?? 0); return text(`failed after ${a.ms ?? 0} ms`, true); },
    run: async (t, signal, a) => { await sleep(a.ms ?? 0, signal); return text(`failed after ${a.ms ?? 0} ms`, true); },
  },
  failing_job: { task: "required", props: {}, run: async (t, signal) => { await sleep(1000, signal); return text("failing_job: simulated tool failure", true); } },
  protocol_error_job: { task: "optional", props: {}, run: async (t, signal) => { await sleep(200, signal); throw rpcError(-32603, "protocol_error_job: simulated internal error"); } },
  confirm_delete: {
    task: "optional", props: { filename: { type: "string" } },
    run: async (t, signal, a) => {
      const r = await ask(t, elicit(`Delete ${a.filename}?`, { confirm: { type: "boolean" } }, ["confirm"]));
      return text(r?.action === "accept" && r.content?.confirm ? `deleted ${a.filename}` : `kept ${a.filename}`);
    },
  },
  multi_input: {
    task: "optional", props: {},
    run: async (t) => {
      const [x, y] = await Promise.all([
        ask(t, elicit("First input", { name: { type: "string" }, confirm: { type: "boolean" } })),
        ask(t, elicit("Second input", { name: { type: "string" }, confirm: { type: "boolean" } })),
      ]);
      return text(`got ${x?.content?.name} and ${y?.content?.name}`);
    },
  },
  ask: {
    task: "required", props: { question: { type: "string" } },
    run: async (t, signal, a) => {
      const r = await ask(t, elicit(a.question ?? "?", { answer: { type: "string" } }, ["answer"]));
      return text(`answer: ${r?.content?.answer}`);
    },
  },
  test_tool_with_task: { task: "required", props: {}, mrtr: true },
};

async function toolsCall(params, declared) {
  const tool = tools[params?.name];
  if (!tool) throw rpcError(-32602, `Unknown tool: ${params?.name}`);
  const args = params.arguments ?? {};
  if (tool.task === "required" && !declared) throw missingCap();
  if (tool.mrtr) {
    const resp = params.inputResponses?.user_name;
    if (!resp) {
      return {
        resultType: "input_required",
        inputRequests: { user_name: elicit("What is your name?", { name: { type: "string" } }, ["name"]) },
        requestState: "round-1",
      };
    }
    const name = resp?.content?.name ?? "unknown";
    return spawnTask(async (t, signal) => { await sleep(300, signal); return text(`Hello, ${name}! (from task)`); });
  }
  if (tool.task !== "forbidden" && declared) return spawnTask((t, signal) => tool.run(t, signal, args));
  if (tool.sync) return await tool.sync(args);
  throw missingCap();
}

function lookup(params) {
  const t = tasks.get(params?.taskId);
  if (!t) throw rpcError(-32602, `Task not found: ${params?.taskId}`);
  return t;
}

async function dispatch(method, params) {
  const caps = params?._meta?.[META_CAPS];
  const declared = !!caps?.extensions && Object.hasOwn(caps.extensions, EXT);
  switch (method) {
    case "server/discover":
      return {
        resultType: "complete", supportedVersions: [PV], ttlMs: 0, cacheScope: "public",
        capabilities: { tools: {}, extensions: { [EXT]: {} } },
        _meta: { "io.modelcontextprotocol/serverInfo": { name: "mock-task-server", version: "0.0.0" } },
      };
    case "tools/list":
      return {
        resultType: "complete", ttlMs: 0, cacheScope: "public",
        tools: Object.entries(tools).map(([name, t]) => ({ name, inputSchema: { type: "object", properties: t.props } })),
      };
    case "tools/call": return toolsCall(params, declared);
    case "tasks/get": { if (!declared) throw missingCap(); return { resultType: "complete", ...detailed(lookup(params)) }; }
    case "tasks/update": { if (!declared) throw missingCap(); answer(lookup(params), params.inputResponses); return { resultType: "complete" }; }
    case "tasks/cancel": {
      if (!declared) throw missingCap();
      const t = lookup(params);
      if (!["completed", "failed", "cancelled"].includes(t.status)) { settle(t, { status: "cancelled" }); t.abort.abort(); }
      return { resultType: "complete" };
    }
    case "ping": return { resultType: "complete" };
    default: throw rpcError(-32601, `Method not found: ${method}`);
  }
}

async function handle(msg) {
  if (!msg || typeof msg !== "object" || msg.id === undefined || typeof msg.method !== "string") return undefined; // notifications/responses: ignore
  try {
    return { jsonrpc: "2.0", id: msg.id, result: await dispatch(msg.method, msg.params) };
  } catch (e) {
    return { jsonrpc: "2.0", id: msg.id, error: e.rpc ?? { code: -32603, message: String(e.message ?? e) } };
  }
}

// ---------------------------------------------------------------- transports
const NAME_OF = { "tools/call": "name", "prompts/get": "name", "resources/read": "uri", "tasks/get": "taskId", "tasks/update": "taskId", "tasks/cancel": "taskId" };
const KNOWN = new Set(["server/discover", "tools/list", "tools/call", "tasks/get", "tasks/update", "tasks/cancel", "ping"]);

function headerCheck(req, msg) {
  const bad = (m) => rpcError(-32020, `Header mismatch: ${m}`);
  if (!KNOWN.has(msg.method)) return undefined; // unknown methods: -32601 from dispatch, never -32020
  const pvHeader = req.headers["mcp-protocol-version"];
  if (pvHeader !== undefined && msg.params?._meta?.[META_PV] !== undefined && pvHeader !== msg.params._meta[META_PV]) return bad("MCP-Protocol-Version");
  const m = req.headers["mcp-method"];
  if (m === undefined || m.trim() !== msg.method) return bad("Mcp-Method");
  const field = NAME_OF[msg.method];
  if (field) {
    const n = req.headers["mcp-name"];
    if (n === undefined || n.trim() !== String(msg.params?.[field])) return bad("Mcp-Name");
  }
  return undefined;
}

function serveHttp(addr) {
  const i = addr.lastIndexOf(":");
  const host = addr.slice(0, i), port = Number(addr.slice(i + 1));
  const server = http.createServer((req, res) => {
    const send = (status, body) => { res.writeHead(status, { "content-type": "application/json" }); res.end(JSON.stringify(body)); };
    if (req.url !== "/mcp") return send(404, { jsonrpc: "2.0", id: null, error: { code: -32600, message: "not found" } });
    if (req.method !== "POST") { res.writeHead(405, { allow: "POST" }); return res.end(); }
    let body = "";
    req.setEncoding("utf8");
    req.on("data", (c) => { body += c; });
    req.on("end", async () => {
      let msg;
      try { msg = JSON.parse(body); } catch { return send(400, { jsonrpc: "2.0", id: null, error: { code: -32700, message: "Parse error" } }); }
      const mismatch = headerCheck(req, msg);
      if (mismatch) return send(400, { jsonrpc: "2.0", id: msg.id ?? null, error: mismatch.rpc });
      const reply = await handle(msg);
      if (reply === undefined) { res.writeHead(202); return res.end(); }
      const status = reply.error && [-32020, -32021, -32022].includes(reply.error.code) ? 400 : 200;
      send(status, reply);
    });
  });
  server.listen(port, host, () => process.stderr.write(`mock-task-server: listening on http://${addr}/mcp\n`));
}

function serveStdio() {
  const rl = readline.createInterface({ input: process.stdin });
  rl.on("line", async (line) => {
    if (!line.trim()) return;
    let msg;
    try { msg = JSON.parse(line); } catch { process.stdout.write(JSON.stringify({ jsonrpc: "2.0", id: null, error: { code: -32700, message: "Parse error" } }) + "\n"); return; }
    const reply = await handle(msg);
    if (reply) process.stdout.write(JSON.stringify(reply) + "\n");
  });
  rl.on("close", () => process.exit(0));
}

const argv = process.argv.slice(2);
if (argv[0] === "--http" && argv[1]) serveHttp(argv[1]);
else if (argv.length === 0) serveStdio();
else { process.stderr.write("usage: mock-task-server.mjs [--http HOST:PORT]\n"); process.exit(2); }
