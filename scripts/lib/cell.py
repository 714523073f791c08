"""A replicated cell of ringstream servers on loopback for the Python
drivers of scripts/ (bench-cell, bench-follower-reads): the secret file
(mode 600), free peer ports, the --cell flags, and the wait until node 1
(the first voter, which every group is steered to be led by) leads.

start(binary, work, *flags, nodes=3): nodes 1..N, each a server.Server
(scripts/lib/server.py) with FLAGS and its own data directory under WORK;
ends the driver if node 1 does not lead within 30 s.
"""
import os
import socket
import sys
import time
import urllib.request

import server  # scripts/lib/server.py


def free_ports(n):
    """`n` ports free now (bound and let go)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def leads(url):
    """Whether the node at `url` leads every group (its /leaderz is 200)."""
    try:
        with urllib.request.urlopen(url + "/leaderz", timeout=2) as r:
            return r.status == 200
    except Exception:
        return False


def start(binary, work, *flags, nodes=3):
    secret = os.path.join(work, "secret")
    with open(secret, "w") as f:
        f.write("a benchmark cell secret, 32 bytes\n")
    os.chmod(secret, 0o600)
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(free_ports(nodes)))
    servers = [server.start(binary, os.path.join(work, f"n{i + 1}"), *flags, "--node-id", str(i + 1),
                            "--cell", voters, "--cell-secret-file", secret) for i in range(nodes)]
    deadline = time.monotonic() + 30
    while not leads(servers[0].url):
        if time.monotonic() > deadline:
            sys.exit("node 1 did not come to lead within 30 s")
        time.sleep(0.1)
    return servers
