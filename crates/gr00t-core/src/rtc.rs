//! Real-time chunking options as every door receives them (HTTP fields, ZMQ `options`,
//! websocket keys), wire-neutral: the doors read the values, [`RtcOptions::resolve`] checks
//! them against the served model and embodiment and builds the model's [`Rtc`], so that a bad
//! value is refused before the queue, naming the field.

use crate::error::FieldError;
use crate::session::LastChunk;
use gr00t_embodiment::layout::EmbodimentSpec;
pub use gr00t_model::rtc::DEFAULT_RAMP_RATE;
use gr00t_model::Rtc;

/// The request keys of the RTC options, as upstream's `options` spells them (and the HTTP
/// body's top-level fields).
pub const RTC_KEYS: [&str; 5] = [
    "previous_chunk",
    "action_horizon",
    "rtc_overlap_steps",
    "rtc_frozen_steps",
    "rtc_ramp_rate",
];

/// A previous chunk as sent: `rows × width` values, row-major.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    /// Rows sent (≤ the model's horizon).
    pub rows: usize,
    /// Values per row: the embodiment's valid action dims or the model's action dim.
    pub width: usize,
    /// `rows × width` values.
    pub values: Vec<f32>,
}

/// The RTC fields of one request, each `None` when absent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RtcOptions {
    /// `previous_chunk`: normalised, as `actions_normalized` returns it.
    pub previous_chunk: Option<Chunk>,
    /// `action_horizon` (default: the chunk's rows).
    pub action_horizon: Option<u64>,
    /// `rtc_overlap_steps` (required with a chunk).
    pub overlap_steps: Option<u64>,
    /// `rtc_frozen_steps` (default 0).
    pub frozen_steps: Option<u64>,
    /// `rtc_ramp_rate` (default [`DEFAULT_RAMP_RATE`]).
    pub ramp_rate: Option<f64>,
}

/// Values per action row the embodiment decodes (the width of its `actions_normalized`
/// concatenated in key order; its keys sit contiguously from column 0).
pub fn valid_action_width(spec: &EmbodimentSpec) -> usize {
    spec.actions.keys().map(|(_, d, _)| d).sum()
}

impl RtcOptions {
    /// Whether any RTC field was given.
    pub fn is_empty(&self) -> bool {
        *self == RtcOptions::default()
    }

    /// The model's options for a model of `horizon` rows × `action_dim` and an embodiment
    /// decoding `valid_width` values per row; `None` without any field. Errors name
    /// `prefix` + the field (`options.` on ZMQ).
    pub fn resolve(
        self,
        prefix: &str,
        horizon: usize,
        action_dim: usize,
        valid_width: usize,
    ) -> Result<Option<Rtc>, FieldError> {
        let err = |key: &str, msg: String| FieldError::new(format!("{prefix}{key}"), msg);
        let Some(chunk) = self.previous_chunk.as_ref() else {
            let given = [
                (self.action_horizon.is_some(), "action_horizon"),
                (self.overlap_steps.is_some(), "rtc_overlap_steps"),
                (self.frozen_steps.is_some(), "rtc_frozen_steps"),
                (self.ramp_rate.is_some(), "rtc_ramp_rate"),
            ];
            return match given.iter().find(|(g, _)| *g) {
                Some((_, key)) => Err(err(
                    key,
                    "needs previous_chunk (the RTC options apply to a previous chunk)".into(),
                )),
                None => Ok(None),
            };
        };
        let pc = "previous_chunk";
        if chunk.rows == 0 || chunk.rows > horizon {
            return Err(err(
                pc,
                format!("has {} rows, expected 1 to {horizon}", chunk.rows),
            ));
        }
        if chunk.width != valid_width && chunk.width != action_dim {
            return Err(err(
                pc,
                format!(
                    "rows have {} values, expected {valid_width} (the embodiment's action dims, \
                     as actions_normalized returns them) or {action_dim} (padded)",
                    chunk.width
                ),
            ));
        }
        if chunk.values.len() != chunk.rows * chunk.width {
            return Err(err(
                pc,
                format!(
                    "has {} values, expected {} rows × {}",
                    chunk.values.len(),
                    chunk.rows,
                    chunk.width
                ),
            ));
        }
        if let Some(i) = chunk.values.iter().position(|v| !v.is_finite()) {
            return Err(err(
                pc,
                format!(
                    "value [{}, {}] is not finite (as float32)",
                    i / chunk.width,
                    i % chunk.width
                ),
            ));
        }
        // Zero-padded like `action_pred`: the model reads only rows < action_horizon.
        let mut previous_chunk = vec![0.0f32; horizon * action_dim];
        for (r, row) in chunk.values.chunks_exact(chunk.width).enumerate() {
            previous_chunk[r * action_dim..r * action_dim + chunk.width].copy_from_slice(row);
        }
        self.steps(prefix)?
            .against(previous_chunk, chunk.rows, horizon, action_dim)
            .map(Some)
    }

    /// What a request asks for: RTC against its own `previous_chunk`, or, in a session and
    /// without one, against the session's last chunk (`None` without any RTC field). Checks
    /// what can be checked before the chunk is known.
    pub fn plan(
        self,
        prefix: &str,
        horizon: usize,
        action_dim: usize,
        valid_width: usize,
        in_session: bool,
    ) -> Result<Option<RtcPlan>, FieldError> {
        if !in_session || self.previous_chunk.is_some() || self.is_empty() {
            return Ok(self
                .resolve(prefix, horizon, action_dim, valid_width)?
                .map(RtcPlan::Chunk));
        }
        let steps = self.steps(prefix)?;
        // The session's chunk has at most `horizon` rows: what fails here fails with any.
        steps.against(
            vec![0.0; horizon * action_dim],
            horizon,
            horizon,
            action_dim,
        )?;
        Ok(Some(RtcPlan::SessionChunk { steps, last: None }))
    }

    /// The step options (`rtc_overlap_steps` required).
    fn steps(&self, prefix: &str) -> Result<RtcSteps, FieldError> {
        let overlap_steps = self.overlap_steps.ok_or_else(|| {
            let with = if self.previous_chunk.is_some() {
                "is required with previous_chunk"
            } else {
                "is required with the RTC options"
            };
            FieldError::new(format!("{prefix}rtc_overlap_steps"), with)
        })?;
        Ok(RtcSteps {
            prefix: prefix.to_string(),
            action_horizon: self.action_horizon,
            overlap_steps,
            frozen_steps: self.frozen_steps.unwrap_or(0),
            ramp_rate: self.ramp_rate.unwrap_or(DEFAULT_RAMP_RATE),
        })
    }
}

/// RTC as a request asks for it.
#[derive(Debug, Clone, PartialEq)]
pub enum RtcPlan {
    /// Against the chunk the client sent.
    Chunk(Rtc),
    /// Against its session's last chunk, which the inference thread fills in (`None`: the
    /// session has answered nothing yet, so the chunk is computed without RTC).
    SessionChunk {
        /// The step options.
        steps: RtcSteps,
        /// The session's last chunk.
        last: Option<LastChunk>,
    },
}

/// The step options of an RTC request, before its previous chunk is known.
#[derive(Debug, Clone, PartialEq)]
pub struct RtcSteps {
    /// Prefix of the field names in refusals (`options.` on ZMQ).
    pub prefix: String,
    /// `action_horizon` (default: the previous chunk's rows).
    pub action_horizon: Option<u64>,
    /// `rtc_overlap_steps`.
    pub overlap_steps: u64,
    /// `rtc_frozen_steps`.
    pub frozen_steps: u64,
    /// `rtc_ramp_rate`.
    pub ramp_rate: f64,
}

impl RtcSteps {
    /// The model's options against `previous_chunk` (`horizon × action_dim`, padded) whose
    /// first `rows` rows are valid; refusals name the field.
    pub fn against(
        &self,
        previous_chunk: Vec<f32>,
        rows: usize,
        horizon: usize,
        action_dim: usize,
    ) -> Result<Rtc, FieldError> {
        let err = |key: &str, msg: String| FieldError::new(format!("{}{key}", self.prefix), msg);
        let ah = self.action_horizon.unwrap_or(rows as u64);
        if ah > rows as u64 {
            return Err(err(
                "action_horizon",
                format!("{ah} exceeds the {rows} rows of the previous chunk"),
            ));
        }
        let big = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        let rtc = Rtc {
            previous_chunk,
            action_horizon: big(ah),
            overlap_steps: big(self.overlap_steps),
            frozen_steps: big(self.frozen_steps),
            ramp_rate: self.ramp_rate,
        };
        rtc.validate(horizon, action_dim)
            .map_err(|e| err(e.field.name(), e.message))?;
        Ok(rtc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(rows: usize, width: usize) -> RtcOptions {
        RtcOptions {
            previous_chunk: Some(Chunk {
                rows,
                width,
                values: (0..rows * width).map(|i| i as f32).collect(),
            }),
            overlap_steps: Some(4),
            ..Default::default()
        }
    }

    fn field(o: RtcOptions) -> String {
        o.resolve("options.", 40, 132, 17).unwrap_err().field
    }

    #[test]
    fn pads_the_chunk_and_applies_defaults() {
        let rtc = opts(10, 17).resolve("", 40, 132, 17).unwrap().unwrap();
        assert_eq!(rtc.previous_chunk.len(), 40 * 132);
        assert_eq!(rtc.previous_chunk[132 + 16], (17 + 16) as f32);
        assert_eq!(rtc.previous_chunk[132 + 17], 0.0);
        assert!(rtc.previous_chunk[10 * 132..].iter().all(|&v| v == 0.0));
        assert_eq!(
            (rtc.action_horizon, rtc.overlap_steps, rtc.frozen_steps),
            (10, 4, 0)
        );
        assert_eq!(rtc.ramp_rate, DEFAULT_RAMP_RATE);
        let full = opts(40, 132).resolve("", 40, 132, 17).unwrap().unwrap();
        assert_eq!(
            full.previous_chunk,
            opts(40, 132).previous_chunk.unwrap().values
        );
        assert_eq!(RtcOptions::default().resolve("", 40, 132, 17), Ok(None));
    }

    #[test]
    fn refusals_name_the_field() {
        let with = |f: fn(&mut RtcOptions)| {
            let mut o = opts(10, 17);
            f(&mut o);
            field(o)
        };
        assert_eq!(
            with(|o| o.overlap_steps = Some(11)),
            "options.rtc_overlap_steps"
        );
        assert_eq!(
            with(|o| o.overlap_steps = None),
            "options.rtc_overlap_steps"
        );
        assert_eq!(
            with(|o| o.frozen_steps = Some(5)),
            "options.rtc_frozen_steps"
        );
        assert_eq!(with(|o| o.ramp_rate = Some(-1.0)), "options.rtc_ramp_rate");
        assert_eq!(
            with(|o| o.ramp_rate = Some(f64::NAN)),
            "options.rtc_ramp_rate"
        );
        assert_eq!(
            with(|o| o.action_horizon = Some(11)),
            "options.action_horizon"
        );
        assert_eq!(
            with(|o| o.action_horizon = Some(0)),
            "options.action_horizon"
        );
        assert_eq!(field(opts(10, 16)), "options.previous_chunk");
        assert_eq!(field(opts(41, 17)), "options.previous_chunk");
        assert_eq!(field(opts(0, 17)), "options.previous_chunk");
        let mut nan = opts(10, 17);
        if let Some(c) = nan.previous_chunk.as_mut() {
            c.values[20] = f32::INFINITY;
        }
        let e = nan.resolve("", 40, 132, 17).unwrap_err();
        assert_eq!(e.field, "previous_chunk");
        assert!(e.message.contains("[1, 3]"), "{}", e.message);
        let lone = RtcOptions {
            frozen_steps: Some(1),
            ..Default::default()
        };
        assert_eq!(field(lone), "options.rtc_frozen_steps");
    }
}
