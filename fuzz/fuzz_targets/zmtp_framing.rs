//! ZMQ connection bytes → the ZMTP framing layer (greeting, READY handshake, PING, frame
//! headers and bodies) under small limits. The first byte picks how the rest is cut into
//! reads: the events and the refusal must not depend on the cut, and no message may exceed
//! the limits.
#![no_main]
use gr00t_fuzz::protocols::zmtp::{Decoder, Event, Limits};
use libfuzzer_sys::fuzz_target;

const LIMITS: Limits = Limits {
    max_message: 4096,
    max_frames: 4,
    max_command: 256,
};

fn run(data: &[u8], cut: usize) -> (Vec<Event>, Option<String>) {
    let mut d = Decoder::new(LIMITS);
    let mut out = Vec::new();
    for piece in data.chunks(cut.max(1)) {
        if let Err(e) = d.feed(piece, &mut out) {
            return (out, Some(e.to_string()));
        }
    }
    (out, None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, data)) = data.split_first() else {
        return;
    };
    let whole = run(data, data.len());
    let cut = run(data, usize::from(cut % 17) + 1);
    assert_eq!(whole, cut, "the events depend on how the bytes were read");
    for e in &whole.0 {
        if let Event::Message(frames) = e {
            assert!(frames.len() <= LIMITS.max_frames);
            assert!(frames.iter().map(Vec::len).sum::<usize>() <= LIMITS.max_message);
        }
    }
});
