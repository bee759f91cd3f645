//! What the request path's path handling allocates, counted by the
//! allocator: a path already normal and already folded (no upper case, no
//! trailing slash, no `;`) is normalised and folded without one allocation
//! (docs/configuration.md, "Paths an upstream treats alike"). A binary of
//! its own, so that its counting allocator sees no other test.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use sluice::key::fold::{fold, PathsAlike};
use sluice::key::path::normalize;

/// The system allocator, counting the allocations of the thread that asks
/// ([`allocations`]): the harness's own threads are not counted.
struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn count() {
    // `try_with`: a thread being torn down has no counter left.
    let _ = ALLOCATIONS.try_with(|count| count.set(count.get() + 1));
}

// SAFETY: every call is passed on unchanged to the system allocator.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// How many allocations one run of `f` makes on this thread.
fn allocations<T>(f: impl FnOnce() -> T) -> usize {
    let before = ALLOCATIONS.with(Cell::get);
    std::hint::black_box(f());
    ALLOCATIONS.with(Cell::get) - before
}

#[test]
fn a_path_already_folded_is_matched_without_an_allocation() {
    let checked = |path: &'static str, alike| {
        allocations(|| {
            let normal = normalize(path).unwrap();
            fold(&normal, alike).map(|folded| folded.len())
        })
    };
    for path in [
        "/",
        "/login",
        "/api/v1/users/42/orders",
        "/static/app.min.js",
        "/a%2Fb",
        "/%C3%A9t%C3%A9",
    ] {
        assert_eq!(checked(path, PathsAlike::ALL), 0, "{path}");
    }
    // Whatever is alike, a path is only copied when folding changes it.
    for path in ["/Login", "/login/", "/login;x=1"] {
        assert_eq!(checked(path, PathsAlike::NONE), 0, "{path}");
        assert_eq!(
            checked(path, PathsAlike::ALL),
            1,
            "{path}: one copy, folded"
        );
    }
}
