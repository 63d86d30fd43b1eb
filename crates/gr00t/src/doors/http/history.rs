//! The status page's memory: the last N requests, each kept as a ready-to-send JSON object.
//!
//! Entries are built on their own thread after the answer has gone out, so the request path
//! only pays for handing over the request's decoded frames, state and instruction ([`Shown`];
//! the body is never parsed again). For a computed request the frames are run again through
//! the checkpoint's image pipeline (deterministic, so these are exactly the `qwen_resized`
//! frames the model saw) and sent as small JPEG data URLs.

use super::errors::HttpError;
use base64::Engine as _;
use gr00t_core::request::Request;
use gr00t_core::response::PredictResponse;
use gr00t_embodiment::droid::CAMERA_LABELS;
use gr00t_embodiment::image::{Frame, ImagePipeline};
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

/// JPEG quality of the page's frames: small (~15 kB each) and still sharp enough to judge a crop.
const JPEG_QUALITY: u8 = 85;
/// Finished requests that may wait for the entry builder; beyond that, entries are skipped
/// rather than slowing anything down.
const PENDING: usize = 16;

/// What the page shows of a computed request's input, taken from the parsed request: each
/// view's frames as decoded (in the layout's view order), the layout's frame offsets, the
/// instruction and the state.
#[derive(Debug, Clone)]
pub struct Shown {
    /// Per view, its frames as sent (oldest first; the current one alone in a session).
    pub frames: Vec<(String, Vec<Frame>)>,
    /// The layout's frame offsets (`[-15, 0]` for DROID).
    pub deltas: Vec<i64>,
    /// The instruction as sent.
    pub instruction: String,
    /// The state as sent, per key.
    pub state: Vec<(String, Vec<f32>)>,
}

impl Shown {
    /// The page's copy of `request`'s input, its views in the order of its served layout.
    pub fn of(request: &Request) -> Shown {
        let (obs, spec) = (&request.observation, &request.layout.spec);
        Shown {
            frames: spec
                .views
                .iter()
                .filter_map(|v| obs.images.iter().find(|(sent, _)| sent == v).cloned())
                .collect(),
            deltas: spec.frame_deltas.clone(),
            instruction: obs.instruction.clone(),
            state: obs.state.clone(),
        }
    }
}

/// A finished request handed to the history.
pub enum Pending {
    /// A computed prediction: its input and the answer.
    Served {
        /// The request id.
        request_id: String,
        /// When it finished, ms since the Unix epoch.
        unix_ms: u64,
        /// The request's input.
        shown: Arc<Shown>,
        /// The answer.
        response: Arc<PredictResponse>,
        /// Time spent waiting for the worker.
        queue_ms: f64,
    },
    /// A refused or failed prediction.
    Refused {
        /// The request id.
        request_id: String,
        /// When it finished, ms since the Unix epoch.
        unix_ms: u64,
        /// HTTP status.
        status: u16,
        /// The error message sent to the client.
        message: String,
    },
}

struct Entry {
    seq: u64,
    json: Arc<str>,
}

struct Ring {
    entries: VecDeque<Entry>,
    next_seq: u64,
}

/// The bounded list of recent requests; cloning shares it.
#[derive(Clone)]
pub struct History {
    ring: Arc<Mutex<Ring>>,
    capacity: usize,
    tx: SyncSender<Pending>,
}

/// What the page's poll gets: entries newer than the one it has.
#[derive(Debug, Clone, PartialEq)]
pub struct Since {
    /// Sequence number of the newest entry (0 when none yet).
    pub latest: u64,
    /// The newer entries' JSON objects, oldest first.
    pub entries: Vec<Arc<str>>,
}

impl History {
    /// A history of `capacity` entries (at least 1) with its builder thread; `pipeline` turns
    /// request frames into what the model saw (`None`: entries carry no frames).
    pub fn start(capacity: usize, pipeline: Option<ImagePipeline>) -> std::io::Result<History> {
        let capacity = capacity.max(1);
        let (tx, rx) = sync_channel(PENDING);
        let ring = Arc::new(Mutex::new(Ring {
            entries: VecDeque::with_capacity(capacity),
            next_seq: 1,
        }));
        let history = History {
            ring: ring.clone(),
            capacity,
            tx,
        };
        // The thread ends when the last `History` (and with it the sender) is dropped.
        let builder = history.clone_ring_only();
        std::thread::Builder::new()
            .name("gr00t-ui".into())
            .spawn(move || builder.run(rx, pipeline))?;
        Ok(history)
    }

    fn clone_ring_only(&self) -> RingHandle {
        RingHandle {
            ring: self.ring.clone(),
            capacity: self.capacity,
        }
    }

    /// Hands a finished request over; never blocks (a full backlog drops it and says so).
    pub fn offer(&self, pending: Pending) -> bool {
        match self.tx.try_send(pending) {
            Ok(()) => true,
            Err(TrySendError::Full(_)) => {
                tracing::debug!("status page backlog full; request left out of the history");
                false
            }
            Err(TrySendError::Disconnected(_)) => false,
        }
    }

    /// Entries newer than `after`, oldest first.
    pub fn since(&self, after: u64) -> Since {
        let ring = lock(&self.ring);
        Since {
            latest: ring.next_seq - 1,
            entries: ring
                .entries
                .iter()
                .filter(|e| e.seq > after)
                .map(|e| e.json.clone())
                .collect(),
        }
    }

    /// Entries held now.
    pub fn len(&self) -> usize {
        lock(&self.ring).entries.len()
    }

    /// The most entries kept.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

fn lock(ring: &Mutex<Ring>) -> std::sync::MutexGuard<'_, Ring> {
    // Every update is a push plus a pop: a panicking holder cannot leave it half-done.
    ring.lock().unwrap_or_else(|p| p.into_inner())
}

/// The builder thread's view: the ring without the sender, so it does not keep itself alive.
struct RingHandle {
    ring: Arc<Mutex<Ring>>,
    capacity: usize,
}

impl RingHandle {
    fn run(self, rx: Receiver<Pending>, pipeline: Option<ImagePipeline>) {
        while let Ok(p) = rx.recv() {
            let t0 = std::time::Instant::now();
            self.push(entry_json(&p, pipeline.as_ref()));
            tracing::debug!(
                "status page entry built in {:.1} ms",
                t0.elapsed().as_secs_f64() * 1e3
            );
        }
    }

    /// Numbers an entry and appends it, dropping the oldest beyond capacity.
    fn push(&self, mut value: Value) {
        let mut ring = lock(&self.ring);
        let seq = ring.next_seq;
        ring.next_seq += 1;
        value["seq"] = seq.into();
        ring.entries.push_back(Entry {
            seq,
            json: value.to_string().into(),
        });
        while ring.entries.len() > self.capacity {
            ring.entries.pop_front();
        }
    }
}

/// The page's view of one request (without `seq`, which the ring assigns).
pub fn entry_json(p: &Pending, pipeline: Option<&ImagePipeline>) -> Value {
    match p {
        Pending::Refused {
            request_id,
            unix_ms,
            status,
            message,
        } => json!({
            "request_id": request_id,
            "unix_ms": unix_ms,
            "status": status,
            "error": message,
        }),
        Pending::Served {
            request_id,
            unix_ms,
            shown,
            response,
            queue_ms,
        } => {
            let (frames, frames_error) = match pipeline {
                Some(p) => match model_frames(shown, p) {
                    Ok(f) => (f, None),
                    Err(e) => (Vec::new(), Some(e.to_string())),
                },
                None => (Vec::new(), None),
            };
            let state: serde_json::Map<String, Value> = shown
                .state
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect();
            let mut v = json!({
                "request_id": request_id,
                "unix_ms": unix_ms,
                "status": 200,
                "instruction": shown.instruction,
                "state": state,
                "frames": frames,
                "actions": response.actions,
                "action_horizon": response.action_horizon,
                "embodiment": response.embodiment,
                "timing_ms": super::reply::TimingBody(&response.timing_ms),
                "queue_ms": queue_ms,
                "seq_len": response.seq_len,
                "noise_source": response.noise_source,
                "seed": response.seed,
            });
            if let Some(e) = frames_error {
                v["frames_error"] = e.into();
            }
            v
        }
    }
}

/// The frames in model order (time-major: each offset, every view) after the eval crop and
/// the Qwen resize, as `{label, camera, t, width, height, src}` with a JPEG data URL; each
/// labelled by its view (DROID's cameras by their short names) and its offset (`t−15`, `t`).
pub fn model_frames(shown: &Shown, pipeline: &ImagePipeline) -> Result<Vec<Value>, HttpError> {
    let last = shown.deltas.len().saturating_sub(1);
    let mut out = Vec::new();
    for (k, &delta) in shown.deltas.iter().enumerate() {
        for (view, frames) in &shown.frames {
            // A view sent with its current frame alone (in a session) shows at t only.
            let i = match frames.len() {
                n if n == shown.deltas.len() => k,
                1 if k == last => 0,
                _ => continue,
            };
            let name = CAMERA_LABELS
                .iter()
                .find(|(camera, _)| camera == view)
                .map_or(view.as_str(), |(_, short)| short);
            let when = match delta {
                0 => "t".to_string(),
                d if d < 0 => format!("t−{}", -d),
                d => format!("t+{d}"),
            };
            let field = format!("images.{view}[{i}]");
            let label = format!("{name} {when}");
            out.push(seen_frame(&frames[i], pipeline, &field, label, view, i)?);
        }
    }
    Ok(out)
}

/// One frame as the model saw it (after crop and Qwen resize), as the page's JSON entry.
fn seen_frame(
    frame: &Frame,
    pipeline: &ImagePipeline,
    field: &str,
    label: String,
    camera: &str,
    t: usize,
) -> Result<Value, HttpError> {
    let image = |cause| HttpError::Frame {
        field: field.into(),
        cause,
    };
    let seen = pipeline.frame_stages(frame).map_err(image)?.qwen_resized;
    let jpeg =
        encode_jpeg(&seen.data, seen.width, seen.height).map_err(|cause| HttpError::Jpeg {
            field: field.into(),
            cause,
        })?;
    Ok(json!({
        "label": label,
        "camera": camera,
        "t": t,
        "width": seen.width,
        "height": seen.height,
        "src": format!(
            "data:image/jpeg;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(jpeg)
        ),
    }))
}

fn encode_jpeg(rgb: &[u8], width: usize, height: usize) -> Result<Vec<u8>, image::ImageError> {
    let mut buf = Vec::with_capacity(24 * 1024);
    image::codecs::jpeg::JpegEncoder::new_with_quality(&mut buf, JPEG_QUALITY).encode(
        rgb,
        width as u32,
        height as u32,
        image::ExtendedColorType::Rgb8,
    )?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use gr00t_core::layouts::Layouts;
    use gr00t_core::response::{ActionGroups, TimingMs};

    fn response() -> Arc<PredictResponse> {
        Arc::new(PredictResponse {
            actions: ActionGroups(vec![
                ("eef_9d".into(), vec![vec![0.5; 9]; 40]),
                ("gripper_position".into(), vec![vec![0.1]; 40]),
                ("joint_position".into(), vec![vec![0.2; 7]; 40]),
            ]),
            action_horizon: 40,
            embodiment: "x".into(),
            seq_len: 517,
            noise_source: "seed",
            seed: Some(7),
            actions_normalized: None,
            timing_ms: TimingMs::default(),
            ..Default::default()
        })
    }

    fn refused(id: &str) -> Pending {
        Pending::Refused {
            request_id: id.into(),
            unix_ms: 1,
            status: 400,
            message: "state: is required".into(),
        }
    }

    #[test]
    fn keeps_the_last_n_in_order() {
        let h = History::start(3, None).unwrap();
        // Built on this thread: the builder thread runs the same two calls.
        let ring = h.clone_ring_only();
        for i in 0..5 {
            ring.push(entry_json(&refused(&format!("r{i}")), None));
        }
        let s = h.since(0);
        assert_eq!(s.latest, 5);
        let ids: Vec<Value> = s
            .entries
            .iter()
            .map(|e| serde_json::from_str::<Value>(e).unwrap())
            .collect();
        assert_eq!(
            ids.iter()
                .map(|v| v["seq"].as_u64().unwrap())
                .collect::<Vec<_>>(),
            vec![3, 4, 5]
        );
        assert_eq!(ids[2]["request_id"], "r4");
        assert_eq!(ids[2]["status"], 400);
        assert_eq!(h.since(4).entries.len(), 1);
        assert!(h.since(5).entries.is_empty());
        assert_eq!((h.len(), h.capacity()), (3, 3));
    }

    #[test]
    fn served_entry_carries_what_the_page_plots() {
        let shown = Shown {
            frames: Vec::new(),
            deltas: vec![-15, 0],
            instruction: "pick".into(),
            state: vec![
                (
                    "eef_9d".into(),
                    vec![1.0, 2.0, 3.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0],
                ),
                ("gripper_position".into(), vec![0.5]),
                (
                    "joint_position".into(),
                    vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0],
                ),
            ],
        };
        let v = entry_json(
            &Pending::Served {
                request_id: "abc".into(),
                unix_ms: 9,
                shown: Arc::new(shown),
                response: response(),
                queue_ms: 1.5,
            },
            None,
        );
        assert_eq!(v["instruction"], "pick");
        assert_eq!(v["state"]["joint_position"][6], 7.0);
        assert_eq!(v["actions"]["eef_9d"].as_array().unwrap().len(), 40);
        assert_eq!(v["seq_len"], 517);
        assert_eq!(v["noise_source"], "seed");
        assert_eq!(v["queue_ms"], 1.5);
        assert!(v["timing_ms"]["total"].is_number());
        assert_eq!(v["frames"].as_array().unwrap().len(), 0);
    }

    #[test]
    fn frames_are_the_model_inputs_after_crop_and_resize() {
        let ckpt = gr00t_model::Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
        let pipeline = ImagePipeline::from_checkpoint(&ckpt).unwrap();
        let layouts = Layouts::of_checkpoint(&ckpt, &[gr00t_embodiment::EMBODIMENT_TAG]).unwrap();
        let body = gr00t_fixtures::request_json("case0");
        let request = crate::request_from_body(body.as_bytes(), &layouts, None).unwrap();
        let frames = model_frames(&Shown::of(&request), &pipeline).unwrap();
        let labels: Vec<&str> = frames
            .iter()
            .map(|f| f["label"].as_str().unwrap())
            .collect();
        assert_eq!(
            labels,
            ["exterior t−15", "wrist t−15", "exterior t", "wrist t"]
        );
        // NVIDIA's pipeline output for this request: `[4, 3, 256, 448]` u8, model order.
        let taps = gr00t_fixtures::Taps::load("case0");
        assert_eq!(taps.dims("proc.qwen_resized_u8"), [4, 3, 256, 448]);
        let want = taps.u8s("proc.qwen_resized_u8");
        let plane = 256 * 448;
        for (i, f) in frames.iter().enumerate() {
            assert_eq!(
                (f["width"].as_u64(), f["height"].as_u64()),
                (Some(448), Some(256))
            );
            let src = f["src"].as_str().unwrap();
            let b64 = src.strip_prefix("data:image/jpeg;base64,").unwrap();
            let jpeg = base64::engine::general_purpose::STANDARD
                .decode(b64)
                .unwrap();
            assert!(jpeg.len() < 64 * 1024, "{} bytes", jpeg.len());
            let back = image::load_from_memory(&jpeg).unwrap().to_rgb8();
            assert_eq!(back.dimensions(), (448, 256));
            let chw = &want[i * 3 * plane..(i + 1) * 3 * plane];
            let mean_abs: f64 = back
                .as_raw()
                .chunks_exact(3)
                .enumerate()
                .flat_map(|(p, px)| (0..3).map(move |c| (px[c], p, c)))
                .map(|(v, p, c)| (v as f64 - chw[c * plane + p] as f64).abs())
                .sum::<f64>()
                / (3 * plane) as f64;
            // JPEG at quality 85 is lossy but close (~1 level); another frame, a shifted crop or
            // swapped channels would be tens of levels off.
            assert!(mean_abs < 3.0, "frame {i}: mean |Δ| {mean_abs}");
        }
    }

    #[test]
    fn a_session_frame_sent_alone_shows_at_t() {
        let ckpt = gr00t_model::Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
        let pipeline = ImagePipeline::from_checkpoint(&ckpt).unwrap();
        let layouts = Layouts::of_checkpoint(&ckpt, &[gr00t_embodiment::EMBODIMENT_TAG]).unwrap();
        let mut body: Value = serde_json::from_str(&gr00t_fixtures::request_json("case0")).unwrap();
        for cam in gr00t_embodiment::droid::CAMERAS {
            let t = body["images"][cam][1].clone();
            body["images"][cam] = json!([t]);
        }
        body["session_id"] = json!("arm-1");
        let bytes = serde_json::to_vec(&body).unwrap();
        let request = crate::request_from_body(&bytes, &layouts, None).unwrap();
        let frames = model_frames(&Shown::of(&request), &pipeline).unwrap();
        let labels: Vec<&str> = frames
            .iter()
            .map(|f| f["label"].as_str().unwrap())
            .collect();
        assert_eq!(labels, ["exterior t", "wrist t"]);
    }
}
