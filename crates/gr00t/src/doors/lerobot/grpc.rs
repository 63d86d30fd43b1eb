//! LeRobot's gRPC service `transport.AsyncInference` (LeRobot's `transport/services.proto`):
//! its messages written here as prost types, with the field numbers LeRobot's generated
//! `services_pb2.py` declares (a test checks them against bytes LeRobot's protobuf wrote), and
//! the four calls dispatched onto [`Robots`]. Served as an axum router on the door's [`LimitedListener`] (HTTP/2), so the
//! connection cap, handshake and idle timers are the other doors'; tonic frames the messages and
//! refuses one over the limit from its length prefix, before reading it.
//!
//! [`LimitedListener`]: crate::doors::connections::LimitedListener

use super::robots::{Reassembly, Refusal, Robots};
use crate::doors::answers::{Answered, Answers, Door, Outcome};
use crate::doors::connections::{ConnInfo, ConnState};
use gr00t_core::response::PredictResponse;
use std::convert::Infallible;
use std::sync::Arc;
use tonic::codegen::{http, Body, BoxFuture, Context, Poll, Service, StdError};
use tonic::server::{ClientStreamingService, Grpc, NamedService, UnaryService};
use tonic::{Request, Response, Status, Streaming};

/// `transport.Empty`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Empty {}

/// `transport.PolicySetup`: a pickled (or safe-form) `RemotePolicyConfig`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PolicySetup {
    /// The payload.
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
}

/// `transport.Observation`: one piece of a pickled `TimedObservation`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Observation {
    /// `TransferState`: BEGIN 1, MIDDLE 2, END 3.
    #[prost(int32, tag = "1")]
    pub transfer_state: i32,
    /// The piece.
    #[prost(bytes = "vec", tag = "2")]
    pub data: Vec<u8>,
}

/// `transport.Actions`: a pickled `list[TimedAction]`, empty when no observation came.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Actions {
    /// The payload.
    #[prost(bytes = "vec", tag = "1")]
    pub data: Vec<u8>,
}

/// The service's full name.
pub const SERVICE: &str = "transport.AsyncInference";

/// The gRPC service over the door's robots.
#[derive(Clone)]
pub struct AsyncInference {
    /// The robots it serves.
    pub robots: Arc<Robots>,
    /// `--api-token`: then every call needs `authorization: Bearer <token>` metadata.
    pub api_token: Option<Arc<str>>,
    /// The largest message (one piece, and a reassembled observation).
    pub max_message_bytes: usize,
    /// Where its predictions are counted (`/metrics`, `door="lerobot"`) and logged.
    pub answers: Arc<Answers>,
}

impl NamedService for AsyncInference {
    const NAME: &'static str = SERVICE;
}

fn status(r: Refusal) -> Status {
    match r {
        Refusal::Invalid(m) => Status::invalid_argument(m),
        Refusal::NoPolicy => Status::failed_precondition(Refusal::NoPolicy.to_string()),
        Refusal::Unavailable(m) => Status::unavailable(m),
        Refusal::Internal(m) => Status::internal(m),
    }
}

/// The outcome label of a refusal.
fn outcome(r: &Refusal) -> Outcome {
    match r {
        Refusal::Invalid(_) => Outcome::refused(""),
        Refusal::NoPolicy => Outcome::refused("policy"),
        Refusal::Unavailable(_) => Outcome::Busy,
        Refusal::Internal(_) => Outcome::Internal,
    }
}

impl AsyncInference {
    /// Runs one call's prediction work under a request span of its own, then counts, times and
    /// logs it as the other doors do (`None`: no prediction was asked of the engine, nothing to
    /// record).
    async fn recorded<T>(
        &self,
        what: &str,
        work: impl std::future::Future<Output = Result<(T, Option<PredictResponse>), Refusal>>,
    ) -> Result<T, Status> {
        // The refusal's text, written once for the log line and kept for the status.
        let work = async { work.await.map_err(|r| (r.to_string(), r)) };
        let result = self
            .answers
            .answer_in_span(Door::LeRobot, what, None, work, |r| match r {
                Ok((_, response)) => response
                    .as_ref()
                    .map(std::slice::from_ref)
                    .map(Answered::Served),
                Err((message, r)) => Some(Answered::Refused(outcome(r), message)),
            })
            .await;
        result.map(|(value, _)| value).map_err(|(_, r)| status(r))
    }

    /// The caller's connection, once its token (if one is set) is checked.
    fn caller<T>(&self, request: &Request<T>) -> Result<Arc<ConnState>, Status> {
        let conn = request
            .extensions()
            .get::<axum::extract::ConnectInfo<ConnInfo>>()
            .map(|c| c.0 .0.clone())
            .ok_or_else(|| Status::internal("the LeRobot door has no connection state"))?;
        if let Some(token) = &self.api_token {
            let sent = request
                .metadata()
                .get("authorization")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().split_once(' '))
                .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
                .map(|(_, t)| t.trim().to_string());
            if !sent
                .is_some_and(|t| gr00t_core::auth::token_matches(t.as_bytes(), token.as_bytes()))
            {
                return Err(Status::unauthenticated(
                    "this server needs `authorization: Bearer <token>` metadata (--api-token)",
                ));
            }
        }
        conn.mark_greeted();
        conn.mark_served();
        Ok(conn)
    }
}

impl AsyncInference {
    /// `Ready`: the caller starts over.
    async fn ready(self, request: Request<Empty>) -> Result<Response<Empty>, Status> {
        let conn = self.caller(&request)?;
        self.robots.ready(&conn).map_err(status)?;
        Ok(Response::new(Empty {}))
    }

    /// `SendPolicyInstructions`: the caller's policy, checked.
    async fn send_policy_instructions(
        self,
        request: Request<PolicySetup>,
    ) -> Result<Response<Empty>, Status> {
        let conn = self.caller(&request)?;
        let _busy = conn.busy();
        self.robots
            .set_policy(&conn, &request.get_ref().data)
            .map_err(status)?;
        Ok(Response::new(Empty {}))
    }

    /// `SendObservations`: pieces put together; each whole observation (or a piece refused) is
    /// a prediction request, counted and logged. The connection is not busy while waiting for
    /// pieces: a stalled stream is left to the idle timer and to eviction at the cap.
    async fn send_observations(
        self,
        request: Request<Streaming<Observation>>,
    ) -> Result<Response<Empty>, Status> {
        let conn = self.caller(&request)?;
        let mut pieces = request.into_inner();
        let mut whole = Reassembly::default();
        while let Some(piece) = pieces.message().await? {
            let message = match whole.push(piece.transfer_state, piece.data, self.max_message_bytes)
            {
                Ok(None) => continue,
                Ok(Some(message)) => Ok(message),
                Err(r) => Err(r),
            };
            let read = async {
                let _busy = conn.busy();
                self.robots.observe(&conn, &message?).map(|_| ((), None))
            };
            self.recorded("SendObservations", read).await?;
        }
        Ok(Response::new(Empty {}))
    }

    /// `GetActions`: the caller's waiting observation run, counted and logged.
    async fn get_actions(self, request: Request<Empty>) -> Result<Response<Actions>, Status> {
        let conn = self.caller(&request)?;
        let _busy = conn.busy();
        let data = self
            .recorded("GetActions", self.robots.actions(&conn))
            .await?;
        Ok(Response::new(Actions { data }))
    }
}

/// One call of the service: its handler run on the door (tonic's service traits want a value
/// per call).
struct Call<F>(AsyncInference, F);

impl<Req, Resp, F, Fut> UnaryService<Req> for Call<F>
where
    F: FnMut(AsyncInference, Request<Req>) -> Fut,
    Fut: std::future::Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    type Response = Resp;
    type Future = BoxFuture<Response<Resp>, Status>;
    fn call(&mut self, request: Request<Req>) -> Self::Future {
        Box::pin((self.1)(self.0.clone(), request))
    }
}

impl<Req, Resp, F, Fut> ClientStreamingService<Req> for Call<F>
where
    F: FnMut(AsyncInference, Request<Streaming<Req>>) -> Fut,
    Fut: std::future::Future<Output = Result<Response<Resp>, Status>> + Send + 'static,
{
    type Response = Resp;
    type Future = BoxFuture<Response<Resp>, Status>;
    fn call(&mut self, request: Request<Streaming<Req>>) -> Self::Future {
        Box::pin((self.1)(self.0.clone(), request))
    }
}

impl<B> Service<http::Request<B>> for AsyncInference
where
    B: Body + Send + 'static,
    B::Error: Into<StdError> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let door = self.clone();
        let max = self.max_message_bytes;
        macro_rules! grpc {
            ($decode:ty, $encode:ty) => {
                Grpc::new(tonic_prost::ProstCodec::<$encode, $decode>::default())
                    .apply_max_message_size_config(Some(max), Some(max))
            };
        }
        let method = req
            .uri()
            .path()
            .strip_prefix("/transport.AsyncInference/")
            .unwrap_or("");
        match method {
            "Ready" => Box::pin(async move {
                let call = Call(door, AsyncInference::ready);
                Ok(grpc!(Empty, Empty).unary(call, req).await)
            }),
            "SendPolicyInstructions" => Box::pin(async move {
                let call = Call(door, AsyncInference::send_policy_instructions);
                Ok(grpc!(PolicySetup, Empty).unary(call, req).await)
            }),
            "SendObservations" => Box::pin(async move {
                let call = Call(door, AsyncInference::send_observations);
                Ok(grpc!(Observation, Empty).client_streaming(call, req).await)
            }),
            "GetActions" => Box::pin(async move {
                let call = Call(door, AsyncInference::get_actions);
                Ok(grpc!(Empty, Actions).unary(call, req).await)
            }),
            _ => Box::pin(async move {
                Ok(Status::unimplemented("no such method of transport.AsyncInference").into_http())
            }),
        }
    }
}

/// The door's router: the service on its gRPC path.
pub fn router(service: AsyncInference) -> axum::Router {
    tonic::service::Routes::new(service).into_axum_router()
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    /// Bytes LeRobot 0.4.4's `services_pb2` (protobuf 6.31) wrote for the same messages.
    #[test]
    fn messages_encode_as_lerobots_protobuf_does() {
        let hex =
            |m: &dyn Fn() -> Vec<u8>| m().iter().map(|b| format!("{b:02x}")).collect::<String>();
        let end = Observation {
            transfer_state: 3,
            data: b"xy".to_vec(),
        };
        assert_eq!(hex(&|| end.encode_to_vec()), "080312027879");
        let begin = Observation {
            transfer_state: 1,
            data: Vec::new(),
        };
        assert_eq!(hex(&|| begin.encode_to_vec()), "0801");
        let setup = PolicySetup {
            data: b"abc".to_vec(),
        };
        assert_eq!(hex(&|| setup.encode_to_vec()), "0a03616263");
        let actions = Actions {
            data: vec![0x80, 4],
        };
        assert_eq!(hex(&|| actions.encode_to_vec()), "0a028004");
        assert!(Empty {}.encode_to_vec().is_empty());
        assert_eq!(
            Observation::decode(&[0x08, 0x03, 0x12, 0x02, b'x', b'y'][..]).unwrap(),
            end
        );
    }
}
