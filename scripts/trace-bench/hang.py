#!/usr/bin/env python3
"""A collector that hangs: accepts every connection on 127.0.0.1:PORT (default
18491), never reads and never answers, and keeps the sockets open until it is
killed. Used by run.sh's `hang` part."""
import socket
import sys
import threading

port = int(sys.argv[1]) if len(sys.argv) > 1 else 18491
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind(("127.0.0.1", port))
server.listen(128)
held = []
lock = threading.Lock()
print(f"hang: listening on 127.0.0.1:{port}", flush=True)
while True:
    conn, _ = server.accept()
    with lock:
        held.append(conn)
