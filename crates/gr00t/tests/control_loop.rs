//! `gr00t bench --loop --control-hz`'s robot on the tiny fixture checkpoint, with a fixed
//! simulated delay instead of a clock: every new chunk starts at the row of the ticks gone;
//! with RTC whose frozen steps cover the delay, the first executed new action is the old
//! chunk's next action exactly (normalised and physical: the frozen rows are copied and the
//! state is the same), so the boundary is exactly the old chunk's own step; without RTC it
//! is not.

use gr00t::bench::control_loop::{max_abs_diff, simulate, ModeReport, SimOptions};
use gr00t_core::device::DeviceOptions;
use gr00t_core::engine::{Engine, EngineOptions};

const DELAY: u64 = 2;
const EXECUTE: usize = 6;
const CHUNKS: usize = 3;

fn run(engine: &Engine, rtc: bool) -> ModeReport {
    let opts = SimOptions {
        execute: EXECUTE,
        chunks: CHUNKS,
        delay: DELAY,
        rtc,
    };
    simulate(engine, &opts).unwrap()
}

#[test]
fn rtc_continues_the_old_chunk_across_the_boundary_and_plain_chunks_jump() {
    let engine = Engine::load(&EngineOptions {
        checkpoint: gr00t_fixtures::tiny_checkpoint(),
        tokenizer: None,
        device: DeviceOptions::default(),
        embodiments: Vec::new(),
        weight_cache: None,
    })
    .unwrap();
    let (plain, rtc) = (run(&engine, false), run(&engine, true));
    for m in [&plain, &rtc] {
        let r = &m.robot;
        assert_eq!(r.boundaries.len(), CHUNKS, "rtc {}", m.rtc);
        assert_eq!((r.missed, r.stale), (0, 0));
        // Sent every EXECUTE ticks, the last answer adopted DELAY + 1 ticks after its send.
        assert_eq!(m.ticks, (CHUNKS * EXECUTE) as u64 + DELAY + 1);
        for b in &r.boundaries {
            assert_eq!(
                (b.send_row, b.switch_row, b.held),
                (EXECUTE, DELAY as usize, 0)
            );
        }
    }
    // The expected delay of an answer arriving within tick DELAY + 1 is DELAY + 1 ticks.
    assert_eq!(rtc.frozen, vec![DELAY as usize + 1; CHUNKS]);
    assert_eq!(plain.frozen, vec![0; CHUNKS]);
    for (p, r) in plain.robot.boundaries.iter().zip(&rtc.robot.boundaries) {
        let next = r.old_next.as_ref().unwrap();
        assert_eq!(
            &r.first, next,
            "RTC's first new action is the old chunk's next"
        );
        assert_eq!(r.deviation(), Some((0.0, 0.0)));
        assert_eq!(r.jump_normalized(), max_abs_diff(&r.last.0, &next.0));
        let (dn, dp) = p.deviation().unwrap();
        assert!(dn > 1e-3 && dp > 1e-4, "no RTC: a fresh chunk ({dn}, {dp})");
    }
    // Both modes saw the same observations: the first chunk and its first boundary agree.
    assert_eq!(plain.robot.boundaries[0].last, rtc.robot.boundaries[0].last);
}
