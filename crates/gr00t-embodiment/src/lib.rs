//! The embodiment layer of GR00T N1.7: any tag's layout read from the checkpoint
//! ([`embodiment`]), the observation every door hands over ([`observation`]) and its base64
//! frames' checked decoding ([`encoded_views`]), DROID's contract names ([`droid`]), the action
//! groups,
//! image/prompt/state pre-processing into [`ModelInputs`], and decoding of the model's
//! normalised action chunk into physical actions. DROID goes through the same
//! [`EmbodimentProcessor`](embodiment::EmbodimentProcessor); what is DROID's own is data: its
//! checkpoint layout, its [`frame_policy`] table entry and the default [`EMBODIMENT_TAG`].
//!
//! [`ModelInputs`]: gr00t_model::ModelInputs

pub mod actions;
pub mod droid;
pub mod embodiment;
pub mod embodiment_tags;
pub mod encoded_views;
pub mod error;
pub mod frame_history;
pub mod frame_policy;
pub mod image;
pub mod layout;
pub mod observation;
pub mod pose;
pub mod prompt;
pub mod response;
pub mod state;

/// The DROID embodiment tag: the default layout, and the key of its frame policy.
pub const EMBODIMENT_TAG: &str = "oxe_droid_relative_eef_relative_joint";
