//! ZMQ request bytes → msgpack(-numpy) value → `get_action` observation parsing (nested and
//! flat key forms); the same bytes also go through the `.npy` decoder.
#![no_main]
use gr00t_fuzz::protocols::{msgpack_numpy, npy, observation, schema};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;

fuzz_target!(|data: &[u8]| {
    static SCHEMAS: OnceLock<[schema::Schema; 2]> = OnceLock::new();
    let schemas = SCHEMAS.get_or_init(|| [gr00t_fuzz::schema(false), gr00t_fuzz::schema(true)]);
    let _ = npy::decode(data);
    // Borrowed, as the door reads it.
    let Ok(rmpv::ValueRef::Map(req)) = msgpack_numpy::unpack_ref(data) else {
        return;
    };
    let Some(rmpv::ValueRef::Map(d)) = msgpack_numpy::get(&req, "data") else {
        return;
    };
    let obs = msgpack_numpy::get(d, "observation");
    let options = msgpack_numpy::get(d, "options");
    for schema in schemas {
        let _ = observation::parse(obs, options, schema);
    }
});
