"""300 sequential requests on one keep-alive connection; prints the seconds
they took. Usage: python3 client.py PORT [COUNT] [get|post|chunked]

`post` sends a 1 KiB body with Content-Length, `chunked` the same body in
four chunks; each request goes out in one write, as a client that does not
wait on Nagle itself sends it (TCP_NODELAY)."""
import socket
import sys
import time

port = int(sys.argv[1])
count = int(sys.argv[2]) if len(sys.argv) > 2 else 300
load = sys.argv[3] if len(sys.argv) > 3 else "get"

body = b"a" * 1024
if load == "get":
    request = b"GET / HTTP/1.1\r\nHost: n\r\n\r\n"
elif load == "post":
    request = b"POST / HTTP/1.1\r\nHost: n\r\nContent-Length: 1024\r\n\r\n" + body
else:
    chunks = b"".join(b"100\r\n" + body[i:i + 256] + b"\r\n" for i in range(0, 1024, 256))
    request = b"POST / HTTP/1.1\r\nHost: n\r\nTransfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n"

connection = socket.create_connection(("127.0.0.1", port))
connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
reader = connection.makefile("rb")
start = time.monotonic()
for _ in range(count):
    connection.sendall(request)
    status = reader.readline()
    assert b" 200 " in status, status
    length = 0
    while True:
        line = reader.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    reader.read(length)
took = time.monotonic() - start
print(f"{load}: {count} requests in {took:.2f} s ({1000 * took / count:.2f} ms each)")
