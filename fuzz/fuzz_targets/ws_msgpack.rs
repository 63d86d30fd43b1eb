//! Websocket message bytes → msgpack-numpy value (borrowed, as the door reads it) → openpi
//! DROID observation.
#![no_main]
use gr00t_fuzz::protocols::{droid_obs, msgpack_numpy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(rmpv::ValueRef::Map(m)) = msgpack_numpy::unpack_ref(data) {
        let _ = droid_obs::parse(&m);
    }
});
