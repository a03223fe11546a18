"""Draws cycle throughput against live tasks for every implementation.

    python bench/chart.py bench/results/results.txt bench/cycles.png
"""

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SIZES = {"1k": 1_000, "10k": 10_000, "100k": 100_000, "1m": 1_000_000}
NAMES = {
    "ours": "mcp-task-store (handle, 1 caller)",
    "mutex": "parking_lot::Mutex<BTreeMap> (1 caller)",
    "ts": "TypeScript SDK InMemoryTaskStore 1.32.2",
    "py": "Python SDK InMemoryTaskStore 1.30.0",
    "rmcp": "rmcp 3.9.0 TaskManager",
}


def main():
    src, dst = sys.argv[1], sys.argv[2]
    data = {}
    with open(src) as f:
        for line in f:
            p = line.split()
            if len(p) == 5 and p[0] == "RESULT" and p[2].startswith("cycle_") and p[2][6:] in SIZES:
                data.setdefault(p[1], []).append((SIZES[p[2][6:]], float(p[3])))
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for impl, label in NAMES.items():
        pts = sorted(data.get(impl, []))
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("live tasks in the store")
    ax.set_ylabel("cycles per second (create, get, store result, get result)")
    ax.set_title("Task cycle throughput against store size (one run of bench/compare.sh)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(dst)


if __name__ == "__main__":
    main()
