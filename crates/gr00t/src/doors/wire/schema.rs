//! The served layout of each embodiment, from the checkpoint's modality config: its keys,
//! shapes and action widths ([`Schema`]), the schema a message names ([`pick_schema`]) and
//! `get_modality_config`'s reply (`Schema::modality_config`).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::error::WireError;
use super::msg::{Msg, View};
use super::msgpack_numpy::{str_map, type_name};
use gr00t_core::rtc::valid_action_width;
use gr00t_embodiment::embodiment_tags;
use gr00t_embodiment::layout::Layout;
use gr00t_model::checkpoint::ModalityConfigs;
use rmpv::Value;
use std::sync::Arc;

/// How a wire door reads one served embodiment's messages: a view of its [`Layout`] (keys,
/// shapes, action widths) with the door's key style and the modality config as msgpack.
#[derive(Debug, Clone)]
pub struct Schema {
    /// The served layout.
    pub layout: Arc<Layout>,
    /// Rows the model generates (an RTC `previous_chunk`'s rows; 40).
    pub horizon: usize,
    /// Width of one noise row (`max_action_dim`).
    pub action_dim: usize,
    /// `--use-sim-policy-wrapper`: flat keys.
    pub flat: bool,
    /// `get_modality_config`'s reply: the layout's modality config, encoded once.
    pub modality_config: Value,
}

impl Schema {
    /// The schema of one served layout.
    pub fn new(layout: Arc<Layout>, horizon: usize, action_dim: usize, flat: bool) -> Schema {
        Schema {
            modality_config: modality_config_value(&layout.modality),
            layout,
            horizon,
            action_dim,
            flat,
        }
    }

    /// The embodiment tag.
    pub fn tag(&self) -> &str {
        self.layout.tag()
    }

    /// Video keys in config order.
    pub fn views(&self) -> &[String] {
        &self.layout.spec.views
    }

    /// State keys in config order with their widths.
    pub fn state_keys(&self) -> impl Iterator<Item = (&str, usize)> {
        self.layout.spec.state.keys()
    }

    /// Video frames per camera (`len(video.delta_indices)`, 2 for DROID).
    pub fn video_t(&self) -> usize {
        self.layout.spec.frame_deltas.len()
    }

    /// State steps (`len(state.delta_indices)`, 1 for DROID).
    pub fn state_t(&self) -> usize {
        self.layout.modality.state.delta_indices.len()
    }

    /// The language key (`annotation.language.language_instruction`).
    pub fn language_key(&self) -> &str {
        &self.layout.spec.language_key
    }

    /// Action keys in reply order.
    pub fn action_keys(&self) -> impl Iterator<Item = &str> {
        self.layout.spec.actions.keys().map(|(k, _, _)| k)
    }

    /// Action values per row the embodiment decodes (an RTC `previous_chunk` row).
    pub fn action_width(&self) -> usize {
        valid_action_width(&self.layout.spec)
    }

    /// Steps the embodiment returns per chunk.
    pub fn action_horizon(&self) -> usize {
        self.layout.spec.actions.horizon()
    }
}

/// The schema of the embodiment a message names (a tag or upstream's enum name), or the
/// default one (the first) when it names none.
pub fn pick_schema<'a, M: Msg>(
    schemas: &'a [Schema],
    named: Option<&M>,
) -> Result<&'a Schema, WireError> {
    let name = match named.map(|v| (v, v.view())) {
        None | Some((_, View::Nil)) => {
            return schemas
                .first()
                .ok_or_else(|| WireError::Reply("no embodiment".into()))
        }
        Some((_, View::String(_, s))) => s.unwrap_or(""),
        Some((v, _)) => {
            return Err(WireError::field(
                "embodiment",
                format!("embodiment must be a str. Got {}", type_name(v)),
            ))
        }
    };
    let tag = embodiment_tags::resolve(name, schemas.iter().map(Schema::tag)).ok_or_else(|| {
        let name = crate::doors::excerpt::excerpt(name);
        WireError::from(gr00t_core::error::not_served(
            &name,
            schemas.iter().map(Schema::tag),
        ))
    })?;
    schemas
        .iter()
        .find(|s| s.tag() == tag)
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
