#!/usr/bin/env bash
# Boots the release server again and again on one data directory, under
# background load, and reports how long each boot took: from the process
# start to its "listening" line, then SIGTERM and a clean exit. Fails if a
# boot takes longer than LIMIT_MS, logs a stall warning, or exits non-zero.
#
#   scripts/boot-loop.sh [BOOTS]        # default 300
# Environment: LIMIT_MS (3000), SHARDS (2), LOAD (2: busy-looping processes
# beside it; 0 for none), RINGSTREAM (the binary; default: build and use
# target/release/ringstream).
set -euo pipefail
cd "$(dirname "$0")/.."
BOOTS="${1:-300}"
if [ -z "${RINGSTREAM:-}" ]; then
  cargo build --release --quiet -p ringstream
  RINGSTREAM=target/release/ringstream
fi
exec python3 - "$RINGSTREAM" "$BOOTS" "${LIMIT_MS:-3000}" "${SHARDS:-2}" "${LOAD:-2}" <<'PY'
import os, signal, subprocess, sys, tempfile, time
binary, boots, limit_ms, shards, load = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
work = tempfile.mkdtemp(prefix="ringstream-boots.")
times, problems = [], []
try:
    for i in range(boots):
        err = open(os.path.join(work, "err"), "w+")
        t0 = time.perf_counter()
        p = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--data-dir", os.path.join(work, "data"),
                              "--shards", shards, "--no-pin"], stdout=subprocess.PIPE, stderr=err, text=True)
        line = p.stdout.readline()
        ms = (time.perf_counter() - t0) * 1000
        if "listening on" not in line:
            p.kill(); p.wait(); err.seek(0)
            sys.exit(f"boot {i}: no listening line; stderr:\n{err.read()}")
        times.append(ms)
        p.send_signal(signal.SIGTERM)
        rc = p.wait(timeout=15)
        err.seek(0); log = err.read()
        if rc != 0:
            problems.append(f"boot {i}: exit status {rc}")
        if "no progress" in log or "restarting the process" in log:
            problems.append(f"boot {i}: stalled: {log.strip().splitlines()[-1]}")
        if ms > limit_ms:
            problems.append(f"boot {i}: {ms:.0f} ms (limit {limit_ms} ms)")
finally:
    for b in burners:
        b.kill()
    subprocess.run(["rm", "-rf", work])
times.sort()
q = lambda f: times[min(len(times) - 1, int(f * len(times)))]
print(f"{len(times)} boots of {binary} ({shards} shards, {load} busy loops beside it): "
      f"median {q(0.5):.0f} ms, p99 {q(0.99):.0f} ms, slowest {times[-1]:.0f} ms; {len(problems)} problems")
for p in problems:
    print("  " + p)
sys.exit(1 if problems else 0)
PY
