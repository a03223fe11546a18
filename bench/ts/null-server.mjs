#!/usr/bin/env node
// The cheapest stdio "server" the e2e client can be pointed at: it keeps no tasks and
// answers `initialize` and `tasks/get` from templates (every task it is asked about is
// `completed`), and anything else with -32601. No SDK, no store, no validation.
//
// It exists to measure the client, not a server: the `tasks/get` rate the TypeScript SDK
// client reaches against it is about the most any server could get out of that client on
// this machine, so `e2e.mjs` reports it as the ceiling for target 7's ratio.

import { createInterface } from 'node:readline';

const PROTOCOL = '2025-11-25';
const STAMP = new Date().toISOString();

function answer(message) {
    const { id, method, params } = message;
    if (id === undefined) return null; // a notification
    if (method === 'initialize') {
        return {
            jsonrpc: '2.0',
            id,
            result: {
                protocolVersion: PROTOCOL,
                capabilities: { tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } },
                serverInfo: { name: 'null-server', version: '0.0.0' }
            }
        };
    }
    if (method === 'tasks/get') {
        return {
            jsonrpc: '2.0',
            id,
            result: {
                taskId: String(params?.taskId),
                status: 'completed',
                ttl: 600000,
                createdAt: STAMP,
                lastUpdatedAt: STAMP,
                pollInterval: 100
            }
        };
    }
    return { jsonrpc: '2.0', id, error: { code: -32601, message: `method not found: ${method}` } };
}

// Answers to lines that arrived together leave in one write, as a server that batches its
// output would send them.
let pending = [];
let scheduled = false;
function flush() {
    scheduled = false;
    const text = pending.join('');
    pending = [];
    process.stdout.write(text);
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on('line', (line) => {
    if (line.trim() === '') return;
    let reply;
    try {
        reply = answer(JSON.parse(line));
    } catch (err) {
        reply = { jsonrpc: '2.0', id: null, error: { code: -32700, message: String(err) } };
    }
    if (reply === null) return;
    pending.push(JSON.stringify(reply) + '\n');
    if (!scheduled) {
        scheduled = true;
        setImmediate(flush);
    }
});
lines.on('close', () => {
    if (pending.length) flush();
});
