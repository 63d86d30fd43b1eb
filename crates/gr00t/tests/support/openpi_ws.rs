//! An openpi websocket client written like openpi-client's `WebsocketClientPolicy`
//! (msgpack-numpy with binary keys), for the tests that speak to `--ws-port`: connect (the
//! metadata frame first), infer, and case0 as openpi's DROID observation.

use super::test_server::{both_frames, frame, state, CAMERAS, GROUPS};
use gr00t::doors::wire::msgpack_numpy::{openpi_array, pack, unpack};
use gr00t::doors::wire::ndarray::{DType, NdArray};
use rmpv::Value;
use std::net::TcpStream;
use std::time::Duration;
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, WebSocket};

/// A client websocket over a blocking TCP stream.
pub type Ws = WebSocket<TcpStream>;

/// A websocket to `addr`'s openpi path, and the metadata the server sends first.
pub fn connect(addr: &str, api_key: Option<&str>) -> Result<(Ws, Value), tungstenite::Error> {
    connect_to(addr, "/", api_key)
}

/// A websocket to `path` on `addr` (with `Api-Key` when given), and its metadata frame.
pub fn connect_to(
    addr: &str,
    path: &str,
    api_key: Option<&str>,
) -> Result<(Ws, Value), tungstenite::Error> {
    let auth = api_key.map(|k| format!("Api-Key {k}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    connect_with(addr, path, &headers)
}

/// A websocket to `path` on `addr` whose handshake carries `headers`, and its metadata frame.
pub fn connect_with(
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(Ws, Value), tungstenite::Error> {
    let stream = TcpStream::connect(addr).expect("tcp connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let mut req = format!("ws://{addr}{path}").into_client_request().unwrap();
    for (name, value) in headers {
        let name: tungstenite::http::HeaderName = name.parse().unwrap();
        req.headers_mut().insert(name, value.parse().unwrap());
    }
    let (mut ws, _) = tungstenite::client(req, stream).map_err(|e| match e {
        tungstenite::HandshakeError::Failure(e) => e,
        tungstenite::HandshakeError::Interrupted(_) => panic!("handshake interrupted"),
    })?;
    // The server speaks first: the metadata frame.
    let meta = match ws.read().expect("metadata frame") {
        Message::Binary(b) => unpack(&b).expect("metadata msgpack"),
        other => panic!("expected binary metadata, got {other:?}"),
    };
    Ok((ws, meta))
}

/// One observation sent, its binary reply unpacked.
pub fn infer(ws: &mut Ws, obs: &Value) -> Value {
    ws.send(Message::Binary(pack(obs).into())).expect("send");
    match ws.read().expect("reply") {
        Message::Binary(b) => unpack(&b).expect("reply msgpack"),
        other => panic!("expected a binary reply, got {other:?}"),
    }
}

/// A `uint8` openpi array.
pub fn image(shape: Vec<usize>, data: Vec<u8>) -> Value {
    openpi_array(&NdArray::new(DType::U8, shape, data).unwrap())
}

/// case0's state, cameras at frame `t` (`[H,W,3]`), or both frames (`[2,H,W,3]`) when `t` is
/// `None`; noise seed 0 (case0's).
pub fn observation(t: Option<&str>) -> Vec<(Value, Value)> {
    let mut m: Vec<(Value, Value)> = CAMERAS
        .iter()
        .map(|cam| {
            let v = match t {
                Some(t) => {
                    let (w, h, data) = frame("case0", cam, t);
                    image(vec![h, w, 3], data)
                }
                None => {
                    let (w, h, data) = both_frames("case0", cam);
                    image(vec![2, h, w, 3], data)
                }
            };
            (Value::from(format!("observation/{cam}")), v)
        })
        .collect();
    for g in GROUPS {
        let f64s: Vec<u8> = state("case0", g)
            .iter()
            .flat_map(|x| (*x as f64).to_le_bytes())
            .collect();
        let n = f64s.len() / 8;
        let a = NdArray::new(DType::parse("<f8").unwrap(), vec![n], f64s).unwrap();
        m.push((Value::from(format!("observation/{g}")), openpi_array(&a)));
    }
    m.push((
        Value::from("prompt"),
        Value::from("Put the blue block in the green bowl"),
    ));
    m.push((Value::from("__noise_seed__"), Value::from(0)));
    m
}
