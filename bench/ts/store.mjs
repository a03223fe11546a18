#!/usr/bin/env node
// The official TypeScript SDK's InMemoryTaskStore (@modelcontextprotocol/sdk 1.32.x) through
// the same workloads as examples/compare.rs. Prints `RESULT ts <workload> <value> <unit>`.
//
//   node store.mjs all                 # cycles, get latency, list walk, expiry, idle CPU
//   node --expose-gc store.mjs mem <payload bytes> <n>   # one memory figure (fresh process)
//
// Cycles (createTask -> getTask -> storeTaskResult -> getTaskResult, each awaited) run in
// chunks of CHUNK; the chunk's tasks carry a TTL (so the SDK arms its per-task timer, as it
// does in a server) and are reclaimed between chunks, untimed, by clearing their timers and
// deleting them. Live tasks are prefilled with no TTL.

import { InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks';

const CHUNK = 2000;
const BUDGET_MS = 1500;
const WARMUP_MS = 300;
const CYCLE_TTL = 60_000;
const STRIDE = 7919;

const now = () => performance.now();

function report(workload, value, unit) {
    console.log(`RESULT ts ${workload} ${value.toFixed(3)} ${unit}`);
}

function sizeLabel(n) {
    if (n >= 1e6) return `${n / 1e6}m`;
    if (n >= 1e3) return `${n / 1e3}k`;
    return String(n);
}

function resultValue() {
    return { content: [{ type: 'text', text: 'done' }] };
}

function percentile(sorted, p) {
    return sorted[Math.round((sorted.length - 1) * p)];
}

async function prefill(store, n) {
    const ids = new Array(n);
    for (let i = 0; i < n; i++) ids[i] = (await store.createTask({ ttl: null }, i, { method: 'tools/call', params: {} })).taskId;
    return ids;
}

function reclaim(store, ids) {
    for (const id of ids) {
        const t = store.cleanupTimers.get(id);
        if (t) clearTimeout(t);
        store.cleanupTimers.delete(id);
        store.tasks.delete(id);
    }
}

async function cyclesPerSec(store) {
    const request = { method: 'tools/call', params: {} };
    let timed = 0;
    let cycles = 0;
    const began = now();
    for (;;) {
        const warm = now() - began < WARMUP_MS;
        if (!warm && timed >= BUDGET_MS) break;
        const ids = new Array(CHUNK);
        const t0 = now();
        for (let i = 0; i < CHUNK; i++) {
            const task = await store.createTask({ ttl: CYCLE_TTL }, i, request);
            const id = task.taskId;
            ids[i] = id;
            if (!(await store.getTask(id))) throw new Error('get');
            await store.storeTaskResult(id, 'completed', resultValue());
            if (!(await store.getTaskResult(id))) throw new Error('getResult');
        }
        const dt = now() - t0;
        if (!warm) {
            timed += dt;
            cycles += CHUNK;
        }
        reclaim(store, ids);
    }
    return (cycles * 1000) / timed;
}

async function runCycles(sizes) {
    for (const n of sizes) {
        const store = new InMemoryTaskStore();
        const ids = await prefill(store, n);
        report(`cycle_${sizeLabel(n)}`, await cyclesPerSec(store), 'cycles/s');
        if (n === 100_000) {
            // get latency, 1 caller
            const samples = 200_000;
            for (let i = 0; i < samples / 10; i++) await store.getTask(ids[(i * STRIDE) % ids.length]);
            const us = new Float64Array(samples);
            for (let i = 0; i < samples; i++) {
                const id = ids[(i * STRIDE) % ids.length];
                const t0 = now();
                const t = await store.getTask(id);
                us[i] = (now() - t0) * 1000;
                if (!t) throw new Error('get');
            }
            us.sort();
            report('get_p50_100k', percentile(us, 0.5), 'us');
            report('get_p99_100k', percentile(us, 0.99), 'us');
            // A full list walk; the SDK's page size is fixed at 10. Each page rebuilds the key
            // array, so the walk is O(n^2 / p): bounded at LIST_BUDGET_MS and extrapolated
            // linearly by pages (every page costs the same O(n) rebuild).
            const LIST_BUDGET_MS = 10_000;
            const t0 = now();
            let cursor;
            let pages = 0;
            let seen = 0;
            for (;;) {
                const page = await store.listTasks(cursor);
                pages++;
                seen += page.tasks.length;
                if (!page.nextCursor) break;
                cursor = page.nextCursor;
                if (now() - t0 > LIST_BUDGET_MS) break;
            }
            const ms = now() - t0;
            const totalPages = Math.ceil(n / 10);
            if (pages >= totalPages) {
                report('list_walk_100k_p10', ms, 'ms');
            } else {
                console.log(`NOTE ts list_walk_100k_p10 extrapolated from ${pages} of ${totalPages} pages (${seen} tasks) in ${ms.toFixed(0)} ms`);
                report('list_walk_100k_p10', (ms * totalPages) / pages, 'ms');
            }
        }
        store.cleanup();
    }
}

// Expiry: 1,000,000 tasks whose TTL timers all fall due at one moment. The SDK arms one
// setTimeout per task; the event loop runs the due timers. Measured: process CPU from the
// deadline until the map is empty, per task, and the longest gap a setImmediate prober sees
// (what any other request waits meanwhile). Before that, 10 s idle with the tasks pending.
async function runExpiry() {
    const N = 1_000_000;
    const store = new InMemoryTaskStore();
    const request = { method: 'tools/call', params: {} };
    const keeper = (await store.createTask({ ttl: null }, 0, request)).taskId;
    const t0 = now();
    const EXPIRE_AT_MS = 25_000;
    for (let i = 0; i < N; i++) {
        const left = Math.max(1, Math.round(EXPIRE_AT_MS - (now() - t0)));
        await store.createTask({ ttl: left }, i, request);
    }
    const created = now() - t0;
    if (created + 10_500 > EXPIRE_AT_MS) throw new Error(`creation took ${created} ms`);
    const idle0 = process.cpuUsage();
    await new Promise(r => setTimeout(r, 10_000));
    const idle = process.cpuUsage(idle0);
    report('idle_cpu_1m_10s', (idle.user + idle.system) / 1000, 'ms');
    // wait until just before the deadline
    await new Promise(r => setTimeout(r, Math.max(0, EXPIRE_AT_MS - (now() - t0) - 200)));
    let maxGap = 0;
    let last = now();
    let running = true;
    const gaps = [];
    const prober = () => {
        const t = now();
        const gap = t - last;
        gaps.push(gap);
        if (gap > maxGap) maxGap = gap;
        last = t;
        if (!store.getTask(keeper)) throw new Error('keeper');
        if (running) setImmediate(prober);
    };
    const cpu0 = process.cpuUsage();
    setImmediate(prober);
    await new Promise(resolve => {
        const check = () => (store.tasks.size <= 1 ? resolve() : setTimeout(check, 5));
        check();
    });
    const cpu = process.cpuUsage(cpu0);
    running = false;
    gaps.sort((a, b) => a - b);
    report('expire_1m_owner_cpu_per_task', ((cpu.user + cpu.system) / N), 'us');
    report('expire_1m_stall_max', maxGap, 'ms');
    report('expire_1m_stall_p99', percentile(gaps, 0.99), 'ms');
}

async function runMem(payload, n) {
    const store = new InMemoryTaskStore();
    const request = { method: 'tools/call', params: {} };
    global.gc?.();
    const base = process.memoryUsage().rss;
    for (let i = 0; i < n; i++) {
        const task = await store.createTask({ ttl: null }, i, request);
        if (payload > 0) {
            await store.storeTaskResult(task.taskId, 'completed', { content: [{ type: 'text', text: 'x'.repeat(payload) + i }] });
        }
    }
    global.gc?.();
    const grown = process.memoryUsage().rss - base;
    report(payload > 0 ? 'mem_per_task_1kb_result' : 'mem_per_task', grown / n, 'bytes');
}

const [mode, a, b] = process.argv.slice(2);
if (mode === 'mem') {
    await runMem(Number(a), Number(b));
} else if (mode === 'cycles') {
    await runCycles([1_000, 10_000, 100_000, 1_000_000]);
} else if (mode === 'expiry') {
    await runExpiry();
} else if (mode === 'all' || mode === undefined) {
    await runCycles([1_000, 10_000, 100_000, 1_000_000]);
    await runExpiry();
} else {
    console.error('usage: store.mjs [all | cycles | expiry | mem <payload> <n>]');
    process.exit(2);
}
