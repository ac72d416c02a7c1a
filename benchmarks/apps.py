#!/usr/bin/env python3
"""Whole programs over real network latencies (benchmarks/run.sh's application section).

Runs a set of real CUDA programs against one `gpu-server --backend sim`, first over its Unix
socket and then through cuwire-netem at each link profile (netem/netem.h), and reports per
program: wall time, the blocking round trips the client counted (its calls answered by a
reply), the bytes its calls carried each way, and the slowdown against unix:. A model projects
the slowdown at any link from those counts,

    T(link) = T(unix) + round_trips * added_rtt(link) + bytes_up / bw(link) + bytes_down / bw(link)

where added_rtt and bw are what the link was measured to deliver on this machine in the same
run (cuwire-netem --measure: its round trip less plain loopback's, and its bandwidth), and the
report shows the model beside the measurement.

    apps.py --build BUILD [--json FILE] [--plot DIR] [--quick] [--profiles 25gbe,10gbe]
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PROFILES = ["100gbe", "25gbe", "10gbe", "cross-rack"]
QUICK_PROFILES = ["25gbe"]

# (name, path under BUILD, arguments, quick arguments; None: not in the quick run). Programs
# whose binary is missing (tests not built) are left out and said so. All run on the sim's
# default profile (the toolkit's cuBLAS GEMMs need other profiles: tests/e2e/CMakeLists.txt).
PROGRAMS = [
    ("train_loop", "benchmarks/apps/train_loop", ["50"], ["20"]),
    ("bfs", "benchmarks/apps/bfs", ["4096"], ["1024"]),
    ("vector_add", "tests/e2e/vector_add_static", [], []),
    ("streams_events", "tests/e2e/streams_events_static", [], None),
    ("graphs", "tests/e2e/graphs_static", [], None),
    ("cufft_1d", "tests/e2e/cufft_1d_static", [], None),
    ("thrust_sort", "tests/e2e/thrust_sort_static", [], None),
]

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_bytes(text):
    if text == "-":
        return 0
    m = re.match(r"([0-9.]+) (B|KiB|MiB|GiB)$", text)
    return int(float(m.group(1)) * UNITS[m.group(2)]) if m else 0


def read_client_stats(path):
    """The client's table (CUWIRE_STATS=PATH): blocking round trips, calls, bytes each way."""
    out = {"round_trips": 0, "calls": 0, "bytes_up": 0, "bytes_down": 0}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 9 or parts[1] not in ("reply", "async", "local"):
                continue
            call, how, count = parts[0], parts[1], int(parts[2])
            size = parse_bytes(" ".join(parts[-2:]) if parts[-1] in UNITS else parts[-1])
            out["calls"] += count
            if how == "reply":
                out["round_trips"] += count
            # Copies from the device come down; everything else a call carries (copies to the
            # device, module images, parameters) goes up.
            if "DtoH" in call:
                out["bytes_down"] += size
            else:
                out["bytes_up"] += size
    return out


class Server:
    def __init__(self, build, tmp):
        self.socket = os.path.join(tmp, "s.sock")
        ready = os.path.join(tmp, "ready")
        self.log = open(os.path.join(tmp, "server.log"), "w")
        self.proc = subprocess.Popen(
            [os.path.join(build, "server/gpu-server"), "--listen", "unix:" + self.socket,
             "--backend", "sim", "--ready-file", ready],
            stdout=self.log, stderr=subprocess.STDOUT)
        for _ in range(600):
            if os.path.exists(ready):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError("gpu-server did not start; its log: " + self.log.name)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


class Link:
    """cuwire-netem forwarding tcp:127.0.0.1:PORT to the server's socket over a profile."""

    def __init__(self, netem, profile, to, idle_spin):
        self.proc = subprocess.Popen(
            [netem, "--listen", "tcp:127.0.0.1:0", "--to", "unix:" + to, "--profile", profile,
             "--idle-spin", idle_spin],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        first = self.proc.stdout.readline()
        m = re.match(r"cuwire-netem: (tcp:\S+) ->", first)
        if not m:
            self.proc.kill()
            raise RuntimeError("cuwire-netem did not start: " + first)
        self.address = m.group(1)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def run_program(build, path, args, server, stats_path, repeats):
    """The best wall time of `repeats` runs and the client's counts of the last one."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.path.join(build, "lib") + (
        ":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    env["CUWIRE_SERVER"] = server
    env["CUWIRE_STATS"] = stats_path
    env.pop("CUWIRE_TOKEN", None)
    best = None
    for _ in range(repeats):
        t0 = time.monotonic()
        r = subprocess.run([path] + args, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=900)
        wall = time.monotonic() - t0
        if r.returncode != 0:
            raise RuntimeError("%s %s failed (%d) over %s:\n%s" %
                               (path, " ".join(args), r.returncode, server, r.stdout[-2000:]))
        best = wall if best is None else min(best, wall)
    counts = read_client_stats(stats_path)
    counts["wall_s"] = best
    return counts


def measure_link(netem, profile, quick, idle_spin):
    r = subprocess.run([netem, "--measure", "--profile", profile, "--round-trips",
                        "300" if quick else "2000", "--bulk", "16MiB" if quick else "256MiB",
                        "--idle-spin", idle_spin, "--json"],
                       stdout=subprocess.PIPE, text=True, timeout=600, check=True)
    m = json.loads(r.stdout)
    return {
        "profile": profile,
        "asked_rtt_us": m["asked_rtt_us"],
        "asked_gbit": m["asked_gbit"],
        "rtt_p50_us": m["rtt_p50_us"],
        "direct_rtt_p50_us": m["direct_rtt_p50_us"],
        "added_rtt_us": max(0.0, m["rtt_p50_us"] - m["direct_rtt_p50_us"]),
        "gbit": m["gbit"],
    }


def model_seconds(unix, link):
    bw = link["gbit"] * 1e9 / 8
    return (unix["wall_s"] + unix["round_trips"] * link["added_rtt_us"] * 1e-6 +
            (unix["bytes_up"] + unix["bytes_down"]) / bw)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    programs = [p["name"] for p in results["programs"]]
    profiles = [l["profile"] for l in results["links"]]
    fig, axes = plt.subplots(1, len(profiles), figsize=(4.5 * len(profiles), 4.2), squeeze=False)
    for ax, prof in zip(axes[0], profiles):
        measured = [p["links"][prof]["slowdown"] for p in results["programs"]]
        model = [p["links"][prof]["model_slowdown"] for p in results["programs"]]
        xs = range(len(programs))
        ax.bar([x - 0.2 for x in xs], measured, 0.4, label="measured")
        ax.bar([x + 0.2 for x in xs], model, 0.4, label="model")
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(programs, rotation=45, ha="right", fontsize=8)
        ax.set_title(prof)
        ax.set_ylabel("wall time / unix:")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--json")
    ap.add_argument("--plot")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--profiles")
    ap.add_argument("--idle-spin", help="cuwire-netem's --idle-spin (default: 200us with 4 or "
                    "more cores, else 0: a spinning link would take a core from the program and "
                    "the server)")
    args = ap.parse_args()
    idle_spin = args.idle_spin or ("200us" if (os.cpu_count() or 1) >= 4 else "0us")
    build = os.path.abspath(args.build)
    json_path = args.json or os.path.join(build, "benchmarks/apps.json")
    plot_dir = args.plot or os.path.join(build, "benchmarks/plots")
    profiles = (args.profiles.split(",") if args.profiles else
                QUICK_PROFILES if args.quick else PROFILES)
    netem = os.path.join(build, "benchmarks/cuwire-netem")
    repeats = 1 if args.quick else 3
    programs = []
    for name, rel, full_args, quick_args in PROGRAMS:
        if args.quick and quick_args is None:
            continue
        path = os.path.join(build, rel)
        if not os.access(path, os.X_OK):
            print("apps: %s is not built (%s): left out" % (name, path), file=sys.stderr)
            continue
        programs.append((name, path, quick_args if args.quick else full_args))
    results = {
        "command": " ".join(sys.argv),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "host": {"nproc": os.cpu_count(), "uname": " ".join(platform.uname())},
        "quick": args.quick,
        "model": "T(link) = T(unix) + round_trips * added_rtt + (bytes_up + bytes_down) / bw",
        "idle_spin": idle_spin,
        "links": [measure_link(netem, p, args.quick, idle_spin) for p in profiles],
        "programs": [],
    }
    tmp = tempfile.mkdtemp(prefix="cuwire-apps-")
    server = None
    links = {}
    try:
        server = Server(build, tmp)
        for l in results["links"]:
            links[l["profile"]] = Link(netem, l["profile"], server.socket, idle_spin)
        stats = os.path.join(tmp, "stats.txt")
        for name, path, prog_args in programs:
            # Once first, unmeasured: the server's first session of a program loads its
            # modules and warms its caches, as a long-running job's later steps never see.
            run_program(build, path, prog_args, "unix:" + server.socket, stats, 1)
            unix = run_program(build, path, prog_args, "unix:" + server.socket, stats, repeats)
            entry = {"name": name, "args": prog_args, "unix": unix, "links": {}}
            for l in results["links"]:
                got = run_program(build, path, prog_args, links[l["profile"]].address, stats,
                                  repeats)
                model = model_seconds(unix, l)
                entry["links"][l["profile"]] = {
                    "wall_s": got["wall_s"],
                    "round_trips": got["round_trips"],
                    "slowdown": got["wall_s"] / unix["wall_s"],
                    "model_s": model,
                    "model_slowdown": model / unix["wall_s"],
                }
            results["programs"].append(entry)
    finally:
        for l in links.values():
            l.stop()
        if server:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    with open(json_path, "w") as f:
        json.dump(results, f, indent=1)
    os.makedirs(plot_dir, exist_ok=True)
    plot(results, os.path.join(plot_dir, "apps.png"))

    print("links (measured here): " + "; ".join(
        "%s +%.1f us RTT, %.1f Gbit/s" % (l["profile"], l["added_rtt_us"], l["gbit"])
        for l in results["links"]))
    head = "%-16s %9s %8s %10s %10s" % ("program", "unix s", "RTs", "up", "down")
    for l in results["links"]:
        head += " %21s" % (l["profile"] + " x (model)")
    print(head)
    for p in results["programs"]:
        u = p["unix"]
        row = "%-16s %9.3f %8d %10d %10d" % (p["name"], u["wall_s"], u["round_trips"],
                                             u["bytes_up"], u["bytes_down"])
        for l in results["links"]:
            x = p["links"][l["profile"]]
            row += " %13.3f (%5.3f)" % (x["slowdown"], x["model_slowdown"])
        print(row)
    print("apps: results in %s, plot in %s" % (json_path, os.path.join(plot_dir, "apps.png")),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
