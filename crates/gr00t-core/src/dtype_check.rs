//! Whether a reduced precision (`--dtype int8` or `bf16`) keeps a checkpoint's actions: the
//! same observations through f32 and through it, every action group held to the gate
//! ([`Gate`]), and the verdict remembered per checkpoint digest and binary version
//! ([`Verdict`]) so that `serve` knows whether the check passed.

use gr00t_embodiment::response::ActionGroups;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The accuracy gate of one action group over its chunk (the seed port's bar).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Gate {
    /// Least Pearson correlation with the reference.
    pub min_pcc: f64,
    /// Largest `max|Δ|` as a fraction of `max|reference|`.
    pub max_rel: f64,
}

/// PCC ≥ 0.9999 and max|Δ| ≤ 2·10⁻²·max|ref|.
pub const GATE: Gate = Gate {
    min_pcc: 0.9999,
    max_rel: 2e-2,
};

/// One action group of one observation against its reference.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GroupCheck {
    /// The observation (file name or `demo`).
    pub case: String,
    /// The embodiment that answered it (empty where the caller did not say).
    #[serde(default)]
    pub embodiment: String,
    /// The action key.
    pub group: String,
    /// Pearson correlation over the chunk (1 when both are constant and equal within the gate).
    pub pcc: f64,
    /// `max|Δ|`.
    pub max_abs: f64,
    /// `max|reference|`.
    pub max_ref: f64,
    /// Whether both bounds of the gate hold.
    pub pass: bool,
}

impl GroupCheck {
    /// `max|Δ| / max|ref|` (0 for an all-zero reference matched exactly).
    pub fn rel(&self) -> f64 {
        if self.max_ref > 0.0 {
            self.max_abs / self.max_ref
        } else if self.max_abs == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    }
}

/// Pearson correlation of two equally long series (NaN when either is constant or they differ
/// in length).
pub fn pearson(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() || a.is_empty() {
        return f64::NAN;
    }
    let n = a.len() as f64;
    let (ma, mb) = (
        a.iter().map(|&v| f64::from(v)).sum::<f64>() / n,
        b.iter().map(|&v| f64::from(v)).sum::<f64>() / n,
    );
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (&x, &y) in a.iter().zip(b) {
        let (dx, dy) = (f64::from(x) - ma, f64::from(y) - mb);
        sab += dx * dy;
        saa += dx * dx;
        sbb += dy * dy;
    }
    sab / (saa * sbb).sqrt()
}

/// Every group of `reference` against the same group of `got`, under `gate`. A group missing
/// from `got`, of another length or with non-finite values fails.
pub fn compare_groups(
    case: &str,
    reference: &ActionGroups,
    got: &ActionGroups,
    gate: Gate,
) -> Vec<GroupCheck> {
    reference
        .0
        .iter()
        .map(|(key, rows)| {
            let want: Vec<f32> = rows.iter().flatten().copied().collect();
            let ours: Vec<f32> = got.rows(key).iter().flatten().copied().collect();
            check_group(case, key, &want, &ours, gate)
        })
        .collect()
}

/// One group's check (see [`compare_groups`]).
pub fn check_group(case: &str, group: &str, want: &[f32], ours: &[f32], gate: Gate) -> GroupCheck {
    let max_ref = want.iter().fold(0f64, |m, &v| m.max(f64::from(v).abs()));
    let comparable = want.len() == ours.len() && ours.iter().all(|v| v.is_finite());
    let max_abs = if comparable {
        want.iter().zip(ours).fold(0f64, |m, (&w, &o)| {
            m.max((f64::from(w) - f64::from(o)).abs())
        })
    } else {
        f64::INFINITY
    };
    let within = max_abs <= gate.max_rel * max_ref || max_abs == 0.0;
    let mut pcc = if comparable {
        pearson(want, ours)
    } else {
        f64::NAN
    };
    if pcc.is_nan() && comparable && within {
        // A constant group (a gripper held shut): correlation is undefined, equality decides.
        pcc = 1.0;
    }
    GroupCheck {
        case: case.to_string(),
        embodiment: String::new(),
        group: group.to_string(),
        pcc,
        max_abs,
        max_ref,
        pass: comparable && within && pcc >= gate.min_pcc,
    }
}

/// A check's outcome for one checkpoint, dtype and binary, as remembered in the cache.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Verdict {
    /// The checkpoint digest (`/info`'s `checkpoint_digest`).
    pub digest: String,
    /// The binary's version.
    pub version: String,
    /// `int8` or `bf16`.
    pub dtype: String,
    /// The int8 stages checked, with the layers kept f32 and `+smooth` when smoothed
    /// ([`int8_variant`]; `none` for bf16).
    pub stages: String,
    /// Whether every group of every observation passed.
    pub passed: bool,
    /// Observations run.
    pub observations: usize,
    /// Groups checked (observations × action keys).
    pub groups: usize,
    /// The least PCC seen (1 when no group was checked; NaN, written `null`, for a broken one).
    #[serde(deserialize_with = "null_as_nan")]
    pub worst_pcc: f64,
    /// The largest `max|Δ|/max|ref|` seen (NaN, written `null`, for a broken group).
    #[serde(deserialize_with = "null_as_nan")]
    pub worst_rel: f64,
    /// Unix seconds of the check.
    pub checked_at: u64,
}

impl Verdict {
    /// The verdict of `checks` (all observations) for `digest`, `dtype` and `stages`.
    pub fn of(
        checks: &[GroupCheck],
        observations: usize,
        digest: &str,
        dtype: &str,
        stages: &str,
    ) -> Verdict {
        Verdict {
            digest: digest.to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            dtype: dtype.to_string(),
            stages: stages.to_string(),
            passed: !checks.is_empty() && checks.iter().all(|c| c.pass),
            observations,
            groups: checks.len(),
            worst_pcc: checks.iter().map(|c| c.pcc).fold(1.0, nan_min),
            worst_rel: checks.iter().map(GroupCheck::rel).fold(0.0, nan_max),
            checked_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
        }
    }
}

/// JSON has no NaN (serde_json writes `null`): read `null` back as NaN, so that a failed
/// verdict with a broken group still loads as failed.
fn null_as_nan<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

fn nan_min(a: f64, b: f64) -> f64 {
    if b.is_nan() || a.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

fn nan_max(a: f64, b: f64) -> f64 {
    if b.is_nan() || a.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// Where verdicts live: `gr00t-rs/dtype-checks` in the Hugging Face hub cache (beside the
/// pulled checkpoints; `$HF_HUB_CACHE`, `$HF_HOME/hub` or `~/.cache/huggingface/hub`).
pub fn verdict_dir() -> PathBuf {
    gr00t_model::hub::own_cache_dir("dtype-checks")
}

/// The key of an int8 verdict: the stages (`adapter,dit`), `+keep(k_proj,v_proj)` for the
/// layers kept f32, `+smooth` when SmoothQuant smooths them.
pub fn int8_variant(stages: &str, keep: &[String], smooth: bool) -> String {
    let mut key = stages.to_string();
    if !keep.is_empty() {
        key += &format!("+keep({})", keep.join(","));
    }
    if smooth {
        key += "+smooth";
    }
    key
}

/// Where `check-dtype --int8-smooth` keeps a checkpoint's calibration maxima (SmoothQuant's
/// statistics), for this binary's version.
pub fn calibration_file(dir: &Path, digest: &str) -> PathBuf {
    let short: String = digest.chars().take(32).collect();
    dir.join(format!(
        "{short}-int8-calibration-v{}.safetensors",
        env!("CARGO_PKG_VERSION")
    ))
}

/// The file of a checkpoint's verdicts for one dtype and stage set, this binary's version.
fn verdict_file(dir: &Path, digest: &str, dtype: &str, stages: &str) -> PathBuf {
    let short: String = digest.chars().take(32).collect();
    dir.join(format!(
        "{short}-{dtype}-{}-v{}.json",
        stages.replace(',', "+"),
        env!("CARGO_PKG_VERSION")
    ))
}

/// The remembered verdict for this checkpoint, dtype, stages and binary version, if any (an
/// unreadable file counts as none).
pub fn load_verdict(dir: &Path, digest: &str, dtype: &str, stages: &str) -> Option<Verdict> {
    let text = std::fs::read_to_string(verdict_file(dir, digest, dtype, stages)).ok()?;
    let v: Verdict = serde_json::from_str(&text).ok()?;
    (v.digest == digest && v.version == env!("CARGO_PKG_VERSION")).then_some(v)
}

/// Remembers `v`, returning the file written.
pub fn save_verdict(dir: &Path, v: &Verdict) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let path = verdict_file(dir, &v.digest, &v.dtype, &v.stages);
    let tmp = path.with_extension("json.tmp");
    std::fs::write(
        &tmp,
        serde_json::to_vec_pretty(v).map_err(std::io::Error::other)?,
    )?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(rows: &[(&str, Vec<f32>)]) -> ActionGroups {
        ActionGroups(
            rows.iter()
                .map(|(k, v)| (k.to_string(), v.chunks(2).map(<[f32]>::to_vec).collect()))
                .collect(),
        )
    }

    #[test]
    fn the_gate_passes_close_answers_and_fails_far_or_broken_ones() {
        let want: Vec<f32> = (0..40).map(|i| (i as f32 * 0.3).sin()).collect();
        let close: Vec<f32> = want.iter().map(|v| v + 1e-4).collect();
        let far: Vec<f32> = want
            .iter()
            .enumerate()
            .map(|(i, v)| v + 0.05 * (i % 2) as f32)
            .collect();
        let mut nan = want.clone();
        nan[3] = f32::NAN;
        let r = groups(&[("arm", want.clone()), ("grip", vec![1.0; 40])]);
        let ok = compare_groups(
            "c",
            &r,
            &groups(&[("arm", close), ("grip", vec![1.0; 40])]),
            GATE,
        );
        assert!(ok.iter().all(|c| c.pass), "{ok:?}");
        assert_eq!(ok[1].pcc, 1.0, "constant and equal");
        let bad = compare_groups(
            "c",
            &r,
            &groups(&[("arm", far), ("grip", vec![0.9; 40])]),
            GATE,
        );
        assert!(bad.iter().all(|c| !c.pass), "{bad:?}");
        let broken = compare_groups("c", &r, &groups(&[("arm", nan)]), GATE);
        assert!(
            !broken[0].pass && !broken[1].pass,
            "NaN and a missing group fail"
        );
        let v = Verdict::of(&ok, 1, "abc", "int8", "dit");
        assert!(v.passed && v.groups == 2 && v.worst_pcc > 0.9999);
        assert!(!Verdict::of(&bad, 1, "abc", "int8", "dit").passed);
    }

    #[test]
    fn verdicts_round_trip_per_digest_dtype_and_stages() {
        let dir = std::env::temp_dir().join(format!("gr00t-verdicts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(load_verdict(&dir, "d1", "int8", "dit"), None);
        let v = Verdict::of(&[], 0, "d1", "int8", "dit");
        save_verdict(&dir, &v).unwrap();
        assert_eq!(load_verdict(&dir, "d1", "int8", "dit"), Some(v));
        assert_eq!(load_verdict(&dir, "d2", "int8", "dit"), None);
        assert_eq!(load_verdict(&dir, "d1", "int8", "llm,dit"), None);
        assert_eq!(load_verdict(&dir, "d1", "bf16", "none"), None);
        // A broken group (NaN PCC) is remembered as a failure, not forgotten.
        let broken = GroupCheck {
            case: "c".into(),
            embodiment: String::new(),
            group: "arm".into(),
            pcc: f64::NAN,
            max_abs: f64::NAN,
            max_ref: 1.0,
            pass: false,
        };
        let v = Verdict::of(&[broken], 1, "d3", "int8", "dit");
        save_verdict(&dir, &v).unwrap();
        let back = load_verdict(&dir, "d3", "int8", "dit").expect("a failed verdict loads");
        assert!(!back.passed && back.worst_pcc.is_nan() && back.worst_rel.is_nan());
        // Smoothing and kept layers are other verdicts of the same stages.
        let keep = vec!["k_proj".to_string(), "v_proj".to_string()];
        assert_eq!(int8_variant("llm", &[], false), "llm");
        assert_eq!(int8_variant("llm", &[], true), "llm+smooth");
        assert_eq!(
            int8_variant("llm,dit", &keep, true),
            "llm,dit+keep(k_proj,v_proj)+smooth"
        );
        let smoothed = Verdict::of(&[], 1, "d3", "int8", &int8_variant("dit", &[], true));
        save_verdict(&dir, &smoothed).unwrap();
        assert!(!load_verdict(&dir, "d3", "int8", "dit")
            .unwrap()
            .stages
            .contains("smooth"));
        assert_eq!(
            load_verdict(&dir, "d3", "int8", "dit+smooth").map(|v| v.stages),
            Some("dit+smooth".to_string())
        );
        assert_eq!(
            load_verdict(&dir, "d3", "int8", &int8_variant("dit", &keep, false)),
            None
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
