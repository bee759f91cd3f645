//! The scanner against its contract, and against `serde_json` (parse the
//! whole text, `Value::pointer`) as the reference: on JSON values, on
//! event streams split by a plain reading of the WHATWG rules, and on any
//! split of either into pieces. The deliberate differences from serde_json
//! are listed in `json.rs`'s module comment; the reference here models
//! them (`reference_reading`, `reference_value`).

use http::header::{HeaderValue, CONTENT_ENCODING, CONTENT_TYPE};
use proptest::prelude::*;
use serde_json::Value;

use super::*;

fn pointers(texts: &[&str]) -> Vec<Pointer> {
    texts
        .iter()
        .map(|text| Pointer::parse(text).unwrap())
        .collect()
}

/// The readings after feeding `pieces` in turn.
fn scan_pieces(kind: BodyKind, pointers: &[Pointer], pieces: &[&[u8]]) -> Vec<Reading> {
    let refs: Vec<&Pointer> = pointers.iter().collect();
    let mut scanner = BodyScanner::new(kind, &refs);
    for piece in pieces {
        scanner.feed(piece);
    }
    (0..pointers.len()).map(|p| scanner.reading(p)).collect()
}

/// The readings of `body` fed whole; fed a byte at a time and in two
/// halves, it must read the same.
fn scan(kind: BodyKind, texts: &[&str], body: &[u8]) -> Vec<Reading> {
    let pointers = pointers(texts);
    let whole = scan_pieces(kind, &pointers, &[body]);
    let bytes: Vec<&[u8]> = body.chunks(1).collect();
    assert_eq!(scan_pieces(kind, &pointers, &bytes), whole, "byte by byte");
    let (a, b) = body.split_at(body.len() / 2);
    assert_eq!(scan_pieces(kind, &pointers, &[a, b]), whole, "in halves");
    whole
}

fn json(texts: &[&str], body: &str) -> Vec<Reading> {
    scan(BodyKind::Json, texts, body.as_bytes())
}

fn events(texts: &[&str], body: &str) -> Vec<Reading> {
    scan(BodyKind::EventStream, texts, body.as_bytes())
}

use Reading::{Malformed, Missing, Number};

// ---------------------------------------------------------------- pointers

#[test]
fn pointers_unescape_and_name_indices() {
    let pointer = Pointer::parse("/a~1b/~0c/0/01/-/").unwrap();
    assert_eq!(pointer.as_str(), "/a~1b/~0c/0/01/-/");
    assert_eq!(pointer.to_string(), "/a~1b/~0c/0/01/-/");
    let segments: Vec<(&[u8], Option<usize>)> = pointer
        .segments()
        .iter()
        .map(|segment| (&segment.key[..], segment.index))
        .collect();
    assert_eq!(
        segments,
        [
            (&b"a/b"[..], None),
            (b"~c", None),
            (b"0", Some(0)),
            (b"01", None),
            (b"-", None),
            (b"", None),
        ]
    );
    // `~01` is `~1` as a name: `~0` first.
    assert_eq!(
        &Pointer::parse("/~01").unwrap().segments()[0].key[..],
        b"~1"
    );
}

#[test]
fn bad_pointers_say_why_with_an_example() {
    for (text, says) in [
        ("", "starts with \"/\""),
        ("usage/total_tokens", "must start with \"/\""),
        ("/a~", "~0"),
        ("/a~2", "~0"),
        ("/~x/b", "~1"),
    ] {
        let error = Pointer::parse(text).unwrap_err();
        assert!(error.contains(says), "{text:?}: {error}");
        assert!(error.contains("e.g."), "{text:?}: {error}");
    }
    let deep = "/a".repeat(json::MAX_DEPTH + 1);
    assert!(Pointer::parse(&deep).unwrap_err().contains("never match"));
    assert!(Pointer::parse(&"/a".repeat(json::MAX_DEPTH)).is_ok());
}

// ------------------------------------------------------------- body kinds

fn kind_of(content_type: Option<&str>, encodings: &[&str]) -> Option<BodyKind> {
    let mut headers = HeaderMap::new();
    if let Some(content_type) = content_type {
        headers.insert(CONTENT_TYPE, HeaderValue::from_str(content_type).unwrap());
    }
    for encoding in encodings {
        headers.append(CONTENT_ENCODING, HeaderValue::from_str(encoding).unwrap());
    }
    BodyKind::of(&headers)
}

#[test]
fn json_and_event_stream_content_types_are_read() {
    for content_type in [
        "application/json",
        "Application/JSON",
        "application/json; charset=utf-8",
        "application/json;charset=UTF-8",
        "application/problem+json",
        "application/vnd.api+json; ext=bulk",
        "application/ld+JSON",
    ] {
        assert_eq!(
            kind_of(Some(content_type), &[]),
            Some(BodyKind::Json),
            "{content_type}"
        );
    }
    for content_type in [
        "text/event-stream",
        "text/event-stream; charset=utf-8",
        "TEXT/Event-Stream",
    ] {
        assert_eq!(
            kind_of(Some(content_type), &[]),
            Some(BodyKind::EventStream),
            "{content_type}"
        );
    }
    for content_type in [
        "text/plain",
        "application/jsonl",
        "application/x-ndjson",
        "text/json-seq",
        "application/+json",
        "+json",
        "application/octet-stream",
        "text/html; profile=application/json",
    ] {
        assert_eq!(kind_of(Some(content_type), &[]), None, "{content_type}");
    }
    assert_eq!(kind_of(None, &[]), None);
}

#[test]
fn content_coded_bodies_are_not_read() {
    assert_eq!(kind_of(Some("application/json"), &["gzip"]), None);
    assert_eq!(kind_of(Some("text/event-stream"), &["br"]), None);
    assert_eq!(
        kind_of(Some("application/json"), &["identity", "gzip"]),
        None
    );
    assert_eq!(kind_of(Some("application/json"), &["identity, gzip"]), None);
    assert_eq!(
        kind_of(Some("application/json"), &["identity"]),
        Some(BodyKind::Json)
    );
    assert_eq!(
        kind_of(Some("application/json"), &["IDENTITY"]),
        Some(BodyKind::Json)
    );
}

// ------------------------------------------------------------ JSON bodies

#[test]
fn a_json_body_gives_its_numbers() {
    let body =
        r#"{"id":"x","usage":{"prompt_tokens":12,"completion_tokens":30.5,"total_tokens":4.25e1}}"#;
    assert_eq!(
        json(
            &[
                "/usage/prompt_tokens",
                "/usage/completion_tokens",
                "/usage/total_tokens",
                "/usage/other",
                "/id"
            ],
            body
        ),
        [Number(12.0), Number(30.5), Number(42.5), Missing, Malformed]
    );
}

#[test]
fn values_that_are_not_numbers_at_or_above_zero_are_malformed() {
    for (value, reading) in [
        ("0", Number(0.0)),
        ("-0", Number(0.0)),
        ("-0.0e7", Number(0.0)),
        ("7", Number(7.0)),
        ("1.5", Number(1.5)),
        ("2E3", Number(2000.0)),
        ("2e+3", Number(2000.0)),
        ("25e-1", Number(2.5)),
        ("0.000001", Number(0.000001)),
        ("18446744073709551616", Number(18446744073709551616.0)),
        ("1.7976931348623157e308", Number(f64::MAX)),
        ("1e-400", Number(0.0)),
        ("1e400", Malformed),
        ("1e99999999999999999999999", Malformed),
        ("-1", Malformed),
        ("-0.5", Malformed),
        ("\"12\"", Malformed),
        ("null", Malformed),
        ("true", Malformed),
        ("false", Malformed),
        ("{}", Malformed),
        ("{\"a\":1}", Malformed),
        ("[1]", Malformed),
    ] {
        assert_eq!(
            json(&["/v"], &format!("{{\"v\":{value}}}")),
            [reading],
            "{value}"
        );
        assert_eq!(
            json(&["/v"], &format!("{{ \"v\" : {value} }}")),
            [reading],
            "{value}"
        );
        assert_eq!(json(&["/0"], &format!("[{value}]")), [reading], "{value}");
    }
}

#[test]
fn long_numbers_round_to_the_nearest_f64() {
    let long = format!("1{}", "0".repeat(300));
    assert_eq!(json(&["/v"], &format!("{{\"v\":{long}}}")), [Number(1e300)]);
    let long = format!("0.{}1", "0".repeat(300));
    assert_eq!(
        json(&["/v"], &format!("{{\"v\":{long}}}")),
        [Number(1e-301)]
    );
    let digits = "12345678901234567890123456789012345678901234567890";
    assert_eq!(
        json(&["/v"], &format!("{{\"v\":{digits}.5}}")),
        [Number(digits.parse().unwrap())]
    );
    let third = format!("0.{}", "3".repeat(500));
    assert_eq!(
        json(&["/v"], &format!("{{\"v\":{third}}}")),
        [Number(1.0 / 3.0)]
    );
}

#[test]
fn invalid_numbers_end_the_read() {
    for text in [
        "01", "1.", ".5", "-", "1e", "1e+", "+1", "0x10", "1.e3", "--1", "1ee2",
    ] {
        assert_eq!(
            json(&["/v", "/w"], &format!("{{\"w\":1,\"v\":{text}}}")),
            [Missing, Number(1.0)],
            "{text}"
        );
    }
}

#[test]
fn values_count_as_they_are_scanned() {
    // Cut off after the value, or broken after it.
    assert_eq!(
        json(&["/a", "/b"], r#"{"a":3,"b":"#),
        [Number(3.0), Missing]
    );
    assert_eq!(json(&["/a"], r#"{"a":3,]"#), [Number(3.0)]);
    assert_eq!(json(&["/a"], r#"{"a":3}{"a":4}"#), [Number(3.0)]);
    // A number the body ends inside might have gone on.
    assert_eq!(json(&["/a"], r#"{"a":3"#), [Missing]);
    // Nothing after a break is read.
    assert_eq!(
        json(&["/a", "/b"], r#"{"a":3,,"b":4}"#),
        [Number(3.0), Missing]
    );
}

#[test]
fn a_repeated_key_is_the_last_one() {
    assert_eq!(json(&["/a"], r#"{"a":1,"a":2}"#), [Number(2.0)]);
    assert_eq!(json(&["/a"], r#"{"a":1,"a":"x"}"#), [Malformed]);
    assert_eq!(json(&["/u/a"], r#"{"u":{"a":1},"u":{"b":2}}"#), [Missing]);
    assert_eq!(json(&["/u/a"], r#"{"u":{"a":1},"u":null}"#), [Missing]);
    assert_eq!(
        json(&["/u/a"], r#"{"u":{"a":1},"u":{"a":5}}"#),
        [Number(5.0)]
    );
    assert_eq!(
        json(&["/u/a"], r#"{"u":{"a":1,"b":2,"a":3}}"#),
        [Number(3.0)]
    );
}

#[test]
fn array_indices_match_elements_and_keys_match_members() {
    let body = r#"{"c":[{"n":1},{"n":2},[3,4]],"0":{"n":9},"01":5,"-":6}"#;
    assert_eq!(
        json(
            &["/c/0/n", "/c/1/n", "/c/2/1", "/c/3", "/0/n", "/c/01/n", "/01", "/-", "/c/-"],
            body
        ),
        [
            Number(1.0),
            Number(2.0),
            Number(4.0),
            Missing,
            Number(9.0),
            Missing,
            Number(5.0),
            Number(6.0),
            Missing
        ]
    );
    // An index does not name an object's member unless it is its name.
    assert_eq!(json(&["/c/0"], r#"{"c":{"x":1}}"#), [Missing]);
    assert_eq!(json(&["/0/0"], r#"[[7]]"#), [Number(7.0)]);
}

#[test]
fn escaped_keys_are_compared_unescaped() {
    let body =
        r#"{"\u0075sage":{"a\/b":1,"t\"q":2,"\u00e9":3,"\ud83d\ude00":4,"~":5,"a\\b":6,"\n":7}}"#;
    assert_eq!(
        json(
            &[
                "/usage/a~1b",
                "/usage/t\"q",
                "/usage/é",
                "/usage/😀",
                "/usage/~0",
                "/usage/a\\b",
                "/usage/\n"
            ],
            body
        ),
        [
            Number(1.0),
            Number(2.0),
            Number(3.0),
            Number(4.0),
            Number(5.0),
            Number(6.0),
            Number(7.0)
        ]
    );
    // A key longer or shorter than the segment, or a prefix of it.
    assert_eq!(json(&["/ab"], r#"{"a":1,"abc":2,"ab":3}"#), [Number(3.0)]);
    assert_eq!(json(&["/"], r#"{"a":1,"":2}"#), [Number(2.0)]);
}

#[test]
fn invalid_strings_end_the_read() {
    for string in [
        r#""\ud800""#,
        r#""\ud800x""#,
        r#""\ud800\n""#,
        r#""\ud800\u0041""#,
        r#""\udc00""#,
        r#""\x""#,
        r#""\u12g4""#,
        "\"a\u{1}b\"",
        "\"tab\there\"",
    ] {
        assert_eq!(
            json(
                &["/v", "/w"],
                &format!("{{\"w\":1,\"s\":{string},\"v\":2}}")
            ),
            [Missing, Number(1.0)],
            "{string}"
        );
        // The same in a key being compared.
        assert_eq!(
            json(&["/v", "/w"], &format!("{{\"w\":1,{string}:0,\"v\":2}}")),
            [Missing, Number(1.0)],
            "{string}"
        );
    }
}

#[test]
fn nesting_deeper_than_serde_json_allows_is_not_json() {
    for depth in [json::MAX_DEPTH - 1, json::MAX_DEPTH, json::MAX_DEPTH + 1] {
        // `depth` containers: arrays around an object holding the value.
        let text = format!(
            "{}{{\"v\":1}}{}",
            "[".repeat(depth - 1),
            "]".repeat(depth - 1)
        );
        let serde = serde_json::from_str::<Value>(&text).is_ok();
        assert_eq!(serde, depth <= json::MAX_DEPTH, "serde_json's limit");
        // An event counts only if it is JSON.
        let expected = if serde { Malformed } else { Missing };
        assert_eq!(
            events(&["/0"], &format!("data: {text}\n\n")),
            [expected],
            "depth {depth}"
        );
        if serde {
            let pointer = format!("{}/v", "/0".repeat(depth - 1));
            assert_eq!(json(&[&pointer], &text), [Number(1.0)], "depth {depth}");
        }
    }
    // Far deeper: no panic, nothing read.
    let text = "[".repeat(100_000);
    assert_eq!(json(&["/a"], &text), [Missing]);
}

#[test]
fn a_json_body_is_read_to_its_first_mebibyte() {
    let head = r#"{"early":1,"pad":""#;
    let middle = r#"","v":2,"#;
    // The comma ending `2` is the limit's fourth-last byte; `"late":3`
    // straddles the limit.
    let filler = "x".repeat(READ_LIMIT - head.len() - middle.len() - 3);
    let body = format!(r#"{head}{filler}{middle}"late":3}}"#);
    assert_eq!(body.find(r#""late""#), Some(READ_LIMIT - 3));
    let pointers = pointers(&["/early", "/late", "/v"]);
    for piece in [body.len(), 16384, 1000] {
        let pieces: Vec<&[u8]> = body.as_bytes().chunks(piece).collect();
        assert_eq!(
            scan_pieces(BodyKind::Json, &pointers, &pieces),
            [Number(1.0), Missing, Number(2.0)],
            "{piece}"
        );
    }
}

#[test]
fn the_top_value_may_be_anything_and_whitespace_surrounds_it() {
    assert_eq!(json(&["/a"], " \t\r\n{ \"a\" :\n1 } \n"), [Number(1.0)]);
    assert_eq!(json(&["/a"], "[1,2]"), [Missing]);
    assert_eq!(json(&["/a"], "12"), [Missing]);
    assert_eq!(json(&["/a"], ""), [Missing]);
    // A byte order mark is not JSON (serde_json refuses it too).
    assert_eq!(json(&["/a"], "\u{feff}{\"a\":1}"), [Missing]);
}

// ---------------------------------------------------------- event streams

/// An OpenAI-style chat completion stream: `usage: null` until the last chunk.
fn openai_stream(line_end: &str) -> String {
    let mut stream = String::new();
    for word in ["Hello", " there", "!"] {
        stream += &format!(
            "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{word}\"}},\"finish_reason\":null}}],\"usage\":null}}{line_end}{line_end}"
        );
    }
    stream += &format!("data: {{\"id\":\"chatcmpl-1\",\"choices\":[],\"usage\":{{\"prompt_tokens\":11,\"completion_tokens\":3,\"total_tokens\":14}}}}{line_end}{line_end}");
    stream += &format!("data: [DONE]{line_end}{line_end}");
    stream
}

#[test]
fn openai_streams_charge_the_last_chunks_usage() {
    for line_end in ["\n", "\r\n", "\r"] {
        assert_eq!(
            events(
                &["/usage/prompt_tokens", "/usage/completion_tokens", "/usage"],
                &openai_stream(line_end)
            ),
            [Number(11.0), Number(3.0), Malformed],
            "{line_end:?}"
        );
    }
}

#[test]
fn usage_null_chunks_after_the_usage_erase_nothing() {
    let stream = "data: {\"usage\":{\"total_tokens\":5}}\n\ndata: {\"usage\":null}\n\ndata: {\"choices\":[]}\n\ndata: [DONE]\n\n";
    assert_eq!(events(&["/usage/total_tokens"], stream), [Number(5.0)]);
}

#[test]
fn anthropic_streams_charge_the_last_count_of_each() {
    let stream = concat!(
        "event: message_start\n",
        "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\n\n",
        "event: content_block_start\n",
        "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        "event: ping\n",
        "data: {\"type\": \"ping\"}\n\n",
        "event: content_block_delta\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7}}\n\n",
        "event: message_delta\n",
        "data: {\"type\":\"message_delta\",\"delta\":{},\"usage\":{\"output_tokens\":15}}\n\n",
        "event: message_stop\n",
        "data: {\"type\":\"message_stop\"}\n\n",
    );
    assert_eq!(
        events(
            &[
                "/message/usage/input_tokens",
                "/usage/output_tokens",
                "/message/usage/output_tokens"
            ],
            stream
        ),
        [Number(25.0), Number(15.0), Number(1.0)]
    );
}

#[test]
fn a_cr_ending_one_piece_and_an_lf_starting_the_next_are_one_line_end() {
    let pointers = pointers(&["/a"]);
    // Were CR and LF two line ends, the LF would dispatch the first event
    // with half its data (not JSON), and the second one would be one value.
    let pieces: [&[u8]; 4] = [b"data: {\"a\":\r", b"\ndata: 1}\r", b"\n\r", b"\n"];
    assert_eq!(
        scan_pieces(BodyKind::EventStream, &pointers, &pieces),
        [Number(1.0)]
    );
    // CR then CR is a blank line.
    assert_eq!(events(&["/a"], "data: {\"a\":2}\r\r"), [Number(2.0)]);
    // LF then CR: two line ends.
    assert_eq!(events(&["/a"], "data: {\"a\":3}\n\r"), [Number(3.0)]);
    // CRLF then LF: a blank line.
    assert_eq!(events(&["/a"], "data: {\"a\":4}\r\n\n"), [Number(4.0)]);
    // CRLF alone ends one line, not two.
    assert_eq!(events(&["/a"], "data: {\"a\":5}\r\n"), [Missing]);
}

#[test]
fn data_lines_of_one_event_join_with_lf() {
    assert_eq!(
        events(&["/a/b"], "data: {\"a\":\ndata:{\"b\"\ndata:  : 2}}\n\n"),
        [Number(2.0)]
    );
    // Joined, two values are not one.
    assert_eq!(
        events(&["/a"], "data: {\"a\":1}\ndata: {\"a\":2}\n\n"),
        [Missing]
    );
    // An LF inside a string is not JSON.
    assert_eq!(
        events(&["/a"], "data: {\"a\":1,\"s\":\"x\ndata: y\"}\n\n"),
        [Missing]
    );
    // A number split across lines is two tokens.
    assert_eq!(events(&["/a"], "data: {\"a\":1\ndata: 2}\n\n"), [Missing]);
    // `data` without a colon is a data line with an empty value.
    assert_eq!(
        events(&["/a"], "data: {\"a\":\ndata\ndata: 6}\n\n"),
        [Number(6.0)]
    );
}

#[test]
fn fields_comments_and_the_byte_order_mark() {
    let stream = "\u{feff}: a comment\nevent: x\nid: 1\nretry: 10\ndata: {\"a\":1}\n\n";
    assert_eq!(events(&["/a"], stream), [Number(1.0)]);
    // Only one mark, and only at the start.
    assert_eq!(
        events(
            &["/a"],
            "\u{feff}\u{feff}data: {\"a\":1}\n\ndata: {\"a\":2}\n\n"
        ),
        [Number(2.0)]
    );
    assert_eq!(events(&["/a"], "\n\u{feff}data: {\"a\":1}\n\n"), [Missing]);
    // Part of a mark and then a line: the line's field is not `data`.
    let mut stream = b"\xEF\xBBdata: {\"a\":1}\n\n".to_vec();
    assert_eq!(scan(BodyKind::EventStream, &["/a"], &stream), [Missing]);
    stream.splice(0..2, *b"\xEF\xBB\n");
    assert_eq!(scan(BodyKind::EventStream, &["/a"], &stream), [Number(1.0)]);
    // Field names are exact and case-sensitive; one space is dropped.
    for line in [
        "Data: {\"a\":1}",
        "data : {\"a\":1}",
        "dat: {\"a\":1}",
        "datas: {\"a\":1}",
        ":data: {\"a\":1}",
        " data: {\"a\":1}",
    ] {
        assert_eq!(events(&["/a"], &format!("{line}\n\n")), [Missing], "{line}");
    }
    assert_eq!(events(&["/a"], "data:{\"a\":1}\n\n"), [Number(1.0)]);
    assert_eq!(events(&["/a"], "data:   {\"a\":1}  \n\n"), [Number(1.0)]);
}

#[test]
fn events_that_are_not_one_json_value_change_nothing() {
    let stream = concat!(
        "data: {\"a\":1}\n\n",
        "data: [DONE]\n\n",
        "data: {\"a\":2\n\n",
        "data: {\"a\":3} x\n\n",
        "data: {\"a\":4}}\n\n",
        "data:\n\n",
        "data: \n\n",
        "event: only\n\n",
        "data: {\"b\":5}\n\n",
        "data: 7\n\n",
        "data: {\"a\":1e400}x\n\n",
    );
    assert_eq!(events(&["/a", "/b"], stream), [Number(1.0), Number(5.0)]);
    // A later well-formed event replaces the value, even with a malformed one.
    assert_eq!(
        events(&["/a"], "data: {\"a\":1}\n\ndata: {\"a\":\"2\"}\n\n"),
        [Malformed]
    );
    assert_eq!(
        events(&["/a"], "data: {\"a\":\"2\"}\n\ndata: {\"a\":3}\n\n"),
        [Number(3.0)]
    );
}

#[test]
fn an_unterminated_last_event_is_discarded() {
    assert_eq!(
        events(&["/a"], "data: {\"a\":1}\n\ndata: {\"a\":2}\n"),
        [Number(1.0)]
    );
    assert_eq!(
        events(&["/a"], "data: {\"a\":1}\n\ndata: {\"a\":2}"),
        [Number(1.0)]
    );
}

#[test]
fn an_event_longer_than_a_mebibyte_is_skipped() {
    let pointers = pointers(&["/a", "/b"]);
    let event = |value: u32, padding: usize| {
        format!(
            "data: {{\"a\":{value},\"pad\":\"{}\"}}\n\n",
            "x".repeat(padding)
        )
    };
    // Data of exactly READ_LIMIT bytes is read; one more is not.
    let overhead = r#"{"a":2,"pad":""}"#.len();
    let exact = event(2, READ_LIMIT - overhead);
    let over = event(3, READ_LIMIT - overhead + 1);
    let stream = [
        event(1, 10),
        exact,
        over.clone(),
        "data: {\"b\":4}\n\n".to_owned(),
    ]
    .concat();
    for piece in [stream.len(), 65536, 1000] {
        let pieces: Vec<&[u8]> = stream.as_bytes().chunks(piece).collect();
        assert_eq!(
            scan_pieces(BodyKind::EventStream, &pointers, &pieces),
            [Number(2.0), Number(4.0)],
            "{piece}"
        );
    }
    // Long over several data lines (the joining LFs count).
    let lines = format!(
        "data: {{\"a\":5,\"pad\":[\n{}\"\"]}}\n\n",
        "data: \"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\",\n".repeat(READ_LIMIT / 32)
    );
    assert_eq!(
        scan_pieces(BodyKind::EventStream, &pointers, &[lines.as_bytes()]),
        [Missing, Missing]
    );
}

#[test]
fn only_events_that_could_carry_a_pointer_are_walked() {
    let pointers = pointers(&["/usage/total_tokens", "/a/0", "/"]);
    let refs: Vec<&Pointer> = pointers.iter().take(1).collect();
    let walker = json::Walker::new(&refs);
    // The longest name, between quotes, or any backslash.
    assert!(!walker.may_carry(br#"{"usage":null,"total":1}"#));
    assert!(!walker.may_carry(br#"{"total_tokens_x":1,"xtotal_tokens":2}"#));
    assert!(!walker.may_carry(b"total_tokens: 1"));
    assert!(walker.may_carry(br#"{"usage":{"total_tokens":1}}"#));
    assert!(walker.may_carry(br#"["total_tokens"]"#));
    assert!(walker.may_carry(br#"{"x":"\n"}"#));
    assert!(walker.may_carry(br#""total_tokens""#));
    // `/a/0`: `a` must be there; `0` may be an index, so rules nothing out.
    let walker = json::Walker::new(&[&pointers[1]]);
    assert!(!walker.may_carry(br#"{"b":[1]}"#));
    assert!(walker.may_carry(br#"{"a":[1]}"#));
    let only_index = Pointer::parse("/0/1").unwrap();
    assert!(json::Walker::new(&[&only_index]).may_carry(b"{}"));
    // The empty name.
    let walker = json::Walker::new(&[&pointers[2]]);
    assert!(!walker.may_carry(br#"{"a":1}"#));
    assert!(walker.may_carry(br#"{"":1}"#));
    // Names outside ASCII.
    let accented = Pointer::parse("/é/ü").unwrap();
    let walker = json::Walker::new(&[&accented]);
    assert!(walker.may_carry("{\"é\":{\"ü\":1}}".as_bytes()));
    assert!(!walker.may_carry("{\"e\":{\"u\":1}}".as_bytes()));
    // As the scanner reads them: escaped names are found.
    assert_eq!(
        events(
            &["/usage/total_tokens"],
            "data: {\"usage\":{\"total_\\u0074okens\":3}}\n\n"
        ),
        [Number(3.0)]
    );
}

#[test]
fn long_events_are_walked_as_they_come() {
    let content = "word ".repeat(8 * 1024);
    let stream = format!(
        "data: {{\"usage\":{{\"total_tokens\":1}}}}\n\n\
         data: {{\"content\":\"{content}\",\"usage\":null}}\n\n\
         data: {{\"content\":\"{content}\"}}}}\n\n\
         data: {{\"content\":\"{content}\",\n\
         data: \"usage\":{{\"total_tokens\":2}}}}\n\n"
    );
    let pointers = pointers(&["/usage/total_tokens", "/content"]);
    for piece in [stream.len(), 4096, 1000, 7] {
        let pieces: Vec<&[u8]> = stream.as_bytes().chunks(piece).collect();
        assert_eq!(
            scan_pieces(BodyKind::EventStream, &pointers, &pieces),
            [Number(2.0), Malformed],
            "{piece}"
        );
    }
    // Not one value: nothing.
    let broken = format!("data: {{\"usage\":{{\"total_tokens\":1}}, \"x\":\"{content}\"\n\n");
    assert_eq!(events(&["/usage/total_tokens"], &broken), [Missing]);
}

#[test]
fn scanners_read_up_to_sixteen_pointers_each_on_its_own() {
    let texts: Vec<String> = (0..MAX_POINTERS).map(|i| format!("/k{i}")).collect();
    let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
    let body: String = (0..MAX_POINTERS)
        .map(|i| format!("data: {{\"k{i}\":{i}}}\n\n"))
        .collect();
    let expected: Vec<Reading> = (0..MAX_POINTERS).map(|i| Number(i as f64)).collect();
    assert_eq!(events(&texts, &body), expected);
    let refs: Vec<&Pointer> = Vec::new();
    assert!(std::panic::catch_unwind(|| BodyScanner::new(BodyKind::Json, &refs)).is_err());
    let scanner = BodyScanner::new(BodyKind::Json, &[&Pointer::parse("/a").unwrap()]);
    assert_eq!(scanner.reading(1), Missing);
}

// -------------------------------------------------------------- reference

/// What serde_json reads at `pointer` in `value`, as a charge.
fn reference_value(value: &Value, pointer: &str) -> Reading {
    match value.pointer(pointer) {
        None => Missing,
        Some(Value::Number(number)) => match number.as_f64() {
            Some(n) if n.is_finite() && n >= 0.0 => Number(n + 0.0),
            _ => Malformed,
        },
        Some(_) => Malformed,
    }
}

/// Whether the scanner's reading agrees with the reference's: numbers
/// within a few units in the last place (serde_json's parser is not
/// always correctly rounded).
fn agrees(ours: Reading, reference: Reading) -> bool {
    match (ours, reference) {
        (Number(a), Number(b)) => {
            a == b || (a - b).abs() <= a.abs().max(b.abs()) * 4.0 * f64::EPSILON
        }
        (a, b) => a == b,
    }
}

/// The events of `stream` as the WHATWG rules read it, each one's data.
fn reference_events(stream: &[u8]) -> Vec<Vec<u8>> {
    let stream = stream.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(stream);
    let mut events = Vec::new();
    let mut data: Vec<u8> = Vec::new();
    let mut has_data = false;
    let mut rest = stream;
    // Lines, each with its line end; an unterminated last line is dropped
    // with the event it belongs to.
    while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
        let line = &rest[..end];
        let after = if rest[end] == b'\r' && rest.get(end + 1) == Some(&b'\n') {
            end + 2
        } else {
            end + 1
        };
        rest = &rest[after..];
        if line.is_empty() {
            if has_data {
                events.push(std::mem::take(&mut data));
            }
            data.clear();
            has_data = false;
            continue;
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        if name == b"data" {
            if has_data {
                data.push(b'\n');
            }
            data.extend_from_slice(value);
            has_data = true;
        }
    }
    events
}

/// The readings of `pointers` in an event stream, by the reference; `None`
/// when serde_json cannot say (an event with a number beyond `f64`,
/// which it refuses and the scanner reads).
fn reference_stream(stream: &[u8], pointers: &[&str]) -> Option<Vec<Reading>> {
    let mut readings = vec![Missing; pointers.len()];
    for data in reference_events(stream) {
        if data.len() > READ_LIMIT {
            continue;
        }
        match serde_json::from_slice::<Value>(&data) {
            Ok(value) => {
                for (reading, pointer) in readings.iter_mut().zip(pointers) {
                    match reference_value(&value, pointer) {
                        Missing => {}
                        found => *reading = found,
                    }
                }
            }
            Err(error) if error.to_string().contains("number out of range") => return None,
            Err(_) => {}
        }
    }
    Some(readings)
}

// ------------------------------------------------------------- proptests

/// A JSON value as written: names may repeat and be written escaped,
/// numbers are written in any form the grammar allows.
#[derive(Debug, Clone)]
enum Tree {
    Null,
    Bool(bool),
    Number(String),
    Text(String),
    Array(Vec<Tree>),
    /// Members: (name, write the name as `\u` escapes, value).
    Object(Vec<(String, bool, Tree)>),
}

const NAMES: [&str; 10] = ["a", "b", "usage", "tokens", "/", "~", "a/b", "é", "😀", ""];

fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<u64>().prop_map(|n| n.to_string()),
        (0u32..1000).prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |n| n.is_finite())
            .prop_map(|n| serde_json::to_string(&n).unwrap()),
        (0u32..100, 0u32..1000, -30i32..30, prop::bool::ANY).prop_map(|(int, frac, exp, big_e)| {
            format!("{int}.{frac}{}{exp}", if big_e { "E" } else { "e" })
        }),
        Just("-0".to_owned()),
        Just("0.0".to_owned()),
        Just("1e+2".to_owned()),
    ]
}

fn tree() -> impl Strategy<Value = Tree> {
    let leaf = prop_oneof![
        Just(Tree::Null),
        any::<bool>().prop_map(Tree::Bool),
        number_text().prop_map(Tree::Number),
        number_text().prop_map(Tree::Number),
        "[a-z\"\\\\/\\n\u{1}é😀 ]{0,8}".prop_map(Tree::Text),
    ];
    leaf.prop_recursive(5, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Tree::Array),
            prop::collection::vec(
                (
                    prop::sample::select(&NAMES[..]),
                    prop::bool::weighted(0.2),
                    inner
                ),
                0..6
            )
            .prop_map(|members| Tree::Object(
                members
                    .into_iter()
                    .map(|(name, escaped, value)| (name.to_owned(), escaped, value))
                    .collect()
            )),
        ]
    })
}

impl Tree {
    /// Writes the value, with `space` between tokens.
    fn write(&self, out: &mut String, space: &str) {
        match self {
            Tree::Null => *out += "null",
            Tree::Bool(b) => *out += if *b { "true" } else { "false" },
            Tree::Number(text) => *out += text,
            Tree::Text(text) => *out += &serde_json::to_string(text).unwrap(),
            Tree::Array(items) => {
                *out += "[";
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        *out += ",";
                        *out += space;
                    }
                    item.write(out, space);
                }
                *out += space;
                *out += "]";
            }
            Tree::Object(members) => {
                *out += "{";
                *out += space;
                for (i, (name, escaped, value)) in members.iter().enumerate() {
                    if i > 0 {
                        *out += ",";
                    }
                    if *escaped {
                        *out += "\"";
                        for unit in name.encode_utf16() {
                            *out += &format!("\\u{unit:04x}");
                        }
                        *out += "\"";
                    } else {
                        *out += &serde_json::to_string(name).unwrap();
                    }
                    *out += space;
                    *out += ":";
                    *out += space;
                    value.write(out, space);
                }
                *out += "}";
            }
        }
    }

    fn text(&self, space: &str) -> String {
        let mut out = String::new();
        self.write(&mut out, space);
        out
    }
}

/// Pointers into values made of `NAMES` and small indices (most miss,
/// many hit).
fn pointer_texts() -> impl Strategy<Value = Vec<String>> {
    let segment = prop_oneof![
        prop::sample::select(&NAMES[..]).prop_map(str::to_owned),
        prop::sample::select(&["0", "1", "2", "01", "-"][..]).prop_map(str::to_owned),
    ];
    let pointer = prop::collection::vec(segment, 1..5).prop_map(|segments| {
        segments
            .iter()
            .map(|segment| format!("/{}", segment.replace('~', "~0").replace('/', "~1")))
            .collect::<String>()
    });
    prop::collection::vec(pointer, 1..5)
}

fn spaces() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&["", " ", "\n", " \t\r\n "][..])
}

/// Feeds `body` cut at `cuts` (positions taken modulo its length).
fn scan_cut(kind: BodyKind, pointers: &[Pointer], body: &[u8], cuts: &[usize]) -> Vec<Reading> {
    let mut cuts: Vec<usize> = cuts.iter().map(|cut| cut % (body.len() + 1)).collect();
    cuts.sort_unstable();
    let mut pieces = Vec::new();
    let mut from = 0;
    for cut in cuts {
        pieces.push(&body[from..cut]);
        from = cut;
    }
    pieces.push(&body[from..]);
    scan_pieces(kind, pointers, &pieces)
}

/// An event of a generated stream.
#[derive(Debug, Clone)]
enum Event {
    /// A JSON value, its text cut into data lines at these positions.
    Json(Tree, &'static str, Vec<usize>),
    /// Data that is not (always) JSON.
    Data(&'static str),
    /// Lines that are no data: a comment, other fields, blank lines.
    Other(&'static str),
}

fn event() -> impl Strategy<Value = Event> {
    prop_oneof![
        4 => (tree(), spaces(), prop::collection::vec(any::<usize>(), 0..2)).prop_map(|(tree, space, cuts)| Event::Json(tree, space, cuts)),
        1 => prop::sample::select(&["[DONE]", "", "{", "}", "\"x\"", "{\"a\":1}{", "  7  ", "{\"a\":1e400}", "{\"usage\":null}"][..]).prop_map(Event::Data),
        1 => prop::sample::select(&[": keep-alive", "event: delta", "id: 7", "retry: 100", "data", "", "\u{feff}data: 1", "dat"][..]).prop_map(Event::Other),
    ]
}

fn line_end() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&["\n", "\r\n", "\r"][..])
}

/// An event stream: events with mixed line ends, one optional BOM, and the
/// last event perhaps unterminated.
fn stream() -> impl Strategy<Value = Vec<u8>> {
    (
        prop::bool::weighted(0.2),
        prop::collection::vec(
            (event(), line_end(), line_end(), prop::bool::weighted(0.1)),
            0..8,
        ),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(bom, events, cut_last)| {
            let mut out = String::new();
            if bom {
                out += "\u{feff}";
            }
            for (event, end, blank, colon_no_space) in events {
                let data = match event {
                    Event::Json(tree, space, mut cuts) => {
                        let text = tree.text(space);
                        cuts = cuts
                            .iter()
                            .map(|cut| cut % (text.len() + 1))
                            .filter(|&cut| text.is_char_boundary(cut))
                            .collect();
                        cuts.sort_unstable();
                        let mut lines = Vec::new();
                        let mut from = 0;
                        for cut in cuts {
                            lines.push(text[from..cut].to_owned());
                            from = cut;
                        }
                        lines.push(text[from..].to_owned());
                        lines
                    }
                    Event::Data(data) => vec![data.to_owned()],
                    Event::Other(line) => {
                        out += line;
                        out += end;
                        continue;
                    }
                };
                for line in data {
                    out += if colon_no_space { "data:" } else { "data: " };
                    out += &line;
                    out += end;
                }
                out += blank;
            }
            let mut bytes = out.into_bytes();
            if cut_last {
                bytes.pop();
            }
            bytes
        })
}

proptest! {
    // 512 cases each unless PROPTEST_CASES says otherwise.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|cases| cases.parse().ok()).unwrap_or(512)
    ))]

    /// For a JSON value, the scanner reads what serde_json does.
    #[test]
    fn json_values_read_as_serde_json_reads_them(
        tree in tree(),
        space in spaces(),
        texts in pointer_texts(),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let text = tree.text(space);
        let value: Value = serde_json::from_str(&text).expect("generated JSON");
        let parsed: Vec<Pointer> = texts.iter().map(|text| Pointer::parse(text).unwrap()).collect();
        let ours = scan_cut(BodyKind::Json, &parsed, text.as_bytes(), &cuts);
        for (p, pointer) in texts.iter().enumerate() {
            let reference = reference_value(&value, pointer);
            prop_assert!(agrees(ours[p], reference), "{pointer}: {:?} vs serde_json {:?} in {text}", ours[p], reference);
        }
    }

    /// For an event stream, the scanner reads what serde_json reads in the
    /// events the WHATWG rules split.
    #[test]
    fn event_streams_read_as_the_reference_reads_them(
        stream in stream(),
        texts in pointer_texts(),
        cuts in prop::collection::vec(any::<usize>(), 0..6),
    ) {
        let parsed: Vec<Pointer> = texts.iter().map(|text| Pointer::parse(text).unwrap()).collect();
        let ours = scan_cut(BodyKind::EventStream, &parsed, &stream, &cuts);
        let pointer_refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        if let Some(reference) = reference_stream(&stream, &pointer_refs) {
            for p in 0..texts.len() {
                prop_assert!(
                    agrees(ours[p], reference[p]),
                    "{}: {:?} vs reference {:?} in {:?}", texts[p], ours[p], reference[p], String::from_utf8_lossy(&stream)
                );
            }
        }
    }

    /// However a body is cut into pieces, the readings are those of the
    /// whole body fed at once: for generated streams and values, and for
    /// bytes of any kind.
    #[test]
    fn any_split_reads_like_the_whole(
        stream in stream(),
        tree in tree(),
        junk in prop::collection::vec(prop::sample::select(&b"{}[]\",:\\u0a1e-. \r\ndt:"[..]), 0..64),
        texts in pointer_texts(),
        cuts in prop::collection::vec(any::<usize>(), 0..8),
    ) {
        let parsed: Vec<Pointer> = texts.iter().map(|text| Pointer::parse(text).unwrap()).collect();
        let value = tree.text("");
        for (kind, body) in [
            (BodyKind::EventStream, &stream[..]),
            (BodyKind::Json, value.as_bytes()),
            (BodyKind::Json, &junk[..]),
            (BodyKind::EventStream, &junk[..]),
        ] {
            let whole = scan_pieces(kind, &parsed, &[body]);
            prop_assert_eq!(scan_cut(kind, &parsed, body, &cuts), whole);
        }
    }
}
