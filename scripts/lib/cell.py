"""A replicated cell of ringstream servers on loopback for the Python
drivers of scripts/ (bench-cell, bench-follower-reads, cell-tiering-test,
and server.sh's cell_start through peer_ports): the secret file (mode
600), free peer ports, the --cell flags, and the wait until node 1 (the
first voter, which every group is steered to be led by) leads.

start(binary, work, *flags, nodes=3): nodes 1..N, each a server.Server
(scripts/lib/server.py) with FLAGS and its own data directory under WORK;
ends the driver if node 1 does not lead within 30 s.
peer_ports(n, run): N peer ports, each free with the RUN - 1 after it.
write_secret(work): a cell secret file in WORK, mode 600; its path.
"""
import os
import random
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


def peer_ports(n, run=1):
    """`n` ports for a cell's peer listeners: a node's shard i listens on
    its --cell port + i, so each is free now with the `run` - 1 ports after
    it, no two runs overlap, and all lie below the kernel's ephemeral range
    (from 32768), where the servers' own HTTP ports (port 0) come from."""
    held, firsts = [], []
    while len(firsts) < n:
        first = random.randrange(20000, 32000 - run)
        if any(first < f + run and f < first + run for f in firsts):
            continue
        got = []
        for port in range(first, first + run):
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                s.close()
                break
            got.append(s)
        if len(got) == run:
            firsts.append(first)
            held.extend(got)
        else:
            for s in got:
                s.close()
    for s in held:
        s.close()
    return firsts


def write_secret(work):
    """A cell secret file in `work`, readable by its owner only."""
    path = os.path.join(work, "secret")
    with open(path, "wb") as f:
        f.write(os.urandom(32).hex().encode() + b"\n")
    os.chmod(path, 0o600)
    return path


def shards_of(flags):
    """The --shards value among `flags` (1 when absent)."""
    flags = list(flags)
    return int(flags[flags.index("--shards") + 1]) if "--shards" in flags else 1


def leads(url):
    """Whether the node at `url` leads every group (its /leaderz is 200)."""
    try:
        with urllib.request.urlopen(url + "/leaderz", timeout=2) as r:
            return r.status == 200
    except Exception:
        return False


def start(binary, work, *flags, nodes=3):
    secret = write_secret(work)
    ports = peer_ports(nodes, shards_of(flags))
    voters = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
    servers = [server.start(binary, os.path.join(work, f"n{i + 1}"), *flags, "--node-id", str(i + 1),
                            "--cell", voters, "--cell-secret-file", secret) for i in range(nodes)]
    deadline = time.monotonic() + 30
    while not leads(servers[0].url):
        if time.monotonic() > deadline:
            sys.exit("node 1 did not come to lead within 30 s")
        time.sleep(0.1)
    return servers
