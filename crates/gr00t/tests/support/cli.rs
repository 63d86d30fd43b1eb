//! Running the `gr00t` binary to its end, for `tests/{cli,image_paths}.rs` (included there
//! through `tests/support/mod.rs`; not part of the binary).
#![allow(dead_code)]

use serde_json::Value as Json;
use std::path::Path;
use std::process::{Command, Output};

/// `gr00t args…`, run to its end.
pub fn gr00t(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gr00t"))
        .args(args)
        .output()
        .expect("run gr00t")
}

/// Asserts that `out` exited 0 (else shows `what` and its stderr) and parses its stdout.
pub fn json_stdout(what: &str, out: &Output) -> Json {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{what}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// `gr00t predict --checkpoint … --request … extra…`, which must succeed: the response JSON.
pub fn predict(checkpoint: &Path, request: &Path, extra: &[&str]) -> Json {
    let (ckpt, request) = (checkpoint.to_str().unwrap(), request.to_str().unwrap());
    let args = ["predict", "--checkpoint", ckpt, "--request", request];
    json_stdout(request, &gr00t(&[&args[..], extra].concat()))
}
