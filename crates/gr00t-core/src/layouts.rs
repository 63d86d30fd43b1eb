//! The served layouts as the doors read requests against them ([`Layouts`]: one
//! [`Layout`] per served embodiment, the default first, built once at load) and which tags a
//! checkpoint serves ([`served_tags`]).

use crate::error::LoadError;
use gr00t_embodiment::embodiment_tags;
use gr00t_embodiment::error::EmbodimentError;
use gr00t_embodiment::image::ImagePipeline;
use gr00t_embodiment::layout::{EmbodimentSpec, Layout};
use gr00t_embodiment::EMBODIMENT_TAG;
use gr00t_model::Checkpoint;
use std::sync::Arc;

/// What a door needs to turn its wire format into a [`crate::Request`]: the served layouts,
/// the default first, and the noise shape. Cheap to clone (the layouts are shared).
#[derive(Debug, Clone)]
pub struct Layouts {
    /// Every served embodiment's layout, the default first.
    served: Vec<Arc<Layout>>,
    /// Whether DROID is served (the doors' DROID dialects need it).
    pub droid: bool,
    /// Rows the model generates (40).
    pub horizon: usize,
    /// Action width of the model (132).
    pub action_dim: usize,
}

impl Layouts {
    /// The layouts of `tags` (the first the default) read from `ckpt`'s files alone, no
    /// weights loaded: the engine's at load, and what reads requests without a model (tools,
    /// the doors' tests).
    pub fn of_checkpoint(ckpt: &Checkpoint, tags: &[&str]) -> Result<Layouts, EmbodimentError> {
        let images = ImagePipeline::from_checkpoint(ckpt)?;
        let served = tags
            .iter()
            .map(|tag| Layout::new(ckpt, tag, &images).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Layouts {
            served,
            droid: tags.contains(&EMBODIMENT_TAG),
            horizon: ckpt.config.action_horizon,
            action_dim: ckpt.config.max_action_dim,
        })
    }

    /// The served layout `name` means (tag in any case, or upstream's enum name).
    pub fn resolve(&self, name: &str) -> Option<&Arc<Layout>> {
        let tag = embodiment_tags::resolve(name, self.served.iter().map(|l| l.tag()))?;
        self.served.iter().find(|l| l.tag() == tag)
    }

    /// Every served layout, the default first.
    pub fn all(&self) -> &[Arc<Layout>] {
        &self.served
    }

    /// The default layout (the first served).
    pub fn default_layout(&self) -> Option<&Arc<Layout>> {
        self.served.first()
    }

    /// The served tags, the default first.
    pub fn tags(&self) -> Vec<&str> {
        self.served.iter().map(|l| l.tag()).collect()
    }
}

/// The tags to serve: the requested ones (resolved, in order), or every tag whose layout the
/// server can serve, DROID first; unservable tags are logged when not asked for.
pub fn served_tags(ckpt: &Checkpoint, requested: &[String]) -> Result<Vec<String>, LoadError> {
    let all: Vec<&str> = ckpt
        .processor
        .modality_configs
        .keys()
        .map(String::as_str)
        .collect();
    if !requested.is_empty() {
        let mut tags: Vec<String> = Vec::new();
        for name in requested {
            let tag = embodiment_tags::resolve(name, all.iter().copied()).ok_or_else(|| {
                LoadError::Embodiments(format!(
                    "--embodiment {name:?}: the checkpoint has no such embodiment (it has {all:?})"
                ))
            })?;
            EmbodimentSpec::new(ckpt, tag)?;
            if !tags.iter().any(|t| t == tag) {
                tags.push(tag.to_string());
            }
        }
        return Ok(tags);
    }
    let mut tags = Vec::new();
    for tag in all {
        match EmbodimentSpec::new(ckpt, tag) {
            Ok(_) => tags.push(tag.to_string()),
            Err(e) => tracing::warn!("embodiment {tag:?} is not served: {e}"),
        }
    }
    // DROID first: the contract's default layout.
    tags.sort_by_key(|t| t != EMBODIMENT_TAG);
    if tags.is_empty() {
        return Err(LoadError::Embodiments(
            "the checkpoint has no embodiment this server can serve".into(),
        ));
    }
    Ok(tags)
}
