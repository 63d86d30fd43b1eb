//! The served layout of each embodiment, from the checkpoint's modality config: its keys,
//! shapes and action widths ([`Schema`]), the schema a message names ([`pick_schema`]) and
//! `get_modality_config`'s reply (`Schema::modality_config`).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::error::WireError;
use super::msgpack_numpy::{str_map, type_name};
use gr00t_core::rtc::valid_action_width;
use gr00t_embodiment::embodiment::EmbodimentSpec;
use gr00t_embodiment::embodiment_tags;
use gr00t_model::checkpoint::ModalityConfigs;
use rmpv::Value;

/// The observation layout the server expects, from the checkpoint's modality config.
#[derive(Debug, Clone)]
pub struct Schema {
    /// The embodiment tag.
    pub tag: String,
    /// Video keys in config order.
    pub views: Vec<String>,
    /// State keys in config order with their widths.
    pub state_keys: Vec<(String, usize)>,
    /// Video frames per camera (`len(video.delta_indices)`, 2 for DROID).
    pub video_t: usize,
    /// State steps (`len(state.delta_indices)`, 1 for DROID).
    pub state_t: usize,
    /// The language key (`annotation.language.language_instruction`).
    pub language_key: String,
    /// Action keys in reply order.
    pub action_keys: Vec<String>,
    /// Action chunk length.
    pub horizon: usize,
    /// Width of one noise row (`max_action_dim`).
    pub action_dim: usize,
    /// Action values per row the embodiment decodes (an RTC `previous_chunk` row).
    pub action_width: usize,
    /// `--use-sim-policy-wrapper`: flat keys.
    pub flat: bool,
    /// `get_modality_config`'s reply.
    pub modality_config: Value,
}

impl Schema {
    /// The schema of one embodiment (its layout and modality config).
    pub fn new(
        spec: &EmbodimentSpec,
        m: &ModalityConfigs,
        horizon: usize,
        action_dim: usize,
        flat: bool,
    ) -> Schema {
        Schema {
            tag: spec.tag.clone(),
            views: spec.views.clone(),
            state_keys: spec.state.keys().map(|(k, d)| (k.to_string(), d)).collect(),
            video_t: m.video.delta_indices.len(),
            state_t: m.state.delta_indices.len(),
            language_key: m
                .language
                .modality_keys
                .first()
                .cloned()
                .unwrap_or_else(|| "annotation.language.language_instruction".into()),
            action_keys: m.action.modality_keys.clone(),
            horizon,
            action_dim,
            action_width: valid_action_width(spec),
            flat,
            modality_config: modality_config_value(m),
        }
    }
}

/// The schema of the embodiment a message names (a tag or upstream's enum name), or the
/// default one (the first) when it names none.
pub fn pick_schema<'a>(
    schemas: &'a [Schema],
    named: Option<&Value>,
) -> Result<&'a Schema, WireError> {
    let name = match named {
        None | Some(Value::Nil) => {
            return schemas
                .first()
                .ok_or_else(|| WireError::Reply("no embodiment".into()))
        }
        Some(Value::String(s)) => s.as_str().unwrap_or(""),
        Some(v) => {
            return Err(WireError::field(
                "embodiment",
                format!("embodiment must be a str. Got {}", type_name(v)),
            ))
        }
    };
    let tag = embodiment_tags::resolve(name, schemas.iter().map(|s| s.tag.as_str())).ok_or_else(
        || {
            let name = crate::doors::excerpt::excerpt(name);
            WireError::from(gr00t_core::error::not_served(
                &name,
                schemas.iter().map(|s| s.tag.as_str()),
            ))
        },
    )?;
    schemas
        .iter()
        .find(|s| s.tag == tag)
        .ok_or_else(|| WireError::Reply("internal: schema".into()))
}

/// `{modality: {"__ModalityConfig_class__": True, "__ModalityConfig__": True, "as_json":
/// {...}}}` with the dataclass fields in declaration order: the old `MsgSerializer` marker and
/// N1.7's, so that either client decodes it.
fn modality_config_value(m: &ModalityConfigs) -> Value {
    let one = |c: &gr00t_model::checkpoint::ModalityConfig| {
        let ints = Value::Array(c.delta_indices.iter().map(|&d| Value::from(d)).collect());
        let keys = Value::Array(
            c.modality_keys
                .iter()
                .map(|k| Value::from(k.as_str()))
                .collect(),
        );
        let actions = match &c.action_configs {
            None => Value::Nil,
            Some(list) => Value::Array(
                list.iter()
                    .map(|a| {
                        str_map([
                            ("rep", Value::from(a.rep.as_str())),
                            ("type", Value::from(a.kind.as_str())),
                            ("format", Value::from(a.format.as_str())),
                            (
                                "state_key",
                                a.state_key
                                    .as_deref()
                                    .map(Value::from)
                                    .unwrap_or(Value::Nil),
                            ),
                        ])
                    })
                    .collect(),
            ),
        };
        let json = str_map([
            ("delta_indices", ints),
            ("modality_keys", keys),
            ("sin_cos_embedding_keys", Value::Nil),
            ("mean_std_embedding_keys", Value::Nil),
            ("action_configs", actions),
        ]);
        str_map([
            ("__ModalityConfig_class__", Value::Boolean(true)),
            ("__ModalityConfig__", Value::Boolean(true)),
            ("as_json", json),
        ])
    };
    str_map([
        ("video", one(&m.video)),
        ("state", one(&m.state)),
        ("action", one(&m.action)),
        ("language", one(&m.language)),
    ])
}
