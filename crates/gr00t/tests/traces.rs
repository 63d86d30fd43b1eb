//! Request spans across the doors and the queue: `serve --otlp-endpoint` exports an HTTP, a
//! ZMQ and a websocket request's trace (the request span with its door and embodiment, its
//! stages as children; a client's `traceparent` continued) to an OTLP/HTTP receiver run by the
//! test itself, and `--log-format json` puts the request span's fields on the request's log
//! line.

use gr00t::doors::wire::msgpack_numpy::{gr00t_array, str_map};
use gr00t::doors::wire::ndarray::NdArray;
use gr00t_fixtures::http_client as client;
mod support;
use support::{openpi_ws, test_server, zmq_req};

use rmpv::Value;
use serde_json::Value as Json;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use test_server::{nested_observation, noise, Server};

/// How long the receiver may wait for the spans it expects (the exporter batches for 100 ms).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(60);

/// One POST the receiver got: its path, content type and JSON body.
struct Post {
    path: String,
    content_type: String,
    body: Json,
}

/// A minimal OTLP/HTTP receiver on 127.0.0.1: records each POST and answers 200 `{}`.
struct Receiver {
    url: String,
    posts: Arc<Mutex<Vec<Post>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let posts = Arc::new(Mutex::new(Vec::new()));
        let sink = posts.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let sink = sink.clone();
                std::thread::spawn(move || serve_connection(stream, &sink));
            }
        });
        Receiver { url, posts }
    }

    /// Every span received so far.
    fn spans(&self) -> Vec<Json> {
        let posts = self.posts.lock().unwrap();
        posts
            .iter()
            .flat_map(|p| {
                assert_eq!(p.path, "/v1/traces");
                assert_eq!(p.content_type, "application/json");
                let rs = p.body["resourceSpans"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default();
                rs.into_iter().flat_map(|r| {
                    let ss = r["scopeSpans"].as_array().cloned().unwrap_or_default();
                    ss.into_iter()
                        .flat_map(|s| s["spans"].as_array().cloned().unwrap_or_default())
                })
            })
            .collect()
    }

    /// Polls (bounded) until the spans received hold a whole trace of a `door` request:
    /// its request span and every `stages` child; returns (request span, its children).
    fn trace_of(&self, door: &str, stages: &[&str]) -> (Json, Vec<Json>) {
        let deadline = Instant::now() + EXPORT_TIMEOUT;
        loop {
            let spans = self.spans();
            let found = spans
                .iter()
                .filter(|s| s["name"] == "request" && attr(s, "door") == Some(door.into()))
                .find_map(|req| {
                    let children: Vec<Json> = spans
                        .iter()
                        .filter(|c| c["parentSpanId"] == req["spanId"])
                        .cloned()
                        .collect();
                    let names: Vec<&str> =
                        children.iter().filter_map(|c| c["name"].as_str()).collect();
                    stages
                        .iter()
                        .all(|s| names.contains(s))
                        .then(|| (req.clone(), children.clone()))
                });
            if let Some(t) = found {
                return t;
            }
            assert!(
                Instant::now() < deadline,
                "no whole {door} trace within {EXPORT_TIMEOUT:?}; spans: {spans:#?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Reads HTTP/1.1 requests off one connection until it closes, recording each.
fn serve_connection(stream: TcpStream, sink: &Mutex<Vec<Post>>) {
    let mut out = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let path = request_line.split(' ').nth(1).unwrap_or("").to_string();
        let (mut length, mut content_type) = (0, String::new());
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (k, v) = line.split_once(':').unwrap_or((line, ""));
            match k.to_ascii_lowercase().as_str() {
                "content-length" => length = v.trim().parse().unwrap(),
                "content-type" => content_type = v.trim().to_string(),
                _ => {}
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        sink.lock().unwrap().push(Post {
            path,
            content_type,
            body: serde_json::from_slice(&body).expect("an OTLP JSON body"),
        });
        let reply =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}";
        if out.write_all(reply.as_bytes()).is_err() {
            return;
        }
    }
}

/// A span attribute's value (string, or an integer's decimal string).
fn attr(span: &Json, key: &str) -> Option<String> {
    let a = span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?;
    let v = &a["value"];
    v["stringValue"]
        .as_str()
        .or_else(|| v["intValue"].as_str())
        .map(str::to_string)
}

fn nanos(span: &Json, key: &str) -> u128 {
    span[key].as_str().expect("a time string").parse().unwrap()
}

/// Every child is of its parent's trace and within its parent's time.
fn assert_nested(req: &Json, children: &[Json]) {
    let (start, end) = (
        nanos(req, "startTimeUnixNano"),
        nanos(req, "endTimeUnixNano"),
    );
    assert_eq!(req["traceId"].as_str().unwrap().len(), 32, "{req}");
    assert_eq!(req["spanId"].as_str().unwrap().len(), 16, "{req}");
    assert!(req.get("parentSpanId").is_none(), "{req}");
    assert_eq!(req["kind"], 2, "a request is a server span: {req}");
    for c in children {
        assert_eq!(c["traceId"], req["traceId"], "{c}");
        let (s, e) = (nanos(c, "startTimeUnixNano"), nanos(c, "endTimeUnixNano"));
        assert!(start <= s && s <= e && e <= end, "{c} not within {req}");
    }
}

/// case0 as upstream's DROID ZMQ client sends it, one batch item.
fn case0_get_action() -> Value {
    let obs = nested_observation("case0", gr00t_array);
    let noise = gr00t_array(&NdArray::from_f32(vec![1, 40, 132], &noise("case0")));
    str_map([
        ("observation", obs),
        ("options", str_map([("noise", noise)])),
    ])
}

/// The stages every computed request has, under the request span: its queue wait, then the
/// stages the bench reports.
fn stages() -> Vec<&'static str> {
    std::iter::once("queue_wait")
        .chain(gr00t::bench::STAGES)
        .collect()
}

#[test]
fn otlp_export_carries_each_requests_span_tree() {
    let receiver = Receiver::start();
    let s = Server::start(&[
        "--zmq-port",
        "0",
        "--ws-port",
        "0",
        "--otlp-endpoint",
        &receiver.url,
    ]);
    let info = client::get(&s.http, "/info").unwrap().json();
    assert_eq!(info["otlp_endpoint"], receiver.url.as_str(), "{info}");
    let embodiment = info["embodiment"].as_str().unwrap().to_string();

    let body = serde_json::to_vec(&test_server::request("case0")).unwrap();
    let headers = [
        ("Content-Type", "application/json"),
        ("x-request-id", "trace-me-1"),
        ("x-session-id", "arm-7"),
    ];
    let r = client::request(&s.http, "POST", "/predict", &headers, &body).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    let mut http_stages = stages();
    http_stages.push("parse");
    let (req, children) = receiver.trace_of("http", &http_stages);
    assert_eq!(attr(&req, "request_id").as_deref(), Some("trace-me-1"));
    assert_eq!(attr(&req, "embodiment"), Some(embodiment.clone()));
    assert_eq!(attr(&req, "session").as_deref(), Some("arm-7"));
    assert_nested(&req, &children);

    let zmq = s.zmq.clone().expect("zmq address");
    let reply =
        zmq_req::ZmqClient::connect(&zmq).call("get_action", Some(case0_get_action()), None);
    assert!(matches!(reply, Value::Array(_)), "{reply}");
    let mut zmq_stages = stages();
    zmq_stages.push("parse");
    let (zreq, zchildren) = receiver.trace_of("zmq", &zmq_stages);
    assert_eq!(attr(&zreq, "embodiment"), Some(embodiment));
    assert_eq!(attr(&zreq, "request_id").map(|id| id.len()), Some(16));
    assert_nested(&zreq, &zchildren);
    // The websocket door's openpi observation, parsed in its own span too.
    let ws = s.ws.clone().expect("ws address");
    let (mut sock, _) = openpi_ws::connect(&ws, None).unwrap();
    let reply = openpi_ws::infer(&mut sock, &Value::Map(openpi_ws::observation(None)));
    assert!(matches!(reply, Value::Map(_)), "{reply}");
    let mut ws_stages = stages();
    ws_stages.push("parse");
    let (wreq, wchildren) = receiver.trace_of("ws", &ws_stages);
    assert_nested(&wreq, &wchildren);
    // Three requests, three traces; page polls and /info get no span.
    assert_ne!(zreq["traceId"], req["traceId"]);
    assert_ne!(wreq["traceId"], zreq["traceId"]);
    let roots = receiver
        .spans()
        .into_iter()
        .filter(|s| s.get("parentSpanId").is_none())
        .count();
    assert_eq!(roots, 3, "{:#?}", receiver.spans());
}

#[test]
fn an_http_request_with_a_traceparent_continues_the_clients_trace() {
    let receiver = Receiver::start();
    let s = Server::start(&["--otlp-endpoint", &receiver.url]);
    let body = serde_json::to_vec(&test_server::request("case0")).unwrap();
    let client_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let client_span = "00f067aa0ba902b7";
    let traceparent = format!("00-{client_trace}-{client_span}-01");
    let post = |traceparent: &str, id: &str| {
        let headers = [
            ("Content-Type", "application/json"),
            ("traceparent", traceparent),
            ("x-request-id", id),
        ];
        let r = client::request(&s.http, "POST", "/predict", &headers, &body).unwrap();
        assert_eq!(r.status, 200, "{}", r.text());
    };
    post(&traceparent, "continued");
    let (req, children) = receiver.trace_of("http", &stages());
    assert_eq!(attr(&req, "request_id").as_deref(), Some("continued"));
    assert_eq!(req["traceId"], client_trace, "{req}");
    assert_eq!(req["parentSpanId"], client_span, "{req}");
    for c in &children {
        assert_eq!(c["traceId"], client_trace, "{c}");
    }
    // A malformed one (upper-case hex) starts a trace of the server's own.
    post(&traceparent.to_uppercase(), "own");
    let deadline = Instant::now() + EXPORT_TIMEOUT;
    let own = loop {
        let spans = receiver.spans();
        if let Some(r) = spans
            .iter()
            .find(|s| s["name"] == "request" && attr(s, "request_id").as_deref() == Some("own"))
        {
            break r.clone();
        }
        assert!(Instant::now() < deadline, "no span of the second request");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_ne!(own["traceId"], client_trace, "{own}");
    assert!(own.get("parentSpanId").is_none(), "{own}");
}

#[test]
fn a_websocket_handshake_with_a_traceparent_puts_each_message_in_the_clients_trace() {
    let receiver = Receiver::start();
    let s = Server::start(&["--ws-port", "0", "--otlp-endpoint", &receiver.url]);
    let client_trace = "0af7651916cd43dd8448eb211c80319c";
    let client_span = "b7ad6b7169203331";
    let traceparent = format!("00-{client_trace}-{client_span}-01");
    let ws = s.ws.clone().expect("ws address");
    let (mut sock, _) =
        openpi_ws::connect_with(&ws, "/", &[("traceparent", traceparent.as_str())]).unwrap();
    let reply = openpi_ws::infer(&mut sock, &Value::Map(openpi_ws::observation(None)));
    assert!(matches!(reply, Value::Map(_)), "{reply}");
    let (req, children) = receiver.trace_of("ws", &stages());
    assert_eq!(req["traceId"], client_trace, "{req}");
    assert_eq!(req["parentSpanId"], client_span, "{req}");
    for c in &children {
        assert_eq!(c["traceId"], client_trace, "{c}");
    }
}

#[test]
fn a_json_request_line_carries_the_request_span() {
    let s = Server::start(&["--log-format", "json"]);
    // The support reads the address off a text line: here it is followed by JSON.
    let addr: String = s
        .http
        .chars()
        .take_while(|c| c.is_ascii_digit() || matches!(c, '.' | ':'))
        .collect();
    let body = serde_json::to_vec(&test_server::request("case0")).unwrap();
    let headers = [
        ("Content-Type", "application/json"),
        ("x-request-id", "json-line-1"),
    ];
    let r = client::request(&addr, "POST", "/predict", &headers, &body).unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(
        s.log_shows("json-line-1", Duration::from_secs(10)),
        "{}",
        s.log_text()
    );
    let log = s.log_text();
    let line: Json = log
        .lines()
        .filter_map(|l| serde_json::from_str::<Json>(l).ok())
        .find(|l| l["target"] == "gr00t::request" && l["request_id"] == "json-line-1")
        .unwrap_or_else(|| panic!("no request line:\n{log}"));
    let spans = line["spans"].as_array().unwrap_or_else(|| panic!("{line}"));
    assert_eq!(spans.len(), 1, "{line}");
    let span = &spans[0];
    assert_eq!(span["name"], "request", "{line}");
    assert_eq!(span["request_id"], "json-line-1", "{line}");
    assert_eq!(span["door"], "http", "{line}");
    let info = client::get(&addr, "/info").unwrap().json();
    assert_eq!(span["embodiment"], info["embodiment"], "{line}");
}

#[test]
fn a_collector_that_is_down_costs_a_warning_not_an_answer() {
    // A port nothing listens on: bound, then closed again.
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let s = Server::start_with_env(
        &gr00t_fixtures::tiny_checkpoint(),
        0,
        &[],
        &[("GR00T_OTLP_ENDPOINT", &dead)],
    );
    let info = client::get(&s.http, "/info").unwrap().json();
    assert_eq!(info["otlp_endpoint"], dead.as_str(), "{info}");
    for _ in 0..2 {
        let r = s.post_predict(&test_server::request("case0"));
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert!(
        s.log_shows("OTLP export to", EXPORT_TIMEOUT),
        "{}",
        s.log_text()
    );
    assert_eq!(client::get(&s.http, "/health").unwrap().status, 200);
}
