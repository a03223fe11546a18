"""Reads RESULT lines and prints the ratio table and the targets (met / missed).

    python bench/report.py bench/results/results.txt
"""

import sys

IMPLS = ["ours", "mutex", "ts", "py", "rmcp"]
SIZES = ["1k", "10k", "100k", "1m"]


def load(path):
    r = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 5 and parts[0] == "RESULT":
                r[(parts[1], parts[2])] = (float(parts[3]), parts[4])
    return r


def fmt(v):
    if v is None:
        return "n/a"
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def main():
    r = load(sys.argv[1])
    get = lambda i, w: r.get((i, w), (None, None))[0]
    lines = []
    out = lines.append
    out("## Ratios (ours / other; > 1 means ours is better: faster, or for time and memory, smaller)")
    out("")
    out("| workload | unit | " + " | ".join(IMPLS) + " | ours/mutex | ours/ts | ours/py | ours/rmcp |")
    out("|---|---|" + "---|" * (len(IMPLS) + 4))
    rows = [(f"cycle_{s}", True) for s in SIZES]
    rows += [("cycle_100k_t2", True), ("cycle_100k_t8", True)]
    rows += [("get_p50_100k", False), ("get_p99_100k", False)]
    rows += [("list_walk_100k_p100", False), ("list_walk_100k_p10", False)]
    rows += [("expire_1m_owner_cpu_per_task", False), ("expire_1m_stall_max", False)]
    rows += [("idle_cpu_1m_10s", False)]
    rows += [("mem_per_task", False), ("mem_per_task_1kb_result", False)]
    for w, higher in rows:
        vals = {i: get(i, w) for i in IMPLS}
        unit = next((r[(i, w)][1] for i in IMPLS if (i, w) in r), None)
        if unit is None:
            continue
        ratios = []
        for other in ["mutex", "ts", "py", "rmcp"]:
            a, b = vals["ours"], vals[other]
            if a is None or b is None or a == 0 or b == 0:
                ratios.append("n/a")
            else:
                ratios.append(f"{(a / b if higher else b / a):.2f}x")
        out(f"| {w} | {unit} | " + " | ".join(fmt(vals[i]) for i in IMPLS) + " | " + " | ".join(ratios) + " |")
    # the list walk at each store's own page size
    out("")
    out("(list walk: ours and mutex at page size 100, py at 100, ts at its fixed 10; ts/py walks bounded at 10 s and extrapolated, see NOTE lines)")
    e_ours_l, e_ref_l = get("e2e-ours", "lifecycle_8_inflight"), get("e2e-ts-ref", "lifecycle_8_inflight")
    e_ours_g, e_ref_g = get("e2e-ours", "tasks_get_8_inflight"), get("e2e-ts-ref", "tasks_get_8_inflight")
    out("")
    out("| end to end (stdio, TS SDK client) | ours | TS reference server | ours/ref |")
    out("|---|---|---|---|")
    if e_ours_l and e_ref_l:
        out(f"| lifecycles/s, 8 in flight | {fmt(e_ours_l)} | {fmt(e_ref_l)} | {e_ours_l / e_ref_l:.2f}x |")
    if e_ours_g and e_ref_g:
        out(f"| tasks/get requests/s, 8 in flight | {fmt(e_ours_g)} | {fmt(e_ref_g)} | {e_ours_g / e_ref_g:.2f}x |")
    e_null_g = get("e2e-null", "tasks_get_8_inflight")
    if e_null_g and e_ref_g:
        out("")
        out(f"(`tasks/get` ceiling: the same client against `bench/ts/null-server.mjs`, which answers from a "
            f"template, reaches {fmt(e_null_g)} requests/s = {e_null_g / e_ref_g:.2f}x the reference, "
            f"about the most any server can get out of this client on this machine)")

    out("")
    out("## Targets")
    out("")

    def target(name, ok, detail):
        out(f"- {name}: {'MET' if ok else 'MISSED'} ({detail})")

    ts100 = get("ts", "cycle_100k")
    for w, label in [("cycle_100k", "1 caller"), ("cycle_100k_t2", "2 callers"), ("cycle_100k_t8", "8 callers")]:
        v = get("ours", w)
        if v is not None and ts100:
            target(f"1. cycle at 100k, {label} >= 1.25x TS", v >= 1.25 * ts100,
                   f"{fmt(v)} vs TS {fmt(ts100)} cycles/s = {v / ts100:.2f}x")
    p50, p99 = get("ours", "get_p50_100k"), get("ours", "get_p99_100k")
    if p50 is not None:
        target("2. get through the handle p50 <= 2 us", p50 <= 2, f"{p50:.2f} us")
        target("2. get through the handle p99 <= 15 us", p99 <= 15, f"{p99:.2f} us")
    c1k, c1m = get("ours", "cycle_1k"), get("ours", "cycle_1m")
    if c1k and c1m:
        target("3. cycle at 1m >= 0.4x cycle at 1k", c1m >= 0.4 * c1k, f"{fmt(c1m)} / {fmt(c1k)} = {c1m / c1k:.2f}x")
    e, s, idle = get("ours", "expire_1m_owner_cpu_per_task"), get("ours", "expire_1m_stall_max"), get("ours", "idle_cpu_1m_10s")
    if e is not None:
        target("4. expiry owner CPU <= 1.5 us/task", e <= 1.5, f"{e:.3f} us/task")
        target("4. no caller stalled > 1 ms during expiry", s <= 1.0, f"max get {s:.3f} ms")
        idle_owner = get("ours", "idle_owner_cpu_1m_10s")
        target("4. no measurable CPU idle 10 s with 1m pending", idle < 10,
               f"process {idle:.0f} ms (10 ms ticks), owner thread {idle_owner:.3f} ms")
    lw = get("ours", "list_walk_100k_p100")
    if lw is not None:
        target("5. list walk 100k at page 100 <= 25 ms", lw <= 25, f"{lw:.1f} ms")
    m = get("ours", "mem_per_task")
    if m is not None:
        target("6. memory per live task <= 300 bytes", m <= 300, f"{m:.0f} bytes")
    if e_ours_l and e_ref_l:
        target("7. e2e lifecycles >= 20x reference", e_ours_l >= 20 * e_ref_l, f"{e_ours_l / e_ref_l:.1f}x")
    if e_ours_g and e_ref_g:
        ceiling = f"; ceiling with this client {e_null_g / e_ref_g:.2f}x" if e_null_g else ""
        target("7. e2e tasks/get >= 3x reference", e_ours_g >= 3 * e_ref_g, f"{e_ours_g / e_ref_g:.2f}x{ceiling}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
