"""The shared proxybench, with its `post:N` load's body a JSON-RPC call: an
MCP `tools/call` of exactly N bytes (its argument padded) that also says
`max_tokens`, sent with an `X-Api-Key` header, so that rules keyed on the
header alone, on the header and the call's method or tool, or reserving the
call's `max_tokens` are measured on the same requests (docs/ai-budgets.md,
"What it costs"; BENCHMARKS.md has the command and the figures).

    python3 scripts/jsonrpc-bench/proxybench.py --bench-dir ../shared/bench \\
        --scenarios nginx_post --candidate-spec scripts/jsonrpc-bench/sluice.json \\
        --rounds 5 --duration 5 --out-dir target/jsonrpc-bench

Every other argument is proxybench's own.
"""

import json
import os
import sys


def call(size):
    """A tools/call of exactly `size` bytes."""
    def text(pad):
        return json.dumps({
            "jsonrpc": "2.0", "id": 1, "method": "tools/call", "max_tokens": 100,
            "params": {"name": "search", "arguments": {"q": "a" * pad}},
        }, separators=(",", ":"))
    bare = len(text(0))
    if size < bare:
        raise SystemExit("a call takes at least %d bytes" % bare)
    return text(size - bare)


def main():
    args = sys.argv[1:]
    bench = "../shared/bench"
    if "--bench-dir" in args:
        at = args.index("--bench-dir")
        bench = args[at + 1]
        del args[at:at + 2]
    sys.path.insert(0, os.path.abspath(bench))
    import proxybench

    plain = proxybench.lua_body

    def lua_body(kind, n):
        if kind != "post":
            return plain(kind, n)
        return ('wrk.method = "POST"\nwrk.body = [==[%s]==]\n'
                'wrk.headers["Content-Type"] = "application/json"\n'
                'wrk.headers["X-Api-Key"] = "sk-bench-7f3a9c2e"\n' % call(n))

    proxybench.lua_body = lua_body
    sys.argv = [sys.argv[0]] + args
    return proxybench.main()


if __name__ == "__main__":
    sys.exit(main())
