//! A header value a worker thread made last, used again while what it was
//! made from repeats: cloning it is a reference count, making it an
//! allocation. For values that change far less often than requests come
//! (the reset second, a keep-alive client's address).

use std::cell::RefCell;
use std::thread::LocalKey;

use http::HeaderValue;

/// One thread's last value of one kind, and what it was made from.
pub type RecentValue<K> = RefCell<Option<(K, HeaderValue)>>;

/// The value for `key`: `slot`'s last one if it was made from the same
/// key, otherwise `make()`'s, which `slot` then keeps.
pub fn recent_value<K: PartialEq + Copy + 'static>(
    slot: &'static LocalKey<RecentValue<K>>,
    key: K,
    make: impl FnOnce() -> HeaderValue,
) -> HeaderValue {
    slot.with_borrow_mut(|last| match last {
        Some((last_key, value)) if *last_key == key => value.clone(),
        _ => {
            let value = make();
            *last = Some((key, value.clone()));
            value
        }
    })
}
