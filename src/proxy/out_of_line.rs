//! A future polled out of its caller's line: LLVM inlines an `async fn`'s
//! body into its caller's `poll` as it sees fit, and a caller that grows
//! past its budget stops being inlined itself: a call, a frame and its
//! spills on every request (docs/conversation.md, "What it costs").
//! Wrapping a large or rarely run phase keeps its caller small. The step
//! shows in callgrind (`scripts/callgrind/run.sh`) as more instructions a
//! request, and `Proxy::process::{{closure}}` listed as a function of its
//! own rather than inside `Proxy::handle::{{closure}}`
//! (docs/benchmarks-history.md, "The request path without conversation
//! rules").

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

pin_project_lite::pin_project! {
    /// `future`, whose `poll` is never inlined into its caller's.
    pub struct OutOfLine<F> {
        #[pin]
        future: F,
    }
}

impl<F> OutOfLine<F> {
    pub fn new(future: F) -> OutOfLine<F> {
        OutOfLine { future }
    }
}

impl<F: Future> Future for OutOfLine<F> {
    type Output = F::Output;

    #[inline(never)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        self.project().future.poll(cx)
    }
}
