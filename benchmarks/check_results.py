#!/usr/bin/env python3
"""The benchmark suite's test (ctest -L bench): runs `run.sh --quick` into a temporary
directory and checks that its JSON holds every figure with a finite, positive value, baseline
and ratio, the run's description (command, date, host, commit), and that the three plots exist
and are not empty. It asserts nothing about speed: the machines are shared and noisy.

    check_results.py --run-sh benchmarks/run.sh --build BUILD_DIR
    check_results.py --json FILE --plots DIR     (check the output of a run already made)
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

TRANSPORTS = ["unix", "tcp"]
SHM_TRANSPORT = "unix (shm lane)"
QUICK_SIZES = [4 << 10, 64 << 10, 1 << 20, 16 << 20, 64 << 20]
QUICK_CLIENTS = [1, 4, 16]
PLOTS = ["latency.png", "bandwidth.png", "scaling.png"]


def positive(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def expected_ids(results):
    ids = ["dtoh4_p50_vs_blocking", "dtoh4_p99_vs_blocking", "dtoh4_p50_vs_spinning",
           "dtoh4_p99_vs_spinning", "launch_enqueue_ns", "launch_enqueue_rate",
           "launch_total_rate"]
    settings = results["settings"]
    for n in settings["sizes"]:
        for d in ("h2d", "d2h"):
            for host in ("pageable", "pinned"):
                ids.append("%s_%s_%d" % (d, host, n))
    for k in settings["client_counts"]:
        ids += ["scale_calls_per_s_%d" % k, "scale_p99_%d" % k, "scale_slowest_share_%d" % k]
    return ids


def check(json_path, plot_dir):
    problems = []
    with open(json_path) as f:
        results = json.load(f)
    for key in ("command", "date", "git_commit", "figures", "settings", "frames", "results"):
        if key not in results:
            problems.append("no %r in the JSON" % key)
    host = results.get("host", {})
    if not positive(host.get("nproc")) or not host.get("uname"):
        problems.append("host description incomplete: %r" % host)
    if problems:
        return problems
    if results.get("quick"):
        if results["settings"]["sizes"] != [n for n in QUICK_SIZES
                                            if n not in results["settings"]["skipped_sizes"]]:
            problems.append("quick sizes %r" % results["settings"]["sizes"])
        if results["settings"]["client_counts"] != QUICK_CLIENTS:
            problems.append("quick client counts %r" % results["settings"]["client_counts"])
    for call in ("dtoh4", "mem_get_info", "launch"):
        if not positive(results["frames"].get(call, {}).get("request")):
            problems.append("frame size of %s missing" % call)
    seen = set()
    for fig in results["figures"]:
        name = "%s (%s)" % (fig.get("id"), fig.get("transport"))
        seen.add((fig.get("id"), fig.get("transport")))
        for what, x in (("value", fig.get("value")),
                        ("baseline", fig.get("baseline", {}).get("value")),
                        ("ratio", fig.get("ratio"))):
            if not positive(x):
                problems.append("%s: %s is %r" % (name, what, x))
        if not fig.get("unit") or not fig.get("baseline", {}).get("name"):
            problems.append("%s: unit or baseline name missing" % name)
        if fig.get("group") == "bandwidth" and fig.get("transport") in TRANSPORTS and not positive(fig.get("also", {}).get("value")):
            problems.append("%s: memcpy baseline missing" % name)
    for transport in TRANSPORTS:
        for fid in expected_ids(results):
            if (fid, transport) not in seen:
                problems.append("figure %s (%s) missing" % (fid, transport))
    # The shared-memory lane's copies, against memcpy.
    for fid in expected_ids(results):
        if fid[:4] in ("h2d_", "d2h_") and (fid, SHM_TRANSPORT) not in seen:
            problems.append("figure %s (%s) missing" % (fid, SHM_TRANSPORT))
    for name in PLOTS:
        path = os.path.join(plot_dir, name)
        if not os.path.isfile(path) or os.path.getsize(path) == 0:
            problems.append("plot %s missing or empty" % path)
    return problems


def check_apps(json_path, plot_dir):
    """The application section: each program's unix: run and each link's, counted and
    modelled, and its plot."""
    problems = []
    if not os.path.isfile(json_path):
        return ["no application results %s" % json_path]
    with open(json_path) as f:
        results = json.load(f)
    links = [l.get("profile") for l in results.get("links", [])]
    if not links:
        problems.append("no link measured")
    for l in results.get("links", []):
        for key in ("rtt_p50_us", "gbit"):
            if not positive(l.get(key)):
                problems.append("link %s: %s is %r" % (l.get("profile"), key, l.get(key)))
    names = [p.get("name") for p in results.get("programs", [])]
    for want in ("train_loop", "bfs"):
        if want not in names:
            problems.append("program %s missing" % want)
    for p in results.get("programs", []):
        unix = p.get("unix", {})
        for key in ("wall_s", "round_trips", "calls"):
            if not positive(unix.get(key)):
                problems.append("%s over unix: %s is %r" % (p.get("name"), key, unix.get(key)))
        for prof in links:
            x = p.get("links", {}).get(prof, {})
            for key in ("wall_s", "slowdown", "model_slowdown"):
                if not positive(x.get(key)):
                    problems.append("%s over %s: %s is %r" % (p.get("name"), prof, key, x.get(key)))
            # The client counts the same calls whichever way the bytes go (programs that poll
            # make as many calls as their waits take; these two do not).
            if p.get("name") in ("train_loop", "bfs") and x.get("round_trips") != unix.get("round_trips"):
                problems.append("%s: %r round trips over %s, %r over unix:" %
                                (p.get("name"), x.get("round_trips"), prof, unix.get("round_trips")))
    path = os.path.join(plot_dir, "apps.png")
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        problems.append("plot %s missing or empty" % path)
    return problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-sh")
    ap.add_argument("--build")
    ap.add_argument("--json")
    ap.add_argument("--plots")
    args = ap.parse_args()
    if args.json:
        problems = check(args.json, args.plots or ".")
    else:
        if not args.run_sh or not args.build:
            ap.error("--run-sh and --build, or --json and --plots")
        with tempfile.TemporaryDirectory(prefix="cuwire-bench-test-") as tmp:
            json_path = os.path.join(tmp, "x.json")
            plot_dir = os.path.join(tmp, "plots")
            cmd = ["bash", args.run_sh, "--quick", "--no-build", "--build", args.build,
                   "--json", json_path, "--plot", plot_dir]
            print("+ " + " ".join(cmd), flush=True)
            rc = subprocess.call(cmd)
            if rc != 0:
                print("check_results: run.sh failed with status %d" % rc)
                return 1
            problems = check(json_path, plot_dir)
            problems += check_apps(os.path.join(tmp, "x-apps.json"), plot_dir)
    for p in problems:
        print("check_results: " + p)
    if problems:
        return 1
    print("check_results: every figure present, finite and positive; plots drawn")
    return 0


if __name__ == "__main__":
    sys.exit(main())
