#!/usr/bin/env python3
"""User-space instructions per WebSocket message with a message rule, under
callgrind (exact for a given binary): sluice (1 worker) in front of
scripts/bench/websocket.py's echo upstream, 8 tunnels each sending a 64-byte
message and waiting for its echo; 2 s of warm-up, counters zeroed, 5 s
counted, dumped, divided.

    scripts/callgrind/websocket.py BIN [BIN...]

Each binary is run twice, alternated. Loopback only, bounded.
"""
import asyncio, glob, os, subprocess, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import websocket as ws

TMP = os.environ.get("TMPDIR", "/tmp")

async def one(binary, label, seconds=5, conns=8):
    server, up = await ws.start_upstream()
    for f in glob.glob(f"{TMP}/wscg-{label}.out*"):
        os.remove(f)
    wrapper = f"{TMP}/wscg-{label}.sh"
    open(wrapper, "w").write(f"#!/bin/sh\nexec valgrind --tool=callgrind --callgrind-out-file={TMP}/wscg-{label}.out {binary} \"$@\"\n")
    os.chmod(wrapper, 0o755)
    process, port = ws.start_sluice(wrapper, up, ws.METERED)
    time.sleep(3)
    counts = [0]
    await asyncio.gather(*(ws.echo_loop(port, time.time() + 2, counts, 1) for _ in range(conns)))
    subprocess.run(["callgrind_control", "-z", str(process.pid)], capture_output=True)
    counts = [0]
    await asyncio.gather(*(ws.echo_loop(port, time.time() + seconds, counts, 1) for _ in range(conns)))
    subprocess.run(["callgrind_control", "-d", str(process.pid)], capture_output=True)
    time.sleep(1)
    process.terminate(); process.wait()
    server.close()
    irs = []
    for f in glob.glob(f"{TMP}/wscg-{label}.out.*"):
        out = subprocess.run(["callgrind_annotate", f], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if "PROGRAM TOTALS" in line:
                irs.append(int(line.split()[0].replace(",", "")))
    ir = max(irs)
    print(f"{label}: messages={counts[0]} Ir={ir} per_message={ir/counts[0]:.0f}", flush=True)

for round_ in (1, 2):
    for index, binary in enumerate(sys.argv[1:]):
        asyncio.run(one(binary, f"{index}-{os.path.basename(binary)}"))
