"""The official Python SDK's InMemoryTaskStore (PyPI `mcp` 1.30.x) through the same
workloads as examples/compare.rs. Prints `RESULT py <workload> <value> <unit>`.

    python store.py all                  # cycles, get latency, list walk, expiry
    python store.py mem <payload> <n>    # one memory figure (fresh process)

Cycles: create_task -> get_task -> update_task(completed) + store_result -> get_result
(the SDK splits "store the result" into two calls; both are timed). The store expires
lazily: create, get and list scan every task, so each operation is O(n). Prefill inserts the
SDK's own StoredTask objects straight into the store's dict (untimed), because prefilling
through create_task would cost O(n^2); the timed operations all go through the public API.
Every workload is bounded in time; figures come from the operations that completed.
"""

import asyncio
import gc
import sys
import time

from mcp.shared.experimental.tasks.helpers import create_task_state
from mcp.shared.experimental.tasks.in_memory_task_store import InMemoryTaskStore, StoredTask
from mcp.types import CallToolResult, TaskMetadata, TextContent

CHUNK = 2000
BUDGET_S = 1.5
WARMUP_S = 0.3
CYCLE_TTL = 60_000
STRIDE = 7919


def report(workload, value, unit):
    print(f"RESULT py {workload} {value:.3f} {unit}", flush=True)


def note(text):
    print(f"NOTE py {text}", flush=True)


def size_label(n):
    if n >= 1_000_000:
        return f"{n // 1_000_000}m"
    if n >= 1_000:
        return f"{n // 1_000}k"
    return str(n)


def result_value(text="done"):
    return CallToolResult(content=[TextContent(type="text", text=text)])


def prefill(store, n, ttl=None):
    ids = []
    meta = TaskMetadata(ttl=ttl)
    for _ in range(n):
        task = create_task_state(meta)
        store._tasks[task.taskId] = StoredTask(task=task, expires_at=store._calculate_expiry(ttl))
        ids.append(task.taskId)
    return ids


async def cycle(store, meta):
    task = await store.create_task(meta)
    tid = task.taskId
    assert await store.get_task(tid) is not None
    await store.update_task(tid, status="completed")
    await store.store_result(tid, result_value())
    assert await store.get_result(tid) is not None
    return tid


async def cycles_per_sec(store, budget_s=BUDGET_S, warmup_s=WARMUP_S):
    """Chunks of at most CHUNK cycles (fewer when a cycle is slow), reclaimed between
    chunks (untimed)."""
    meta = TaskMetadata(ttl=CYCLE_TTL)
    timed = 0.0
    cycles = 0
    began = time.perf_counter()
    while True:
        warm = time.perf_counter() - began < warmup_s
        if not warm and timed >= budget_s:
            break
        ids = []
        t0 = time.perf_counter()
        while len(ids) < CHUNK and time.perf_counter() - t0 < budget_s:
            ids.append(await cycle(store, meta))
        dt = time.perf_counter() - t0
        if not warm:
            timed += dt
            cycles += len(ids)
        for tid in ids:
            del store._tasks[tid]
    return cycles / timed


async def run_cycles(sizes):
    for n in sizes:
        store = InMemoryTaskStore(page_size=100)
        ids = prefill(store, n)
        warmup = WARMUP_S if n <= 100_000 else 0.0
        report(f"cycle_{size_label(n)}", await cycles_per_sec(store, warmup_s=warmup), "cycles/s")
        if n == 100_000:
            samples = []
            t_end = time.perf_counter() + 3.0
            i = 0
            while time.perf_counter() < t_end and len(samples) < 200_000:
                tid = ids[(i * STRIDE) % len(ids)]
                t0 = time.perf_counter()
                assert await store.get_task(tid) is not None
                samples.append((time.perf_counter() - t0) * 1e6)
                i += 1
            samples.sort()
            note(f"get latency from {len(samples)} samples")
            report("get_p50_100k", samples[len(samples) // 2], "us")
            report("get_p99_100k", samples[round((len(samples) - 1) * 0.99)], "us")
            # list walk at page size 100 (the SDK lets us choose it), bounded and
            # extrapolated by pages (each page rebuilds the key list and scans for expiry).
            t0 = time.perf_counter()
            cursor = None
            pages = 0
            while True:
                _, cursor = await store.list_tasks(cursor)
                pages += 1
                if cursor is None or time.perf_counter() - t0 > 10.0:
                    break
            ms = (time.perf_counter() - t0) * 1e3
            total = -(-n // 100)
            if pages < total:
                note(f"list_walk_100k_p100 extrapolated from {pages} of {total} pages in {ms:.0f} ms")
                ms = ms * total / pages
            report("list_walk_100k_p100", ms, "ms")
        store.cleanup()
        gc.collect()


async def run_expiry():
    """1,000,000 tasks that are all due: the SDK reclaims them on the next access (a full
    scan inside that call). Measured: the CPU of that one call, per task, which is also how
    long the call (and the event loop) stalls."""
    n = 1_000_000
    store = InMemoryTaskStore()
    keeper = prefill(store, 1)[0]
    prefill(store, n, ttl=1)
    time.sleep(0.01)
    c0 = time.process_time()
    t0 = time.perf_counter()
    assert await store.get_task(keeper) is not None
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    assert len(store._tasks) == 1
    report("expire_1m_owner_cpu_per_task", cpu * 1e6 / n, "us")
    report("expire_1m_stall_max", wall * 1e3, "ms")


def rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


async def run_mem(payload, n):
    """RSS growth per task, tasks created through create_task with the lazy scan disabled
    for the fill (it would make the fill O(n^2); it allocates nothing that stays)."""
    store = InMemoryTaskStore()
    store._cleanup_expired = lambda: None
    meta = TaskMetadata(ttl=None)
    gc.collect()
    base = rss_bytes()
    for i in range(n):
        task = await store.create_task(meta)
        if payload:
            await store.update_task(task.taskId, status="completed")
            await store.store_result(task.taskId, result_value("x" * payload + str(i)))
    gc.collect()
    grown = rss_bytes() - base
    report("mem_per_task_1kb_result" if payload else "mem_per_task", grown / n, "bytes")


def main():
    args = sys.argv[1:]
    if args[:1] == ["mem"]:
        asyncio.run(run_mem(int(args[1]), int(args[2])))
    elif args[:1] == ["cycles"]:
        asyncio.run(run_cycles([1_000, 10_000, 100_000, 1_000_000]))
    elif args[:1] == ["expiry"]:
        asyncio.run(run_expiry())
    elif args in ([], ["all"]):
        asyncio.run(run_cycles([1_000, 10_000, 100_000, 1_000_000]))
        asyncio.run(run_expiry())
    else:
        print("usage: store.py [all | cycles | expiry | mem <payload> <n>]", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
