//! Persisted queries (Apollo's automatic persisted queries): the documents
//! sluice knows by their SHA-256, so that a request carrying a hash alone is
//! costed as the query it names (docs/conversation.md, "No query is free").
//!
//! Two sources, looked up in this order:
//!
//! - the manifest (`server.persisted_queries`, an Apollo persisted query
//!   manifest), read with the config and never forgotten;
//! - what sluice learned from requests that carried both a query and its
//!   hash, the hash checked: at most `server.max_persisted_queries`
//!   documents and [`LEARNED_BYTES`] bytes of them, the least recently used
//!   forgotten first (within each shard). The table is cut into [`SHARDS`]
//!   shards (one, for a small table), each behind its own lock, picked by
//!   the hash's first byte, so two requests contend only when they ask the
//!   same shard; requests that carry no hash never look.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use lru::LruCache;
use sha2::{Digest, Sha256};

/// A document's SHA-256, as a persisted query names it.
pub type Hash = [u8; 32];

/// The shards of the learned table.
pub const SHARDS: usize = 16;

/// Most bytes of learned documents kept, all shards together: the table's
/// memory stays bounded whatever documents clients send (64 MiB would be
/// 10,000 documents of 6.5 KiB each; a typical one is under 2 KiB).
pub const LEARNED_BYTES: usize = 64 << 20;

/// The SHA-256 of `document` (the query text exactly as sent).
pub fn hash_of(document: &str) -> Hash {
    Sha256::digest(document.as_bytes()).into()
}

/// A hash written as 64 hexadecimal digits (either case); `None` for
/// anything else.
pub fn parse_hash(text: &str) -> Option<Hash> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut hash = [0u8; 32];
    for (out, pair) in hash.iter_mut().zip(bytes.chunks_exact(2)) {
        *out = (hex_digit(pair[0])? << 4) | hex_digit(pair[1])?;
    }
    Some(hash)
}

fn hex_digit(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// The shards a table of `capacity` documents uses: [`SHARDS`], or one for
/// a small table (whose shards would be too small to hold what a client
/// learned a moment ago).
fn active_shards(capacity: usize) -> usize {
    if capacity < 4 * SHARDS {
        1
    } else {
        SHARDS
    }
}

/// The `index`th shard's share of `capacity` documents over `active`
/// shards: the remainder goes to the first ones, so the shards hold
/// `capacity` in all.
fn share(capacity: usize, active: usize, index: usize) -> usize {
    if index >= active {
        return 0;
    }
    capacity / active + usize::from(index < capacity % active)
}

/// The documents of a manifest by hash: read with the config, immutable.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Manifest {
    documents: HashMap<Hash, Arc<str>>,
}

/// An Apollo persisted query manifest, as its tools write it.
#[derive(serde::Deserialize)]
struct ManifestFile {
    format: String,
    version: u64,
    operations: Vec<ManifestOperation>,
}

#[derive(serde::Deserialize)]
struct ManifestOperation {
    id: String,
    body: String,
    // `name`, `type` and anything a later version adds are not needed.
}

impl Manifest {
    /// Reads an Apollo persisted query manifest (`{"format":
    /// "apollo-persisted-query-manifest", "version": 1, "operations":
    /// [{"id", "name", "type", "body"}]}`): each operation's document by its
    /// `id`, which must be a SHA-256 in hex. The error says what is wrong
    /// and where (line and column of the JSON).
    pub fn parse(text: &str) -> Result<Manifest, String> {
        let file: ManifestFile = serde_json::from_str(text).map_err(|error| {
            format!(
                "line {} column {}: not an Apollo persisted query manifest: {error}",
                error.line(),
                error.column()
            )
        })?;
        if file.format != "apollo-persisted-query-manifest" || file.version != 1 {
            return Err(format!(
                "format \"{}\" version {} is not an Apollo persisted query manifest \
                 (format \"apollo-persisted-query-manifest\", version 1)",
                file.format, file.version
            ));
        }
        let mut documents = HashMap::with_capacity(file.operations.len());
        for (index, operation) in file.operations.into_iter().enumerate() {
            let Some(hash) = parse_hash(&operation.id) else {
                return Err(format!(
                    "operations[{index}].id \"{}\" is not a SHA-256 (64 hexadecimal digits)",
                    operation.id
                ));
            };
            documents.insert(hash, Arc::from(operation.body));
        }
        Ok(Manifest { documents })
    }

    /// A manifest of `(hash, document)` pairs.
    pub fn new(documents: impl IntoIterator<Item = (Hash, Arc<str>)>) -> Manifest {
        Manifest {
            documents: documents.into_iter().collect(),
        }
    }

    pub fn len(&self) -> usize {
        self.documents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.documents.is_empty()
    }

    pub fn get(&self, hash: &Hash) -> Option<&Arc<str>> {
        self.documents.get(hash)
    }
}

/// What sluice learned from requests; shared by every policy, so that a
/// reload keeps it.
pub struct Learned {
    shards: Box<[Mutex<Shard>]>,
    /// The shards in use: the first `active` (the others hold nothing).
    active: AtomicUsize,
    /// Documents held, all shards together.
    held: AtomicUsize,
    /// `sluice_persisted_queries`: those plus the current manifest's.
    gauge: Option<prometheus::IntGauge>,
    manifest: AtomicUsize,
}

struct Shard {
    documents: Option<LruCache<Hash, Arc<str>>>,
    bytes: usize,
}

impl Learned {
    /// A table of at most `capacity` documents (0: nothing is learned).
    pub fn new(capacity: usize) -> Learned {
        let active = active_shards(capacity);
        let shards = (0..SHARDS)
            .map(|index| {
                Mutex::new(Shard {
                    documents: NonZeroUsize::new(share(capacity, active, index)).map(LruCache::new),
                    bytes: 0,
                })
            })
            .collect();
        Learned {
            shards,
            active: AtomicUsize::new(active),
            held: AtomicUsize::new(0),
            gauge: None,
            manifest: AtomicUsize::new(0),
        }
    }

    /// The same, counted in `gauge` (with `manifest` documents preloaded).
    pub fn counted(capacity: usize, gauge: prometheus::IntGauge, manifest: &Manifest) -> Learned {
        let learned = Learned {
            gauge: Some(gauge),
            ..Learned::new(capacity)
        };
        learned.serve(capacity, manifest);
        learned
    }

    /// Holds at most `capacity` documents from now on (forgetting the least
    /// recently used of each shard beyond its share) beside `manifest`: a
    /// reload's settings.
    pub fn serve(&self, capacity: usize, manifest: &Manifest) {
        let active = active_shards(capacity);
        // When `active` changed, hashes pick other shards: what was learned
        // is forgotten (a client sends a query again when its hash is not
        // found).
        let moved = active != self.active.swap(active, Ordering::Relaxed);
        for (index, shard) in self.shards.iter().enumerate() {
            let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            let Shard { documents, bytes } = &mut *shard;
            if moved {
                if let Some(table) = documents.as_mut() {
                    self.held.fetch_sub(table.len(), Ordering::Relaxed);
                    table.clear();
                }
                *bytes = 0;
            }
            let before = documents.as_ref().map_or(0, LruCache::len);
            match (
                NonZeroUsize::new(share(capacity, active, index)),
                documents.as_mut(),
            ) {
                (Some(share), Some(table)) => table.resize(share),
                (Some(share), None) => *documents = Some(LruCache::new(share)),
                (None, _) => *documents = None,
            }
            let after = documents.as_ref().map_or(0, LruCache::len);
            if after < before {
                *bytes = documents
                    .as_ref()
                    .map_or(0, |table| table.iter().map(|(_, d)| d.len()).sum());
                self.held.fetch_sub(before - after, Ordering::Relaxed);
            }
        }
        self.manifest.store(manifest.len(), Ordering::Relaxed);
        self.publish();
    }

    fn publish(&self) {
        if let Some(gauge) = &self.gauge {
            let known = self.len() + self.manifest.load(Ordering::Relaxed);
            gauge.set(i64::try_from(known).unwrap_or(i64::MAX));
        }
    }

    fn shard(&self, hash: &Hash) -> std::sync::MutexGuard<'_, Shard> {
        let active = self.active.load(Ordering::Relaxed).max(1);
        let shard = &self.shards[usize::from(hash[0]) % active];
        // A panic while the lock was held cannot leave the table broken
        // (each step keeps it consistent): go on with it.
        shard.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The document learned for `hash`, now the most recently used.
    pub fn get(&self, hash: &Hash) -> Option<Arc<str>> {
        self.shard(hash).documents.as_mut()?.get(hash).cloned()
    }

    /// Learns `document` (whose hash the caller checked) as `hash`,
    /// forgetting the least recently used documents of its shard to make
    /// room.
    pub fn learn(&self, hash: Hash, document: &str) {
        let mut shard = self.shard(&hash);
        let Shard { documents, bytes } = &mut *shard;
        let Some(documents) = documents.as_mut() else {
            return;
        };
        if let Some(known) = documents.get(&hash) {
            // Already known: only its recency changed.
            debug_assert_eq!(&**known, document);
            return;
        }
        let budget = LEARNED_BYTES / self.active.load(Ordering::Relaxed).max(1);
        if document.len() > budget {
            return;
        }
        let mut forgotten = 0;
        while *bytes + document.len() > budget {
            match documents.pop_lru() {
                Some((_, old)) => {
                    *bytes -= old.len();
                    forgotten += 1;
                }
                None => break,
            }
        }
        if let Some((_, old)) = documents.push(hash, Arc::from(document)) {
            // The shard was full: its least recently used went.
            *bytes -= old.len();
            forgotten += 1;
        }
        *bytes += document.len();
        if forgotten == 0 {
            self.held.fetch_add(1, Ordering::Relaxed);
        } else if forgotten > 1 {
            self.held.fetch_sub(forgotten - 1, Ordering::Relaxed);
        }
        drop(shard);
        self.publish();
    }

    /// Documents held now.
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for Learned {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Learned")
            .field("held", &self.len())
            .finish()
    }
}

/// Where a request's hash alone is looked up, and whether a request that
/// carries both teaches it (the request path's does; `POST /admin/explain`,
/// a question about a request, does not).
#[derive(Debug, Clone, Copy)]
pub struct Persisted<'s> {
    pub manifest: &'s Manifest,
    pub learned: &'s Learned,
    pub learns: bool,
}

impl Persisted<'_> {
    /// The document named by `hash`: the manifest's, else a learned one.
    pub fn document(&self, hash: &Hash) -> Option<Arc<str>> {
        match self.manifest.get(hash) {
            Some(document) => Some(document.clone()),
            None => self.learned.get(hash),
        }
    }

    /// Learns `document` as `hash` (checked by the caller), unless the
    /// manifest has it or this is a question.
    pub fn learn(&self, hash: Hash, document: &str) {
        if self.learns && self.manifest.get(&hash).is_none() {
            self.learned.learn(hash, document);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(hash: &Hash) -> String {
        hash.iter().map(|byte| format!("{byte:02x}")).collect()
    }

    #[test]
    fn hashes_are_sha256_and_read_in_either_case() {
        let hash = hash_of("{ a }");
        // `printf '{ a }' | sha256sum`
        assert_eq!(
            hex(&hash),
            "1c7e1e347f726166b5b1c55afd61f278cc9b45e00c108ec33d540a566379811b"
        );
        assert_eq!(parse_hash(&hex(&hash)), Some(hash));
        assert_eq!(parse_hash(&hex(&hash).to_uppercase()), Some(hash));
        assert_eq!(parse_hash(&hex(&hash)[1..]), None);
        assert_eq!(parse_hash(&format!("{}g", &hex(&hash)[1..])), None);
    }

    fn hashes(count: usize) -> Vec<(Hash, String)> {
        (0..count)
            .map(|n| {
                let document = format!("{{ field{n} }}");
                (hash_of(&document), document)
            })
            .collect()
    }

    #[test]
    fn the_least_recently_used_is_forgotten_first_and_the_bound_holds() {
        // Four documents a shard: a fifth in the same shard evicts the
        // least recently used.
        let learned = Learned::new(4 * SHARDS);
        let all = hashes(400);
        let first = &all[0];
        let same_shard: Vec<_> = all[1..]
            .iter()
            .filter(|(hash, _)| hash[0] as usize % SHARDS == first.0[0] as usize % SHARDS)
            .take(4)
            .collect();
        learned.learn(first.0, &first.1);
        assert_eq!(learned.get(&first.0).as_deref(), Some(&*first.1));
        for (hash, document) in &same_shard {
            learned.learn(*hash, document);
        }
        assert_eq!(learned.get(&first.0), None, "the older one is forgotten");
        assert!(same_shard
            .iter()
            .all(|(hash, _)| learned.get(hash).is_some()));
        assert_eq!(learned.len(), 4);

        // Many: never more than the capacity.
        let learned = Learned::new(100);
        for (hash, document) in &all {
            learned.learn(*hash, document);
        }
        assert!(learned.len() <= 100, "{}", learned.len());
        let found = all
            .iter()
            .filter(|(hash, _)| learned.get(hash).is_some())
            .count();
        assert_eq!(found, learned.len());
        // The most recent is kept.
        let last = all.last().unwrap();
        assert!(learned.get(&last.0).is_some());
    }

    #[test]
    fn a_use_makes_a_document_recent() {
        // A small table: one shard of two documents.
        let learned = Learned::new(2);
        let three = hashes(3);
        learned.learn(three[0].0, &three[0].1);
        learned.learn(three[1].0, &three[1].1);
        // The first is used, so the second is the least recent.
        assert!(learned.get(&three[0].0).is_some());
        learned.learn(three[2].0, &three[2].1);
        assert!(learned.get(&three[0].0).is_some());
        assert!(learned.get(&three[1].0).is_none());
        assert!(learned.get(&three[2].0).is_some());
    }

    #[test]
    fn a_small_table_has_room_for_any_hash() {
        let learned = Learned::new(3);
        let all = hashes(3);
        for (hash, document) in &all {
            learned.learn(*hash, document);
        }
        assert_eq!(learned.len(), 3);
        assert!(all.iter().all(|(hash, _)| learned.get(hash).is_some()));
        let more = hashes(50);
        for (hash, document) in &more {
            learned.learn(*hash, document);
        }
        assert!(learned.len() <= 3);
    }

    #[test]
    fn nothing_is_learned_with_no_room_or_by_a_question_or_past_the_manifest() {
        let learned = Learned::new(0);
        let (hash, document) = &hashes(1)[0];
        learned.learn(*hash, document);
        assert_eq!((learned.get(hash), learned.len()), (None, 0));

        let learned = Learned::new(10);
        let manifest = Manifest::new([(*hash, Arc::from(document.as_str()))]);
        let asking = Persisted {
            manifest: &Manifest::default(),
            learned: &learned,
            learns: false,
        };
        asking.learn(*hash, document);
        assert_eq!(learned.len(), 0);
        let serving = Persisted {
            manifest: &manifest,
            learned: &learned,
            learns: true,
        };
        serving.learn(*hash, document);
        assert_eq!(learned.len(), 0, "the manifest has it already");
        assert_eq!(serving.document(hash).as_deref(), Some(document.as_str()));
    }

    #[test]
    fn a_manifest_is_read_by_id_and_a_broken_one_says_where() {
        let hash = hex(&hash_of("query A { a }"));
        let text = format!(
            r#"{{"format":"apollo-persisted-query-manifest","version":1,
                "operations":[{{"id":"{hash}","name":"A","type":"query","body":"query A {{ a }}"}}]}}"#
        );
        let manifest = Manifest::parse(&text).unwrap();
        assert_eq!(manifest.len(), 1);
        assert_eq!(
            manifest.get(&parse_hash(&hash).unwrap()).map(|d| &**d),
            Some("query A { a }")
        );
        let broken = Manifest::parse("{\n \"format\": 1").unwrap_err();
        assert!(broken.starts_with("line 2 column "), "{broken}");
        let other = Manifest::parse(r#"{"format":"relay","version":1,"operations":[]}"#);
        assert!(other.unwrap_err().contains("format \"relay\" version 1"));
        let bad_id = text.replace(&hash, "abc");
        assert!(Manifest::parse(&bad_id)
            .unwrap_err()
            .starts_with("operations[0].id \"abc\" is not a SHA-256"));
    }

    #[test]
    fn a_smaller_table_forgets_and_the_gauge_counts_the_manifest_too() {
        let gauge = prometheus::IntGauge::new("known", "known").unwrap();
        let manifest = Manifest::new([(hash_of("{ m }"), Arc::from("{ m }"))]);
        let learned = Learned::counted(1000, gauge.clone(), &manifest);
        assert_eq!(gauge.get(), 1);
        for (hash, document) in hashes(200) {
            learned.learn(hash, &document);
        }
        assert_eq!((learned.len(), gauge.get()), (200, 201));
        learned.serve(4 * SHARDS, &Manifest::default());
        assert!(learned.len() <= 4 * SHARDS, "{}", learned.len());
        assert!(!learned.is_empty(), "a smaller table keeps what fits");
        assert_eq!(gauge.get() as usize, learned.len());
        learned.serve(0, &manifest);
        assert_eq!((learned.len(), gauge.get()), (0, 1));
    }

    #[test]
    fn the_bytes_of_a_shard_are_bounded() {
        let learned = Learned::new(10_000);
        let budget = LEARNED_BYTES / SHARDS;
        // Documents of a quarter of a shard's bytes, all in one shard.
        let big: Vec<(Hash, String)> = (0..64)
            .map(|n| format!("{{ f{n} }}{}", " ".repeat(budget / 4)))
            .map(|document| (hash_of(&document), document))
            .filter(|(hash, _)| (hash[0] as usize).is_multiple_of(SHARDS))
            .take(6)
            .collect();
        for (hash, document) in &big {
            learned.learn(*hash, document);
        }
        let kept = big
            .iter()
            .filter(|(hash, _)| learned.get(hash).is_some())
            .count();
        assert_eq!(kept, 3, "three quarters and a bit fit, not four");
        assert_eq!(learned.len(), 3);
        // One larger than a shard's bytes is never learned.
        let huge = " ".repeat(budget + 1);
        learned.learn(hash_of(&huge), &huge);
        assert_eq!(learned.len(), 3);
    }
}
