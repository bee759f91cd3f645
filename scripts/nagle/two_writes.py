"""An upstream as Python's http.server writes one: HTTP/1.1 keep-alive, the
head flushed by end_headers() and the body in a second write, with Nagle's
algorithm on (no TCP_NODELAY); a POST's body is read whole first.
Usage: python3 two_writes.py PORT"""
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        body = b"ok\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                self.rfile.read(size + 2)
                if size == 0:
                    break
        else:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.do_GET()


HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
