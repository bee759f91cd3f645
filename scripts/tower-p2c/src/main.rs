//! What tower's power-of-two-choices balancer costs per request, for
//! sluice's decision not to put it on the request path
//! (docs/benchmarks-history.md, "tower::balance"). Run under callgrind with
//! 0 and N calls and divide the difference by N (run.sh does).
//!
//!   balance N   a `Balance` over three always-ready services, each counting
//!               its requests in flight (`PendingRequests`, the load sluice's
//!               `least_request` compares), owned by the loop (`&mut`).
//!   buffer N    the same behind `Buffer`, as a balancer shared by many
//!               connections must be (it needs `&mut self`): each call goes
//!               through a channel to the balancer's task and back.
//!   direct N    one such service called directly: the floor to subtract.
use std::convert::Infallible;
use std::task::{Context, Poll};

use tower::balance::p2c::Balance;
use tower::buffer::Buffer;
use tower::discover::ServiceList;
use tower::load::{CompleteOnResponse, PendingRequests};
use tower::{Service, ServiceExt};

/// A server that answers at once: only the balancing is measured.
#[derive(Clone)]
struct Answer;

impl Service<u32> for Answer {
    type Response = u32;
    type Error = Infallible;
    type Future = std::future::Ready<Result<u32, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: u32) -> Self::Future {
        std::future::ready(Ok(request))
    }
}

fn server() -> PendingRequests<Answer> {
    PendingRequests::new(Answer, CompleteOnResponse::default())
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().expect("a mode: balance, buffer or direct");
    let calls: u32 = args
        .next()
        .expect("a number of calls")
        .parse()
        .expect("a number");
    let mut sum = 0u64;
    match mode.as_str() {
        "direct" => {
            let mut one = server();
            for i in 0..calls {
                sum += u64::from(one.ready().await.unwrap().call(i).await.unwrap());
            }
        }
        "balance" => {
            let mut balance = Balance::new(ServiceList::new(vec![server(), server(), server()]));
            for i in 0..calls {
                sum += u64::from(balance.ready().await.unwrap().call(i).await.unwrap());
            }
        }
        "buffer" => {
            let balance = Balance::new(ServiceList::new(vec![server(), server(), server()]));
            let mut shared = Buffer::new(balance, 1024);
            for i in 0..calls {
                sum += u64::from(shared.ready().await.unwrap().call(i).await.unwrap());
            }
        }
        other => panic!("unknown mode {other}"),
    }
    std::hint::black_box(sum);
}
