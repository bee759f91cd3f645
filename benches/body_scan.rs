//! What reading `json:<pointer>` charges costs a response body, in bytes
//! scanned per second on one core (the target is 1 GB/s), on the two
//! bodies an LLM API sends:
//!
//! - `openai-stream`: a chat-completions stream, 300 chunks of one word
//!   each with `"usage":null`, a last chunk with the usage, and
//!   `data: [DONE]`; fed one event per read, as an upstream sends them.
//!   Most chunks hold no `prompt_tokens` (nor a backslash), so they are
//!   never walked; the chunks whose word is `\n\n` are;
//! - `openai-stream-walked`: the same stream with a third pointer,
//!   `/created`, which every chunk holds: every event is walked, the
//!   scanner's worst case on this stream;
//! - `json-100k`: a 100 KiB non-streamed chat completion (one long
//!   `content` string with escapes, the usage at the end), fed in 16 KiB
//!   reads.
//!
//! They read `/usage/prompt_tokens` and `/usage/completion_tokens`. Each
//! iteration is one response: a new scanner, every read, the readings.
//! Before timing, a counting allocator reports the allocations of one
//! such scan (the scanner's `new` included), and per read.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice::body_scan::{BodyKind, BodyScanner, Pointer, Reading};

#[path = "common/counting_alloc.rs"]
mod counting_alloc;

const PROMPT_TOKENS: u64 = 1_234;
const WORDS: [&str; 12] = [
    "The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog", ".", "\\n\\n",
    " It",
];

/// `n` pseudo-random lower-case letters and digits (xorshift), as in ids.
fn id(seed: u64, n: usize) -> String {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"[(x % 62) as usize]
                as char
        })
        .collect()
}

/// The events of an OpenAI chat-completions stream of `chunks` words, each
/// a separate read.
fn openai_stream(chunks: usize) -> Vec<Vec<u8>> {
    let chat = format!("chatcmpl-{}", id(7, 29));
    let head = format!(
        r#""id":"{chat}","object":"chat.completion.chunk","created":1764151200,"model":"gpt-4o-mini","system_fingerprint":"fp_{}""#,
        id(11, 10).to_lowercase()
    );
    let mut events = Vec::new();
    events.push(format!(
        "data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null}},\"logprobs\":null,\"finish_reason\":null}}],\"usage\":null}}\n\n"
    ));
    for i in 0..chunks {
        let word = WORDS[i % WORDS.len()];
        events.push(format!(
            "data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{word}\"}},\"logprobs\":null,\"finish_reason\":null}}],\"usage\":null}}\n\n"
        ));
    }
    events.push(format!(
        "data: {{{head},\"choices\":[{{\"index\":0,\"delta\":{{}},\"logprobs\":null,\"finish_reason\":\"stop\"}}],\"usage\":null}}\n\n"
    ));
    events.push(format!(
        "data: {{{head},\"choices\":[],\"usage\":{{\"prompt_tokens\":{PROMPT_TOKENS},\"completion_tokens\":{chunks},\"total_tokens\":{},\"prompt_tokens_details\":{{\"cached_tokens\":0,\"audio_tokens\":0}},\"completion_tokens_details\":{{\"reasoning_tokens\":0,\"audio_tokens\":0,\"accepted_prediction_tokens\":0,\"rejected_prediction_tokens\":0}}}}}}\n\n",
        PROMPT_TOKENS as usize + chunks
    ));
    events.push("data: [DONE]\n\n".to_owned());
    events.into_iter().map(String::into_bytes).collect()
}

/// A non-streamed chat completion of about `size` bytes.
fn completion(size: usize) -> Vec<u8> {
    let mut content = String::new();
    let mut i = 0;
    while content.len() < size - 900 {
        content += WORDS[i % WORDS.len()];
        if i % 97 == 0 {
            content += " \\\"quoted\\\"";
        }
        i += 1;
    }
    format!(
        r#"{{"id":"chatcmpl-{}","object":"chat.completion","created":1764151200,"model":"gpt-4o-mini-2024-07-18","choices":[{{"index":0,"message":{{"role":"assistant","content":"{content}","refusal":null,"annotations":[]}},"logprobs":null,"finish_reason":"stop"}}],"usage":{{"prompt_tokens":{PROMPT_TOKENS},"completion_tokens":{i},"total_tokens":{},"prompt_tokens_details":{{"cached_tokens":0,"audio_tokens":0}},"completion_tokens_details":{{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}},"service_tier":"default","system_fingerprint":"fp_{}"}}"#,
        id(7, 29),
        PROMPT_TOKENS as usize + i,
        id(11, 10).to_lowercase()
    )
    .into_bytes()
}

/// One response: a scanner, every read, the first two readings.
fn scan(kind: BodyKind, pointers: &[&Pointer], reads: &[&[u8]]) -> [Reading; 2] {
    let mut scanner = BodyScanner::new(kind, pointers);
    for read in reads {
        scanner.feed(black_box(read));
    }
    [scanner.reading(0), scanner.reading(1)]
}

fn body_scan(c: &mut Criterion) {
    let prompt = Pointer::parse("/usage/prompt_tokens").unwrap();
    let completion_tokens = Pointer::parse("/usage/completion_tokens").unwrap();
    let created = Pointer::parse("/created").unwrap();
    let pointers = [&prompt, &completion_tokens];
    let walked = [&prompt, &completion_tokens, &created];

    let stream = openai_stream(300);
    let stream_reads: Vec<&[u8]> = stream.iter().map(Vec::as_slice).collect();
    let body = completion(100 * 1024);
    let body_reads: Vec<&[u8]> = body.chunks(16 * 1024).collect();

    let mut group = c.benchmark_group("body_scan");
    for (name, kind, pointers, reads) in [
        (
            "openai-stream",
            BodyKind::EventStream,
            &pointers[..],
            &stream_reads,
        ),
        (
            "openai-stream-walked",
            BodyKind::EventStream,
            &walked[..],
            &stream_reads,
        ),
        ("json-100k", BodyKind::Json, &pointers[..], &body_reads),
    ] {
        let bytes: usize = reads.iter().map(|read| read.len()).sum();
        let readings = scan(kind, pointers, reads);
        assert_eq!(readings[0], Reading::Number(PROMPT_TOKENS as f64), "{name}");
        assert!(
            matches!(readings[1], Reading::Number(n) if n > 0.0),
            "{name}"
        );
        let allocations = counting_alloc::allocations(|| scan(kind, pointers, reads));
        println!(
            "body_scan/{name}: {bytes} bytes in {} reads; {allocations} allocations per scan ({:.3} per read)",
            reads.len(),
            allocations as f64 / reads.len() as f64
        );
        group.throughput(Throughput::Bytes(bytes as u64));
        group.bench_function(name, |b| b.iter(|| scan(kind, pointers, black_box(reads))));
    }
    group.finish();
}

criterion_group!(benches, body_scan);
criterion_main!(benches);
