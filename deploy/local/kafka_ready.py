"""Wait until a Kafka broker answers a Metadata request: used by stack.sh, standard library only.

Usage: python3 kafka_ready.py HOST:PORT TIMEOUT_SECONDS [PID]

Sends Metadata v4 (the oldest version Kafka 4.x still serves, KIP-896) on a plain socket and waits for an
answer naming at least one broker and an active controller. Exits 0 when ready, 1 on timeout, 2 when the
process PID (the broker's JVM) died meanwhile. Needs no venv, so the stack starts before `make venv`.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import time

METADATA = 3
VERSION = 4


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by broker")
        buf += chunk
    return bytes(buf)


def _string(data: bytes, off: int) -> tuple[str | None, int]:
    (length,) = struct.unpack_from(">h", data, off)
    off += 2
    if length < 0:
        return None, off
    return data[off : off + length].decode(), off + length


def metadata(host: str, port: int, timeout: float) -> tuple[int, int]:
    """Return (number of brokers, controller id) from one Metadata v4 round trip."""
    client_id = b"gk-stack-probe"
    # Request header v1 (api key, version, correlation id, client id), body v4: topics=null (all), no auto-create.
    body = struct.pack(">hhih", METADATA, VERSION, 1, len(client_id)) + client_id + struct.pack(">ib", -1, 0)
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        sock.sendall(struct.pack(">i", len(body)) + body)
        (size,) = struct.unpack(">i", _recv_exact(sock, 4))
        data = _recv_exact(sock, size)
    # Response header v0 (correlation id), body v4: throttle ms, brokers[node id, host, port, rack], cluster id,
    # controller id, topics...
    _corr, _throttle, n_brokers = struct.unpack_from(">iii", data, 0)
    off = 12
    for _ in range(n_brokers):
        off += 4  # node id
        _host, off = _string(data, off)
        off += 4  # port
        _rack, off = _string(data, off)
    _cluster, off = _string(data, off)
    (controller,) = struct.unpack_from(">i", data, off)
    return n_brokers, controller


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str]) -> int:
    host, _, port = argv[1].rpartition(":")
    deadline = time.monotonic() + float(argv[2])
    pid = int(argv[3]) if len(argv) > 3 else None
    last = "no answer yet"
    while time.monotonic() < deadline:
        if pid is not None and not _alive(pid):
            print(f"kafka process {pid} exited", file=sys.stderr)
            return 2
        try:
            brokers, controller = metadata(host, int(port), timeout=2.0)
            if brokers >= 1 and controller >= 0:
                return 0
            last = f"brokers={brokers} controller={controller}"
        except (OSError, struct.error, UnicodeDecodeError) as exc:
            last = f"{type(exc).__name__}: {exc}"
        time.sleep(0.25)
    print(f"kafka at {host}:{port} not ready: {last}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
