//! `gr00t pull`: downloads the pinned GR00T N1.7-3B snapshot into the Hugging Face cache
//! (resumable, with progress bars) and checks every file against the hub's listing: size, and
//! sha256 for the LFS files (the weights).

use gr00t_model::hub;
use hf_hub::api::sync::ApiError;
use hf_hub::api::sync::{Api, ApiBuilder};
use hf_hub::{Repo, RepoType};
use indicatif::style::TemplateError;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long the reachability check may take per step (DNS, then TCP connect).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Retries (with resume) per file after a dropped connection.
const RETRIES: usize = 3;

/// Options of `gr00t pull`.
#[derive(Debug, Clone)]
pub struct PullOptions {
    /// Revision to fetch (commit, commit prefix or branch).
    pub revision: String,
}

/// One file of the snapshot as the hub lists it.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteFile {
    /// Path inside the repository.
    pub path: String,
    /// Size in bytes, when listed.
    pub size: Option<u64>,
    /// Lower-case hex sha256 of the content (LFS files only).
    pub sha256: Option<String>,
}

/// The snapshot: its full commit and its files.
#[derive(Debug, Clone, PartialEq)]
pub struct Listing {
    /// Full 40-hex commit.
    pub commit: String,
    /// Files in listing order.
    pub files: Vec<RemoteFile>,
}

#[derive(Deserialize)]
struct RawListing {
    sha: String,
    siblings: Vec<RawSibling>,
}

#[derive(Deserialize)]
struct RawSibling {
    rfilename: String,
    size: Option<u64>,
    lfs: Option<RawLfs>,
}

#[derive(Deserialize)]
struct RawLfs {
    sha256: String,
    size: Option<u64>,
}

fn is_hex(s: &str, len: Option<usize>) -> bool {
    len.is_none_or(|n| s.len() == n) && !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Why `gr00t pull` failed: the hub's answer, a file, the network, or the download.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    /// The hub's listing is not the JSON expected.
    #[error("unexpected answer from the hub: {0}")]
    Answer(#[source] serde_json::Error),
    /// The listing's commit is not 40 hex digits.
    #[error("the hub answered an invalid commit {0:?}")]
    BadCommit(String),
    /// The listing is of another commit than the one asked for.
    #[error("asked for revision {asked}, the hub answered commit {commit}")]
    WrongCommit {
        /// The revision asked for.
        asked: String,
        /// The commit the hub answered.
        commit: String,
    },
    /// A listed path is absolute, empty or climbs out of the snapshot.
    #[error("the hub listed an unsafe file path {0:?}")]
    UnsafePath(String),
    /// A listed sha256 is not 64 hex digits.
    #[error("the hub listed an invalid sha256 for {0}")]
    BadSha(String),
    /// The revision lists no file.
    #[error("revision {0} lists no files")]
    NoFiles(String),
    /// A local file cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why not.
        source: std::io::Error,
    },
    /// A file's size is not the listed one.
    #[error("{file}: {got} bytes, the hub lists {want}")]
    Size {
        /// The file's path in the repository.
        file: String,
        /// Its size here.
        got: u64,
        /// The listed size.
        want: u64,
    },
    /// A file's sha256 is not the listed one.
    #[error("{file}: sha256 {got}, the hub lists {want}")]
    Sha {
        /// The file's path in the repository.
        file: String,
        /// Its digest here.
        got: String,
        /// The listed digest.
        want: String,
    },
    /// The endpoint is no URL with a host.
    #[error("cannot parse the address {0:?}")]
    Address(String),
    /// The host resolves to nothing.
    #[error("{0} resolves to no address")]
    NoAddress(String),
    /// The host does not resolve.
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        /// The host.
        host: String,
        /// The resolver's reason.
        source: std::io::Error,
    },
    /// The resolver did not answer in time.
    #[error("resolving {host} took longer than {secs}s")]
    ResolveTimeout {
        /// The host.
        host: String,
        /// The time waited.
        secs: u64,
    },
    /// No address of the host accepts a connection (the last one tried).
    #[error("cannot connect to {host}:{port} ({addr}): {source}")]
    Connect {
        /// The host.
        host: String,
        /// The port.
        port: u16,
        /// The address tried last.
        addr: SocketAddr,
        /// Why it refused.
        source: std::io::Error,
    },
    /// The hub refused the listing (401/403): gated, or no token.
    #[error("the hub refused access to {repo} (HTTP {code}): {hint}", repo = hub::MODEL_REPO, hint = ACCESS_HINT)]
    Refused {
        /// The HTTP status.
        code: u16,
    },
    /// The hub has no such revision (404), or hides a gated one.
    #[error("{repo} has no revision {revision} (HTTP 404) — or it is gated: {hint}", repo = hub::MODEL_REPO, hint = ACCESS_HINT)]
    NoRevision {
        /// The revision asked for.
        revision: String,
    },
    /// The listing request failed otherwise.
    #[error("cannot list {repo} at {revision}: {source}", repo = hub::MODEL_REPO)]
    List {
        /// The revision asked for.
        revision: String,
        /// ureq's reason.
        source: Box<ureq::Error>,
    },
    /// The listing's body could not be read.
    #[error("reading the hub's answer: {0}")]
    ReadAnswer(#[source] std::io::Error),
    /// A file did not download.
    #[error("downloading {file}: {source} ({hint})", hint = ACCESS_HINT)]
    Download {
        /// The file's path in the repository.
        file: String,
        /// hf-hub's reason.
        source: ApiError,
    },
    /// A downloaded file is not the listed one; it was removed.
    #[error("verification failed, file removed: {0}")]
    Verify(#[source] Box<PullError>),
    /// The hub client could not be built.
    #[error(transparent)]
    Client(#[from] ApiError),
    /// The progress bar's template is invalid.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// Writing the snapshot's refs failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// Parses the hub's `GET /api/models/{repo}/revision/{rev}?blobs=true` answer and checks it
/// belongs to `revision` and names only safe relative paths.
pub fn parse_listing(json: &str, revision: &str) -> Result<Listing, PullError> {
    let raw: RawListing = serde_json::from_str(json).map_err(PullError::Answer)?;
    let commit = raw.sha.to_ascii_lowercase();
    if !is_hex(&commit, Some(40)) {
        return Err(PullError::BadCommit(raw.sha));
    }
    if is_hex(revision, None) && !commit.starts_with(&revision.to_ascii_lowercase()) {
        return Err(PullError::WrongCommit {
            asked: revision.to_string(),
            commit,
        });
    }
    let mut files = Vec::with_capacity(raw.siblings.len());
    for s in raw.siblings {
        let p = Path::new(&s.rfilename);
        let safe = !s.rfilename.is_empty()
            && p.components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !safe {
            return Err(PullError::UnsafePath(s.rfilename));
        }
        let (sha256, size) = match s.lfs {
            Some(lfs) => {
                let sha = lfs.sha256.to_ascii_lowercase();
                if !is_hex(&sha, Some(64)) {
                    return Err(PullError::BadSha(s.rfilename));
                }
                (Some(sha), lfs.size.or(s.size))
            }
            None => (None, s.size),
        };
        files.push(RemoteFile {
            path: s.rfilename,
            size,
            sha256,
        });
    }
    if files.is_empty() {
        return Err(PullError::NoFiles(revision.to_string()));
    }
    Ok(Listing { commit, files })
}

/// Lower-case hex sha256 of a file's content.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Checks a local file against its listing entry: size, then sha256 when listed.
pub fn verify_file(path: &Path, file: &RemoteFile) -> Result<(), PullError> {
    let read = |source| PullError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    if let Some(size) = file.size {
        if meta.len() != size {
            return Err(PullError::Size {
                file: file.path.clone(),
                got: meta.len(),
                want: size,
            });
        }
    }
    if let Some(want) = &file.sha256 {
        let got = sha256_file(path).map_err(read)?;
        if &got != want {
            return Err(PullError::Sha {
                file: file.path.clone(),
                got,
                want: want.clone(),
            });
        }
    }
    Ok(())
}

/// `host` and `port` of an http(s)/socks URL (`user@`, paths and IPv6 brackets handled).
pub fn host_port(url: &str) -> Option<(String, u16)> {
    let (scheme, rest) = url.split_once("://").unwrap_or(("http", url));
    let default_port = match scheme.to_ascii_lowercase().as_str() {
        "https" => 443,
        "http" => 80,
        s if s.starts_with("socks") => 1080,
        _ => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (host, after) = v6.split_once(']')?;
        (host, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => default_port,
    };
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// Fails within a few seconds when `url`'s host cannot be resolved or connected to, so an
/// offline machine gets a clear message instead of a hang.
pub fn check_reachable(url: &str, timeout: Duration) -> Result<(), PullError> {
    let (host, port) = host_port(url).ok_or_else(|| PullError::Address(url.to_string()))?;
    let (tx, rx) = std::sync::mpsc::channel();
    let lookup_host = host.clone();
    // The system resolver has no timeout of its own: run it aside and stop waiting.
    std::thread::spawn(move || {
        let _ = tx.send(
            (lookup_host.as_str(), port)
                .to_socket_addrs()
                .map(|a| a.collect::<Vec<_>>()),
        );
    });
    let addrs = match rx.recv_timeout(timeout) {
        Ok(Ok(addrs)) if !addrs.is_empty() => addrs,
        Ok(Ok(_)) => return Err(PullError::NoAddress(host)),
        Ok(Err(source)) => return Err(PullError::Resolve { host, source }),
        Err(_) => {
            return Err(PullError::ResolveTimeout {
                host,
                secs: timeout.as_secs(),
            })
        }
    };
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(_) => return Ok(()),
            Err(source) => last = Some((addr, source)),
        }
    }
    // `addrs` is not empty: some address was tried.
    Err(match last {
        Some((addr, source)) => PullError::Connect {
            host,
            port,
            addr,
            source,
        },
        None => PullError::NoAddress(host),
    })
}

/// The first non-empty token: `HF_TOKEN`, then the token files (as `huggingface-cli login` writes).
pub fn token_from(env_token: Option<String>, files: &[PathBuf]) -> Option<String> {
    env_token
        .into_iter()
        .chain(files.iter().filter_map(|f| std::fs::read_to_string(f).ok()))
        .map(|t| t.trim().to_string())
        .find(|t| !t.is_empty())
}

fn token() -> Option<String> {
    let mut files = Vec::new();
    if let Some(p) = std::env::var_os("HF_TOKEN_PATH") {
        files.push(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("HF_HOME") {
        files.push(PathBuf::from(p).join("token"));
    }
    if let Some(p) = std::env::var_os("HOME") {
        files.push(PathBuf::from(p).join(".cache/huggingface/token"));
    }
    token_from(std::env::var("HF_TOKEN").ok(), &files)
}

/// The variables ureq reads its proxy from, in its order.
pub const PROXY_VARIABLES: [&str; 6] = [
    "ALL_PROXY",
    "all_proxy",
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
];

/// The proxy ureq will use (it reads these variables), whose reachability matters instead.
fn proxy_from_env() -> Option<String> {
    PROXY_VARIABLES
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .find(|v| !v.trim().is_empty())
}

/// A progress bar for hf-hub's downloads.
struct Bar(ProgressBar);

impl hf_hub::api::Progress for Bar {
    fn init(&mut self, size: usize, _filename: &str) {
        self.0.set_length(size as u64);
        self.0.set_position(0);
    }
    fn update(&mut self, size: usize) {
        self.0.inc(size as u64);
    }
    fn finish(&mut self) {}
}

fn bar(name: &str) -> Result<ProgressBar, PullError> {
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template(
            "{msg:40!} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} {eta}",
        )?
        .progress_chars("=> "),
    );
    bar.set_message(name.to_string());
    Ok(bar)
}

const ACCESS_HINT: &str =
    "if the repository is gated, accept its license on the hub and set HF_TOKEN";

fn listing(api: &Api, revision: &str) -> Result<Listing, PullError> {
    let repo = api.repo(Repo::with_revision(
        hub::MODEL_REPO.into(),
        RepoType::Model,
        revision.into(),
    ));
    let response = match repo.info_request().query("blobs", "true").call() {
        Ok(r) => r,
        Err(ureq::Error::Status(code @ (401 | 403), _)) => return Err(PullError::Refused { code }),
        Err(ureq::Error::Status(404, _)) => {
            return Err(PullError::NoRevision {
                revision: revision.to_string(),
            })
        }
        Err(e) => {
            return Err(PullError::List {
                revision: revision.to_string(),
                source: Box::new(e),
            })
        }
    };
    let text = response.into_string().map_err(PullError::ReadAnswer)?;
    parse_listing(&text, revision)
}

/// Runs `gr00t pull`; returns the process exit code.
pub fn run(opts: PullOptions) -> Result<i32, PullError> {
    let endpoint = std::env::var("HF_ENDPOINT").unwrap_or_else(|_| "https://huggingface.co".into());
    let probe = proxy_from_env().unwrap_or_else(|| endpoint.clone());
    if let Err(e) = check_reachable(&probe, CONNECT_TIMEOUT) {
        eprintln!("error: cannot reach the Hugging Face Hub ({endpoint}): {e}");
        eprintln!(
            "gr00t pull needs network access to download {} (revision {}). Offline, copy a snapshot into {} \
             (models--nvidia--GR00T-N1.7-3B/snapshots/<commit>/) or pass `gr00t serve --checkpoint DIR`.",
            hub::MODEL_REPO,
            opts.revision,
            hub::hub_cache_dir().display()
        );
        return Ok(3);
    }
    let cache = hub::hub_cache_dir();
    let api = ApiBuilder::from_cache(hf_hub::Cache::new(cache.clone()))
        .with_endpoint(endpoint)
        .with_token(token())
        .with_progress(false)
        .with_retries(RETRIES)
        .build()?;
    let listing = listing(&api, &opts.revision)?;
    let total: u64 = listing.files.iter().filter_map(|f| f.size).sum();
    eprintln!(
        "{} at {}: {} files, {:.2} GB, into {}",
        hub::MODEL_REPO,
        listing.commit,
        listing.files.len(),
        total as f64 / 1e9,
        cache.display()
    );
    let repo = api.repo(Repo::with_revision(
        hub::MODEL_REPO.into(),
        RepoType::Model,
        listing.commit.clone(),
    ));
    let snapshot = hub::repo_folder(&cache, hub::MODEL_REPO)
        .join("snapshots")
        .join(&listing.commit);
    for file in &listing.files {
        let local = snapshot.join(&file.path);
        if local.exists() && verify_file(&local, file).is_ok() {
            eprintln!("{}: already downloaded and verified", file.path);
            continue;
        }
        let bar = bar(&file.path)?;
        let path = repo
            .download_with_progress(&file.path, Bar(bar.clone()))
            .map_err(|source| PullError::Download {
                file: file.path.clone(),
                source,
            })?;
        bar.finish();
        if let Err(e) = verify_file(&path, file) {
            // A corrupt blob must not be picked up by the next run: remove it and its link.
            let blob = std::fs::canonicalize(&path).ok();
            let _ = std::fs::remove_file(&path);
            if let Some(blob) = blob {
                let _ = std::fs::remove_file(blob);
            }
            return Err(PullError::Verify(Box::new(e)));
        }
    }
    // `find_snapshot` resolves the requested revision name through refs/.
    let refs = hub::repo_folder(&cache, hub::MODEL_REPO).join("refs");
    std::fs::create_dir_all(&refs)?;
    if !opts.revision.contains(['/', '\\', '.']) {
        std::fs::write(refs.join(&opts.revision), &listing.commit)?;
    }
    eprintln!("done: {} (run `gr00t serve`)", snapshot.display());
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    const COMMIT: &str = "2fc962b973bc0123456789abcdef0123456789ab";

    fn tmp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("gr00t-pull-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn listing_keeps_sizes_and_lfs_hashes() {
        let sha = "a".repeat(64);
        let json = format!(
            r#"{{"id":"nvidia/GR00T-N1.7-3B","sha":"{COMMIT}","siblings":[
                {{"rfilename":"config.json","blobId":"x","size":2165}},
                {{"rfilename":"model-00001-of-00002.safetensors","size":135,"lfs":{{"sha256":"{}","size":4000000000,"pointerSize":135}}}},
                {{"rfilename":"backbone/config.json"}}]}}"#,
            sha.to_uppercase()
        );
        let l = parse_listing(&json, "2fc962b973bc").unwrap();
        assert_eq!(l.commit, COMMIT);
        assert_eq!(
            l.files,
            vec![
                RemoteFile {
                    path: "config.json".into(),
                    size: Some(2165),
                    sha256: None
                },
                RemoteFile {
                    path: "model-00001-of-00002.safetensors".into(),
                    size: Some(4_000_000_000),
                    sha256: Some(sha)
                },
                RemoteFile {
                    path: "backbone/config.json".into(),
                    size: None,
                    sha256: None
                },
            ]
        );
        // Branch names are not checked against the commit.
        assert!(parse_listing(&json, "main").is_ok());
    }

    #[test]
    fn listing_refusals() {
        let one = |sha: &str, file: &str, lfs: &str| {
            format!(r#"{{"sha":"{sha}","siblings":[{{"rfilename":"{file}"{lfs}}}]}}"#)
        };
        let err = parse_listing(&one(COMMIT, "a", ""), "deadbeef")
            .unwrap_err()
            .to_string();
        assert!(err.contains("deadbeef"), "{err}");
        assert!(parse_listing(&one("xyz", "a", ""), "main").is_err());
        for bad in ["../evil", "/etc/passwd", "a/../../b", ""] {
            assert!(
                parse_listing(&one(COMMIT, bad, ""), "main").is_err(),
                "{bad}"
            );
        }
        assert!(parse_listing(&one(COMMIT, "a", r#","lfs":{"sha256":"12"}"#), "main").is_err());
        assert!(parse_listing(&format!(r#"{{"sha":"{COMMIT}","siblings":[]}}"#), "main").is_err());
        assert!(parse_listing("<html>", "main").is_err());
    }

    #[test]
    fn verify_checks_size_and_sha256() {
        let dir = tmp("verify");
        let path = dir.join("blob");
        std::fs::write(&path, b"abc").unwrap();
        // sha256("abc"), a published test vector (FIPS 180-2).
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(sha256_file(&path).unwrap(), abc);
        let file = |size, sha: Option<&str>| RemoteFile {
            path: "blob".into(),
            size,
            sha256: sha.map(String::from),
        };
        assert!(verify_file(&path, &file(Some(3), Some(abc))).is_ok());
        assert!(verify_file(&path, &file(None, None)).is_ok());
        assert!(verify_file(&path, &file(Some(4), Some(abc)))
            .unwrap_err()
            .to_string()
            .contains("4"));
        let wrong = "0".repeat(64);
        assert!(verify_file(&path, &file(Some(3), Some(&wrong)))
            .unwrap_err()
            .to_string()
            .contains("sha256"));
        assert!(verify_file(&dir.join("missing"), &file(None, None)).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn host_port_parsing() {
        let hp = |u: &str| host_port(u).map(|(h, p)| format!("{h}:{p}"));
        assert_eq!(
            hp("https://huggingface.co").as_deref(),
            Some("huggingface.co:443")
        );
        assert_eq!(
            hp("http://proxy.local:3128/").as_deref(),
            Some("proxy.local:3128")
        );
        assert_eq!(
            hp("http://user:pw@proxy:8080").as_deref(),
            Some("proxy:8080")
        );
        assert_eq!(hp("socks5://[::1]:9050").as_deref(), Some("::1:9050"));
        assert_eq!(hp("proxy:3128").as_deref(), Some("proxy:3128"));
        assert_eq!(hp("ftp://x"), None);
        assert_eq!(hp("https://:443"), None);
    }

    #[test]
    fn unreachable_hosts_fail_fast() {
        // A port nobody listens on (bound, then released) and a name that never resolves.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        for url in [
            format!("http://127.0.0.1:{port}"),
            "https://gr00t-test.invalid".to_string(),
        ] {
            let t0 = Instant::now();
            assert!(
                check_reachable(&url, Duration::from_secs(5)).is_err(),
                "{url}"
            );
            assert!(
                t0.elapsed() < Duration::from_secs(11),
                "{url} took {:?}",
                t0.elapsed()
            );
        }
        let live = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", live.local_addr().unwrap());
        assert!(check_reachable(&url, Duration::from_secs(5)).is_ok());
    }

    #[test]
    fn token_precedence() {
        let dir = tmp("token");
        let f = dir.join("token");
        std::fs::write(&f, "hf_file\n").unwrap();
        let files = [dir.join("absent"), f];
        assert_eq!(
            token_from(Some("hf_env".into()), &files).as_deref(),
            Some("hf_env")
        );
        assert_eq!(
            token_from(Some("  ".into()), &files).as_deref(),
            Some("hf_file")
        );
        assert_eq!(token_from(None, &files).as_deref(), Some("hf_file"));
        assert_eq!(token_from(None, &files[..1]), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
