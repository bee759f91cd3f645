//! Path globs for `match.path_glob`, compiled once at config load and matched
//! against normalised paths (see [`super::path::normalize`]) on every request.
//!
//! The language is deliberately small: `*` and `**` are the only special
//! characters, there is no escaping, `?` and `[` are literal, and matching is
//! case-sensitive like the paths themselves.
//!
//! - `*` as a whole segment matches exactly one non-empty segment;
//! - `*` inside a segment matches any run of characters except `/`
//!   (`/api/*.csv`);
//! - `**` as a whole segment matches zero or more segments (`/api/**` matches
//!   `/api`, `/api/` and `/api/a/b`; `/**/report` matches `/report` and
//!   `/x/y/report`);
//! - everything else, including a trailing slash, must match exactly.
//!
//! Matching must not allocate and must not be exponential: both the segment
//! level and the character level use greedy matching with a single restart
//! point, which is exact for these languages and costs at most
//! O(pattern × path) comparisons.

use std::ops::Range;

/// One compiled pattern segment; text is kept as a range into the pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    /// Must equal the path segment byte for byte.
    Literal(Range<usize>),
    /// `*`: exactly one non-empty segment.
    AnySegment,
    /// `**`: zero or more segments.
    AnySegments,
    /// A segment containing `*` among other characters.
    Wildcard(Range<usize>),
}

/// A compiled `match.path_glob`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathGlob {
    pattern: String,
    segments: Vec<Part>,
}

/// Marks "past the last path segment" in the segment cursor.
const END: usize = usize::MAX;

impl PathGlob {
    /// Compiles `pattern`. Every string is a valid pattern; config validation is
    /// where a pattern that could never match a normalised path (one not
    /// starting with `/`, or containing `//`, `.` or `..` segments) is reported.
    pub fn new(pattern: &str) -> PathGlob {
        let mut segments = Vec::new();
        let mut start = 0;
        for seg in pattern.split('/') {
            let range = start..start + seg.len();
            start = range.end + 1;
            segments.push(match seg {
                "*" => Part::AnySegment,
                "**" => Part::AnySegments,
                s if s.contains('*') => Part::Wildcard(range),
                _ => Part::Literal(range),
            });
        }
        PathGlob {
            pattern: pattern.to_owned(),
            segments,
        }
    }

    /// The pattern as written in the config.
    pub fn as_str(&self) -> &str {
        &self.pattern
    }

    /// Whether `normalized_path` (the output of
    /// [`normalize`](super::path::normalize)) matches. Does not allocate.
    pub fn matches(&self, normalized_path: &str) -> bool {
        let path = normalized_path.as_bytes();
        let segs = &self.segments;
        let mut p = 0;
        let mut s = 0;
        // The latest `**`: the pattern index after it and the path position it
        // will absorb up to if the rest fails. Later `**`s supersede earlier
        // ones, which is what keeps this linear in restarts.
        let mut restart: Option<(usize, usize)> = None;
        loop {
            if s == END {
                // Path used up: only `**` may remain, each matching nothing.
                return segs[p..].iter().all(|x| *x == Part::AnySegments);
            }
            let (seg, next) = segment_at(path, s);
            if let Some(pat) = segs.get(p) {
                if *pat == Part::AnySegments {
                    restart = Some((p + 1, s));
                    p += 1;
                    continue;
                }
                if self.segment_matches(pat, seg) {
                    p += 1;
                    s = next;
                    continue;
                }
            }
            // Mismatch, or pattern used up with path left: let the latest `**`
            // swallow one more segment and retry from there.
            match restart {
                Some((after, from)) => {
                    let (_, absorbed_to) = segment_at(path, from);
                    restart = Some((after, absorbed_to));
                    p = after;
                    s = absorbed_to;
                }
                None => return false,
            }
        }
    }

    fn segment_matches(&self, pat: &Part, seg: &[u8]) -> bool {
        match pat {
            Part::Literal(r) => self.pattern.as_bytes().get(r.clone()) == Some(seg),
            Part::AnySegment => !seg.is_empty(),
            Part::AnySegments => true,
            Part::Wildcard(r) => self
                .pattern
                .as_bytes()
                .get(r.clone())
                .is_some_and(|w| wildcard_matches(w, seg)),
        }
    }
}

/// The path segment starting at byte `start`, and where the next one starts
/// (or [`END`]).
fn segment_at(path: &[u8], start: usize) -> (&[u8], usize) {
    let rest = path.get(start..).unwrap_or_default();
    match rest.iter().position(|&b| b == b'/') {
        Some(i) => (&rest[..i], start + i + 1),
        None => (rest, END),
    }
}

/// In-segment glob: `*` matches any run of bytes (a segment holds no `/`).
fn wildcard_matches(pat: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0, 0);
    let mut restart: Option<(usize, usize)> = None;
    while t < text.len() {
        match pat.get(p) {
            Some(b'*') => {
                restart = Some((p + 1, t));
                p += 1;
            }
            Some(&c) if c == text[t] => {
                p += 1;
                t += 1;
            }
            _ => match restart {
                Some((after, from)) => {
                    restart = Some((after, from + 1));
                    p = after;
                    t = from + 1;
                }
                None => return false,
            },
        }
    }
    pat[p.min(pat.len())..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, path: &str) -> bool {
        PathGlob::new(pattern).matches(path)
    }

    #[test]
    fn literal_patterns_match_exactly() {
        assert!(m("/api/login", "/api/login"));
        assert!(!m("/api/login", "/api/login/"));
        assert!(!m("/api/login", "/api/login;x"));
        assert!(!m("/api/login", "/API/login"));
        assert!(!m("/api/login", "/api/log"));
        assert!(!m("/api/login", "/api"));
        assert!(m("/", "/"));
        assert!(!m("/", "/a"));
        assert!(m("/api/", "/api/"));
        assert!(!m("/api/", "/api"));
    }

    #[test]
    fn star_segment_matches_exactly_one_non_empty_segment() {
        assert!(m("/api/*", "/api/x"));
        assert!(!m("/api/*", "/api/"));
        assert!(!m("/api/*", "/api"));
        assert!(!m("/api/*", "/api/x/y"));
        assert!(!m("/api/*", "/api/x/"));
        assert!(m("/api/*/", "/api/x/"));
        assert!(m("/*/login", "/v1/login"));
        assert!(!m("/*", "/"));
    }

    #[test]
    fn star_inside_a_segment_stays_inside_it() {
        assert!(m("/api/*.csv", "/api/report.csv"));
        assert!(m("/api/*.csv", "/api/.csv"));
        assert!(!m("/api/*.csv", "/api/a/report.csv"));
        assert!(!m("/api/*.csv", "/api/report.xls"));
        assert!(m("/api/report.*", "/api/report.json"));
        assert!(m("/v*/users", "/v2/users"));
        assert!(m("/a*b*c", "/abbbc"));
        assert!(m("/a*b*c", "/axxbyybzc"));
        assert!(!m("/a*b*c", "/axxbyyb"));
        assert!(m("/x**y", "/xy"));
    }

    #[test]
    fn double_star_matches_zero_or_more_segments() {
        for p in ["/api", "/api/", "/api/a", "/api/a/b", "/api/a/b/"] {
            assert!(m("/api/**", p), "{p}");
        }
        assert!(!m("/api/**", "/apix"));
        assert!(!m("/api/**", "/"));
        for p in ["/report", "/x/report", "/x/y/report"] {
            assert!(m("/**/report", p), "{p}");
        }
        assert!(!m("/**/report", "/report/"));
        assert!(!m("/**/report", "/x/reports"));
        assert!(m("/**", "/"));
        assert!(m("/**", "/anything/at/all"));
        assert!(m("/a/**/b/**/c", "/a/b/c"));
        assert!(m("/a/**/b/**/c", "/a/x/b/y/z/c"));
        assert!(!m("/a/**/b/**/c", "/a/x/c"));
        assert!(m("/**/*.csv", "/a/b/r.csv"));
        assert!(!m("/**/*.csv", "/a/b/r.csv/"));
    }

    #[test]
    fn as_str_returns_the_pattern() {
        assert_eq!(PathGlob::new("/api/**").as_str(), "/api/**");
    }

    #[test]
    fn adversarial_patterns_finish_quickly() {
        let pattern = "/**/a/**/a/**/a/**/a/**/a/**/a/**/b";
        let path = "/a".repeat(2_000);
        assert!(!m(pattern, &path));
        let pattern = format!("/{}b", "*a".repeat(50));
        let path = format!("/{}", "a".repeat(4_000));
        assert!(!m(&pattern, &path));
    }

    /// Exponential but obviously right; only for short inputs.
    fn reference(pat: &[&str], path: &[&str]) -> bool {
        fn wild(p: &[u8], t: &[u8]) -> bool {
            match p.split_first() {
                None => t.is_empty(),
                Some((b'*', rest)) => (0..=t.len()).any(|i| wild(rest, &t[i..])),
                Some((c, rest)) => t.first() == Some(c) && wild(rest, &t[1..]),
            }
        }
        match pat.split_first() {
            None => path.is_empty(),
            Some((&"**", rest)) => (0..=path.len()).any(|i| reference(rest, &path[i..])),
            Some((&"*", rest)) => {
                path.first().is_some_and(|s| !s.is_empty()) && reference(rest, &path[1..])
            }
            Some((p, rest)) => {
                path.first()
                    .is_some_and(|s| wild(p.as_bytes(), s.as_bytes()))
                    && reference(rest, &path[1..])
            }
        }
    }

    #[test]
    fn agrees_with_a_naive_matcher_on_generated_inputs() {
        const PAT: [&str; 8] = ["a", "b", "*", "**", "a*", "*b", "", "ab"];
        const PATH: [&str; 5] = ["a", "b", "ab", "", "ba"];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let np = (next() % 5) as usize;
            let ns = (next() % 6) as usize;
            let pat: Vec<&str> = (0..np).map(|_| PAT[(next() % 8) as usize]).collect();
            let path: Vec<&str> = (0..ns).map(|_| PATH[(next() % 5) as usize]).collect();
            let pattern = format!("/{}", pat.join("/"));
            let text = format!("/{}", path.join("/"));
            // The reference works on the segments the strings really have
            // (`"/"` is two empty segments).
            let full_pat: Vec<&str> = pattern.split('/').collect();
            let full_path: Vec<&str> = text.split('/').collect();
            assert_eq!(
                m(&pattern, &text),
                reference(&full_pat, &full_path),
                "{pattern} vs {text}"
            );
        }
    }
}
