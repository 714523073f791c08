#!/usr/bin/env python3
"""Side-by-side runs of Durable Streams servers on one machine (used by
scripts/bench-compare.sh): for each pair, every server in turn (the order
rotates from pair to pair), each workload on a freshly started server with a
fresh data directory, driven by loadgen; per run the achieved rate, p50/p99
and the server's CPU time per append (utime + stime of its process over the
measured window, from /proc). Prints every run, then per workload the
medians and the median of the per-pair ratios of the first server to each
other one. Writes everything as JSON to --out, keeps every loadgen report
in runs/ beside it, and draws one chart per workload (chart-WORKLOAD.svg,
`loadgen plot`): for each server the run of median throughput, overlaid.
"""
import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in scripts/lib
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cell  # noqa: E402 (scripts/lib/cell.py)
import server  # noqa: E402 (scripts/lib/server.py, beside this file)

TICK = os.sysconf("SC_CLK_TCK")

# name -> (connections, open-loop rate (0 = closed loop), loadgen --spread).
# 1 KiB durable appends. "rotate": request n of connection k goes to stream
# (n*C + k) mod 100, so every connection writes every stream; "pinned":
# connection k writes only stream k mod 100 (one writer per stream).
WORKLOADS = {
    "closed-c32": (32, 0, "rotate"),
    "closed-c128": (128, 0, "rotate"),
    "open-5k": (128, 5000, "rotate"),
    "open-20k": (128, 20000, "rotate"),
    "closed-c256": (256, 0, "rotate"),
    "pinned-c32": (32, 0, "pinned"),
    "pinned-c128": (128, 0, "pinned"),
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    """CPU time of a process and all its threads (and reaped children);
    of several processes together for a list of pids (a cell)."""
    if isinstance(pid, list):
        return sum(cpu_seconds(p) for p in pid)
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12]) + int(f[13]) + int(f[14])) / TICK


def command(name, port, data, a):
    if name == "electric":
        return [a.electric, "--host", "127.0.0.1", "--port", str(port), "--data-dir", data], None
    if name == "floor":  # no storage at all: what HTTP over these sockets costs (loadgen/src/bin/http-floor.rs)
        return [a.floor, "--listen", f"127.0.0.1:{port}"], None
    if name == "reference":
        env = dict(os.environ, DATA_DIR=data, PORT=str(port))
        return ["node", a.reference], env
    sys.exit(f"unknown server {name}")


class Cell:
    """A replicated cell of three ringstream nodes (scripts/lib/cell.py),
    one shard each, as one server: the load goes to node 1, which leads;
    its CPU is the three processes' together; it stops as a whole. Its
    nodes run --no-pin: pinned, all three would share the first CPU."""

    def __init__(self, binary, work):
        self.nodes = cell.start(binary, work, "--shards", "1", "--no-pin")
        self.pid = [n.pid for n in self.nodes]

    def poll(self):
        return None

    def terminate(self):
        for n in self.nodes:
            n.stop()

    def wait(self, timeout=None):
        return 0

    kill = terminate


def start(name, a, work):
    if name == "ringstream":  # pinned shards, default settings (scripts/lib/server.py)
        s = server.start(a.ringstream, work, *(["--shards", str(a.shards)] if a.shards else []))
        return s.proc, s.url
    if name == "ringstream-cell":  # three nodes, an ack once durable on two of them
        c = Cell(a.ringstream, work)
        return c, c.nodes[0].url
    port = free_port()
    data = os.path.join(work, "data")
    os.makedirs(data)
    cmd, env = command(name, port, data, a)
    log = open(os.path.join(work, "server.log"), "w")
    p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work)
    deadline = time.time() + 30
    while time.time() < deadline:
        if p.poll() is not None:
            sys.exit(f"{name} exited at start; see {log.name}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    p.kill()
    sys.exit(f"{name} did not listen within 30 s")


def run(name, workload, pair, a):
    conns, rate, spread = WORKLOADS[workload]
    work = tempfile.mkdtemp(prefix=f"ds-compare-{name}.")
    p, url = start(name, a, work)
    out = os.path.join(a.runs_dir, f"{workload}-{name}-pair{pair}.json")
    lg = [a.loadgen, "--target", url, "--surface", "v1", "--streams", str(a.streams), "--payload", "1024",
          "--spread", spread, "--connections", str(conns), "--rate", str(rate), "--duration", str(a.duration),
          "--warmup", str(a.warmup), "--quiet", "--allow-errors", "--label", name, "--out", out]
    g = subprocess.Popen(lg, stdout=subprocess.DEVNULL)
    time.sleep(a.warmup + 0.5)  # stream creation and warm-up are not measured
    c0 = cpu_seconds(p.pid)
    window = a.duration - 1.0
    time.sleep(window)
    c1 = cpu_seconds(p.pid)
    rc = g.wait()
    p.terminate()
    try:
        p.wait(timeout=15)
    except subprocess.TimeoutExpired:
        p.kill()
    if rc != 0 or not os.path.exists(out):
        sys.exit(f"loadgen failed against {name} ({workload}); logs in {work}")
    r = json.load(open(out))
    subprocess.run(["rm", "-rf", work])
    achieved = r["achieved_rate"]
    return {
        "server": name, "workload": workload, "rate": achieved, "errors": r["errors"], "report": out,
        "p50_us": r["latency_us"]["p50"], "p99_us": r["latency_us"]["p99"],
        "cpu_us_per_append": (c1 - c0) * 1e6 / max(achieved * window, 1.0),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default="ringstream,electric,reference")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=10.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--streams", type=int, default=100)
    ap.add_argument("--shards", type=int, default=0)
    ap.add_argument("--ringstream", default="target/release/ringstream")
    ap.add_argument("--electric", default="")
    ap.add_argument("--reference", default="")
    ap.add_argument("--loadgen", default="target/release/loadgen")
    ap.add_argument("--floor", default="target/release/http-floor")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    for k in ("ringstream", "electric", "reference", "loadgen", "floor"):
        if getattr(a, k):
            setattr(a, k, os.path.abspath(getattr(a, k)))
    servers = a.servers.split(",")
    workloads = a.workloads.split(",")
    a.runs_dir = os.path.join(os.path.dirname(os.path.abspath(a.out)), "runs")
    os.makedirs(a.runs_dir, exist_ok=True)
    runs = []
    for i in range(a.pairs):
        order = servers[i % len(servers):] + servers[:i % len(servers)]
        for w in workloads:
            for s in order:
                r = run(s, w, i + 1, a)
                r["pair"] = i + 1
                runs.append(r)
                print(f"pair {i + 1} {w:11} {s:10}: {r['rate']:8.0f}/s  p50 {r['p50_us']:7} us  p99 {r['p99_us']:8} us  "
                      f"CPU {r['cpu_us_per_append']:6.1f} us/append  errors {r['errors']}", flush=True)
    med = statistics.median
    summary = {}
    base = servers[0]
    print(f"\nmedians of {a.pairs} pairs; ratios are {base} / other, the median of per-pair ratios")
    for w in workloads:
        summary[w] = {}
        for s in servers:
            rs = [r for r in runs if r["workload"] == w and r["server"] == s]
            summary[w][s] = {k: med([r[k] for r in rs]) for k in ("rate", "p50_us", "p99_us", "cpu_us_per_append")}
            m = summary[w][s]
            print(f"{w:11} {s:10}: {m['rate']:8.0f}/s  p99 {m['p99_us']:8.0f} us  CPU {m['cpu_us_per_append']:6.1f} us/append")
        for s in servers[1:]:
            ratio = {}
            for k in ("rate", "p99_us", "cpu_us_per_append"):
                pairs = [(x[k], y[k]) for x in runs for y in runs if x["pair"] == y["pair"] and x["workload"] == w
                         and y["workload"] == w and x["server"] == base and y["server"] == s]
                vals = [x / y for x, y in pairs if y > 0]  # a peer that achieved nothing has no ratio
                ratio[k] = med(vals) if vals else None
            summary[w][f"{base}/{s}"] = ratio
            fmt = lambda v: "n/a" if v is None else f"{v:.2f}"
            print(f"{w:11} {base}/{s}: throughput {fmt(ratio['rate'])}x, p99 {fmt(ratio['p99_us'])}x, "
                  f"CPU per append {fmt(ratio['cpu_us_per_append'])}x")
    json.dump({"runs": runs, "summary": summary, "pairs": a.pairs, "duration": a.duration}, open(a.out, "w"), indent=1)
    charts(runs, servers, workloads, a)


def charts(runs, servers, workloads, a):
    """One chart per workload: each server's run of median throughput."""
    outdir = os.path.dirname(os.path.abspath(a.out))
    for w in workloads:
        picked = []
        for s in servers:
            rs = sorted((r for r in runs if r["workload"] == w and r["server"] == s), key=lambda r: r["rate"])
            if rs:
                picked.append(rs[(len(rs) - 1) // 2])
        conns, rate, spread = WORKLOADS[w]
        load = f"open loop {rate}/s" if rate else "closed loop"
        title = f"{w}: {conns} connections ({spread}), {load}, 1 KiB appends, {a.duration:g} s, median of {a.pairs}"
        out = os.path.join(outdir, f"chart-{w}.svg")
        cmd = [a.loadgen, "plot", *[r["report"] for r in picked], "--out", out, "--title", title]
        for r in picked:
            cmd += ["--label", f"{r['server']} (pair {r['pair']})"]
        subprocess.run(cmd, check=True)
        print(f"chart: {out}")


if __name__ == "__main__":
    main()
