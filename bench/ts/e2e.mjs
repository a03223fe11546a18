#!/usr/bin/env node
// End to end over stdio, driven by the official TypeScript SDK client (1.32.x): the same
// workloads against our mcp-task-server and against the SDK-based reference server
// (tests/interop/ts/reference-server.mjs), in one run. Prints
// `RESULT <server> <workload> <value> <unit>` with server `e2e-ours` / `e2e-ts-ref`.
//
//   node e2e.mjs <path to mcp-task-server>
//
// Workloads (each bounded in time):
//   lifecycle: task-augmented tools/call of `sleep {ms: 0}` (the reply is the created task),
//              then a blocking tasks/result; INFLIGHT such loops at once; lifecycles/s.
//   tasks_get: tasks/get on finished tasks, INFLIGHT requests in flight; requests/s.
//
// Then `tasks_get` once more against `null-server.mjs`, which answers from a template and
// keeps nothing (server `e2e-null`): what this client reaches there is about the most any
// server can get out of it here, so it bounds the ours/reference ratio for `tasks/get`.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const HERE = dirname(fileURLToPath(import.meta.url));
const INFLIGHT = 8;
const WARMUP_MS = 500;
const LIFECYCLE_MS = 5_000;
const GET_MS = 3_000;
const TIMEOUT = { timeout: 15_000 };

function report(server, workload, value, unit) {
    console.log(`RESULT ${server} ${workload} ${value.toFixed(3)} ${unit}`);
}

/** CPU seconds used so far by every thread of process `pid` (Linux: /proc/<pid>/stat). */
function processCpu(pid) {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name (which may hold spaces) start at field 3; utime and
    // stime are fields 14 and 15, in clock ticks (100 per second on Linux).
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / 100;
}

/** Runs `work` and reports how busy the client (this process) and the server were. */
async function withCpu(server, workload, pid, work) {
    const wall0 = performance.now();
    const client0 = process.cpuUsage();
    const server0 = processCpu(pid);
    const value = await work();
    const wall = (performance.now() - wall0) / 1000;
    const client = process.cpuUsage(client0);
    const clientCpu = (client.user + client.system) / 1e6;
    const serverCpu = processCpu(pid) - server0;
    const pct = (cpu) => `${Math.round((100 * cpu) / wall)}%`;
    // Per operation, counting the warm-up too (the CPU figures cover it), at the measured rate.
    const ops = value * wall;
    const us = (micros) => (micros / ops).toFixed(1);
    console.log(
        `NOTE ${server} ${workload}: client CPU ${pct(clientCpu)} of one core ` +
            `(${us(client.user)} us user + ${us(client.system)} us system per operation), ` +
            `server CPU ${pct(serverCpu)} (${us(serverCpu * 1e6)} us per operation)`
    );
    return value;
}

async function connect(command, args) {
    const transport = new StdioClientTransport({ command, args, env: { ...process.env }, stderr: 'ignore' });
    const client = new Client({ name: 'mcp-task-store-bench', version: '0.1.0' }, { capabilities: {} });
    await client.connect(transport, TIMEOUT);
    return { client, pid: transport.pid };
}

async function createTask(tasks) {
    const stream = tasks.callToolStream({ name: 'sleep', arguments: { ms: 0 } }, CallToolResultSchema, {
        task: { ttl: 600_000 },
        ...TIMEOUT
    });
    const first = await stream.next();
    await stream.return(undefined);
    const msg = first.value;
    if (first.done || msg.type !== 'taskCreated') {
        throw new Error(`expected taskCreated, got ${first.done ? 'end of stream' : msg.type}: ${JSON.stringify(msg?.error?.message ?? msg)}`);
    }
    return msg.task;
}

/** Runs INFLIGHT loops of `op` for warmup + ms; returns completed ops per second (timed part). */
async function rate(op, ms) {
    const start = performance.now();
    const measureFrom = start + WARMUP_MS;
    const end = measureFrom + ms;
    let counted = 0;
    const loop = async () => {
        while (performance.now() < end) {
            await op();
            const t = performance.now();
            if (t >= measureFrom && t <= end) counted++;
        }
    };
    await Promise.all(Array.from({ length: INFLIGHT }, loop));
    return (counted * 1000) / ms;
}

/** `tasks/get` with INFLIGHT in flight, round robin over `ids`; requests/s. */
function getRate(name, tasks, pid, ids) {
    let k = 0;
    return withCpu(name, 'tasks_get', pid, () => rate(async () => {
        const t = await tasks.getTask(ids[k++ % ids.length], TIMEOUT);
        if (t.status !== 'completed') throw new Error(`unexpected status ${t.status}`);
    }, GET_MS));
}

async function bench(name, command, args) {
    const { client, pid } = await connect(command, args);
    const tasks = client.experimental.tasks;
    try {
        const lifecycles = await withCpu(name, 'lifecycle', pid, () => rate(async () => {
            const task = await createTask(tasks);
            const result = await tasks.getTaskResult(task.taskId, CallToolResultSchema, TIMEOUT);
            if (result.content?.[0]?.text !== 'slept 0 ms') throw new Error(`unexpected result ${JSON.stringify(result)}`);
        }, LIFECYCLE_MS));
        report(name, 'lifecycle_8_inflight', lifecycles, 'lifecycles/s');

        const ids = [];
        for (let i = 0; i < INFLIGHT; i++) {
            const task = await createTask(tasks);
            await tasks.getTaskResult(task.taskId, CallToolResultSchema, TIMEOUT);
            ids.push(task.taskId);
        }
        report(name, 'tasks_get_8_inflight', await getRate(name, tasks, pid, ids), 'requests/s');
    } finally {
        await client.close();
    }
}

/** The client against a server that does nothing: the ceiling for `tasks/get`. */
async function benchNull() {
    const name = 'e2e-null';
    const { client, pid } = await connect(process.execPath, [resolve(HERE, 'null-server.mjs')]);
    try {
        const ids = Array.from({ length: INFLIGHT }, (_, i) => `null-task-${i}`);
        report(name, 'tasks_get_8_inflight', await getRate(name, client.experimental.tasks, pid, ids), 'requests/s');
    } finally {
        await client.close();
    }
}

const server = process.argv[2];
if (!server) {
    console.error('usage: e2e.mjs <path to mcp-task-server>');
    process.exit(2);
}
const reference = resolve(HERE, '../../tests/interop/ts/reference-server.mjs');
await bench('e2e-ours', resolve(server), ['--poll-interval', '100ms', '--log', 'off']);
await bench('e2e-ts-ref', process.execPath, [reference, '--poll-interval', '100']);
await benchNull();
process.exit(0);
