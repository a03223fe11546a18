#!/usr/bin/env node
// Reference MCP server (stdio) for the interop suite, built only with the official
// TypeScript SDK (@modelcontextprotocol/sdk 1.32.x) and its experimental task support
// (MCP 2025-11-25 tasks): McpServer + server.experimental.tasks.registerToolTask,
// InMemoryTaskStore and InMemoryTaskMessageQueue.
//
// It offers the same demo tools as the Rust `mcp-task-server`:
//   sleep          {ms}        taskSupport optional   -> "slept <ms> ms"
//   sleep_required {ms}        taskSupport required   -> "slept <ms> ms"
//   fail           {ms}        taskSupport optional   -> isError "failed after <ms> ms" (task ends `failed`)
//   echo           {text}      taskSupport forbidden  -> "<text>"
//   ask            {question}  taskSupport required   -> elicitation/create related to the task,
//                                                        "answer: <answer>" or isError "no answer (<action>)"
// When a running task's worker observes cancellation it writes to stderr:
//   mcp-task-server: task <taskId> observed cancellation
//
// Options:
//   --poll-interval <ms>  pollInterval reported for new tasks; the SDK's blocking tasks/result
//                         handler also re-checks the store at this interval (default 100;
//                         the SDK's own default would be 1000).
//
// Nothing here patches SDK behaviour: where the SDK deviates from the spec, this server
// deviates too (see README.md, "Known deviations of the reference server").

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { InMemoryTaskStore, InMemoryTaskMessageQueue } from '@modelcontextprotocol/sdk/experimental/tasks';
import { ElicitResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

function parseArgs(argv) {
    const opts = { pollInterval: 100 };
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        const take = () => {
            const v = argv[++i];
            if (v === undefined) throw new Error(`missing value for ${a}`);
            return v;
        };
        if (a === '--poll-interval') {
            opts.pollInterval = Number.parseInt(take(), 10);
            if (!Number.isSafeInteger(opts.pollInterval) || opts.pollInterval <= 0) {
                throw new Error('--poll-interval must be a positive integer (ms)');
            }
        } else if (a === '--help' || a === '-h') {
            process.stderr.write('usage: reference-server.mjs [--poll-interval <ms>]\n');
            process.exit(0);
        } else {
            throw new Error(`unknown argument: ${a}`);
        }
    }
    return opts;
}

let opts;
try {
    opts = parseArgs(process.argv.slice(2));
} catch (err) {
    process.stderr.write(`reference-server: ${err.message}\n`);
    process.exit(2);
}

/**
 * The SDK's InMemoryTaskStore, plus a hook so a worker learns that its task was cancelled.
 * The SDK's tasks/cancel handler moves the task to `cancelled` through
 * store.updateTaskStatus(); we fire the worker's AbortController right after.
 * All store semantics (ids, ttl, paging with page size 10, cursors) are the SDK's.
 */
class CancellationAwareTaskStore extends InMemoryTaskStore {
    constructor() {
        super();
        this.workers = new Map(); // taskId -> AbortController
    }
    async updateTaskStatus(taskId, status, statusMessage, sessionId) {
        await super.updateTaskStatus(taskId, status, statusMessage, sessionId);
        if (status === 'cancelled') {
            this.workers.get(taskId)?.abort(new Error('task cancelled'));
        }
    }
}

const taskStore = new CancellationAwareTaskStore();
const taskMessageQueue = new InMemoryTaskMessageQueue();

const server = new McpServer(
    { name: 'mcp-task-reference-server', version: '0.1.0' },
    {
        capabilities: {
            tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } }
        },
        taskStore,
        taskMessageQueue,
        // Poll interval of the SDK's blocking tasks/result loop when a task has none.
        defaultTaskPollInterval: opts.pollInterval
    }
);

function text(t, isError) {
    const r = { content: [{ type: 'text', text: t }] };
    if (isError) r.isError = true;
    return r;
}

function noteCancellation(taskId) {
    process.stderr.write(`mcp-task-server: task ${taskId} observed cancellation\n`);
}

/** Resolves after ms, or rejects with the signal's reason as soon as it aborts. */
function cancellableSleep(ms, signal) {
    return new Promise((resolve, reject) => {
        if (signal.aborted) return reject(signal.reason);
        const onAbort = () => {
            clearTimeout(timer);
            reject(signal.reason);
        };
        const timer = setTimeout(() => {
            signal.removeEventListener('abort', onAbort);
            resolve();
        }, ms);
        signal.addEventListener('abort', onAbort, { once: true });
    });
}

/**
 * Creates a task for the current tools/call and runs `body(signal, taskId, extra)` in the
 * background. body returns { status: 'completed' | 'failed', result }.
 */
async function startTask(extra, body) {
    const task = await extra.taskStore.createTask({
        ttl: extra.taskRequestedTtl,
        pollInterval: opts.pollInterval
    });
    const ac = new AbortController();
    taskStore.workers.set(task.taskId, ac);
    (async () => {
        try {
            const { status, result } = await body(ac.signal, task.taskId, extra);
            if (ac.signal.aborted) {
                noteCancellation(task.taskId);
                return;
            }
            await extra.taskStore.storeTaskResult(task.taskId, status, result);
        } catch (err) {
            if (ac.signal.aborted) {
                noteCancellation(task.taskId);
                return;
            }
            try {
                await extra.taskStore.storeTaskResult(task.taskId, 'failed', text(`internal error: ${err?.message ?? err}`, true));
            } catch {
                // task gone (ttl) or already terminal
            }
        } finally {
            taskStore.workers.delete(task.taskId);
        }
    })();
    return { task };
}

// getTask/getTaskResult handlers of registerToolTask. The SDK's Protocol answers
// tasks/get and tasks/result from the task store itself; these are only reached by the
// McpServer's own code paths (kept trivial, as in the SDK examples).
const passthrough = {
    getTask: async (_args, extra) => extra.taskStore.getTask(extra.taskId),
    getTaskResult: async (_args, extra) => extra.taskStore.getTaskResult(extra.taskId)
};

const msShape = { ms: z.number().int().min(0).describe('milliseconds to wait') };

function sleepTool(name, taskSupport) {
    server.experimental.tasks.registerToolTask(
        name,
        {
            description: `Waits ms milliseconds (cooperatively cancellable); taskSupport ${taskSupport}.`,
            inputSchema: msShape,
            execution: { taskSupport }
        },
        {
            createTask: async ({ ms }, extra) =>
                startTask(extra, async signal => {
                    await cancellableSleep(ms, signal);
                    return { status: 'completed', result: text(`slept ${ms} ms`) };
                }),
            ...passthrough
        }
    );
}

sleepTool('sleep', 'optional');
sleepTool('sleep_required', 'required');

server.experimental.tasks.registerToolTask(
    'fail',
    {
        description: 'Waits ms milliseconds, then returns an isError tool result (the task ends failed).',
        inputSchema: msShape,
        execution: { taskSupport: 'optional' }
    },
    {
        createTask: async ({ ms }, extra) =>
            startTask(extra, async signal => {
                await cancellableSleep(ms, signal);
                return { status: 'failed', result: text(`failed after ${ms} ms`, true) };
            }),
        ...passthrough
    }
);

server.registerTool(
    'echo',
    {
        description: 'Returns its text argument (taskSupport forbidden).',
        inputSchema: { text: z.string() }
    },
    async ({ text: t }) => text(t)
);

server.experimental.tasks.registerToolTask(
    'ask',
    {
        description: 'Asks the client a question via elicitation/create (form mode) related to the task.',
        inputSchema: { question: z.string() },
        execution: { taskSupport: 'required' }
    },
    {
        createTask: async ({ question }, extra) =>
            startTask(extra, async (signal, taskId) => {
                // extra.sendRequest with relatedTask: the SDK sets the task to input_required,
                // adds _meta["io.modelcontextprotocol/related-task"] and queues the request
                // for side-channel delivery through the client's tasks/result call.
                const elicited = extra.sendRequest(
                    {
                        method: 'elicitation/create',
                        params: {
                            mode: 'form',
                            message: question,
                            requestedSchema: {
                                type: 'object',
                                properties: { answer: { type: 'string' } },
                                required: ['answer']
                            }
                        }
                    },
                    ElicitResultSchema,
                    { relatedTask: { taskId }, signal, timeout: 10 * 60 * 1000 }
                );
                const answer = await Promise.race([
                    elicited,
                    new Promise((_, reject) => {
                        if (signal.aborted) reject(signal.reason);
                        signal.addEventListener('abort', () => reject(signal.reason), { once: true });
                    })
                ]);
                if (signal.aborted) throw signal.reason;
                // Back to working now that the input has arrived (spec §input_required).
                await extra.taskStore.updateTaskStatus(taskId, 'working');
                if (answer.action === 'accept' && typeof answer.content?.answer === 'string') {
                    return { status: 'completed', result: text(`answer: ${answer.content.answer}`) };
                }
                // isError tool result => the task ends failed (2025-11-25).
                return { status: 'failed', result: text(`no answer (${answer.action})`, true) };
            }),
        ...passthrough
    }
);

const transport = new StdioServerTransport();
await server.connect(transport);

// StdioServerTransport does not end the process on stdin EOF, and task TTL timers keep the
// event loop alive: exit explicitly so clients can shut us down by closing stdin.
process.stdin.on('end', () => process.exit(0));
process.stdin.on('close', () => process.exit(0));
