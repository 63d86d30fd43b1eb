//! `gr00t serve`'s packed-weight cache end to end: the first start writes it once ready, a
//! restart maps it and answers the same bits, `/info` says which happened, and `--no-weight-cache` turns it
//! off. (The file's checks, refusals and concurrent writers: gr00t-model's tests.)

use gr00t_fixtures::http_client::get;
mod support;
use support::test_server::{request, Server};

/// A `gr00t serve --dtype int8 --int8 all` on the tiny checkpoint (every linear packed, on any
/// CPU) with its cache in `dir`, plus `extra`.
fn start(dir: &std::path::Path, extra: &[&str]) -> Server {
    let mut args = vec!["--dtype", "int8", "--int8", "all"];
    args.extend_from_slice(extra);
    let dir = dir.to_str().unwrap();
    Server::start_with_env(
        &gr00t_fixtures::tiny_checkpoint(),
        0,
        &args,
        &[("GR00T_WEIGHT_CACHE", dir)],
    )
}

/// `/info`'s weight_cache line and case0's actions.
fn cache_and_actions(server: &Server) -> (String, serde_json::Value) {
    let info = get(&server.http, "/info").unwrap().json();
    let cache = info["weight_cache"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let answer = server.predict_json(&request("case0"));
    (cache, answer["actions"].clone())
}

#[test]
fn a_restart_maps_the_packed_weights_and_answers_the_same_bits() {
    let dir = std::env::temp_dir().join(format!("gr00t-serve-wcache-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);

    let server = start(&dir, &[]);
    let (to_write, first) = cache_and_actions(&server);
    assert!(to_write.contains("to be written to"), "{to_write}");
    assert!(to_write.contains(dir.to_str().unwrap()), "{to_write}");
    // Written after the start, on a thread of its own.
    assert!(
        server.log_shows(
            "packed weights written to",
            std::time::Duration::from_secs(60)
        ),
        "{}",
        server.log_text()
    );
    drop(server);

    let second = start(&dir, &[]);
    let (mapped, again) = cache_and_actions(&second);
    assert!(mapped.contains("packed weights mapped from"), "{mapped}");
    assert!(second.log_text().contains("packed weights mapped from"));
    assert_eq!(again, first, "a restart from the cache answers otherwise");

    let (off, plain) = cache_and_actions(&start(&dir, &["--no-weight-cache"]));
    assert_eq!(off, "off");
    assert_eq!(plain, first, "the cache changed the answer");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn two_servers_starting_at_once_leave_one_valid_file() {
    let dir = std::env::temp_dir().join(format!("gr00t-serve-wcache2-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| start(&dir, &[]));
        let b = s.spawn(|| start(&dir, &[]));
        (a.join().unwrap(), b.join().unwrap())
    });
    for server in [&a, &b] {
        // Each found no file and writes one (the usual case: both load at once), or, started
        // late on a busy machine, maps the other's (logged before it was ready).
        let mapped = server.log_text().contains("packed weights mapped from");
        assert!(
            mapped
                || server.log_shows(
                    "packed weights written to",
                    std::time::Duration::from_secs(60)
                ),
            "{}",
            server.log_text()
        );
    }
    let (_, first) = cache_and_actions(&a);
    assert_eq!(cache_and_actions(&b).1, first);
    drop((a, b));
    // Both wrote a whole file under a name of their own and renamed it: one file, no leftovers.
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    let third = start(&dir, &[]);
    let (mapped, again) = cache_and_actions(&third);
    assert!(mapped.contains("packed weights mapped from"), "{mapped}");
    assert_eq!(again, first);
    let _ = std::fs::remove_dir_all(&dir);
}
