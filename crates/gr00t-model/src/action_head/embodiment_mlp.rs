//! Embodiment-conditioned layers: `CategorySpecificLinear` (W stored `[E, in, out]`, applied as
//! `x @ W[id] + b[id]`, not transposed), the state encoder and action decoder MLPs
//! (Linear → ReLU → Linear) and the multi-embodiment action encoder.

use crate::linear::{products_for, Linear, Products};
use crate::weights::COMPACT;
use crate::{Error, Result};
use candle_core::{DType, Device, Module, Tensor};
use candle_nn::VarBuilder;

/// `CategorySpecificLinear`: one `[in, out]` matrix and `[out]` bias per embodiment.
pub(crate) struct CategorySpecificLinear {
    /// Per embodiment, `None` once dropped.
    slots: Vec<Option<Slot>>,
    /// bf16 products (`--dtype bf16` on the CPU): `x` rounded to bf16, `W` bf16.
    bf16_inputs: bool,
}

/// One embodiment's weights.
enum Slot {
    /// `W[id]` `[in, out]` (a view of the stored table) and `b[id]`, until
    /// [`CategorySpecificLinear::retain`].
    Table(Tensor, Tensor),
    /// Retained: its layer (see [`layer`]), built once.
    Kept(Linear),
}

impl CategorySpecificLinear {
    /// Loads `W` `[E, in, out]` (kept bf16 when stored so) and `b` `[E, out]` under `vb`.
    pub(crate) fn load(
        vb: VarBuilder,
        num_embodiments: usize,
        in_dim: usize,
        out_dim: usize,
    ) -> Result<CategorySpecificLinear> {
        let w = vb.get_with_hints_dtype(
            (num_embodiments, in_dim, out_dim),
            "W",
            Default::default(),
            COMPACT,
        )?;
        let bf16_inputs = products_for(&vb) == Products::Bf16;
        // For bf16 products an f32-stored table is rounded once; widening it back is exact.
        let w = if bf16_inputs && w.dtype() != DType::BF16 {
            w.to_dtype(DType::BF16)?
        } else {
            w
        };
        let b = vb.get((num_embodiments, out_dim), "b")?;
        let slots = (0..num_embodiments)
            .map(|id| Ok(Some(Slot::Table(w.get(id)?, b.get(id)?))))
            .collect::<Result<Vec<_>>>()?;
        Ok(CategorySpecificLinear { slots, bf16_inputs })
    }

    /// Keeps only the embodiments in `keep`, each as a layer of its own (`W[id]ᵀ`: on the CPU
    /// the f32 products then run the hand-written kernels instead of candle's matmul); the
    /// others' weights are freed and selecting them becomes an error.
    pub(crate) fn retain(&mut self, keep: &[usize]) -> Result<()> {
        if let Some(&bad) = keep.iter().find(|&&id| id >= self.slots.len()) {
            return Err(self.out_of_range(bad));
        }
        for (id, slot) in self.slots.iter_mut().enumerate() {
            *slot = match slot.take() {
                Some(Slot::Table(w, b)) if keep.contains(&id) => {
                    Some(Slot::Kept(layer(&w, &b, self.bf16_inputs)?))
                }
                Some(kept @ Slot::Kept(_)) if keep.contains(&id) => Some(kept),
                _ => None,
            };
        }
        Ok(())
    }

    /// Bytes held by the slots still loaded.
    pub(crate) fn kept_bytes(&self) -> usize {
        let bytes = |t: &Tensor| t.elem_count() * t.dtype().size_in_bytes();
        self.slots
            .iter()
            .flatten()
            .map(|slot| match slot {
                Slot::Table(w, b) => bytes(w) + bytes(b),
                Slot::Kept(layer) => layer.weight_bytes(),
            })
            .sum()
    }

    /// The weights of embodiment `id` in the compute dtype (a view once retained).
    pub(crate) fn select(&self, id: usize) -> Result<SelectedLinear> {
        match self.slots.get(id) {
            None => Err(self.out_of_range(id)),
            Some(None) => {
                let kept: Vec<usize> = (0..self.slots.len())
                    .filter(|&i| self.slots[i].is_some())
                    .collect();
                Err(Error::Input(format!(
                    "embodiment id {id} is not loaded (this model keeps embodiment ids {kept:?})"
                )))
            }
            // Built per call, as retaining builds it once: the same product either way.
            Some(Some(Slot::Table(w, b))) => Ok(SelectedLinear(layer(w, b, self.bf16_inputs)?)),
            Some(Some(Slot::Kept(layer))) => Ok(SelectedLinear(layer.clone())),
        }
    }

    fn out_of_range(&self, id: usize) -> Error {
        Error::Input(format!(
            "embodiment id {id} is out of range (the checkpoint has {} slots)",
            self.slots.len()
        ))
    }
}

/// `W[id]ᵀ` `[out, in]` in its own storage and `b[id]` as a layer: on the CPU packed for the
/// hand-written kernels (as the other linears are at load), bf16 products when `bf16_inputs`.
fn layer(w: &Tensor, b: &Tensor, bf16_inputs: bool) -> Result<Linear> {
    let wt = w.t()?.contiguous()?;
    let b = b.copy()?;
    Ok(if w.device().is_cpu() {
        let products = if bf16_inputs {
            Products::Bf16
        } else {
            Products::F32
        };
        Linear::new_for_cpu(wt, Some(b), products)?
    } else {
        Linear::new(wt.to_dtype(b.dtype())?, Some(b))?
    })
}

/// One embodiment's `x @ W + b`.
pub(crate) struct SelectedLinear(Linear);

impl SelectedLinear {
    /// `x @ W + b` for `x` `[.., in]`.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        Ok(self.0.forward(x)?)
    }
}

/// `CategorySpecificMLP`: `layer2(relu(layer1(x)))` (state encoder, action decoder).
pub(crate) struct CategorySpecificMlp {
    layer1: CategorySpecificLinear,
    layer2: CategorySpecificLinear,
}

impl CategorySpecificMlp {
    /// Loads `layer1` (in → hidden) and `layer2` (hidden → out) under `vb`.
    pub(crate) fn load(
        vb: VarBuilder,
        num_embodiments: usize,
        in_dim: usize,
        hidden: usize,
        out_dim: usize,
    ) -> Result<CategorySpecificMlp> {
        Ok(CategorySpecificMlp {
            layer1: CategorySpecificLinear::load(vb.pp("layer1"), num_embodiments, in_dim, hidden)?,
            layer2: CategorySpecificLinear::load(
                vb.pp("layer2"),
                num_embodiments,
                hidden,
                out_dim,
            )?,
        })
    }

    /// Keeps only the embodiments in `keep` (see [`CategorySpecificLinear::retain`]).
    pub(crate) fn retain(&mut self, keep: &[usize]) -> Result<()> {
        self.layer1.retain(keep)?;
        self.layer2.retain(keep)
    }

    /// Bytes of the loaded embodiments' weights.
    pub(crate) fn kept_bytes(&self) -> usize {
        self.layer1.kept_bytes() + self.layer2.kept_bytes()
    }

    /// The MLP of embodiment `id`.
    pub(crate) fn select(&self, id: usize) -> Result<SelectedMlp> {
        Ok(SelectedMlp {
            layer1: self.layer1.select(id)?,
            layer2: self.layer2.select(id)?,
        })
    }
}

/// One embodiment's MLP.
pub(crate) struct SelectedMlp {
    layer1: SelectedLinear,
    layer2: SelectedLinear,
}

impl SelectedMlp {
    /// `layer2(relu(layer1(x)))`.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.layer2.forward(&self.layer1.forward(x)?.relu()?)
    }
}

/// `MultiEmbodimentActionEncoder`: `W3(swish(W2([W1(x) | τ-sinusoid])))`.
pub(crate) struct ActionEncoder {
    w1: CategorySpecificLinear,
    w2: CategorySpecificLinear,
    w3: CategorySpecificLinear,
    width: usize,
}

impl ActionEncoder {
    /// Loads `W1` (action_dim → width), `W2` (2·width → width), `W3` (width → width).
    pub(crate) fn load(
        vb: VarBuilder,
        num_embodiments: usize,
        action_dim: usize,
        width: usize,
    ) -> Result<ActionEncoder> {
        Ok(ActionEncoder {
            w1: CategorySpecificLinear::load(vb.pp("W1"), num_embodiments, action_dim, width)?,
            w2: CategorySpecificLinear::load(vb.pp("W2"), num_embodiments, 2 * width, width)?,
            w3: CategorySpecificLinear::load(vb.pp("W3"), num_embodiments, width, width)?,
            width,
        })
    }

    /// The `[1, 1, width]` timestep sinusoid of bucket `tau` (constant per Euler step),
    /// computed in f32 and stored in `dtype`.
    pub(crate) fn tau_embedding(&self, tau: i64, device: &Device, dtype: DType) -> Result<Tensor> {
        let e = sin_cos_embedding(tau as f32, self.width);
        Ok(Tensor::from_vec(e, (1, 1, self.width), device)?.to_dtype(dtype)?)
    }

    /// Keeps only the embodiments in `keep` (see [`CategorySpecificLinear::retain`]).
    pub(crate) fn retain(&mut self, keep: &[usize]) -> Result<()> {
        self.w1.retain(keep)?;
        self.w2.retain(keep)?;
        self.w3.retain(keep)
    }

    /// Bytes of the loaded embodiments' weights.
    pub(crate) fn kept_bytes(&self) -> usize {
        self.w1.kept_bytes() + self.w2.kept_bytes() + self.w3.kept_bytes()
    }

    /// The encoder of embodiment `id`.
    pub(crate) fn select(&self, id: usize) -> Result<SelectedActionEncoder> {
        Ok(SelectedActionEncoder {
            w1: self.w1.select(id)?,
            w2: self.w2.select(id)?,
            w3: self.w3.select(id)?,
        })
    }
}

/// One embodiment's action encoder.
pub(crate) struct SelectedActionEncoder {
    w1: SelectedLinear,
    w2: SelectedLinear,
    w3: SelectedLinear,
}

impl SelectedActionEncoder {
    /// Encodes actions `[B, H, action_dim]` at the step whose sinusoid is `tau_emb`
    /// `[1, 1, width]` → `[B, H, width]` (before the position embedding).
    pub(crate) fn forward(&self, actions: &Tensor, tau_emb: &Tensor) -> Result<Tensor> {
        let a = self.w1.forward(actions)?;
        let tau = tau_emb.broadcast_as(a.shape())?;
        let x = Tensor::cat(&[&a, &tau], 2)?;
        let x = self.w2.forward(&x)?.silu()?;
        self.w3.forward(&x)
    }
}

/// GR00T's `SinusoidalPositionalEncoding`: `[sin(t·f) | cos(t·f)]`, f_i = exp(−i·ln(10000)/half)
/// for i < half = dim/2, with every step rounded to f32 as torch does; sin/cos are evaluated in
/// f64 on the f32 argument and rounded (torch's f32 kernels are within an ulp of that).
pub(crate) fn sin_cos_embedding(t: f32, dim: usize) -> Vec<f32> {
    let half = dim / 2;
    let step = 10000f32.ln() / half as f32;
    let args: Vec<f32> = (0..half).map(|i| t * (-(i as f32) * step).exp()).collect();
    let sin = args.iter().map(|&a| (a as f64).sin() as f32);
    let cos = args.iter().map(|&a| (a as f64).cos() as f32);
    sin.chain(cos).collect()
}
