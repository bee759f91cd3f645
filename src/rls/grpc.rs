//! The `ShouldRateLimit` route, as tonic's generated server would be, but
//! for two things: a message that is not a `RateLimitRequest` (garbage
//! bytes, a truncated field) is a malformed call, answered
//! `INVALID_ARGUMENT`, where tonic's decoder answers `INTERNAL`, a status
//! that blames sluice and that clients retry; and each call's buffers start
//! at [`CALL_BUFFER_BYTES`], not tonic's 8 KiB each way, since calls and
//! answers are a few hundred bytes and every answer waiting for its
//! connection's window holds one (8 KiB was 82 of 120 MB with 10,000
//! streams in flight: docs/benchmarks-history.md, "Rate limit service").

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;
use tonic::body::Body;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::codegen::{BoxFuture, Service, StdError};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};
use tonic_prost::ProstEncoder;

use tokio::sync::Semaphore;

use super::service::RateLimiter;
use super::{MAX_CALLS, MAX_MESSAGE_BYTES, SERVICE_NAME};

/// Where a call's decode and encode buffers start (they grow for a larger
/// message, up to [`MAX_MESSAGE_BYTES`]).
pub const CALL_BUFFER_BYTES: usize = 512;

/// tonic's own: a streamed answer yields to the runtime past 32 KiB.
const YIELD_THRESHOLD: usize = 32 * 1024;

fn buffer_settings() -> BufferSettings {
    BufferSettings::new(CALL_BUFFER_BYTES, YIELD_THRESHOLD)
}

/// The path of the one method.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// `envoy.service.ratelimit.v3.RateLimitService`, served by `limiter`.
#[derive(Debug, Clone)]
pub struct RateLimitServer {
    limiter: Arc<RateLimiter>,
    /// Places for the calls in flight, on every connection together.
    calls: Arc<Semaphore>,
}

impl RateLimitServer {
    pub fn new(limiter: RateLimiter) -> RateLimitServer {
        RateLimitServer {
            limiter: Arc::new(limiter),
            calls: Arc::new(Semaphore::new(MAX_CALLS)),
        }
    }
}

impl NamedService for RateLimitServer {
    const NAME: &'static str = SERVICE_NAME;
}

impl<B> Service<http::Request<B>> for RateLimitServer
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != SHOULD_RATE_LIMIT {
            return Box::pin(async { Ok(Status::unimplemented("").into_http()) });
        }
        // Over the cap, answered before the message is read: what the calls
        // in flight hold stays bounded whatever clients open.
        let Ok(place) = Arc::clone(&self.calls).try_acquire_owned() else {
            return Box::pin(async {
                let busy = format!("{MAX_CALLS} calls are in flight; retry with backoff");
                Ok(Status::resource_exhausted(busy).into_http())
            });
        };
        let method = Method(Arc::clone(&self.limiter));
        Box::pin(async move {
            let _place = place;
            let mut grpc = Grpc::new(RequestCodec)
                .apply_max_message_size_config(Some(MAX_MESSAGE_BYTES), None);
            Ok(grpc.unary(method, request).await)
        })
    }
}

/// The method, for tonic's unary handling.
struct Method(Arc<RateLimiter>);

impl UnaryService<RateLimitRequest> for Method {
    type Response = RateLimitResponse;
    type Future = BoxFuture<Response<RateLimitResponse>, Status>;

    fn call(&mut self, request: Request<RateLimitRequest>) -> Self::Future {
        let limiter = Arc::clone(&self.0);
        Box::pin(async move { limiter.should_rate_limit(request).await })
    }
}

/// Prost's encoding of the answer; the call's decoding, below.
#[derive(Debug, Clone, Copy, Default)]
struct RequestCodec;

impl Codec for RequestCodec {
    type Encode = RateLimitResponse;
    type Decode = RateLimitRequest;
    type Encoder = ProstEncoder<RateLimitResponse>;
    type Decoder = RequestDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(buffer_settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        RequestDecoder
    }
}

/// A `RateLimitRequest`, or `INVALID_ARGUMENT` saying why the bytes are
/// not one.
#[derive(Debug, Clone, Copy, Default)]
struct RequestDecoder;

impl Decoder for RequestDecoder {
    type Item = RateLimitRequest;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<RateLimitRequest>, Status> {
        RateLimitRequest::decode(buf).map(Some).map_err(|error| {
            Status::invalid_argument(format!("the message is not a RateLimitRequest: {error}"))
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        buffer_settings()
    }
}
