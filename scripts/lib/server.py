"""A ringstream server for the Python drivers of scripts/ (bench-pairs,
boot-loop, lib/compare.py): the contract of scripts/lib/server.sh, for
processes Python starts and measures itself.

start(binary, work, *flags): runs BINARY with --listen 127.0.0.1:0 (or
port=P), --data-dir WORK/data and FLAGS, stderr appended to WORK/err; reads
its "listening on" line (boot_s: from exec to that line), then waits for
/readyz to answer 200. A server that exits first, or is not ready within
30 s, ends the driver with the tail of WORK/err. The rest of stdout is
drained into WORK/out, so a chatty server never blocks on a full pipe.
"""
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request


class Server:
    def __init__(self, proc, url, boot_s, work):
        self.proc, self.url, self.boot_s, self.work = proc, url, boot_s, work
        self.pid = proc.pid

    def stop(self, timeout=15):
        """SIGTERM, then the exit status (SIGKILL after `timeout` s: None)."""
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None

    def stderr(self):
        with open(os.path.join(self.work, "err")) as f:
            return f.read()


def start(binary, work, *flags, port=0, ready_timeout=30.0):
    os.makedirs(work, exist_ok=True)
    err = open(os.path.join(work, "err"), "a")
    t0 = time.perf_counter()
    proc = subprocess.Popen([binary, "--listen", f"127.0.0.1:{port}", "--data-dir", os.path.join(work, "data"),
                             *flags], stdout=subprocess.PIPE, stderr=err, text=True)
    err.close()
    line = proc.stdout.readline()
    boot_s = time.perf_counter() - t0
    m = re.search(r"listening on .*?(127\.0\.0\.1:\d+)", line)
    if not m:
        _failed(proc, work, f"printed no listening line (first line: {line!r})")
    threading.Thread(target=_drain, args=(proc.stdout, os.path.join(work, "out")), daemon=True).start()
    server = Server(proc, f"http://{m.group(1)}", boot_s, work)
    _wait_ready(server, ready_timeout)
    return server


def _drain(pipe, path):
    with open(path, "a") as out:
        for line in pipe:
            out.write(line)


def _wait_ready(server, timeout):
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            _failed(server.proc, server.work, "exited before it was ready")
        try:
            with urllib.request.urlopen(server.url + "/readyz", timeout=2) as r:
                if r.status == 200:
                    return
                status = r.status
        except urllib.error.HTTPError as e:
            status = e.code
        except OSError as e:
            status = str(e)
        time.sleep(0.01)
    _failed(server.proc, server.work, f"answered /readyz with {status} for {timeout:.0f} s")


def _failed(proc, work, what):
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    tail = open(os.path.join(work, "err")).read().splitlines()[-20:]
    sys.exit(f"{os.path.basename(sys.argv[0]) or 'server.py'}: the server ({work}/data) {what}:\n" + "\n".join(tail))
