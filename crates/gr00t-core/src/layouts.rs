//! The served layouts as the doors read requests against them ([`Layouts`]: one
//! [`Layout`] per served embodiment, the default first, built once at load, each spec read once
//! also when deciding which tags a checkpoint can serve).

use crate::error::LoadError;
use gr00t_embodiment::embodiment_tags;
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
    /// Rows the model generates (40).
    pub horizon: usize,
    /// Action width of the model (132).
    pub action_dim: usize,
}

impl Layouts {
    /// The layouts `names` ask for (tags in any case or upstream's enum names, resolved, in
    /// order, the first the default), or with no names every layout the checkpoint can serve,
    /// DROID first (the others logged); read from `ckpt`'s files alone, no weights loaded. The
    /// engine's at load, and what reads requests without a model (tools, the doors' tests).
    pub fn of_checkpoint<S: AsRef<str>>(
        ckpt: &Checkpoint,
        names: &[S],
    ) -> Result<Layouts, LoadError> {
        let images = ImagePipeline::from_checkpoint(ckpt)?;
        let all: Vec<&str> = ckpt
            .processor
            .modality_configs
            .keys()
            .map(String::as_str)
            .collect();
        let mut served: Vec<Arc<Layout>> = Vec::new();
        for name in names.iter().map(AsRef::as_ref) {
            let tag = embodiment_tags::resolve(name, all.iter().copied()).ok_or_else(|| {
                LoadError::Embodiments(format!(
                    "--embodiment {name:?}: the checkpoint has no such embodiment (it has {all:?})"
                ))
            })?;
            if !served.iter().any(|l| l.tag() == tag) {
                served.push(Arc::new(Layout::new(ckpt, tag, &images)?));
            }
        }
        if names.is_empty() {
            for tag in &all {
                match EmbodimentSpec::new(ckpt, tag) {
                    Ok(spec) => served.push(Arc::new(Layout::of_spec(ckpt, spec, &images)?)),
                    Err(e) => tracing::warn!("embodiment {tag:?} is not served: {e}"),
                }
            }
            // DROID first: the contract's default layout.
            served.sort_by_key(|l| l.tag() != EMBODIMENT_TAG);
            if served.is_empty() {
                return Err(LoadError::Embodiments(
                    "the checkpoint has no embodiment this server can serve".into(),
                ));
            }
        }
        Ok(Layouts {
            served,
            horizon: ckpt.config.action_horizon,
            action_dim: ckpt.config.max_action_dim,
        })
    }

    /// Whether DROID is served (the doors' DROID dialects need it).
    pub fn serves_droid(&self) -> bool {
        self.served.iter().any(|l| l.tag() == EMBODIMENT_TAG)
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
