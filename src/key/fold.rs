//! Paths an upstream treats alike (docs/configuration.md, "Paths an
//! upstream treats alike"): the one spelling rules match and `path` keys
//! are built on, so that a limit on `/login` holds for every spelling the
//! upstream serves as `/login`.
//!
//! [`fold`] takes a normalised path ([`super::path::normalize`]) and, as
//! `server.paths_alike` says, removes each segment's `;` parameters
//! (Tomcat and Jetty strip them before they resolve `.` and `..`, so
//! `/login/..;/login` is `/login` there), resolves `.` and `..` again,
//! drops one trailing slash (the root keeps its slash) and lowers the case
//! of letters, including letters outside ASCII, whether written as text or
//! as percent-escaped UTF-8 (ASP.NET compares paths ignoring case). Only a
//! raw `;` starts parameters: `%3B` is a character of the segment, as
//! Tomcat reads it (it strips parameters before it decodes). Escapes keep
//! upper-case hex, so a folded path is still normal.
//!
//! It runs on every request: a path already folded (no upper case, no
//! trailing slash, no `;`) is returned borrowed after one scan, without
//! allocating.

mod case;

use std::borrow::Cow;

use super::path::{normalize, PathError};

/// What the upstream serves alike (`server.paths_alike`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PathsAlike {
    /// `"case"`: `/Login` is `/login`.
    pub case: bool,
    /// `"trailing_slash"`: `/login/` is `/login`.
    pub trailing_slash: bool,
    /// `"params"`: `/login;x=1` is `/login`, `/a/..;/login` is `/login`.
    pub params: bool,
}

impl Default for PathsAlike {
    /// All three: a rule then matches more, never less, than the upstream
    /// serves.
    fn default() -> PathsAlike {
        PathsAlike::ALL
    }
}

impl PathsAlike {
    /// Every kind: the default.
    pub const ALL: PathsAlike = PathsAlike {
        case: true,
        trailing_slash: true,
        params: true,
    };

    /// None: paths match as written (`paths_alike = []`).
    pub const NONE: PathsAlike = PathsAlike {
        case: false,
        trailing_slash: false,
        params: false,
    };

    /// The names the config writes, in the order it documents them.
    pub const NAMES: [&'static str; 3] = ["case", "trailing_slash", "params"];

    /// These kinds and the one called `name`; `None` for a name that is
    /// not one of [`PathsAlike::NAMES`].
    pub fn with(self, name: &str) -> Option<PathsAlike> {
        let mut alike = self;
        match name {
            "case" => alike.case = true,
            "trailing_slash" => alike.trailing_slash = true,
            "params" => alike.params = true,
            _ => return None,
        }
        Some(alike)
    }

    /// The kinds included, by name, in [`PathsAlike::NAMES`] order.
    pub fn names(self) -> Vec<&'static str> {
        let on = [self.case, self.trailing_slash, self.params];
        (PathsAlike::NAMES.iter().zip(on))
            .filter_map(|(name, on)| on.then_some(*name))
            .collect()
    }

    /// These kinds but the trailing slash: how a `path_prefix` is folded,
    /// which keeps its slash so that `/api/` never fits `/apix`.
    pub fn keeping_trailing_slash(self) -> PathsAlike {
        PathsAlike {
            trailing_slash: false,
            ..self
        }
    }
}

/// `path` folded as `alike` says (see the module docs).
///
/// `path` should be normalised; any other text is folded without a panic,
/// a `%` not followed by two hex digits kept as a character. Returns
/// `Cow::Borrowed` when nothing changes. Fails only when removing
/// parameters leaves a `..` that climbs above the root (`/..;/admin`),
/// which Tomcat and Jetty refuse too.
///
/// Inlined whole into the request path, which then tests one table entry
/// a byte (callgrind: a call cost as much as the test of a short path).
#[inline(always)]
pub fn fold(path: &str, alike: PathsAlike) -> Result<Cow<'_, str>, PathError> {
    if is_folded(path, alike) {
        return Ok(Cow::Borrowed(path));
    }
    rewrite(path, alike).map(Cow::Owned)
}

/// A `match` path, prefix or glob folded as requests' paths are (a prefix
/// with `alike` [keeping its trailing slash](PathsAlike::keeping_trailing_slash)).
/// Config validation accepts only normal patterns with no `..` left to
/// resolve once parameters are removed; the hex of their escapes may be
/// lower-case, which normalising upper-cases as it does a request's.
pub fn fold_pattern(written: &str, alike: PathsAlike) -> String {
    let normal = normalize(written).unwrap_or(Cow::Borrowed(written));
    match fold(&normal, alike) {
        Ok(folded) => folded.into_owned(),
        Err(_) => normal.into_owned(),
    }
}

/// The bytes at which a path may need folding: upper-case ASCII, `;`,
/// `%` (an escape of a letter outside ASCII) and every byte of non-ASCII
/// UTF-8.
static MAY_FOLD: [bool; 256] = {
    let mut table = [false; 256];
    let mut byte = 0;
    while byte < 256 {
        table[byte] = matches!(byte as u8, b'A'..=b'Z' | b';' | b'%' | 0x80..);
        byte += 1;
    }
    table
};

/// The fast path: whether folding would leave `path` as it is. One test
/// a byte, none when only the trailing slash folds; the kinds are looked
/// at only past a byte that may fold.
#[inline(always)]
fn is_folded(path: &str, alike: PathsAlike) -> bool {
    let b = path.as_bytes();
    if alike.trailing_slash && b.len() > 1 && b[b.len() - 1] == b'/' {
        return false;
    }
    if !(alike.case || alike.params) {
        return true;
    }
    match b.iter().position(|&byte| MAY_FOLD[usize::from(byte)]) {
        None => true,
        Some(from) => rest_is_folded(path, from, alike),
    }
}

/// [`is_folded`] from `from`, a byte that may fold, on.
#[inline(never)]
fn rest_is_folded(path: &str, from: usize, alike: PathsAlike) -> bool {
    let b = path.as_bytes();
    let mut i = from;
    while i < b.len() {
        match b[i] {
            b';' if alike.params => return false,
            b'A'..=b'Z' if alike.case => return false,
            b'%' if alike.case => {
                // The hex digits of an escape are not letters of the path;
                // an escape of non-ASCII UTF-8 may be one.
                let (c, len) = case::escaped_char(b, i);
                if c.is_some_and(case::lowers) {
                    return false;
                }
                i += len;
                continue;
            }
            0x80.. if alike.case => {
                let c = path[i..].chars().next().unwrap_or_default();
                if case::lowers(c) {
                    return false;
                }
                i += c.len_utf8();
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    true
}

/// The slow path: the folded path built segment by segment, parameters
/// removed and `.` and `..` resolved as [`super::path::normalize`] resolves
/// them.
#[inline(never)]
fn rewrite(path: &str, alike: PathsAlike) -> Result<String, PathError> {
    // Folding rarely grows a path (a few letters lower to longer UTF-8).
    let mut out = String::with_capacity(path.len());
    // `out` holds `/seg1/seg2…` without a trailing slash; the last input
    // segment decides whether the path ends with one.
    let mut trailing_slash = false;
    let body = path.strip_prefix('/').unwrap_or(path);
    let mut segments = body.split('/').peekable();
    while let Some(raw) = segments.next() {
        let last = segments.peek().is_none();
        let segment = match (alike.params, raw.find(';')) {
            (true, Some(params)) => &raw[..params],
            _ => raw,
        };
        match segment {
            // `/;x/a` is `//a` to Tomcat, which merges the slashes.
            "" | "." => trailing_slash = last,
            ".." => {
                match out.rfind('/') {
                    Some(parent) => out.truncate(parent),
                    None => return Err(PathError::AboveRootWithParams),
                }
                trailing_slash = last;
            }
            _ => {
                out.push('/');
                if alike.case {
                    case::push_lowered(segment, &mut out);
                } else {
                    out.push_str(segment);
                }
                trailing_slash = false;
            }
        }
    }
    if out.is_empty() || (trailing_slash && !alike.trailing_slash) {
        out.push('/');
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
