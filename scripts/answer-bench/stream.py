#!/usr/bin/env python3
"""An OpenAI chat-completions stream (`"stream": true` with
`stream_options.include_usage`), as the benchmark's upstreams send it.

    stream.py FILE [--events 300] [--prompt-tokens 57]

writes the body to FILE: EVENTS-2 `chat.completion.chunk` events (the first
with the role, then one word of content each, the last content one with
`finish_reason: "stop"`), every one with `"usage":null`; then one with
`"choices":[]` and the usage; then `data: [DONE]`. completion_tokens is the
number of content words. Prints `prompt_tokens completion_tokens bytes`.
timeline.py imports events() to send the same kind of events one by one.
"""
import json
import random
import sys

WORDS = ("the of and to in is that it for as with was on be by this are "
         "or at from an but not have which one all their can more has "
         "been its also when there were other into some such these than "
         "only time may then any most first after two used many over").split()


def events(n=300, prompt_tokens=57, seed=7):
    """The n events' lines (each `data: ...`, no blank line after) and the usage."""
    rnd = random.Random(seed)
    ident = "chatcmpl-" + "".join(rnd.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789") for _ in range(29))
    created = 1764150000
    head = {"id": ident, "object": "chat.completion.chunk", "created": created,
            "model": "gpt-4o-mini", "system_fingerprint": "fp_" + "%010x" % rnd.getrandbits(40)}
    words = n - 2  # the role event and the words; then the usage event (and [DONE], not counted)
    out = []
    def chunk(choices, usage):
        return "data: " + json.dumps(dict(head, choices=choices, usage=usage), separators=(",", ":"))
    out.append(chunk([{"index": 0, "delta": {"role": "assistant", "content": "", "refusal": None},
                       "logprobs": None, "finish_reason": None}], None))
    for i in range(words - 1):
        out.append(chunk([{"index": 0, "delta": {"content": rnd.choice(WORDS) + " "},
                           "logprobs": None, "finish_reason": None}], None))
    out.append(chunk([{"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}], None))
    completion = words - 1
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion,
             "total_tokens": prompt_tokens + completion,
             "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
             "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                           "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
    out.append(chunk([], usage))
    out.append("data: [DONE]")
    return out, usage


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--events", type=int, default=300)
    ap.add_argument("--prompt-tokens", type=int, default=57)
    a = ap.parse_args()
    lines, usage = events(a.events, a.prompt_tokens)
    body = "".join(line + "\n\n" for line in lines).encode()
    with open(a.file, "wb") as f:
        f.write(body)
    print(usage["prompt_tokens"], usage["completion_tokens"], len(body))


if __name__ == "__main__":
    sys.exit(main())
