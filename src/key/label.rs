//! How a caller's key is shown outside the request path: logs, every admin
//! answer, the status page and `check` (docs/operations.md, "Keys in logs
//! and admin views").
//!
//! A value from a `header:` or `query:` source is an API key or a token, a
//! secret of its caller, so it is shown as a label: at most its first four
//! characters (never more than a quarter of it) and a hash keyed with the
//! deployment's [`LabelKey`], `sk_l…#3f9a1c2e4b7d`. The same value always
//! gets the same label, so a label quoted from a log finds the caller on
//! the status page; nobody without the key can confirm a guessed value by
//! hashing it. The other sources (`ip`, `path`, `method`, `host`,
//! `jwt:<claim>`) are identifiers and are shown as they are, and
//! `[admin] reveal_keys = true` shows credentials in clear too.
//!
//! A key is kept as a [`KeyText`], its parts apart, so that a value that
//! contains `|` is never mistaken for two parts when it is labelled.

use std::fmt;
use std::sync::Arc;

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use smallvec::SmallVec;

use super::KeySource;

/// A bucket key as text: each source's value, in `key` order. Its clear
/// form joins them with `|` (the form admin calls and `overrides` take).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyText {
    joined: String,
    /// Where each part ends in `joined` (the `|` between parts excluded).
    ends: SmallVec<[u32; 4]>,
}

impl KeyText {
    /// An empty key, to which parts are added.
    pub fn new() -> KeyText {
        KeyText::default()
    }

    /// Adds the next part: `write` appends its value to the string it is
    /// given.
    pub fn push_with(&mut self, write: impl FnOnce(&mut String)) {
        if !self.ends.is_empty() {
            self.joined.push('|');
        }
        write(&mut self.joined);
        self.ends.push(self.joined.len() as u32);
    }

    /// Adds the next part.
    pub fn push(&mut self, value: &str) {
        self.push_with(|text| text.push_str(value));
    }

    /// A key written as text for a rule with `sources` sources, split into
    /// parts as [`super::KeyHasher::key_of_text`] splits it: on `|`, the
    /// last part taking any further `|`.
    pub fn typed(text: &str, sources: usize) -> KeyText {
        let mut key = KeyText::new();
        for part in text.splitn(sources.max(1), '|') {
            key.push(part);
        }
        key
    }

    /// The parts, in `key` order.
    pub fn parts(&self) -> impl Iterator<Item = &str> {
        let mut start = 0;
        self.ends.iter().map(move |&end| {
            let part = &self.joined[start..end as usize];
            start = end as usize + 1;
            part
        })
    }

    /// The key in clear, its parts joined by `|`. Never shown as it is:
    /// [`KeyLabels::show`] writes what may be shown.
    pub fn clear(&self) -> &str {
        &self.joined
    }
}

/// The secret that labels are hashed with. Its `Debug` does not show it.
#[derive(Clone)]
pub struct LabelKey(Arc<[u8; 32]>);

impl fmt::Debug for LabelKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("LabelKey(..)")
    }
}

/// Sets the label keys of different origins apart.
const CONTEXT: &[u8] = b"sluice key labels v1";

/// PBKDF2 rounds for a key made from the admin token: a caller who knows
/// its own key and reads its label cannot try a dictionary of tokens
/// against it at the speed of one hash each (a few milliseconds, once at
/// start: docs/benchmarks-history.md, "Keys are secrets: the label key").
const TOKEN_ROUNDS: u32 = 60_000;

impl LabelKey {
    /// A key of this process alone: labels change when it restarts.
    pub fn random() -> LabelKey {
        let mut key = [0u8; 32];
        if getrandom::fill(&mut key).is_err() {
            // No randomness from the system: still a key nobody can guess
            // without reading this process's memory.
            let state = std::collections::hash_map::RandomState::new();
            for (index, chunk) in key.chunks_mut(8).enumerate() {
                use std::hash::BuildHasher;
                chunk.copy_from_slice(
                    &state
                        .hash_one((index, std::time::Instant::now()))
                        .to_le_bytes(),
                );
            }
        }
        LabelKey(Arc::new(key))
    }

    /// The key of every instance that shares a store's `seed`.
    pub fn from_seed(seed: [u64; 2]) -> LabelKey {
        let mut digest = Sha256::new();
        digest.update(CONTEXT);
        digest.update(seed[0].to_le_bytes());
        digest.update(seed[1].to_le_bytes());
        LabelKey(Arc::new(digest.finalize().into()))
    }

    /// The key of a deployment whose admin token is `token`.
    pub fn from_token(token: &str) -> LabelKey {
        let mut key = [0u8; 32];
        pbkdf2::pbkdf2_hmac::<Sha256>(token.as_bytes(), CONTEXT, TOKEN_ROUNDS, &mut key);
        LabelKey(Arc::new(key))
    }

    /// The deployment's key when no store seed is known: from the admin
    /// token when one is set, else a key of this process.
    pub fn for_token(token: Option<&str>) -> LabelKey {
        token.map_or_else(LabelKey::random, LabelKey::from_token)
    }

    /// The label of one credential value.
    pub fn label(&self, value: &str) -> String {
        if value.is_empty() {
            // A missing source: nothing to hide.
            return String::new();
        }
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0[..]).expect("HMAC takes any key");
        mac.update(value.as_bytes());
        let digest = mac.finalize().into_bytes();
        let mut label = String::with_capacity(4 + 3 + 1 + 2 * LABEL_HASH_BYTES);
        label.push_str(&elided(value));
        label.push('#');
        for byte in &digest[..LABEL_HASH_BYTES] {
            label.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
            label.push(char::from_digit(u32::from(byte & 15), 16).unwrap_or('0'));
        }
        label
    }
}

/// What a label shows of `value` before its hash: at most its first four
/// characters, never more than a quarter of it, and only printable ASCII
/// other than the separators, then `…`. Config errors about a credential
/// show this alone (their line and column point at the value).
pub fn elided(value: &str) -> String {
    let shown = (value.chars().count() / 4).min(4);
    let mut elided: String = value
        .chars()
        .take(shown)
        .take_while(|c| c.is_ascii_graphic() && !matches!(c, '|' | '#'))
        .collect();
    elided.push('…');
    elided
}

/// How a config error or a reload diff shows an `overrides` key of a rule
/// keyed on `sources`: elided when the key holds a credential (the error's
/// line and column point at it), `None` when it may be shown as written.
pub fn elided_override(sources: &[KeySource], text: &str) -> Option<String> {
    sources.iter().any(is_credential).then(|| elided(text))
}

/// Bytes of the keyed hash a label shows (48 bits: distinct callers share a
/// label only among many millions).
const LABEL_HASH_BYTES: usize = 6;

/// Whether a value of `source` is a credential, shown only as a label. A
/// descriptor entry may carry anything Envoy read from a request (an API
/// key header, say), so it is one too, and so is a value from the body (a
/// tenant id or token in JSON). A GraphQL operation's name or type is not:
/// it says what is asked, not who asks.
pub fn is_credential(source: &KeySource) -> bool {
    matches!(
        source,
        KeySource::Header(_) | KeySource::Query(_) | KeySource::Body(_) | KeySource::Descriptor(_)
    )
}

/// How one policy shows keys: labelled with the deployment's key, or in
/// clear with `reveal_keys`.
#[derive(Debug, Clone)]
pub struct KeyLabels {
    key: LabelKey,
    reveal: bool,
}

impl KeyLabels {
    pub fn new(key: LabelKey, reveal: bool) -> KeyLabels {
        KeyLabels { key, reveal }
    }

    /// Whether `other` shows every key as this does (the same label key,
    /// the same `reveal_keys`): what a cache of shown keys is valid for.
    pub fn same_as(&self, other: &KeyLabels) -> bool {
        self.reveal == other.reveal && Arc::ptr_eq(&self.key.0, &other.key.0)
    }

    /// The key as it may be shown: its parts joined by `|`, each credential
    /// part as its label.
    pub fn show(&self, sources: &[KeySource], key: &KeyText) -> String {
        if self.reveal {
            return key.clear().to_owned();
        }
        self.redacted(sources, key)
    }

    /// The key with each credential part as its label, whatever
    /// `reveal_keys` says: what leaves this instance (the ban board in a
    /// shared Redis, which other instances and whoever reads Redis see).
    pub fn redacted(&self, sources: &[KeySource], key: &KeyText) -> String {
        if !sources.iter().any(is_credential) {
            return key.clear().to_owned();
        }
        let mut shown = String::with_capacity(key.clear().len() + 24);
        for (index, part) in key.parts().enumerate() {
            if index > 0 {
                shown.push('|');
            }
            match sources.get(index) {
                Some(source) if is_credential(source) => shown.push_str(&self.key.label(part)),
                _ => shown.push_str(part),
            }
        }
        shown
    }

    /// One credential value as it may be shown.
    pub fn show_value(&self, value: &str) -> String {
        if self.reveal {
            value.to_owned()
        } else {
            self.key.label(value)
        }
    }

    /// A key an operator wrote as text (an admin call, an `overrides`
    /// entry), as it may be shown.
    pub fn show_typed(&self, sources: &[KeySource], text: &str) -> String {
        self.show(sources, &KeyText::typed(text, sources.len()))
    }

    /// Whether `given`, written by an operator, names `key`: the key in
    /// clear, or as it is shown.
    pub fn names(&self, sources: &[KeySource], key: &KeyText, given: &str) -> bool {
        key.clear() == given || self.show(sources, key) == given
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sources() -> Vec<KeySource> {
        vec![
            KeySource::Ip,
            KeySource::Header(http::HeaderName::from_static("x-api-key")),
        ]
    }

    #[test]
    fn a_credential_shows_a_quarter_at_most_four_characters_and_a_keyed_hash() {
        let key = LabelKey::from_seed([1, 2]);
        let label = key.label("sk_live_SECRET123");
        assert!(label.starts_with("sk_l…#"), "{label}");
        assert_eq!(label.len(), "sk_l…#".len() + 12);
        // Stable, and keyed: the same value under another key differs.
        assert_eq!(
            label,
            LabelKey::from_seed([1, 2]).label("sk_live_SECRET123")
        );
        assert_ne!(
            label,
            LabelKey::from_seed([1, 3]).label("sk_live_SECRET123")
        );
        assert_ne!(label, key.label("sk_live_SECRET124"));
        // Short values show less, a very short one nothing but the hash.
        assert!(key.label("abcdefgh").starts_with("ab…#"));
        assert!(key.label("abc").starts_with("…#"));
        // Only printable ASCII is shown, and never the separators.
        assert!(key.label("a|bcdefghijklmnop").starts_with("a…#"));
        assert!(key.label("\nabcdefghijklmnop").starts_with("…#"));
        assert_eq!(key.label(""), "");
    }

    #[test]
    fn tokens_make_one_key_per_token() {
        let a = LabelKey::from_token("token-a");
        assert_eq!(
            a.label("v-123456"),
            LabelKey::from_token("token-a").label("v-123456")
        );
        assert_ne!(
            a.label("v-123456"),
            LabelKey::from_token("token-b").label("v-123456")
        );
        assert_ne!(
            LabelKey::random().label("v-123456"),
            LabelKey::random().label("v-123456")
        );
    }

    #[test]
    fn only_credential_parts_are_labelled() {
        let labels = KeyLabels::new(LabelKey::from_seed([7, 7]), false);
        let mut key = KeyText::new();
        key.push("203.0.113.7");
        key.push("sk_live_SECRET|123");
        let shown = labels.show(&sources(), &key);
        let (ip, label) = shown.split_once('|').unwrap();
        assert_eq!(ip, "203.0.113.7");
        assert!(
            label.starts_with("sk_l…#") && !shown.contains("SECRET"),
            "{shown}"
        );
        // Typed in clear, the same key gets the same label.
        assert_eq!(
            labels.show_typed(&sources(), "203.0.113.7|sk_live_SECRET|123"),
            shown
        );
        assert!(labels.names(&sources(), &key, "203.0.113.7|sk_live_SECRET|123"));
        assert!(labels.names(&sources(), &key, &shown));
        assert!(!labels.names(&sources(), &key, "203.0.113.7|sk_l…#000000000000"));
        // Revealed, it is shown in clear.
        let revealed = KeyLabels::new(LabelKey::from_seed([7, 7]), true);
        assert_eq!(
            revealed.show(&sources(), &key),
            "203.0.113.7|sk_live_SECRET|123"
        );
    }

    #[test]
    fn a_value_with_the_separator_stays_one_part() {
        let labels = KeyLabels::new(LabelKey::from_seed([7, 7]), false);
        let header_first = vec![
            KeySource::Header(http::HeaderName::from_static("x-api-key")),
            KeySource::Ip,
        ];
        let mut key = KeyText::new();
        key.push("abcd|SECRETPART");
        key.push("203.0.113.7");
        let shown = labels.show(&header_first, &key);
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(shown.ends_with("|203.0.113.7"), "{shown}");
        assert_eq!(
            key.parts().collect::<Vec<_>>(),
            ["abcd|SECRETPART", "203.0.113.7"]
        );
    }
}
