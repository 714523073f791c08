"""The probes of scripts/netns-selftest.sh, run inside the namespace of
scripts/lib/netns.sh.

serve ADDR PORT: a TCP echo server on ADDR:PORT; prints "listening" once it
  listens. Each connection gets one line back: "ADDR heard PEER: LINE", so a
  client knows which address answered and which source address it saw.
check ADDR... [--cut A>B ...]: probes every directed pair of the ADDRs and
  compares with what the cuts predict (exit 1 on any difference):
  - tcp SRC DST: a client bound to (SRC, 0) connects to DST:7001 with a 1 s
    timeout and expects the echo; it works only when neither SRC>DST nor
    DST>SRC is cut (a TCP handshake needs packets both ways), else it times
    out;
  - udp SRC DST: one datagram from a socket bound to (SRC, 0) to a socket
    bound to (DST, 0), received within 1 s from SRC; it is delivered unless
    SRC>DST is cut: this is what shows a cut is one way.
"""
import concurrent.futures
import socket
import sys
import threading

PORT = 7001
TIMEOUT = 1.0


def serve(addr, port):
    lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lsock.bind((addr, port))
    lsock.listen(64)
    print("listening", flush=True)
    while True:
        conn, peer = lsock.accept()
        threading.Thread(target=_echo, args=(conn, peer), daemon=True).start()


def _echo(conn, peer):
    with conn:
        conn.settimeout(5)
        try:
            line = conn.makefile("rb").readline().decode().strip()
            conn.sendall(f"{conn.getsockname()[0]} heard {peer[0]}: {line}\n".encode())
        except OSError:
            pass


def tcp(src, dst):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(TIMEOUT)
    try:
        s.bind((src, 0))
        s.connect((dst, PORT))
        s.sendall(f"hello from {src}\n".encode())
        reply = s.makefile("rb").readline().decode().strip()
    except socket.timeout:
        return "timeout"
    except ConnectionRefusedError:
        return "refused"
    except OSError as e:
        return f"error {e}"
    finally:
        s.close()
    want = f"{dst} heard {src}: hello from {src}"
    return "works" if reply == want else f"wrong reply {reply!r} (want {want!r})"


def udp(src, dst):
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        rx.bind((dst, 0))
        rx.settimeout(TIMEOUT)
        tx.bind((src, 0))
        tx.sendto(b"ping", rx.getsockname())
        data, peer = rx.recvfrom(64)
        if (data, peer[0]) != (b"ping", src):
            return f"wrong datagram {data!r} from {peer[0]}"
        return "delivered"
    except socket.timeout:
        return "lost"
    except OSError as e:
        return f"error {e}"
    finally:
        rx.close()
        tx.close()


def check(args):
    cuts, addrs = set(), []
    it = iter(args)
    for a in it:
        if a == "--cut":
            src, dst = next(it).split(">")
            cuts.add((src, dst))
        else:
            addrs.append(a)
    probes = []
    for src in addrs:
        for dst in addrs:
            if src != dst:
                cut_tcp = (src, dst) in cuts or (dst, src) in cuts
                probes.append(("tcp", src, dst, "timeout" if cut_tcp else "works"))
                probes.append(("udp", src, dst, "lost" if (src, dst) in cuts else "delivered"))
    with concurrent.futures.ThreadPoolExecutor(len(probes)) as pool:
        got = list(pool.map(lambda p: (tcp if p[0] == "tcp" else udp)(p[1], p[2]), probes))
    failed = 0
    for (kind, src, dst, want), have in zip(probes, got):
        if have == want:
            print(f"  ok    {kind} {src} -> {dst}: {have}")
        else:
            failed += 1
            print(f"  FAIL  {kind} {src} -> {dst}: {have}, expected {want}")
    return 1 if failed else 0


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "serve":
        serve(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) > 2 and sys.argv[1] == "check":
        sys.exit(check(sys.argv[2:]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
