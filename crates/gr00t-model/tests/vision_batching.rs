//! Encoding several images in one vision-tower call gives each image bit-for-bit the rows it
//! gets alone (what lets `Gr00tModel` batch the images its vision cache lacks).

mod common;

use candle_core::{DType, Device, Tensor};
use gr00t_fixtures::{tensor_bits, Taps};
use gr00t_model::taps::Recorder;
use gr00t_model::vision::VisionTower;
use gr00t_model::Checkpoint;

#[test]
fn one_call_on_all_images_equals_one_call_per_image_bit_for_bit() {
    let ck = Checkpoint::open(gr00t_fixtures::tiny_checkpoint()).unwrap();
    let vb = ck.var_builder(DType::F32, &Device::Cpu).unwrap();
    let tower = VisionTower::load(
        vb.pp("backbone.model.model.visual"),
        &ck.backbone.vision_config,
    )
    .unwrap();
    let x = common::model_inputs(&Taps::load("case0"));
    let pd = x.patch_dim;
    let rows = x.pixel_values.len() / pd;
    let all = Tensor::from_slice(&x.pixel_values, (rows, pd), &Device::Cpu).unwrap();
    let off = Recorder::disabled();
    let together = tower.forward(&all, &x.image_grid_thw, &off).unwrap();
    assert!(x.image_grid_thw.len() > 1);

    let (mut start, mut merged) = (0, 0);
    for (i, &g) in x.image_grid_thw.iter().enumerate() {
        let n = g[0] * g[1] * g[2];
        let alone = tower
            .forward(&all.narrow(0, start, n).unwrap(), &[g], &off)
            .unwrap();
        let len = alone.image_embeds.dim(0).unwrap();
        let slice = |t: &Tensor| t.narrow(0, merged, len).unwrap();
        assert_eq!(
            tensor_bits(&slice(&together.image_embeds)),
            tensor_bits(&alone.image_embeds),
            "image {i}: merged rows differ"
        );
        assert_eq!(together.deepstack.len(), alone.deepstack.len());
        for (k, (a, b)) in together.deepstack.iter().zip(&alone.deepstack).enumerate() {
            assert_eq!(
                tensor_bits(&slice(a)),
                tensor_bits(b),
                "image {i}: deepstack {k} differs"
            );
        }
        start += n;
        merged += len;
    }
    assert_eq!(merged, together.image_embeds.dim(0).unwrap());

    // The grid tables (position embedding, rotary tables) are kept from the last call: the
    // whole call again recomputes them after the per-image calls, a third call reuses them;
    // all three give the same bits.
    for round in 0..2 {
        let again = tower.forward(&all, &x.image_grid_thw, &off).unwrap();
        assert_eq!(
            tensor_bits(&again.image_embeds),
            tensor_bits(&together.image_embeds),
            "round {round}"
        );
    }
}
