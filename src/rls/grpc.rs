//! The `ShouldRateLimit` route, as tonic's generated server would be, but
//! for one thing: a message that is not a `RateLimitRequest` (garbage
//! bytes, a truncated field) is a malformed call, answered
//! `INVALID_ARGUMENT`, where tonic's decoder answers `INTERNAL`, a status
//! that blames sluice and that clients retry.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use prost::Message;
use tonic::body::Body;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::codegen::{BoxFuture, Service, StdError};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status};
use tonic_prost::ProstEncoder;

use super::service::RateLimiter;
use super::{MAX_MESSAGE_BYTES, SERVICE_NAME};

/// The path of the one method.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// `envoy.service.ratelimit.v3.RateLimitService`, served by `limiter`.
#[derive(Debug, Clone)]
pub struct RateLimitServer {
    limiter: Arc<RateLimiter>,
}

impl RateLimitServer {
    pub fn new(limiter: RateLimiter) -> RateLimitServer {
        RateLimitServer {
            limiter: Arc::new(limiter),
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
        let method = Method(Arc::clone(&self.limiter));
        Box::pin(async move {
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
        ProstEncoder::default()
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
}
