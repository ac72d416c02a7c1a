#!/usr/bin/env python3
"""Draws the benchmark suite's plots from its JSON (benchmarks/run.sh writes both).

    plot.py RESULTS.json OUT_DIR

writes OUT_DIR/latency.png (CDF of the 4-byte synchronous copy against the raw ping-pongs, one
panel per transport), OUT_DIR/bandwidth.png (GiB/s against copy size, cuwire H2D/D2H against
the raw stream and memcpy, one panel per transport) and OUT_DIR/scaling.png (calls/s of all
clients and p99 latency against the number of client processes). Standard library and
matplotlib only.
"""

import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (after the backend is chosen)

TRANSPORTS = ["unix", "tcp"]


def subtitle(results):
    return "%s, %s, %s%s" % (
        results.get("git_commit", "?")[:12],
        results.get("date", "?"),
        "%s cores" % results.get("host", {}).get("nproc", "?"),
        " (quick)" if results.get("quick") else "",
    )


def latency(results, path):
    fig, axes = plt.subplots(1, len(TRANSPORTS), figsize=(12, 4.5), sharey=True)
    series = [("cuwire", "cuwire cuMemcpyDtoH 4 B"),
              ("raw_blocking", "raw ping-pong, blocking"),
              ("raw_spinning", "raw ping-pong, spinning")]
    for ax, transport in zip(axes, TRANSPORTS):
        data = results["results"]["latency"][transport]
        for key, label in series:
            cdf = data[key]["cdf"]
            us = [v / 1000.0 for v in cdf["ns"]]
            ax.plot(us, cdf["levels"], label="%s (p50 %.1f us)" % (label, data[key]["p50_ns"] / 1000.0))
        ax.set_xscale("log")
        ax.set_xlabel("latency (us, log)")
        ax.set_title(transport)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    axes[0].set_ylabel("share of calls at or below")
    fig.suptitle("4-byte synchronous copy latency, CDF - " + subtitle(results), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def points(results, transport, series):
    pts = results["results"].get("bandwidth", {}).get(transport, {}).get(series, [])
    pts = sorted((p["bytes"], p["gib_per_s"]) for p in pts if "gib_per_s" in p)
    return [p[0] for p in pts], [p[1] for p in pts]


def bandwidth(results, path):
    fig, axes = plt.subplots(1, len(TRANSPORTS), figsize=(12, 4.5), sharey=True)
    series = [("h2d_pageable", "cuwire H2D pageable", "-", "o"),
              ("h2d_pinned", "cuwire H2D pinned", "--", "o"),
              ("d2h_pageable", "cuwire D2H pageable", "-", "s"),
              ("d2h_pinned", "cuwire D2H pinned", "--", "s"),
              ("raw_up", "raw stream up", ":", "^"),
              ("raw_down", "raw stream down", ":", "v")]
    shm = "unix (shm lane)"
    for ax, transport in zip(axes, TRANSPORTS):
        for key, label, style, marker in series:
            x, y = points(results, transport, key)
            if x:
                ax.plot(x, y, style, marker=marker, label=label)
        if transport == "unix" and shm in results["results"].get("bandwidth", {}):
            for key in ("h2d_pageable", "d2h_pageable", "h2d_pinned", "d2h_pinned"):
                x, y = points(results, shm, key)
                if x:
                    ax.plot(x, y, "-.", marker="x", label="shm lane " + key.replace("_", " "))
        x, y = points(results, "host", "memcpy")
        ax.plot(x, y, "k-", alpha=0.5, label="single-thread memcpy")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(x)
        ax.set_xticklabels([size_label(s) for s in x], fontsize=8)
        ax.set_xlabel("copy size")
        ax.set_title(transport)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("GiB/s (log)")
    fig.suptitle("Copy bandwidth against size - " + subtitle(results), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def size_label(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return "%d %s" % (n >> shift, unit)
    return "%d B" % n


def scaling(results, path):
    fig, (rate_ax, p99_ax) = plt.subplots(1, 2, figsize=(12, 4.5))
    for transport in TRANSPORTS:
        data = results["results"]["scaling"][transport]
        for key, label, style in (("cuwire", "cuwire cuMemGetInfo", "-o"),
                                  ("raw", "raw blocking ping-pong", ":^")):
            rows = data[key]
            clients = [r["clients"] for r in rows]
            rate_ax.plot(clients, [r["calls_per_s"] for r in rows], style,
                         label="%s %s" % (label, transport))
            p99_ax.plot(clients, [r["p99_ns"] / 1000.0 for r in rows], style,
                        label="%s %s" % (label, transport))
    counts = sorted({r["clients"] for t in TRANSPORTS for r in results["results"]["scaling"][t]["cuwire"]})
    for ax in (rate_ax, p99_ax):
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts)
        ax.set_xticklabels([str(c) for c in counts])
        ax.set_xlabel("client processes")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    rate_ax.set_ylabel("calls/s, all clients")
    rate_ax.set_ylim(bottom=0)
    p99_ax.set_ylabel("p99 latency (us, log)")
    p99_ax.set_yscale("log")
    fig.suptitle("Synchronous calls from many clients - " + subtitle(results), fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1]) as f:
        results = json.load(f)
    os.makedirs(argv[2], exist_ok=True)
    latency(results, os.path.join(argv[2], "latency.png"))
    bandwidth(results, os.path.join(argv[2], "bandwidth.png"))
    scaling(results, os.path.join(argv[2], "scaling.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
