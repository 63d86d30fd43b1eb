//! An episode of a GR00T-format (LeRobot v2) dataset folder as `/predict` bodies for
//! `check-dtype`. Parquet and video decoding stay in Python (pyarrow, PyAV): the binary carries
//! `tools/episode_requests.py` and runs it under `python3` into a temporary folder.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `tools/episode_requests.py`, built in so that the binary needs no checkout beside it.
const TOOL: &str = include_str!("../../../tools/episode_requests.py");

/// What the tool needs on the machine.
const NEEDS: &str =
    "python3 with numpy, pyarrow, av and pillow (pip install numpy pyarrow av pillow)";

/// Whether `path` is a LeRobot / GR00T-format dataset folder (`meta/info.json`).
pub fn is_dataset(path: &Path) -> bool {
    path.join("meta").join("info.json").is_file()
}

/// Which episode of a dataset folder to read, and as which embodiment.
#[derive(Debug, Clone, Default)]
pub struct EpisodeChoice {
    /// The embodiment tag its episodes were recorded as.
    pub embodiment: Option<String>,
    /// The episode index.
    pub episode: usize,
}

/// Why a dataset folder's episode could not become bodies.
#[derive(Debug, thiserror::Error)]
pub enum EpisodeError {
    /// No `--embodiment`.
    #[error(
        "a LeRobot / GR00T dataset folder (meta/info.json): give --embodiment TAG, the \
         embodiment its episodes were recorded as"
    )]
    NoEmbodiment,
    /// `python3` did not start.
    #[error("starting python3 for tools/episode_requests.py: {0}; it needs {NEEDS}")]
    Spawn(std::io::Error),
    /// The tool failed; its last words.
    #[error("tools/episode_requests.py failed: {0}; it needs {NEEDS}")]
    Tool(String),
    /// The temporary folder could not be made.
    #[error("a temporary folder for the episode's bodies: {0}")]
    Temp(std::io::Error),
}

/// A folder of request bodies, removed when dropped.
#[derive(Debug)]
pub struct Bodies {
    /// The folder.
    pub dir: PathBuf,
}

impl Drop for Bodies {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs the tool on `dataset` for `checkpoint`'s embodiment: up to 8 steps of the episode, one
/// in ten, each a body in the returned folder.
pub fn episode_bodies(
    dataset: &Path,
    checkpoint: &Path,
    choice: &EpisodeChoice,
) -> Result<Bodies, EpisodeError> {
    let embodiment = choice
        .embodiment
        .as_ref()
        .ok_or(EpisodeError::NoEmbodiment)?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("gr00t-episode-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(EpisodeError::Temp)?;
    let bodies = Bodies { dir };
    tracing::info!(
        dataset = %dataset.display(),
        episode = choice.episode,
        embodiment = embodiment.as_str(),
        "reading the episode with tools/episode_requests.py"
    );
    let mut child = Command::new("python3")
        .arg("-")
        .arg(dataset)
        .args(["--checkpoint".as_ref(), checkpoint.as_os_str()])
        .args(["--embodiment", embodiment])
        .args(["--episode", &choice.episode.to_string()])
        .args(["--out".as_ref(), bodies.dir.as_os_str()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(EpisodeError::Spawn)?;
    if let Some(mut stdin) = child.stdin.take() {
        // A write error shows as the tool's own failure below.
        let _ = stdin.write_all(TOOL.as_bytes());
    }
    let out = child.wait_with_output().map_err(EpisodeError::Spawn)?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let last = stderr
            .trim()
            .lines()
            .last()
            .unwrap_or("no message")
            .to_string();
        return Err(EpisodeError::Tool(last));
    }
    Ok(bodies)
}
