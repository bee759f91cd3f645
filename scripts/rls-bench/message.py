#!/usr/bin/env python3
"""The gRPC messages of scripts/rls-bench, without protoc.

  message.py request FILE [DOMAIN KEY VALUE]   writes one framed RateLimitRequest
  message.py response FILE                      prints a framed RateLimitResponse

`request` writes `RateLimitRequest { domain, descriptors: [{ entries: [{key,
value}] }], hits_addend: 0 }` (envoy.service.ratelimit.v3), protobuf-encoded
(hits_addend 0 is proto3's default, so absent), behind gRPC's 5-byte frame
header: a 0 compression flag and the message's length, 4 bytes big-endian.
`response` reads the body of an answer (curl's --output) and prints
overall_code and each status' code, limit and remaining, to check a call by
hand. Defaults: domain "edge", one entry user = alice.
"""
import struct
import sys

CODES = {0: "UNKNOWN", 1: "OK", 2: "OVER_LIMIT"}
UNITS = {0: "UNKNOWN", 1: "SECOND", 2: "MINUTE", 3: "HOUR", 4: "DAY", 5: "MONTH", 6: "YEAR", 7: "WEEK"}


def varint(n):
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def field(number, payload):
    """A length-delimited field (wire type 2)."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def request(domain, key, value):
    entry = field(1, key.encode()) + field(2, value.encode())
    descriptor = field(1, entry)
    return field(1, domain.encode()) + field(2, descriptor)


def framed(message):
    return b"\0" + struct.pack(">I", len(message)) + message


def fields(data):
    """(number, wire type, value) of each field of one message."""
    at = 0
    while at < len(data):
        tag, at = read_varint(data, at)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, at = read_varint(data, at)
        elif wire == 2:
            length, at = read_varint(data, at)
            value, at = data[at : at + length], at + length
        elif wire == 5:
            value, at = data[at : at + 4], at + 4
        elif wire == 1:
            value, at = data[at : at + 8], at + 8
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, value


def read_varint(data, at):
    n = shift = 0
    while True:
        byte = data[at]
        at += 1
        n |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return n, at


def response(body):
    if len(body) < 5:
        return "no message (a trailers-only answer: see grpc-status)"
    length = struct.unpack(">I", body[1:5])[0]
    message = body[5 : 5 + length]
    overall, statuses = 0, []
    for number, _, value in fields(message):
        if number == 1:
            overall = value
        elif number == 2:
            status = {"code": 0, "limit": None, "remaining": 0}
            for n, _, v in fields(value):
                if n == 1:
                    status["code"] = v
                elif n == 2:
                    limit = dict((m, w) for m, _, w in fields(v))
                    status["limit"] = (limit.get(1, 0), limit.get(2, 0))
                elif n == 3:
                    status["remaining"] = v
            statuses.append(status)
    parts = [f"overall_code={CODES.get(overall, overall)}"]
    for s in statuses:
        limit = "-" if s["limit"] is None else f"{s['limit'][0]}/{UNITS.get(s['limit'][1], s['limit'][1])}"
        parts.append(f"status code={CODES.get(s['code'], s['code'])} limit={limit} remaining={s['remaining']}")
    return "; ".join(parts)


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "request":
        domain, key, value = (sys.argv[3:6] + ["edge", "user", "alice"][len(sys.argv[3:6]):])
        with open(sys.argv[2], "wb") as out:
            out.write(framed(request(domain, key, value)))
    elif len(sys.argv) == 3 and sys.argv[1] == "response":
        with open(sys.argv[2], "rb") as body:
            print(response(body.read()))
    else:
        sys.exit(__doc__)
