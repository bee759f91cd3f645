"""300 sequential GETs on one keep-alive connection; prints the seconds they
took. Usage: python3 client.py PORT [COUNT]"""
import http.client
import sys
import time

port, count = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 300
connection = http.client.HTTPConnection("127.0.0.1", port)
start = time.monotonic()
for _ in range(count):
    connection.request("GET", "/")
    response = connection.getresponse()
    assert response.status == 200, response.status
    response.read()
took = time.monotonic() - start
print(f"{count} requests in {took:.2f} s ({1000 * took / count:.2f} ms each)")
