// Interop suite: drives an MCP server over stdio with the official TypeScript SDK client
// (@modelcontextprotocol/sdk 1.32.x) and its experimental tasks API (MCP 2025-11-25).
//
// Server under test: MCP_SERVER_CMD = JSON argv array, e.g.
//   MCP_SERVER_CMD='["/work/main/target/debug/mcp-task-server","--page-size","4"]'
// Unset: the SDK-based reference server (node reference-server.mjs).
//
// Run: node --test --test-reporter=spec interop.test.mjs   (or ./run.sh)

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { setTimeout as delay } from 'node:timers/promises';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { spawn } from 'node:child_process';
import { createServer } from 'node:net';
import {
    CallToolResultSchema,
    ElicitRequestSchema,
    ErrorCode,
    McpError,
    RELATED_TASK_META_KEY,
    ResultSchema
} from '@modelcontextprotocol/sdk/types.js';

const HERE = dirname(fileURLToPath(import.meta.url));
const USING_REFERENCE = !process.env.MCP_SERVER_CMD;
const SERVER_CMD = parseServerCmd();
const VERBOSE = !!process.env.INTEROP_VERBOSE;
// MCP_SERVER_TRANSPORT=http: launch the server with `--http 127.0.0.1:<free port>` and talk
// Streamable HTTP to http://127.0.0.1:<port>/mcp instead of stdio.
const TRANSPORT = process.env.MCP_SERVER_TRANSPORT ?? 'stdio';
if (!['stdio', 'http'].includes(TRANSPORT)) throw new Error(`MCP_SERVER_TRANSPORT must be stdio or http, not ${TRANSPORT}`);
if (TRANSPORT === 'http' && USING_REFERENCE) throw new Error('MCP_SERVER_TRANSPORT=http needs MCP_SERVER_CMD (the reference server is stdio only)');
const REQUEST_TIMEOUT_MS = 15_000; // per JSON-RPC request
const TEST_TIMEOUT_MS = 30_000; // per test
const TTL_MS = 60_000; // requested task ttl

function parseServerCmd() {
    const raw = process.env.MCP_SERVER_CMD;
    if (!raw) return [process.execPath, join(HERE, 'reference-server.mjs')];
    let argv;
    try {
        argv = JSON.parse(raw);
    } catch (err) {
        throw new Error(`MCP_SERVER_CMD must be a JSON array of strings: ${err.message}`);
    }
    if (!Array.isArray(argv) || argv.length === 0 || !argv.every(a => typeof a === 'string')) {
        throw new Error('MCP_SERVER_CMD must be a non-empty JSON array of strings');
    }
    return argv;
}

// ---------------------------------------------------------------------------------------
// helpers

/** Splits the child's stderr into lines and lets tests wait for a line (bounded). */
class StderrLines {
    constructor(stream) {
        this.lines = [];
        this.waiters = new Set();
        let buf = '';
        stream.setEncoding('utf8');
        stream.on('data', chunk => {
            buf += chunk;
            let i;
            while ((i = buf.indexOf('\n')) >= 0) {
                this.#push(buf.slice(0, i).replace(/\r$/, ''));
                buf = buf.slice(i + 1);
            }
        });
        stream.on('end', () => {
            if (buf) this.#push(buf);
            buf = '';
        });
    }
    #push(line) {
        this.lines.push(line);
        if (VERBOSE) process.stderr.write(`[server stderr] ${line}\n`);
        for (const w of this.waiters) {
            if (w.pred(line)) w.resolve(line);
        }
    }
    tail(n = 20) {
        return this.lines.slice(-n).join('\n');
    }
    waitFor(pred, timeoutMs, what) {
        const hit = this.lines.find(pred);
        if (hit !== undefined) return Promise.resolve(hit);
        return new Promise((resolve, reject) => {
            const w = {
                pred,
                resolve: line => {
                    clearTimeout(timer);
                    this.waiters.delete(w);
                    resolve(line);
                }
            };
            const timer = setTimeout(() => {
                this.waiters.delete(w);
                reject(
                    new Error(`timed out after ${timeoutMs} ms waiting for server stderr line: ${what}\n` + `--- stderr tail ---\n${this.tail()}`)
                );
            }, timeoutMs);
            this.waiters.add(w);
        });
    }
}

/** A TCP port nobody listens on right now. */
function freePort() {
    return new Promise((resolve, reject) => {
        const probe = createServer();
        probe.once('error', reject);
        probe.listen(0, '127.0.0.1', () => {
            const { port } = probe.address();
            probe.close(() => resolve(port));
        });
    });
}

/** Launches the server with --http (and `extraArgs`) and waits (bounded) until it says it is serving. */
async function startHttpServer(extraArgs = []) {
    const [command, ...args] = SERVER_CMD;
    const port = await freePort();
    const child = spawn(command, [...args, '--http', `127.0.0.1:${port}`, ...extraArgs], { cwd: HERE, stdio: ['ignore', 'ignore', 'pipe'] });
    const stderr = new StderrLines(child.stderr);
    const exited = new Promise((_, reject) => child.once('exit', code => reject(new Error(`server exited early (code ${code})\n${stderr.tail()}`))));
    await Promise.race([stderr.waitFor(line => line.includes('serving MCP tasks at http://'), 10_000, 'the HTTP server to start'), exited]);
    exited.catch(() => {});
    return { child, stderr, url: new URL(`http://127.0.0.1:${port}/mcp`) };
}

/** Spawns the server under test and connects an SDK client to it. */
async function startSession({ onElicit, http } = {}) {
    let transport, stderr, child, url;
    if (TRANSPORT === 'http') {
        const started = await startHttpServer();
        ({ child, stderr, url } = started);
        transport = new StreamableHTTPClientTransport(url, http);
    } else {
        const [command, ...args] = SERVER_CMD;
        transport = new StdioClientTransport({
            command,
            args,
            cwd: HERE,
            env: { ...process.env },
            stderr: 'pipe'
        });
        stderr = new StderrLines(transport.stderr);
    }
    const client = new Client(
        { name: 'mcp-task-store-interop-ts', version: '0.1.0' },
        { capabilities: { elicitation: { form: {} } } }
    );
    const protocolErrors = [];
    client.onerror = err => protocolErrors.push(err);
    if (onElicit) client.setRequestHandler(ElicitRequestSchema, onElicit);
    await client.connect(transport, { timeout: REQUEST_TIMEOUT_MS });
    const close = async () => {
        await client.close();
        child?.kill();
    };
    return { client, tasks: client.experimental.tasks, stderr, protocolErrors, close, transport, url };
}

/** Runs fn with a fresh server; always closes it; on failure prints the server's stderr. */
async function withSession(t, opts, fn) {
    const session = await startSession(opts);
    try {
        await fn(session);
    } catch (err) {
        const tail = session.stderr.tail();
        if (tail) t.diagnostic(`server stderr tail:\n${tail}`);
        if (session.protocolErrors.length) {
            t.diagnostic(`client protocol errors: ${session.protocolErrors.map(e => e.message).join(' | ')}`);
        }
        throw err;
    } finally {
        await session.close();
    }
}

/**
 * Task-augmented tools/call through the SDK's experimental API: callToolStream with an
 * explicit `task` option sends params.task; its first message is `taskCreated` (the
 * CreateTaskResult). We stop the stream there so the test drives tasks/* itself.
 */
async function createToolTask(tasks, name, args) {
    const stream = tasks.callToolStream({ name, arguments: args }, CallToolResultSchema, {
        task: { ttl: TTL_MS },
        timeout: REQUEST_TIMEOUT_MS
    });
    const first = await stream.next();
    await stream.return(undefined);
    assert.ok(!first.done, `callToolStream(${name}) ended without any message`);
    const msg = first.value;
    if (msg.type === 'error') throw msg.error;
    assert.equal(msg.type, 'taskCreated', `expected taskCreated from callToolStream(${name}), got ${msg.type}`);
    return msg.task;
}

/** Polls fn() until pred(value) holds, with a bounded deadline. */
async function pollUntil(fn, pred, { timeoutMs = 10_000, intervalMs = 25, what = 'condition' } = {}) {
    const deadline = Date.now() + timeoutMs;
    let last;
    for (;;) {
        last = await fn();
        if (pred(last)) return last;
        if (Date.now() >= deadline) {
            throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last value: ${JSON.stringify(last)}`);
        }
        await delay(intervalMs);
    }
}

const TERMINAL = new Set(['completed', 'failed', 'cancelled']);
const waitTerminal = (tasks, taskId) =>
    pollUntil(
        () => tasks.getTask(taskId, { timeout: REQUEST_TIMEOUT_MS }),
        t => TERMINAL.has(t.status),
        { what: `task ${taskId} to reach a terminal status` }
    );

/** Awaits promise and returns {result} or {error}. */
async function settle(promise) {
    try {
        return { result: await promise };
    } catch (error) {
        return { error };
    }
}

function describeOutcome(o) {
    const s = o.error ? `error ${o.error.code ?? ''} ${o.error.message}` : `result ${JSON.stringify(o.result)}`;
    return s.replace(/\s+/g, ' ');
}

async function expectMcpError(promise, code, label) {
    const o = await settle(promise);
    assert.ok(o.error, `${label}: expected JSON-RPC error ${code}, got ${describeOutcome(o)}`);
    assert.ok(o.error instanceof McpError, `${label}: expected an McpError (JSON-RPC error), got ${o.error}`);
    assert.equal(o.error.code, code, `${label}: expected error code ${code}, got ${o.error.code} (${o.error.message})`);
    return o.error;
}

function textOf(result) {
    assert.ok(Array.isArray(result.content) && result.content.length > 0, `result has no content: ${JSON.stringify(result)}`);
    const c = result.content[0];
    assert.equal(c.type, 'text', `first content block is not text: ${JSON.stringify(c)}`);
    return c.text;
}

function assertRelatedTask(result, taskId, label) {
    const related = result?._meta?.[RELATED_TASK_META_KEY];
    assert.ok(related, `${label}: missing _meta["${RELATED_TASK_META_KEY}"] in ${JSON.stringify(result)}`);
    assert.equal(related.taskId, taskId, `${label}: related-task taskId mismatch`);
}

function assertIsoTimestamp(v, field) {
    assert.equal(typeof v, 'string', `${field} must be a string, got ${JSON.stringify(v)}`);
    assert.ok(!Number.isNaN(Date.parse(v)), `${field} is not an ISO 8601 timestamp: ${v}`);
}

function assertTaskShape(task, label) {
    assert.equal(typeof task.taskId, 'string', `${label}: taskId`);
    assert.ok(task.taskId.length > 0, `${label}: empty taskId`);
    assert.ok('ttl' in task, `${label}: ttl must be present (number or null)`);
    assert.ok(task.ttl === null || Number.isInteger(task.ttl), `${label}: ttl must be an integer or null, got ${task.ttl}`);
    assertIsoTimestamp(task.createdAt, `${label}: createdAt`);
    assertIsoTimestamp(task.lastUpdatedAt, `${label}: lastUpdatedAt`);
}

/**
 * For a check that is spec-correct but that the SDK-based reference server is known to
 * violate: when (and only when) MCP_SERVER_CMD is unset and the observed outcome matches
 * the known deviation, mark the test TODO with a loud note, then fail it (reported as
 * "# TODO", not counted as a failure). Any other failure, or any failure against a server
 * given by MCP_SERVER_CMD, is a real failure.
 */
function markKnownReferenceDeviation(t, observed, matchesKnown, note) {
    if (!USING_REFERENCE || !matchesKnown) return false;
    const msg = `KNOWN DEVIATION of the reference server (SDK ${sdkVersion()}): ${note}`;
    t.todo(msg);
    t.diagnostic(`observed: ${observed}`);
    return true;
}

function sdkVersion() {
    try {
        return JSON.parse(readFileSync(join(HERE, 'node_modules/@modelcontextprotocol/sdk/package.json'), 'utf8')).version;
    } catch {
        return '1.32.x';
    }
}

// ---------------------------------------------------------------------------------------
// checks

test('1. initialize: server declares tasks.list, tasks.cancel and tasks.requests.tools.call', { timeout: TEST_TIMEOUT_MS }, async t => {
    await withSession(t, {}, async ({ client }) => {
        const caps = client.getServerCapabilities();
        assert.ok(caps, 'no server capabilities after initialize');
        const tasksCap = caps.tasks;
        assert.ok(tasksCap && typeof tasksCap === 'object', `capabilities.tasks missing: ${JSON.stringify(caps)}`);
        assert.equal(typeof tasksCap.list, 'object', 'capabilities.tasks.list must be an object');
        assert.equal(typeof tasksCap.cancel, 'object', 'capabilities.tasks.cancel must be an object');
        assert.equal(typeof tasksCap.requests?.tools?.call, 'object', 'capabilities.tasks.requests.tools.call must be an object');
        assert.ok(caps.tools, 'capabilities.tools missing');
    });
});

test('2. tools/list reports execution.taskSupport optional/required/forbidden per tool', { timeout: TEST_TIMEOUT_MS }, async t => {
    await withSession(t, {}, async ({ client }) => {
        const { tools } = await client.listTools(undefined, { timeout: REQUEST_TIMEOUT_MS });
        const byName = new Map(tools.map(tool => [tool.name, tool]));
        const expected = { sleep: 'optional', sleep_required: 'required', fail: 'optional', ask: 'required', echo: 'forbidden' };
        for (const [name, support] of Object.entries(expected)) {
            const tool = byName.get(name);
            assert.ok(tool, `tool ${name} missing from tools/list (got ${[...byName.keys()].join(', ')})`);
            // absent taskSupport means "forbidden"
            const actual = tool.execution?.taskSupport ?? 'forbidden';
            assert.equal(actual, support, `tool ${name}: execution.taskSupport`);
        }
        const props = name => Object.keys(byName.get(name).inputSchema?.properties ?? {});
        for (const name of ['sleep', 'sleep_required', 'fail']) assert.ok(props(name).includes('ms'), `${name} inputSchema lacks "ms"`);
        assert.ok(props('echo').includes('text'), 'echo inputSchema lacks "text"');
        assert.ok(props('ask').includes('question'), 'ask inputSchema lacks "question"');
    });
});

test('3. task-augmented sleep returns a working task; tasks/get polling reaches completed; tasks/result returns the tool result', { timeout: TEST_TIMEOUT_MS }, async t => {
    await withSession(t, {}, async ({ tasks }) => {
        const ms = 300;
        // The SDK's full task flow: tools/call with params.task -> CreateTaskResult,
        // then tasks/get polling (at task.pollInterval) -> tasks/result when completed.
        const messages = [];
        for await (const m of tasks.callToolStream({ name: 'sleep', arguments: { ms } }, CallToolResultSchema, {
            task: { ttl: TTL_MS },
            timeout: REQUEST_TIMEOUT_MS
        })) {
            messages.push(m);
        }
        const types = messages.map(m => m.type).join(',');
        assert.equal(messages[0]?.type, 'taskCreated', `first message should be taskCreated, got ${types}`);
        const created = messages[0].task;
        assertTaskShape(created, 'CreateTaskResult.task');
        assert.equal(created.status, 'working', 'a new task must start in status working');

        const statuses = messages.filter(m => m.type === 'taskStatus').map(m => m.task);
        assert.ok(statuses.length >= 1, `no tasks/get polls happened (${types})`);
        for (const s of statuses) {
            assertTaskShape(s, 'tasks/get result');
            assert.equal(s.taskId, created.taskId, 'tasks/get returned another task');
        }
        assert.equal(statuses.at(-1).status, 'completed', `polling ended in ${statuses.at(-1).status}`);

        const last = messages.at(-1);
        if (last.type === 'error') assert.fail(`task flow ended with error: ${last.error.message}`);
        assert.equal(last.type, 'result', `last message should be result (${types})`);
        assert.equal(textOf(last.result), `slept ${ms} ms`);
        assert.ok(!last.result.isError, 'sleep result must not be isError');
    });
});

test('4. tasks/result on a working task blocks until it finishes, then returns the result with related-task _meta', { timeout: TEST_TIMEOUT_MS }, async t => {
    await withSession(t, {}, async ({ tasks }) => {
        const ms = 1500;
        const created = await createToolTask(tasks, 'sleep', { ms });
        const createdAt = Date.now();
        const id = created.taskId;

        const before = await tasks.getTask(id, { timeout: REQUEST_TIMEOUT_MS });
        assert.equal(before.status, 'working', 'task should still be working before tasks/result');

        let settled = false;
        const resultP = tasks.getTaskResult(id, CallToolResultSchema, { timeout: REQUEST_TIMEOUT_MS });
        const tracked = settle(resultP).finally(() => {
            settled = true;
        });

        // While tasks/result is outstanding the server must keep serving other requests,
        // and the task is still working, so tasks/result cannot have answered yet.
        const during = await tasks.getTask(id, { timeout: REQUEST_TIMEOUT_MS });
        if (during.status === 'working') {
            assert.equal(settled, false, 'tasks/result answered while the task was still working');
        }

        const outcome = await tracked;
        if (outcome.error) assert.fail(`tasks/result failed: ${describeOutcome(outcome)}`);
        const elapsed = Date.now() - createdAt;
        const result = outcome.result;
        assert.ok(elapsed >= ms - 250, `tasks/result returned after ${elapsed} ms, before the ${ms} ms sleep could finish`);
        assert.equal(textOf(result), `slept ${ms} ms`);
        assertRelatedTask(result, id, 'tasks/result');

        const after = await tasks.getTask(id, { timeout: REQUEST_TIMEOUT_MS });
        assert.equal(after.status, 'completed');
    });
});

test('5. tasks/list pages through 12 tasks with nextCursor; every task exactly once, more than one page', { timeout: TEST_TIMEOUT_MS }, async t => {
    await withSession(t, {}, async ({ tasks }) => {
        const ids = [];
        for (let i = 0; i < 12; i++) {
            ids.push((await createToolTask(tasks, 'sleep', { ms: 20 })).taskId);
        }
        assert.equal(new Set(ids).size, 12, 'task ids are not unique');

        const seen = [];
        const pageSizes = [];
        let cursor;
        do {
            assert.ok(pageSizes.length < 50, 'tasks/list did not terminate within 50 pages');
            const page = await tasks.listTasks(cursor, { timeout: REQUEST_TIMEOUT_MS });
            pageSizes.push(page.tasks.length);
            for (const task of page.tasks) {
                assertTaskShape(task, 'tasks/list entry');
                seen.push(task.taskId);
            }
            if (page.nextCursor !== undefined) {
                assert.equal(typeof page.nextCursor, 'string');
                assert.notEqual(page.nextCursor, cursor, 'nextCursor did not advance');
            }
            cursor = page.nextCursor;
        } while (cursor !== undefined);

        t.diagnostic(`page sizes: ${pageSizes.join(', ')}`);
        for (const id of ids) {
            const n = seen.filter(s => s === id).length;
            assert.equal(n, 1, `task ${id} listed ${n} times`);
        }
        assert.equal(seen.length, ids.length, `tasks/list returned unexpected extra entries: ${seen.filter(s => !ids.includes(s))}`);
        assert.ok(pageSizes.length > 1, `expected more than one page, got page sizes ${pageSizes}`);
    });
});

test('6. tasks/cancel of a running sleep: reply is cancelled, tasks/get stays cancelled, the worker observes it', { timeout: TEST_TIMEOUT_MS }, async t => {
    await withSession(t, {}, async ({ tasks, stderr }) => {
        const created = await createToolTask(tasks, 'sleep', { ms: 30_000 });
        const id = created.taskId;
        const running = await tasks.getTask(id, { timeout: REQUEST_TIMEOUT_MS });
        assert.equal(running.status, 'working');

        const cancelled = await tasks.cancelTask(id, { timeout: REQUEST_TIMEOUT_MS });
        assertTaskShape(cancelled, 'tasks/cancel result');
        assert.equal(cancelled.taskId, id);
        assert.equal(cancelled.status, 'cancelled', 'tasks/cancel must answer with the task already cancelled');

        const expected = `mcp-task-server: task ${id} observed cancellation`;
        await stderr.waitFor(line => line.trimEnd().endsWith(expected), 5_000, expected);

        const after = await tasks.getTask(id, { timeout: REQUEST_TIMEOUT_MS });
        assert.equal(after.status, 'cancelled', 'task must stay cancelled after the worker stopped');
    });
});

test('7. -32602 for tasks/get, tasks/result, tasks/cancel on an unknown task and for tasks/cancel on a completed task', { timeout: TEST_TIMEOUT_MS }, async t => {
    await withSession(t, {}, async ({ tasks }) => {
        const unknown = randomUUID().replaceAll('-', '');
        const opts = { timeout: 5_000 };
        await expectMcpError(tasks.getTask(unknown, opts), ErrorCode.InvalidParams, 'tasks/get unknown');
        await expectMcpError(tasks.getTaskResult(unknown, CallToolResultSchema, opts), ErrorCode.InvalidParams, 'tasks/result unknown');
        await expectMcpError(tasks.cancelTask(unknown, opts), ErrorCode.InvalidParams, 'tasks/cancel unknown');

        const created = await createToolTask(tasks, 'sleep', { ms: 10 });
        const done = await waitTerminal(tasks, created.taskId);
        assert.equal(done.status, 'completed');
        await expectMcpError(tasks.cancelTask(created.taskId, opts), ErrorCode.InvalidParams, 'tasks/cancel completed');
        const after = await tasks.getTask(created.taskId, opts);
        assert.equal(after.status, 'completed', 'a rejected cancel must not change a completed task');
    });
});

test('8. fail as a task ends failed and tasks/result returns the isError tool result', { timeout: TEST_TIMEOUT_MS }, async t => {
    await withSession(t, {}, async ({ tasks }) => {
        const ms = 100;
        const created = await createToolTask(tasks, 'fail', { ms });
        assert.equal(created.status, 'working');
        const final = await waitTerminal(tasks, created.taskId);
        assert.equal(final.status, 'failed', 'a task whose tool result has isError must end failed');
        if (final.statusMessage === undefined) t.diagnostic('note: failed task has no statusMessage (SHOULD have diagnostics)');

        const result = await tasks.getTaskResult(created.taskId, CallToolResultSchema, { timeout: REQUEST_TIMEOUT_MS });
        assert.equal(result.isError, true, `tasks/result must return the isError tool result, got ${JSON.stringify(result)}`);
        assert.equal(textOf(result), `failed after ${ms} ms`);
        assertRelatedTask(result, created.taskId, 'tasks/result');
    });
});

test('9. -32601 for echo (taskSupport forbidden) with a task and for sleep_required (required) without one', { timeout: TEST_TIMEOUT_MS }, async t => {
    await withSession(t, {}, async ({ client }) => {
        await t.test('9a. echo called with params.task -> -32601', async st => {
            // Raw Protocol.request with the `task` option (the SDK's task augmentation) and a
            // permissive result schema, so whatever the server answers can be reported.
            const o = await settle(
                client.request({ method: 'tools/call', params: { name: 'echo', arguments: { text: 'hi' } } }, ResultSchema, {
                    task: { ttl: TTL_MS },
                    timeout: REQUEST_TIMEOUT_MS
                })
            );
            const ok = o.error instanceof McpError && o.error.code === ErrorCode.MethodNotFound;
            if (!ok) {
                markKnownReferenceDeviation(
                    st,
                    describeOutcome(o).slice(0, 300),
                    o.error?.code === ErrorCode.InvalidParams && /Invalid task creation result/.test(o.error.message),
                    'McpServer runs a forbidden tool even when params.task is set and returns a plain CallToolResult, which the SDK Server rejects as -32602 "Invalid task creation result" (spec: SHOULD -32601)'
                );
            }
            assert.ok(ok, `expected JSON-RPC error -32601, got ${describeOutcome(o)}`);
        });

        await t.test('9b. sleep_required called without params.task -> -32601', async st => {
            // Raw request: client.callTool() would refuse locally (-32600) once tools/list
            // has marked the tool as task-required, never reaching the server.
            const o = await settle(
                client.request({ method: 'tools/call', params: { name: 'sleep_required', arguments: { ms: 10 } } }, CallToolResultSchema, {
                    timeout: REQUEST_TIMEOUT_MS
                })
            );
            const ok = o.error instanceof McpError && o.error.code === ErrorCode.MethodNotFound;
            if (!ok) {
                markKnownReferenceDeviation(
                    st,
                    describeOutcome(o).slice(0, 300),
                    !o.error && o.result?.isError === true && /-32601/.test(o.result?.content?.[0]?.text ?? ''),
                    "McpServer throws McpError(-32601) for a required tool called without a task, but its own tools/call catch-all turns it into a CallToolResult with isError:true (spec: MUST be JSON-RPC error -32601)"
                );
            }
            assert.ok(ok, `expected JSON-RPC error -32601, got ${describeOutcome(o)}`);
        });
    });
});

test('10. ask as a task: elicitation/create carries related-task _meta, client answers, tasks/result returns the answer', { timeout: TEST_TIMEOUT_MS }, async t => {
    const question = 'What is 6 x 7?';
    const elicitations = [];
    const statusesSeenInHandler = [];
    let session;
    await withSession(
        t,
        {
            onElicit: async request => {
                elicitations.push(request.params);
                const relatedId = request.params?._meta?.[RELATED_TASK_META_KEY]?.taskId;
                if (relatedId) {
                    // Best effort: while the server waits for this answer the task should be input_required.
                    const o = await settle(session.tasks.getTask(relatedId, { timeout: 5_000 }));
                    statusesSeenInHandler.push(o.error ? `error: ${o.error.message}` : o.result.status);
                }
                return { action: 'accept', content: { answer: '42' } };
            }
        },
        async s => {
            session = s;
            const { tasks } = s;
            const created = await createToolTask(tasks, 'ask', { question });
            const id = created.taskId;

            // Per spec the requestor calls tasks/result right away; the server may deliver the
            // elicitation on that side channel (reference server) or directly (both work on stdio).
            let done = false;
            const resultP = settle(tasks.getTaskResult(id, CallToolResultSchema, { timeout: REQUEST_TIMEOUT_MS })).finally(() => {
                done = true;
            });
            const polled = [];
            const pollP = (async () => {
                while (!done) {
                    const o = await settle(tasks.getTask(id, { timeout: 5_000 }));
                    if (o.result) polled.push(o.result.status);
                    if (!done) await delay(20);
                }
            })();
            const outcome = await resultP;
            await pollP;
            if (outcome.error) assert.fail(`tasks/result failed: ${describeOutcome(outcome)}`);

            assert.equal(elicitations.length, 1, `expected exactly one elicitation/create, got ${elicitations.length}`);
            const params = elicitations[0];
            assert.equal(params.message, question);
            assert.ok(params.mode === undefined || params.mode === 'form', `elicitation mode ${params.mode}`);
            assert.equal(params.requestedSchema?.type, 'object');
            assert.equal(params.requestedSchema?.properties?.answer?.type, 'string');
            assert.deepEqual(params.requestedSchema?.required, ['answer']);
            assertRelatedTask(params, id, 'elicitation/create params');

            const result = outcome.result;
            assert.equal(textOf(result), 'answer: 42');
            assert.ok(!result.isError, 'accepted answer must not be isError');
            assertRelatedTask(result, id, 'tasks/result');

            const final = await tasks.getTask(id, { timeout: REQUEST_TIMEOUT_MS });
            assert.equal(final.status, 'completed');

            const sawInputRequired = polled.includes('input_required') || statusesSeenInHandler.includes('input_required');
            t.diagnostic(`statuses polled while waiting: ${[...new Set(polled)].join(', ') || '(none)'}; seen inside elicitation handler: ${statusesSeenInHandler.join(', ') || '(none)'}`);
            if (!sawInputRequired) {
                t.diagnostic('note (best effort, not failing): input_required was never observed via tasks/get');
            }
        }
    );
});

/** Reads an SSE body until its text includes `needle` (bounded); returns the text read. */
async function readUntil(body, needle, timeoutMs, what) {
    const reader = body.getReader();
    const decoder = new TextDecoder();
    let text = '';
    const deadline = Date.now() + timeoutMs;
    try {
        while (!text.includes(needle)) {
            const left = deadline - Date.now();
            if (left <= 0) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; read: ${text}`);
            let timer;
            const timeout = new Promise((_, reject) => {
                timer = setTimeout(() => reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}; read: ${text}`)), left);
            });
            const { value, done } = await Promise.race([reader.read(), timeout]).finally(() => clearTimeout(timer));
            if (done) throw new Error(`the stream ended before ${what}; read: ${text}`);
            text += decoder.decode(value, { stream: true });
        }
        return text;
    } finally {
        reader.releaseLock();
    }
}

test(
    '11. HTTP: a client whose GET event stream was cut resumes it with Last-Event-ID, and an elicitation sent meanwhile still arrives',
    { timeout: TEST_TIMEOUT_MS, skip: TRANSPORT !== 'http' && 'the GET event stream exists over HTTP only' },
    async t => {
        // The client's GET stream is cut (here: a second GET for its session takes the stream
        // over, as when a proxy or NAT drops a connection and the server writes into the dead
        // one); the elicitation the server then sends goes out on that other stream. The
        // client reopens its stream with the last event id it saw, and the server replays
        // what followed: without that, the task would wait for an answer until its TTL.
        const gets = [];
        let clientStreamOpen;
        const clientStreamOpened = new Promise(resolve => (clientStreamOpen = resolve));
        const recordingFetch = async (url, init) => {
            const response = await fetch(url, init);
            if ((init?.method ?? 'GET') === 'GET') {
                gets.push({ status: response.status, lastEventId: new Headers(init?.headers).get('last-event-id') });
                if (response.ok) clientStreamOpen();
            }
            return response;
        };
        const elicitations = [];
        const http = {
            fetch: recordingFetch,
            // Long enough that the elicitation goes out before the client reconnects.
            reconnectionOptions: { initialReconnectionDelay: 3_000, maxReconnectionDelay: 5_000, reconnectionDelayGrowFactor: 1.5, maxRetries: 3 }
        };
        const onElicit = async request => {
            elicitations.push(request.params);
            return { action: 'accept', content: { answer: '42' } };
        };
        await withSession(t, { onElicit, http }, async s => {
            await Promise.race([clientStreamOpened, delay(10_000).then(() => assert.fail('the client never opened its GET stream'))]);
            const thief = await fetch(s.url, {
                method: 'GET',
                headers: { accept: 'text/event-stream', 'mcp-session-id': s.transport.sessionId, 'mcp-protocol-version': '2025-11-25' }
            });
            assert.equal(thief.status, 200, 'the second GET takes the session stream over');
            try {
                const created = await createToolTask(s.tasks, 'ask', { question: 'Resumed?' });
                await readUntil(thief.body, 'elicitation/create', 10_000, 'the elicitation on the stream that took over');
                assert.equal(elicitations.length, 0, 'the client reconnected before the elicitation went out: the test did not cut its stream in time');
                const done = await waitTerminal(s.tasks, created.taskId);
                assert.equal(done.status, 'completed', `task ended ${done.status}`);
                const result = await s.tasks.getTaskResult(created.taskId, CallToolResultSchema, { timeout: REQUEST_TIMEOUT_MS });
                assert.equal(textOf(result), 'answer: 42');
                assert.equal(elicitations.length, 1, 'the replayed elicitation was answered once');
                const resumed = gets.slice(1).filter(g => g.lastEventId);
                assert.ok(resumed.length > 0, `the client reopened its stream with Last-Event-ID: ${JSON.stringify(gets)}`);
                t.diagnostic(`GET streams the client opened: ${JSON.stringify(gets)}`);
            } finally {
                await thief.body?.cancel().catch(() => {});
            }
        });
    }
);

test(
    '12. HTTP with --identity-header: each identity sees only its own tasks, a session is its opener\'s alone, and a request without an identity gets 401',
    { timeout: TEST_TIMEOUT_MS, skip: TRANSPORT !== 'http' && 'identities are an HTTP feature' },
    async t => {
        const { child, stderr, url } = await startHttpServer(['--identity-header', 'X-Forwarded-User']);
        const clients = [];
        const connect = async (user, sessionId) => {
            const headers = user ? { 'X-Forwarded-User': user } : {};
            const transport = new StreamableHTTPClientTransport(url, { requestInit: { headers }, sessionId });
            const client = new Client({ name: `interop-${user ?? 'anonymous'}`, version: '0.1.0' }, { capabilities: {} });
            clients.push(client);
            await client.connect(transport, { timeout: REQUEST_TIMEOUT_MS });
            return { client, tasks: client.experimental.tasks, transport };
        };
        try {
            const alice = await connect('alice');
            const bob = await connect('bob');
            const created = await createToolTask(alice.tasks, 'sleep', { ms: 60_000 });
            const listed = await alice.tasks.listTasks(undefined, { timeout: REQUEST_TIMEOUT_MS });
            assert.deepEqual(listed.tasks.map(task => task.taskId), [created.taskId]);
            assert.deepEqual((await bob.tasks.listTasks(undefined, { timeout: REQUEST_TIMEOUT_MS })).tasks, []);
            await expectMcpError(bob.tasks.getTask(created.taskId, { timeout: REQUEST_TIMEOUT_MS }), ErrorCode.InvalidParams, 'bob gets alice\'s task');

            // Bob, holding alice's session id, is refused as if the session did not exist.
            const hijack = await connect('bob', alice.transport.sessionId);
            const stolen = await settle(hijack.tasks.listTasks(undefined, { timeout: REQUEST_TIMEOUT_MS }));
            assert.ok(stolen.error, `bob listed alice's session: ${JSON.stringify(stolen.result)}`);
            assert.match(String(stolen.error.message), /404|not found|session/i, describeOutcome(stolen));
            assert.equal((await alice.tasks.getTask(created.taskId, { timeout: REQUEST_TIMEOUT_MS })).status, 'working');

            const anonymous = await settle(connect(undefined));
            assert.ok(anonymous.error, 'a client without an identity connected');
            assert.match(String(anonymous.error.message), /401|unauthori[sz]ed|X-Forwarded-User/i, describeOutcome(anonymous));

            const cancelled = await alice.tasks.cancelTask(created.taskId, { timeout: REQUEST_TIMEOUT_MS });
            assert.equal(cancelled.status, 'cancelled');
        } catch (err) {
            t.diagnostic(`server stderr tail:\n${stderr.tail()}`);
            throw err;
        } finally {
            for (const client of clients) await client.close().catch(() => {});
            child.kill();
        }
    }
);
