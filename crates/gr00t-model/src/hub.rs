//! Where the released weights live: the Hugging Face cache layout for the pinned revision.

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The model repository on the Hugging Face Hub.
pub const MODEL_REPO: &str = "nvidia/GR00T-N1.7-3B";
/// The pinned revision (commit prefix).
pub const MODEL_REVISION: &str = "2fc962b973bc";

/// The hub cache folder: `$HF_HUB_CACHE`, else `$HF_HOME/hub`, else `~/.cache/huggingface/hub`.
pub fn hub_cache_dir() -> PathBuf {
    cache_dir_from(
        std::env::var_os("HF_HUB_CACHE").map(PathBuf::from),
        std::env::var_os("HF_HOME").map(PathBuf::from),
        std::env::var_os("HOME").map(PathBuf::from),
    )
}

/// gr00t-rs's own folder `name` in the hub cache (`gr00t-rs/NAME`, beside the pulled
/// checkpoints): the dtype verdicts, the packed-weight cache.
pub fn own_cache_dir(name: &str) -> PathBuf {
    hub_cache_dir().join("gr00t-rs").join(name)
}

/// `hub_cache_dir` from explicit variables (testable without touching the environment).
pub fn cache_dir_from(
    hub_cache: Option<PathBuf>,
    hf_home: Option<PathBuf>,
    home: Option<PathBuf>,
) -> PathBuf {
    if let Some(p) = hub_cache.filter(|p| !p.as_os_str().is_empty()) {
        return p;
    }
    if let Some(p) = hf_home.filter(|p| !p.as_os_str().is_empty()) {
        return p.join("hub");
    }
    home.unwrap_or_else(|| PathBuf::from("."))
        .join(".cache")
        .join("huggingface")
        .join("hub")
}

/// The cache folder of a repository: `models--{org}--{name}`.
pub fn repo_folder(cache: &Path, repo: &str) -> PathBuf {
    cache.join(format!("models--{}", repo.replace('/', "--")))
}

/// The snapshot folder of `repo` at `revision` (a commit hash, a prefix of one, or a ref such
/// as `main`), if it exists in the cache.
pub fn find_snapshot(cache: &Path, repo: &str, revision: &str) -> Result<PathBuf> {
    let root = repo_folder(cache, repo);
    let snapshots = root.join("snapshots");
    // A ref name resolves through refs/<name>.
    let commit = std::fs::read_to_string(root.join("refs").join(revision))
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| revision.to_string());
    let direct = snapshots.join(&commit);
    if direct.is_dir() {
        return Ok(direct);
    }
    let entries = std::fs::read_dir(&snapshots).map_err(|_| {
        Error::file(
            &snapshots,
            format!(
                "no cached snapshots of {repo}; run `gr00t pull` to download revision {revision}"
            ),
        )
    })?;
    let mut found: Vec<PathBuf> = entries
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with(&commit) && e.path().is_dir())
        .map(|e| e.path())
        .collect();
    found.sort();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(Error::file(
            &snapshots,
            format!("revision {revision} of {repo} is not cached; run `gr00t pull` to download it"),
        )),
        _ => Err(Error::file(
            &snapshots,
            format!("revision prefix {revision} is ambiguous"),
        )),
    }
}

/// What a checkpoint folder is, as `/info` and `/v1/models` name it: `(id, revision)`. A
/// snapshot of the Hugging Face cache is its repository and commit (12 digits); any other
/// folder (a fine-tune, a copy, the test checkpoint) is its last two path components and
/// `local`, never the released model's name.
pub fn served_model(dir: &Path) -> (String, String) {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let parts: Vec<String> = dir
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if let [.., repo, snapshots, commit] = parts.as_slice() {
        if let (Some(repo), "snapshots") = (repo.strip_prefix("models--"), snapshots.as_str()) {
            if let Some((org, name)) = repo.split_once("--") {
                let short = commit.get(..12).unwrap_or(commit);
                return (format!("{org}/{name}"), short.to_string());
            }
        }
    }
    let tail: Vec<&str> = parts
        .iter()
        .rev()
        .take(2)
        .filter(|p| *p != "/")
        .map(String::as_str)
        .collect();
    let id = tail.into_iter().rev().collect::<Vec<_>>().join("/");
    (
        if id.is_empty() { "local".into() } else { id },
        "local".into(),
    )
}

/// The pinned GR00T N1.7-3B snapshot in the default cache.
pub fn default_checkpoint_dir() -> Result<PathBuf> {
    find_snapshot(&hub_cache_dir(), MODEL_REPO, MODEL_REVISION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_dir_precedence() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(
            cache_dir_from(p("/a"), p("/b"), p("/h")),
            PathBuf::from("/a")
        );
        assert_eq!(
            cache_dir_from(None, p("/b"), p("/h")),
            PathBuf::from("/b/hub")
        );
        assert_eq!(
            cache_dir_from(None, None, p("/h")),
            PathBuf::from("/h/.cache/huggingface/hub")
        );
        assert_eq!(
            cache_dir_from(p(""), p("/b"), p("/h")),
            PathBuf::from("/b/hub")
        );
    }

    #[test]
    fn served_model_names_the_snapshot_or_the_folder() {
        let full = format!("{MODEL_REVISION}{}", "0".repeat(40 - MODEL_REVISION.len()));
        let snapshot =
            PathBuf::from("/cache/hub/models--nvidia--GR00T-N1.7-3B/snapshots").join(&full);
        assert_eq!(
            served_model(&snapshot),
            (MODEL_REPO.to_string(), MODEL_REVISION.to_string())
        );
        let fine_tune = Path::new("/work/so101_ft/checkpoint-20000");
        assert_eq!(
            served_model(fine_tune),
            ("so101_ft/checkpoint-20000".to_string(), "local".to_string())
        );
        assert_eq!(served_model(Path::new("/ft")).0, "ft");
    }

    #[test]
    fn snapshot_by_prefix_and_ref() {
        let tmp = std::env::temp_dir().join(format!("gr00t-hub-test-{}", std::process::id()));
        let root = repo_folder(&tmp, MODEL_REPO);
        let full = format!("{MODEL_REVISION}{}", "0".repeat(40 - MODEL_REVISION.len()));
        std::fs::create_dir_all(root.join("snapshots").join(&full)).unwrap();
        std::fs::create_dir_all(root.join("refs")).unwrap();
        std::fs::write(root.join("refs/main"), &full).unwrap();
        let want = root.join("snapshots").join(&full);
        assert_eq!(
            find_snapshot(&tmp, MODEL_REPO, MODEL_REVISION).unwrap(),
            want
        );
        assert_eq!(find_snapshot(&tmp, MODEL_REPO, "main").unwrap(), want);
        let err = find_snapshot(&tmp, MODEL_REPO, "deadbeef")
            .unwrap_err()
            .to_string();
        assert!(err.contains("gr00t pull"), "{err}");
        let err = find_snapshot(&tmp, "other/repo", MODEL_REVISION)
            .unwrap_err()
            .to_string();
        assert!(err.contains("gr00t pull"), "{err}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
