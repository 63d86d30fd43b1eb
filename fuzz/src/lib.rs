//! Shared set-up of the fuzz targets: the server's protocol decoders (linked from the `gr00t`
//! library, the exact code the server runs), and the tiny fixture checkpoint's pipeline.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The ZMQ / websocket decoders of `crates/gr00t/src/doors`.
pub mod protocols {
    pub use gr00t::doors::wire::{msgpack_numpy, ndarray, npy, observation, schema};
    pub use gr00t::doors::lerobot;
    pub use gr00t::doors::ws::droid_obs;
    pub use gr00t::doors::zmq::zmtp;
}

/// The bundled tiny checkpoint (set `GR00T_FUZZ_CHECKPOINT` to use another).
pub fn checkpoint_dir() -> PathBuf {
    std::env::var_os("GR00T_FUZZ_CHECKPOINT")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../tests/fixtures/gr00t_n17_tiny/checkpoint")
        })
}

/// The tiny checkpoint, opened once.
pub fn checkpoint() -> &'static gr00t_model::Checkpoint {
    static CKPT: OnceLock<gr00t_model::Checkpoint> = OnceLock::new();
    CKPT.get_or_init(|| gr00t_model::Checkpoint::open(checkpoint_dir()).expect("tiny checkpoint"))
}

/// The checkpoint's image pipeline, built once.
pub fn pipeline() -> &'static gr00t_embodiment::image::ImagePipeline {
    static P: OnceLock<gr00t_embodiment::image::ImagePipeline> = OnceLock::new();
    P.get_or_init(|| {
        gr00t_embodiment::image::ImagePipeline::from_checkpoint(checkpoint()).expect("pipeline")
    })
}

/// The checkpoint's DROID layout as the doors read requests against it, built once.
pub fn layouts() -> &'static gr00t_core::layouts::Layouts {
    static L: OnceLock<gr00t_core::layouts::Layouts> = OnceLock::new();
    L.get_or_init(|| {
        let tag = gr00t_embodiment::EMBODIMENT_TAG;
        gr00t_core::layouts::Layouts::of_checkpoint(checkpoint(), &[tag]).expect("DROID layout")
    })
}

/// The ZMQ observation schema of the checkpoint's DROID layout (nested or flat keys).
pub fn schema(flat: bool) -> protocols::schema::Schema {
    let ckpt = checkpoint();
    protocols::schema::Schema::new(
        layouts().all()[0].clone(),
        ckpt.config.action_horizon,
        ckpt.config.max_action_dim,
        flat,
    )
}
