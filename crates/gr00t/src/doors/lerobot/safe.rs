//! The safe form of LeRobot PR #3048 (open): `[u32 big-endian JSON length][JSON][safetensors]`,
//! the JSON holding the object's type and its scalar fields, the safetensors its arrays. Read
//! and written for the same objects as the pickle form, so the door keeps working if it merges.
//! This form starts with its length's high byte, 0 for any JSON under 16 MiB; no pickle opcode
//! is 0, so [`is_safe`] tells them apart.

use super::error::PayloadError;
use super::numpy;
use super::objects::{Feature, ObsValue, RemotePolicyConfig, TimedAction, TimedObservation};
use crate::doors::wire::ndarray::{DType, Kind};
use safetensors::tensor::{Dtype as StDtype, SafeTensors, TensorView};
use serde_json::{Map, Value};

/// Whether `bytes` are in the safe form rather than a pickle.
pub fn is_safe(bytes: &[u8]) -> bool {
    bytes.first() == Some(&0)
}

/// Splits the form into its JSON object and its safetensors bytes (empty when it has none).
fn unpack<'a>(
    bytes: &'a [u8],
    kind: &str,
    max_bytes: usize,
) -> Result<(Map<String, Value>, &'a [u8]), PayloadError> {
    let bad = |what: String| PayloadError::Safe(what);
    if bytes.len() > max_bytes {
        return Err(bad(format!("{} bytes exceed {max_bytes}", bytes.len())));
    }
    let Some((len, rest)) = bytes.split_first_chunk::<4>() else {
        return Err(bad("shorter than its 4-byte JSON length".into()));
    };
    let n = u32::from_be_bytes(*len) as usize;
    if n > rest.len() {
        return Err(bad(format!(
            "JSON length {n} exceeds the {} bytes that follow",
            rest.len()
        )));
    }
    let (json, tensors) = rest.split_at(n);
    let Value::Object(meta) =
        serde_json::from_slice(json).map_err(|e| bad(format!("JSON: {e}")))?
    else {
        return Err(bad("its JSON is not an object".into()));
    };
    match meta.get("type") {
        Some(Value::String(t)) if t == kind => Ok((meta, tensors)),
        other => Err(bad(format!("expected type {kind:?}, got {other:?}"))),
    }
}

/// Reads a `RemotePolicyConfig` in the safe form.
pub fn config_from_safe(
    bytes: &[u8],
    max_bytes: usize,
) -> Result<RemotePolicyConfig, PayloadError> {
    let (mut meta, _) = unpack(bytes, "RemotePolicyConfig", max_bytes)?;
    let mut take = |name: &str| {
        meta.remove(name).ok_or_else(|| {
            PayloadError::invalid(&format!("RemotePolicyConfig.{name}"), "is missing".into())
        })
    };
    let text = |v: Value, name: &str| match v {
        Value::String(s) => Ok(s),
        _ => Err(PayloadError::invalid(
            &format!("RemotePolicyConfig.{name}"),
            "is not a string".into(),
        )),
    };
    let policy_type = text(take("policy_type")?, "policy_type")?;
    let pretrained_name_or_path =
        text(take("pretrained_name_or_path")?, "pretrained_name_or_path")?;
    let actions_per_chunk = take("actions_per_chunk")?.as_i64().ok_or_else(|| {
        PayloadError::invalid(
            "RemotePolicyConfig.actions_per_chunk",
            "is not an integer".into(),
        )
    })?;
    let features = take("lerobot_features")?;
    let device = match meta.remove("device") {
        None => "cpu".to_string(),
        Some(v) => text(v, "device")?,
    };
    let rename_map = match meta.remove("rename_map") {
        None => Vec::new(),
        Some(Value::Object(m)) => m
            .into_iter()
            .map(|(k, v)| text(v, "rename_map").map(|v| (k, v)))
            .collect::<Result<_, _>>()?,
        Some(_) => {
            return Err(PayloadError::invalid(
                "RemotePolicyConfig.rename_map",
                "is not an object".into(),
            ))
        }
    };
    let Value::Object(features) = features else {
        return Err(PayloadError::invalid(
            "RemotePolicyConfig.lerobot_features",
            "is not an object".into(),
        ));
    };
    let lerobot_features = features
        .into_iter()
        .map(|(name, v)| feature(&name, v).map(|f| (name, f)))
        .collect::<Result<_, _>>()?;
    Ok(RemotePolicyConfig {
        policy_type,
        pretrained_name_or_path,
        lerobot_features,
        actions_per_chunk,
        device,
        rename_map,
    })
}

/// One feature: `hw_to_dataset_features`' dict (`dtype`), or a `PolicyFeature` (`type`).
fn feature(name: &str, v: Value) -> Result<Feature, PayloadError> {
    let field = format!("RemotePolicyConfig.lerobot_features['{name}']");
    let bad = |what: &str| PayloadError::invalid(&field, what.into());
    let Value::Object(m) = v else {
        return Err(bad("is not an object"));
    };
    let dtype = match (m.get("dtype"), m.get("type")) {
        (Some(Value::String(d)), _) | (None, Some(Value::String(d))) => d.clone(),
        _ => return Err(bad("has neither a dtype nor a type")),
    };
    let shape = m
        .get("shape")
        .and_then(Value::as_array)
        .and_then(|d| {
            d.iter()
                .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
                .collect()
        })
        .ok_or_else(|| bad("has no shape of sizes"))?;
    let names = match m.get("names") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(n)) => n
            .iter()
            .map(|n| n.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| bad("has names that are not all strings"))?,
        Some(_) => return Err(bad("has names that are not a list")),
    };
    Ok(Feature {
        dtype,
        shape,
        names,
    })
}

/// Reads a `TimedObservation` in the safe form: `scalar_data` from the JSON, arrays (numpy or
/// torch alike) from the safetensors.
pub fn observation_from_safe(
    bytes: &[u8],
    max_bytes: usize,
) -> Result<TimedObservation, PayloadError> {
    let (mut meta, tensors) = unpack(bytes, "TimedObservation", max_bytes)?;
    let field = |name: &str| format!("TimedObservation.{name}");
    let timestamp = meta
        .get("timestamp")
        .and_then(Value::as_f64)
        .ok_or_else(|| {
            PayloadError::invalid(&field("timestamp"), "is missing or not a number".into())
        })?;
    let timestep = meta
        .get("timestep")
        .and_then(Value::as_i64)
        .ok_or_else(|| {
            PayloadError::invalid(&field("timestep"), "is missing or not an integer".into())
        })?;
    let must_go = match meta.get("must_go") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            return Err(PayloadError::invalid(
                &field("must_go"),
                "is not a bool".into(),
            ))
        }
    };
    let mut observation = Vec::new();
    match meta.remove("scalar_data") {
        None => {}
        Some(Value::Object(scalars)) => {
            for (key, v) in scalars {
                let value = match v {
                    Value::Bool(b) => ObsValue::Bool(b),
                    Value::String(s) => ObsValue::Text(s),
                    Value::Number(n) => ObsValue::Number(n.as_f64().unwrap_or(f64::NAN)),
                    _ => {
                        return Err(PayloadError::invalid(
                            &format!("TimedObservation.observation['{key}']"),
                            "is not a number, bool or string".into(),
                        ))
                    }
                };
                observation.push((key, value));
            }
        }
        Some(_) => {
            return Err(PayloadError::invalid(
                &field("scalar_data"),
                "is not an object".into(),
            ))
        }
    }
    if !tensors.is_empty() {
        let st = SafeTensors::deserialize(tensors)
            .map_err(|e| PayloadError::Safe(format!("safetensors: {e}")))?;
        for (key, view) in st.iter() {
            let here = format!("TimedObservation.observation['{key}']");
            let dtype = dtype_of(view.dtype()).ok_or_else(|| {
                PayloadError::invalid(
                    &here,
                    format!("safetensors dtype {:?} is not read", view.dtype()),
                )
            })?;
            let array = numpy::array(
                dtype,
                view.shape().to_vec(),
                view.data().to_vec(),
                false,
                &here,
            )?;
            observation.push((key.to_string(), ObsValue::Array(array)));
        }
    }
    Ok(TimedObservation {
        timestamp,
        timestep,
        observation,
        must_go,
    })
}

/// The array dtype of a safetensors dtype (little-endian, as safetensors stores them).
fn dtype_of(d: StDtype) -> Option<DType> {
    let (kind, size) = match d {
        StDtype::BOOL => (Kind::Bool, 1),
        StDtype::U8 => (Kind::UInt, 1),
        StDtype::I8 => (Kind::Int, 1),
        StDtype::U16 => (Kind::UInt, 2),
        StDtype::I16 => (Kind::Int, 2),
        StDtype::U32 => (Kind::UInt, 4),
        StDtype::I32 => (Kind::Int, 4),
        StDtype::U64 => (Kind::UInt, 8),
        StDtype::I64 => (Kind::Int, 8),
        StDtype::F32 => (Kind::Float, 4),
        StDtype::F64 => (Kind::Float, 8),
        _ => return None,
    };
    Some(DType {
        kind,
        size,
        big_endian: false,
    })
}

/// `list[TimedAction]` in the safe form: `{"type": "TimedActions", "actions": [{timestamp,
/// timestep}…]}` and one float32 tensor `action_<i>` each.
pub fn actions_to_safe(actions: &[TimedAction]) -> Result<Vec<u8>, PayloadError> {
    let meta = serde_json::json!({
        "type": "TimedActions",
        "actions": actions
            .iter()
            .map(|a| serde_json::json!({"timestamp": a.timestamp, "timestep": a.timestep}))
            .collect::<Vec<_>>(),
    });
    let json = meta.to_string().into_bytes();
    let bytes: Vec<Vec<u8>> = actions
        .iter()
        .map(|a| a.action.iter().flat_map(|x| x.to_le_bytes()).collect())
        .collect();
    let views = actions
        .iter()
        .zip(&bytes)
        .enumerate()
        .map(|(i, (a, b))| {
            TensorView::new(StDtype::F32, vec![a.action.len()], b)
                .map(|v| (format!("action_{i}"), v))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PayloadError::Safe(format!("safetensors: {e}")))?;
    let tensors = if views.is_empty() {
        Vec::new()
    } else {
        safetensors::serialize(views, None)
            .map_err(|e| PayloadError::Safe(format!("safetensors: {e}")))?
    };
    let len =
        u32::try_from(json.len()).map_err(|_| PayloadError::Safe("JSON over 4 GiB".into()))?;
    let mut out = Vec::with_capacity(4 + json.len() + tensors.len());
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&json);
    out.extend_from_slice(&tensors);
    Ok(out)
}
