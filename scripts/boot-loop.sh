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
. scripts/lib/build.sh
server_binary
exec python3 - "$SERVER_BIN" "$BOOTS" "${LIMIT_MS:-3000}" "${SHARDS:-2}" "${LOAD:-2}" <<'PY'
import os, signal, subprocess, sys, tempfile, time
sys.dont_write_bytecode = True  # no __pycache__ in scripts/lib
sys.path.insert(0, "scripts/lib")
import server  # scripts/lib/server.py
binary, boots, limit_ms, shards, load = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(load)]
work = tempfile.mkdtemp(prefix="ringstream-boots.")
times, problems = [], []
try:
    for i in range(boots):
        open(os.path.join(work, "err"), "w").close()  # this boot's log only
        try:
            s = server.start(binary, work, "--shards", shards, "--no-pin")
        except SystemExit as e:  # no listening line, or not ready: the log says why
            sys.exit(f"boot {i}: {e}")
        ms = s.boot_s * 1000  # from exec to the listening line
        times.append(ms)
        s.proc.send_signal(signal.SIGTERM)
        rc = s.proc.wait(timeout=15)
        log = s.stderr()
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
