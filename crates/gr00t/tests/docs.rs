//! The docs say only what exists: every relative link and `#anchor` in README.md and docs/
//! resolves, every repository path they quote in code spans exists, and every `--flag` they
//! name is a flag of some `gr00t` command, of a script in this repository, or of a named
//! outside tool.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Flags of outside tools the docs show (cargo, curl, kubectl, vLLM).
const OUTSIDE_FLAGS: &[&str] = &[
    // cargo
    "--release",
    "--workspace",
    "--features",
    "--example",
    "--test",
    "--lib",
    "--locked",
    "--all-targets",
    "--path",
    "--nocapture",
    "--test-threads",
    // curl
    "--data-binary",
    // kubectl create secret
    "--from-literal",
    // vllm serve
    "--omni",
    // LeRobot's robot_client (draccus flags, read here up to their first `_`)
    "--server",
    "--robot",
    "--task",
    "--policy",
    "--pretrained",
    "--actions",
    "--chunk",
];

/// Top folders of this repository that a quoted path may start with.
const TOP_FOLDERS: &[&str] = &[
    "crates/",
    "docs/",
    "bench/",
    "deploy/",
    "examples/",
    "scripts/",
    "tests/",
    "tools/",
    "fuzz/",
    "assets/",
    ".ci/",
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// README.md, bench/README.md and every Markdown file under docs/.
fn markdown_files() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("bench/README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The lines outside fenced code blocks, numbered from 1.
fn prose_lines(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

/// `line` with its inline code spans blanked out, and the spans themselves.
fn split_code_spans(line: &str) -> (String, Vec<&str>) {
    let mut prose = String::new();
    let mut spans = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        prose.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        match after.find('`') {
            Some(end) => {
                spans.push(&after[..end]);
                rest = &after[end + 1..];
            }
            None => {
                rest = after;
                break;
            }
        }
    }
    prose.push_str(rest);
    (prose, spans)
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a Markdown file defines (repeated headings get `-1`, `-2`, …).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for (_, line) in prose_lines(text) {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let s = slug(line[hashes..].trim().trim_end_matches('#').trim());
        let n = seen.entry(s.clone()).or_default();
        out.insert(if *n == 0 {
            s.clone()
        } else {
            format!("{s}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of `[text](target)` links in a line's prose.
fn link_targets(prose: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = prose;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or("");
        out.push(target);
        rest = &after[end..];
    }
    out
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in markdown_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in prose_lines(&text) {
            let (prose, _) = split_code_spans(line);
            for target in link_targets(&prose) {
                if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                    continue;
                }
                checked += 1;
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let linked = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(path)
                };
                let place = format!("{}:{n}: {target}", file.display());
                if !linked.exists() {
                    broken.push(format!("{place} (no such file)"));
                } else if !anchor.is_empty() && linked.extension().is_some_and(|e| e == "md") {
                    let defined = anchors(&std::fs::read_to_string(&linked).unwrap());
                    if !defined.contains(anchor) {
                        broken.push(format!("{place} (no such heading)"));
                    }
                }
            }
        }
    }
    assert!(
        checked > 30,
        "only {checked} links found: is the parser broken?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// A quoted `crates/…`, `docs/…` (or a test file as `tests/x.rs`, inside one of the crates)
/// names something that exists; globs and placeholders are not checked.
#[test]
fn every_repository_path_the_docs_quote_exists() {
    let root = root();
    let crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let mut missing = Vec::new();
    let mut checked = 0;
    // docs/model/ quotes NVIDIA's tree, not ours.
    for file in markdown_files()
        .into_iter()
        .filter(|f| !f.components().any(|c| c.as_os_str() == "model"))
    {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let (_, spans) = split_code_spans(line);
            for token in spans
                .iter()
                .flat_map(|s| s.split(|c: char| c.is_whitespace() || "(),;=".contains(c)))
            {
                if !TOP_FOLDERS.iter().any(|t| token.starts_with(t))
                    || token.contains(['*', '<', '{', '$'])
                {
                    continue;
                }
                let path = token
                    .split("::")
                    .next()
                    .unwrap()
                    .trim_end_matches([':', '.']);
                checked += 1;
                let found = root.join(path).exists()
                    || (path.starts_with("tests/") && crates.iter().any(|c| c.join(path).exists()));
                if !found {
                    missing.push(format!("{}:{}: {token}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} paths found: is the parser broken?"
    );
    assert!(
        missing.is_empty(),
        "paths that do not exist:\n{}",
        missing.join("\n")
    );
}

/// The `--name` flag that `s` starts with.
fn flag_at(s: &str) -> Option<&str> {
    let rest = s.strip_prefix("--")?;
    if !rest.starts_with(|c: char| c.is_ascii_lowercase()) {
        return None;
    }
    let len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .unwrap_or(rest.len());
    Some(s[..2 + len].trim_end_matches('-'))
}

/// `--name` tokens of a text (not `x--y`).
fn flags_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (at, _) in text.match_indices("--") {
        let joined = text[..at]
            .chars()
            .next_back()
            .is_some_and(|b| b.is_alphanumeric() || b == '-');
        if let Some(flag) = flag_at(&text[at..]).filter(|_| !joined) {
            out.insert(flag.to_string());
        }
    }
    out
}

/// The flags `gr00t` and each of its subcommands accept, from their `--help`.
fn gr00t_flags() -> BTreeSet<String> {
    let help = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_gr00t"))
            .args(args)
            .arg("--help")
            .output()
            .expect("run gr00t --help");
        assert!(out.status.success());
        String::from_utf8(out.stdout).unwrap()
    };
    let top = help(&[]);
    let commands: Vec<String> = top
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.iter().any(|c| c == "serve"), "{top}");
    let mut flags = flags_in(&top);
    for c in &commands {
        flags.extend(flags_in(&help(&[c])));
    }
    flags
}

/// The flags the repository's own scripts parse (`"--quick"` in Python, `--pypi-cuda)` in shell).
fn script_flags() -> BTreeSet<String> {
    let root = root();
    let mut flags = BTreeSet::new();
    let mut dirs: Vec<PathBuf> = [
        "bench",
        "deploy",
        "examples",
        "scripts",
        "tests/python",
        "tools",
        ".ci",
    ]
    .iter()
    .map(|d| root.join(d))
    .collect();
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            for quote in ["\"--", "'--"] {
                for (at, _) in text.match_indices(quote) {
                    flags.extend(flag_at(&text[at + 1..]).map(str::to_string));
                }
            }
            for line in text.lines().map(str::trim_start) {
                if line.contains(')') {
                    flags.extend(flag_at(line).map(str::to_string));
                }
            }
        }
    }
    flags
}

#[test]
fn every_flag_the_docs_name_exists() {
    let known: BTreeSet<String> = gr00t_flags()
        .into_iter()
        .chain(script_flags())
        .chain(OUTSIDE_FLAGS.iter().map(|f| f.to_string()))
        .collect();
    for must in ["--checkpoint", "--zmq-port", "--api-token-file", "--quick"] {
        assert!(
            known.contains(must),
            "{must} not found: is the flag reader broken?"
        );
    }
    let mut unknown = Vec::new();
    for file in markdown_files()
        .into_iter()
        .filter(|f| !f.components().any(|c| c.as_os_str() == "model"))
    {
        let text = std::fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for flag in flags_in(line) {
                if !known.contains(&flag) {
                    unknown.push(format!("{}:{}: {flag}", file.display(), n + 1));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "flags no gr00t command, repository script or listed outside tool has:\n{}",
        unknown.join("\n")
    );
}

#[test]
fn the_parsers_find_what_they_should() {
    assert_eq!(
        slug("bf16 on the CPU (`--dtype bf16`)"),
        "bf16-on-the-cpu---dtype-bf16"
    );
    assert_eq!(link_targets("see [a](b.md#c) and [d](e)"), ["b.md#c", "e"]);
    let (prose, spans) = split_code_spans("x `a/b` y [l](t) `c`");
    assert_eq!(spans, ["a/b", "c"]);
    assert_eq!(link_targets(&prose), ["t"]);
    let flags: Vec<String> = flags_in("`--max-body-mb` (16), a—b, x--y, --no-ui.")
        .into_iter()
        .collect();
    assert_eq!(flags, ["--max-body-mb", "--no-ui"]);
    assert_eq!(
        anchors("# A\n## Fleet\n```\n# not\n```\n## Fleet\n")
            .into_iter()
            .collect::<Vec<_>>(),
        ["a", "fleet", "fleet-1"]
    );
}
