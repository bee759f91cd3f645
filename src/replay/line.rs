//! One access log line, read for a replay: what the request asked (method,
//! host, path, client), when (`time`, to the microsecond), how long it took
//! and was held, what sluice decided (`outcome`, `rule`), and the values of
//! the key sources the replay needs, from its `keys` (docs/edge.md lists
//! the members).
//!
//! A line is parsed by `serde_json` into borrowed members (other members
//! are skipped), then kept as one owned [`Recorded`]: a single string
//! holding its texts, so that lines waiting to be decided in time order cost
//! one allocation each.

use std::borrow::Cow;
use std::cell::Cell;
use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr};
use std::ops::Range;

use http::Method;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use smallvec::SmallVec;

use super::scan::{scan, Members, Pairs};
use super::time::{Epoch, Times};
use crate::clock::Nanos;

/// What the log says happened to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Logged {
    #[default]
    Allowed,
    Delayed,
    Limited,
    /// `missing_key`, `denied`: refused, but not by a limit.
    Refused,
}

/// A line, owned, as the replay keeps it until its turn; one is reused
/// for line after line ([`read_into`]), its text's room kept.
#[derive(Debug, Default)]
pub struct Recorded {
    /// When the request arrived (Unix nanoseconds).
    pub time: Nanos,
    /// From `time` until its response was sent.
    pub duration: Nanos,
    /// How long sluice held it on purpose.
    pub held: Nanos,
    pub method: Method,
    pub client: Option<IpAddr>,
    pub logged: Logged,
    /// Whether the line has `keys` (`null`: refused before any rule).
    pub reached_rules: bool,
    /// Where this line is: its file's number and its line number.
    pub at: (u32, u64),
    /// The line as read, then any member read unescaped.
    text: String,
    host: Option<Range<u32>>,
    path: Range<u32>,
    client_text: Range<u32>,
    rule: Option<Range<u32>>,
    /// Each wanted source's value (see [`Wanted`]), `None` when the line
    /// has none.
    values: SmallVec<[Option<Range<u32>>; 4]>,
}

impl Recorded {
    /// The bytes it holds, its text's room included.
    pub fn size(&self) -> usize {
        std::mem::size_of::<Self>() + self.text.capacity()
    }

    /// Gives back a long line's room, so that rooms kept stay small.
    pub fn shrink(&mut self) {
        if self.text.capacity() > 4096 {
            self.text = String::new();
        }
    }

    pub fn host(&self) -> Option<&str> {
        self.host.clone().map(|at| self.slice(at))
    }

    pub fn path(&self) -> &str {
        self.slice(self.path.clone())
    }

    /// The client as the log writes it (an IPv6 client as its network).
    pub fn client_text(&self) -> &str {
        self.slice(self.client_text.clone())
    }

    /// The rule the log names as deciding.
    pub fn rule(&self) -> Option<&str> {
        self.rule.clone().map(|at| self.slice(at))
    }

    /// The value of the `index`th wanted source.
    pub fn value(&self, index: usize) -> Option<&str> {
        let at = self.values.get(index)?.clone()?;
        Some(self.slice(at))
    }

    fn slice(&self, at: Range<u32>) -> &str {
        &self.text[at.start as usize..at.end as usize]
    }
}

/// The key sources a replay reads from each line's `keys`, by their names
/// as the config writes them (the rest of `keys` is skipped), and what
/// reading the lines before tells of the next.
#[derive(Debug, Default)]
pub struct Wanted {
    pub names: Vec<String>,
    /// Where in `keys` each name was found last.
    hints: Vec<Cell<usize>>,
    /// The last time read, to the second.
    times: Cell<Times>,
}

impl Wanted {
    /// The value in `pairs` of the `index`th name wanted. Lines of one log
    /// hold their keys in one order: where the name was last time is looked
    /// at first.
    #[inline]
    fn value_in<'p>(&self, pairs: &'p Pairs<'_>, index: usize) -> Option<&'p str> {
        let name = &self.names[index];
        let hint = self.hints.get(index).map_or(0, |hint| hint.get());
        let found = match pairs.get(hint) {
            Some(pair) if pair.0 == **name => Some(pair),
            _ => pairs
                .iter()
                .position(|(member, _)| *member == **name)
                .map(|at| {
                    if let Some(hint) = self.hints.get(index) {
                        hint.set(at);
                    }
                    &pairs[at]
                }),
        };
        found.and_then(|(_, value)| value.as_deref())
    }

    /// The index of source `name`, added if new.
    pub fn want(&mut self, name: String) -> usize {
        match self.names.iter().position(|one| *one == name) {
            Some(index) => index,
            None => {
                self.names.push(name);
                self.hints.push(Cell::new(0));
                self.names.len() - 1
            }
        }
    }
}

/// Why a line is not an access log line.
#[derive(Debug, PartialEq, Eq)]
pub struct NotALine(pub String);

#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(borrow)]
    time: Text<'a>,
    #[serde(borrow, default)]
    client: Option<Text<'a>>,
    #[serde(borrow, default)]
    method: Option<Text<'a>>,
    #[serde(borrow, default)]
    host: Option<Text<'a>>,
    #[serde(borrow, default)]
    path: Option<Text<'a>>,
    duration_ms: f64,
    #[serde(default)]
    delay_ms: u64,
    #[serde(borrow)]
    outcome: Text<'a>,
    #[serde(borrow, default)]
    rule: Option<Text<'a>>,
    #[serde(borrow, default)]
    keys: Option<Keys<'a>>,
}

/// A string of the line: borrowed from it unless it has escapes.
#[derive(Debug)]
struct Text<'a>(Cow<'a, str>);

impl<'a> Text<'a> {
    fn into_inner(self) -> Cow<'a, str> {
        self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct String<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for String<'a> {
            type Value = Text<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Borrowed(text)))
            }
            fn visit_str<E>(self, text: &str) -> Result<Text<'a>, E> {
                Ok(Text(Cow::Owned(text.to_owned())))
            }
        }
        deserializer.deserialize_str(String(PhantomData))
    }
}

/// A line's `keys`, as pairs.
struct Keys<'a>(SmallVec<[(Text<'a>, Option<Text<'a>>); 4]>);

impl<'de: 'a, 'a> Deserialize<'de> for Keys<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Pairs<'a>(PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Pairs<'a> {
            type Value = Keys<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object of key sources")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Keys<'a>, A::Error> {
                let mut pairs = SmallVec::new();
                while let Some(name) = map.next_key::<Text<'a>>()? {
                    let value = map.next_value::<Option<Text<'a>>>()?;
                    pairs.push((name, value));
                }
                Ok(Keys(pairs))
            }
        }
        deserializer.deserialize_map(Pairs(PhantomData))
    }
}

/// Reads one line of a log (without its newline), its time on the clock
/// of `epoch`; `at` says where it is.
pub fn read(
    line: &[u8],
    wanted: &Wanted,
    epoch: Epoch,
    at: (u32, u64),
) -> Result<Recorded, NotALine> {
    let mut recorded = Recorded::default();
    read_into(&mut recorded, line, wanted, epoch, at)?;
    Ok(recorded)
}

/// [`read`] into `into`, whose text's room is reused.
pub fn read_into(
    into: &mut Recorded,
    line: &[u8],
    wanted: &Wanted,
    epoch: Epoch,
    at: (u32, u64),
) -> Result<(), NotALine> {
    let mut members = Members::default();
    let line = read_members(line, true, &mut members)?;
    keep(into, line, &members, wanted, epoch, at)
}

/// A line's members into `members`: by [`scan`] where it reads the line
/// (`fast`), else by `serde_json`; the line as text.
fn read_members<'a>(
    line: &'a [u8],
    fast: bool,
    members: &mut Members<'a>,
) -> Result<&'a str, NotALine> {
    // Checked here, at once: serde_json's check of each string as it reads
    // it costs more than std's of the whole line.
    let line = std::str::from_utf8(line)
        .map_err(|_| NotALine("not an access log line: it is not UTF-8".to_owned()))?;
    if !fast || scan(line, members).is_none() {
        *members = parsed(line)?;
    }
    Ok(line)
}

/// What a replay keeps of a line's `members`, into `into`: the line's text
/// whole (one copy), and where each member is in it; a member that is not
/// the line's own text (a string with escapes, read unescaped) after it.
fn keep(
    into: &mut Recorded,
    line: &str,
    members: &Members<'_>,
    wanted: &Wanted,
    epoch: Epoch,
    at: (u32, u64),
) -> Result<(), NotALine> {
    let (time, duration_ms, logged, method) = judged(members, wanted, epoch)?;
    let mut text = std::mem::take(&mut into.text);
    text.clear();
    text.push_str(line);
    let within = line.as_ptr() as usize..line.as_ptr() as usize + line.len();
    let mut put = |value: &str| {
        let start = value.as_ptr() as usize;
        if within.contains(&start) || value.is_empty() {
            let start = start.saturating_sub(within.start).min(line.len()) as u32;
            return start..start + value.len() as u32;
        }
        let start = text.len() as u32;
        text.push_str(value);
        start..text.len() as u32
    };
    let client_text = put(members.client.as_deref().unwrap_or(""));
    let client = client_ip(members.client.as_deref().unwrap_or(""));
    let host = members.host.as_deref().map(&mut put);
    let path = put(members.path.as_deref().unwrap_or("/"));
    let rule = members.rule.as_deref().map(&mut put);
    let mut values = std::mem::take(&mut into.values);
    values.clear();
    let reached_rules = members.keys.is_some();
    if let Some(pairs) = &members.keys {
        for index in 0..wanted.names.len() {
            let value = wanted.value_in(pairs, index);
            values.push(value.map(&mut put));
        }
    }
    *into = Recorded {
        time,
        duration: millis_to_nanos(duration_ms),
        held: members.delay_ms.saturating_mul(1_000_000),
        method,
        client,
        logged,
        reached_rules,
        at,
        text,
        host,
        path,
        client_text,
        rule,
        values,
    };
    Ok(())
}

/// What a line says happened: when, for how long, to which method, and how
/// it was answered; an error when it does not say it as sluice's lines do.
fn judged(
    members: &Members<'_>,
    wanted: &Wanted,
    epoch: Epoch,
) -> Result<(Nanos, f64, Logged, Method), NotALine> {
    let Some(time_text) = members.time.as_deref() else {
        return Err(NotALine(
            "not an access log line: it has no time".to_owned(),
        ));
    };
    let (Some(outcome), Some(duration_ms)) = (members.outcome.as_deref(), members.duration_ms)
    else {
        return Err(NotALine(
            "not an access log line: it has no outcome or duration_ms".to_owned(),
        ));
    };
    let time = Times::parse(&wanted.times, time_text)
        .and_then(|time| epoch.nanos(time))
        .map_err(|bad| NotALine(bad.sentence(time_text)))?;
    let logged = match outcome {
        "allowed" => Logged::Allowed,
        "delayed" => Logged::Delayed,
        "limited" => Logged::Limited,
        "missing_key" | "denied" => Logged::Refused,
        other => return Err(NotALine(format!("its outcome {other:?} is not sluice's"))),
    };
    let method = match members.method.as_deref() {
        Some(method) => Method::from_bytes(method.as_bytes())
            .map_err(|_| NotALine(format!("its method {method:?} is not an HTTP method")))?,
        None => Method::GET,
    };
    Ok((time, duration_ms, logged, method))
}

/// A line [`scan`] does not read, parsed in full by `serde_json`.
#[cold]
fn parsed(line: &str) -> Result<Members<'_>, NotALine> {
    let wire: Wire<'_> = serde_json::from_str(line).map_err(|error| {
        let what = error.to_string();
        NotALine(match error.classify() {
            serde_json::error::Category::Data => format!("not an access log line: {what}"),
            _ => format!("not JSON: {what}"),
        })
    })?;
    Ok(Members {
        time: Some(wire.time.0),
        client: wire.client.map(Text::into_inner),
        method: wire.method.map(Text::into_inner),
        host: wire.host.map(Text::into_inner),
        path: wire.path.map(Text::into_inner),
        duration_ms: Some(wire.duration_ms),
        delay_ms: wire.delay_ms,
        outcome: Some(wire.outcome.0),
        rule: wire.rule.map(Text::into_inner),
        keys: wire.keys.map(|Keys(pairs)| {
            (pairs.into_iter())
                .map(|(name, value)| (name.0, value.map(Text::into_inner)))
                .collect()
        }),
    })
}

/// The client IP of a line: an address, or an IPv6 client's network.
fn client_ip(text: &str) -> Option<IpAddr> {
    if let Some(v4) = dotted_quad(text.as_bytes()) {
        return Some(IpAddr::V4(v4));
    }
    text.parse::<IpAddr>().ok().or_else(|| {
        text.parse::<ipnet::IpNet>()
            .ok()
            .map(|network| network.network())
    })
}

/// An IPv4 address as `Ipv4Addr::from_str` reads one (four parts of one
/// to three digits, none with a leading zero, each at most 255), at a
/// third of its cost; `None` for anything else, which `client_ip` then
/// gives to std.
fn dotted_quad(bytes: &[u8]) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    // The part being read: its number, its digits, its index.
    let (mut value, mut digits, mut part) = (0u16, 0, 0);
    for &byte in bytes {
        if byte == b'.' {
            if digits == 0 || part == 3 {
                return None;
            }
            octets[part] = u8::try_from(value).ok()?;
            (value, digits, part) = (0, 0, part + 1);
        } else if byte.is_ascii_digit() && digits < 3 && (digits == 0 || value != 0) {
            value = value * 10 + u16::from(byte - b'0');
            digits += 1;
        } else {
            return None;
        }
    }
    if digits == 0 || part != 3 {
        return None;
    }
    octets[3] = u8::try_from(value).ok()?;
    Some(Ipv4Addr::from(octets))
}

fn millis_to_nanos(millis: f64) -> Nanos {
    if millis.is_finite() && millis > 0.0 {
        (millis * 1e6).round() as Nanos
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_keeps_what_a_replay_reads() {
        let mut wanted = Wanted::default();
        wanted.want("header:x-api-key".into());
        wanted.want("jwt:plan".into());
        let line = r#"{"time":"2026-11-28T11:31:05.123456Z","request_id":"a","client":"2001:db8:1:2::/64","method":"POST","host":"api.example","path":"/v1/\"x\"","status":429,"bytes_out":1,"duration_ms":12.5,"upstream_ms":null,"delay_ms":3,"outcome":"limited","rule":"per-key","key":"k","cost":1,"keys":{"ip":"2001:db8:1:2::/64","header:x-api-key":"sk_l…#3f9a1c2e4b7d","jwt:plan":null}}"#;
        let read = read(line.as_bytes(), &wanted, Epoch::default(), (0, 1)).unwrap();
        assert_eq!(read.time, 1_795_865_465_123_456_000);
        assert_eq!(read.duration, 12_500_000);
        assert_eq!(read.held, 3_000_000);
        assert_eq!(read.method, Method::POST);
        assert_eq!(read.client, Some("2001:db8:1:2::".parse().unwrap()));
        assert_eq!(read.client_text(), "2001:db8:1:2::/64");
        assert_eq!(read.host(), Some("api.example"));
        assert_eq!(read.path(), "/v1/\"x\"");
        assert_eq!(read.logged, Logged::Limited);
        assert_eq!(read.rule(), Some("per-key"));
        assert_eq!(read.value(0), Some("sk_l…#3f9a1c2e4b7d"));
        assert_eq!(read.value(1), None);
        assert!(read.reached_rules);

        let refused_early = line.replace(r#""keys":{"#, r#""keys":null,"x":{"#);
        assert!(!read_ok(&refused_early, &wanted).reached_rules);
        for bad in [
            "",
            "{}",
            "[1]",
            r#"{"time":"x","duration_ms":1,"outcome":"allowed"}"#,
        ] {
            assert!(
                super::read(bad.as_bytes(), &wanted, Epoch::default(), (0, 1)).is_err(),
                "{bad}"
            );
        }
    }

    fn read_ok(line: &str, wanted: &Wanted) -> Recorded {
        read(line.as_bytes(), wanted, Epoch::default(), (0, 1))
            .unwrap_or_else(|e| panic!("{e:?}: {line}"))
    }

    /// A line of sluice's shape, from generated parts.
    fn sluice_line(parts: &(u32, u8, u16, u16, u8, bool)) -> String {
        let (at, client, duration, decimals, outcome, keys) = *parts;
        let time = crate::access_log::rfc3339(1_795_000_000_000_000_000 + u64::from(at) * 1_000);
        let outcome =
            ["allowed", "limited", "delayed", "denied", "missing_key"][usize::from(outcome % 5)];
        let keys = if keys {
            format!(
                r#"{{"ip":"10.0.0.{client}","header:x-api-key":"sk_l…#{client:012x}","jwt:plan":null}}"#
            )
        } else {
            "null".to_owned()
        };
        format!(
            r#"{{"time":"{time}","request_id":"0","client":"10.0.0.{client}","method":"GET","host":"h","path":"/v1/x","status":200,"bytes_out":512,"duration_ms":{duration}.{decimals:03},"upstream_ms":null,"delay_ms":{},"outcome":"{outcome}","rule":"per-key","key":"k","cost":1,"keys":{keys}}}"#,
            decimals % 7,
        )
    }

    /// What reading `line` gives, by the fast scan or by serde_json alone.
    fn read_by(line: &[u8], fast: bool) -> Result<String, ()> {
        let mut wanted = Wanted::default();
        wanted.want("header:x-api-key".into());
        wanted.want("jwt:plan".into());
        let mut members = Members::default();
        let line = read_members(line, fast, &mut members).map_err(drop)?;
        let mut into = Recorded::default();
        keep(&mut into, line, &members, &wanted, Epoch::default(), (0, 1)).map_err(drop)?;
        let values: Vec<_> = (0..2).map(|index| into.value(index)).collect();
        let shown = (
            into.client_text(),
            into.host(),
            into.path(),
            into.rule(),
            values,
        );
        Ok(format!(
            "{:?} {:?} {:?} {:?} {:?} {:?} {shown:?}",
            into.time, into.duration, into.held, into.method, into.client, into.logged
        ))
    }

    /// Bytes that change how JSON reads.
    const TOKENS: &[&str] = &[
        "\"",
        "\\",
        "\\\"",
        " ",
        "\t",
        "\u{1}",
        "{",
        "}",
        "[",
        "]",
        ",",
        ":",
        "0",
        "-",
        "e",
        "E+",
        ".",
        "n",
        "null",
        "true",
        "é",
        "01",
        "1e400",
        "-0",
        "\"time\":\"x\",",
        "\"keys\":{},",
        "\"delay_ms\":1.0,",
        "\"duration_ms\":-1,",
        "\"duration_ms\":1e2,",
        "\"x\":{\"a\":1},",
        "\"host\":5,",
        "\"rule\":null,",
        "\"status\":01,",
        "\"time\":\"2026-11-28T00:00:00Z\",",
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4000))]

        /// The fast scan reads exactly what serde_json reads: the same
        /// line kept, or both refuse it, whatever is changed in a line.
        #[test]
        fn the_fast_scan_reads_as_serde_json_does(
            parts in (0u32..1_000_000, 0u8..255, 0u16..20_000, 0u16..1000, 0u8..5, proptest::bool::ANY),
            edits in proptest::collection::vec((0usize..400, 0usize..TOKENS.len(), 0u8..3), 0..3),
        ) {
            let mut line = sluice_line(&parts).into_bytes();
            for (at, token, how) in edits {
                let at = at % (line.len() + 1);
                match how {
                    0 => { line.splice(at..at, TOKENS[token].bytes()); }
                    1 if at < line.len() => { line.remove(at); }
                    _ => { line.splice(at..(at + TOKENS[token].len()).min(line.len()), TOKENS[token].bytes()); }
                }
            }
            let fast = read_by(&line, true);
            let slow = read_by(&line, false);
            proptest::prop_assert_eq!(fast, slow, "{}", String::from_utf8_lossy(&line));
        }
    }

    #[test]
    fn a_dotted_quad_reads_as_std_reads_it() {
        for text in [
            "10.0.0.1",
            "255.255.255.255",
            "0.0.0.0",
            "256.0.0.1",
            "01.0.0.1",
            "1.0.0.00",
            "1.2.3",
            "1.2.3.4.",
            "1.2.3.4.5",
            ".1.2.3",
            "1..2.3",
            "1.2.3.1000",
            "1.2.3.+4",
            "1.2.3.a",
            "",
            "::1",
            "2001:db8::/64",
            "10.0.0.0/8",
        ] {
            let std = text.parse::<Ipv4Addr>().ok();
            assert_eq!(dotted_quad(text.as_bytes()), std, "{text}");
        }
    }

    #[test]
    fn sluice_s_own_lines_take_the_fast_way() {
        let line = sluice_line(&(7, 3, 12, 500, 0, true));
        assert!(scan(&line, &mut Members::default()).is_some(), "{line}");
        assert!(read_by(line.as_bytes(), true).is_ok());
    }
}
