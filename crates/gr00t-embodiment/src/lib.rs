//! The embodiment layer of GR00T N1.7: any tag's layout read from the checkpoint
//! ([`embodiment`]), the HTTP request types with validation, the action groups,
//! image/prompt/state pre-processing into [`ModelInputs`], and decoding of the model's
//! normalised action chunk into physical actions. DROID (`oxe_droid_relative_eef_relative_joint`) keeps its own fast path
//! ([`processor`]).
//!
//! [`ModelInputs`]: gr00t_model::ModelInputs

pub mod actions;
pub mod embodiment;
pub mod embodiment_request;
pub mod embodiment_tags;
pub mod image;
pub mod pose;
pub mod processor;
pub mod prompt;
pub mod request;
pub mod response;
pub mod state;

/// The DROID embodiment tag (the contract's default layout).
pub const EMBODIMENT_TAG: &str = "oxe_droid_relative_eef_relative_joint";
