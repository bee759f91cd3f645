//! One header map kept per thread for the next upstream response's fields.
//!
//! A response's map is two allocations (its index and its entries), and a
//! forwarded response's is made and dropped once per request. sluice's own
//! server hands the map back here once it has written the head
//! ([`give`]), and the next response read on the thread takes it
//! ([`take`]): on a worker serving HTTP/1.1 exchanges the two alternate, so one
//! kept map is enough.

use std::cell::Cell;

use http::HeaderMap;

/// A map with room for more fields than this is dropped, not kept: one
/// response with many fields must not pin that much for the thread's life.
const MOST_KEPT: usize = 128;

thread_local! {
    static SPARE: Cell<Option<HeaderMap>> = const { Cell::new(None) };
}

/// An empty map with room for `fields`: the kept one, if any.
pub fn take(fields: usize) -> HeaderMap {
    match SPARE.take() {
        Some(mut map) => {
            map.reserve(fields);
            map
        }
        None => HeaderMap::with_capacity(fields),
    }
}

/// Keeps `map`, emptied, for the next [`take`] on this thread, unless it
/// has no room (a map that never held a field allocates nothing) or too
/// much.
pub fn give(mut map: HeaderMap) {
    let room = map.capacity();
    if room == 0 || room > MOST_KEPT {
        return;
    }
    map.clear();
    SPARE.set(Some(map));
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::header::HOST;

    #[test]
    fn a_map_given_back_is_taken_again_empty() {
        let mut map = take(4);
        map.insert(HOST, "a".parse().unwrap());
        let index = map.capacity();
        give(map);
        let again = take(2);
        assert!(again.is_empty());
        assert_eq!(again.capacity(), index, "the same map, with its room");
        // Nothing kept now: a second take makes a new map.
        assert_eq!(take(0).capacity(), 0);
    }

    #[test]
    fn a_map_with_too_much_room_is_not_kept() {
        give(HeaderMap::with_capacity(MOST_KEPT * 2));
        assert_eq!(take(0).capacity(), 0);
    }
}
