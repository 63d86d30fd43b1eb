//! LeRobot's async-inference objects (`lerobot.async_inference.helpers`), and how they are read
//! from a pickle: `NEWOBJ` of the dataclass with an empty tuple, then `BUILD` with its fields.

use super::error::PayloadError;
use super::numpy::{self, Numpy};
use super::pickle::{self, Limits, PyValue};
use crate::doors::wire::ndarray::NdArray;

/// The module LeRobot's dataclasses live in.
pub const HELPERS: &str = "lerobot.async_inference.helpers";

/// Every global a LeRobot request may name: the two dataclasses a robot client sends and the
/// numpy names of its arrays and scalars. Anything else is refused by name.
pub const GLOBALS: &[(&str, &str)] = &[
    (HELPERS, "RemotePolicyConfig"),
    (HELPERS, "TimedObservation"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy._core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
];

/// One entry of `RemotePolicyConfig.lerobot_features` (`hw_to_dataset_features`'s form).
#[derive(Debug, Clone, PartialEq)]
pub struct Feature {
    /// `float32` for the state, `image` / `video` for a camera.
    pub dtype: String,
    /// Its shape: `(N,)` for the state, `(H, W, 3)` for a camera.
    pub shape: Vec<usize>,
    /// The state's motor names (`shoulder_pan.pos`), or a camera's axis names.
    pub names: Vec<String>,
}

/// The policy a robot client asks for (`SendPolicyInstructions`).
#[derive(Debug, Clone, PartialEq)]
pub struct RemotePolicyConfig {
    /// `groot` for this server.
    pub policy_type: String,
    /// The checkpoint the client names (never loaded on its say-so).
    pub pretrained_name_or_path: String,
    /// What the robot observes: `observation.state`, `observation.images.<cam>`, in order.
    pub lerobot_features: Vec<(String, Feature)>,
    /// Actions the client wants per chunk.
    pub actions_per_chunk: i64,
    /// The device the client names.
    pub device: String,
    /// Feature renames (`{}` from the stock client).
    pub rename_map: Vec<(String, String)>,
}

/// One value of a raw robot observation.
#[derive(Debug, Clone, PartialEq)]
pub enum ObsValue {
    /// A number: a motor position (Python float, int or numpy scalar).
    Number(f64),
    /// A bool.
    Bool(bool),
    /// Text: the task.
    Text(String),
    /// An array: a camera frame `(H, W, 3)` uint8, or a state vector.
    Array(NdArray),
}

/// One observation a robot client sends (`SendObservations`).
#[derive(Debug, Clone, PartialEq)]
pub struct TimedObservation {
    /// The client's wall clock when it was taken (`time.time()`).
    pub timestamp: f64,
    /// The last action timestep the robot executed.
    pub timestep: i64,
    /// `robot.get_observation()` plus `task`, in the client's order.
    pub observation: Vec<(String, ObsValue)>,
    /// Whether the server must run it (the client's queue is empty).
    pub must_go: bool,
}

/// One action of the reply chunk (`GetActions`).
#[derive(Debug, Clone, PartialEq)]
pub struct TimedAction {
    /// When it is to be executed, on the client's clock.
    pub timestamp: f64,
    /// Its timestep.
    pub timestep: i64,
    /// One value per `robot.action_features` entry.
    pub action: Vec<f32>,
}

/// Reads a pickled `RemotePolicyConfig`.
pub fn config_from_pickle(
    bytes: &[u8],
    limits: &Limits,
) -> Result<RemotePolicyConfig, PayloadError> {
    let mut f = Fields::of(pickle::read(bytes, GLOBALS, limits)?, "RemotePolicyConfig")?;
    let features = f.take("lerobot_features")?;
    Ok(RemotePolicyConfig {
        policy_type: f.str("policy_type")?,
        pretrained_name_or_path: f.str("pretrained_name_or_path")?,
        lerobot_features: features_of(features, "RemotePolicyConfig.lerobot_features")?,
        actions_per_chunk: f.int("actions_per_chunk")?,
        device: f.str("device")?,
        rename_map: match f.maybe("rename_map") {
            None => Vec::new(),
            Some(v) => str_pairs(v, "RemotePolicyConfig.rename_map")?,
        },
    })
}

/// Reads a pickled `TimedObservation`.
pub fn observation_from_pickle(
    bytes: &[u8],
    limits: &Limits,
) -> Result<TimedObservation, PayloadError> {
    let mut f = Fields::of(pickle::read(bytes, GLOBALS, limits)?, "TimedObservation")?;
    let PyValue::Dict(pairs) = f.take("observation")? else {
        return Err(PayloadError::invalid(
            "TimedObservation.observation",
            "is not a dict".into(),
        ));
    };
    let observation = pairs
        .into_iter()
        .map(|(k, v)| {
            let PyValue::Str(key) = k else {
                return Err(PayloadError::invalid(
                    "TimedObservation.observation",
                    format!("has a key that is not a str: {k:?}"),
                ));
            };
            let value = obs_value(v, &format!("TimedObservation.observation['{key}']"))?;
            Ok((key, value))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(TimedObservation {
        timestamp: f.float("timestamp")?,
        timestep: f.int("timestep")?,
        observation,
        must_go: match f.maybe("must_go") {
            None => false,
            Some(PyValue::Bool(b)) => b,
            Some(_) => {
                return Err(PayloadError::invalid(
                    "TimedObservation.must_go",
                    "is not a bool".into(),
                ))
            }
        },
    })
}

/// One observation value from its pickle form.
fn obs_value(v: PyValue, field: &str) -> Result<ObsValue, PayloadError> {
    Ok(match v {
        PyValue::Float(x) => ObsValue::Number(x),
        PyValue::Int(i) => ObsValue::Number(i as f64),
        PyValue::Bool(b) => ObsValue::Bool(b),
        PyValue::Str(s) => ObsValue::Text(s),
        call @ PyValue::Call { .. } => match numpy::read(call, field)? {
            Numpy::Array(a) => ObsValue::Array(a),
            Numpy::Scalar(x) => ObsValue::Number(x),
        },
        other => {
            return Err(PayloadError::invalid(
                field,
                format!("{} is not a number, text or numpy array", kind(&other)),
            ))
        }
    })
}

/// `lerobot_features` from its pickle form.
fn features_of(v: PyValue, field: &str) -> Result<Vec<(String, Feature)>, PayloadError> {
    let PyValue::Dict(pairs) = v else {
        return Err(PayloadError::invalid(field, "is not a dict".into()));
    };
    pairs
        .into_iter()
        .map(|(k, v)| {
            let PyValue::Str(name) = k else {
                return Err(PayloadError::invalid(
                    field,
                    "has a key that is not a str".into(),
                ));
            };
            let here = format!("{field}['{name}']");
            let PyValue::Dict(entries) = v else {
                return Err(PayloadError::invalid(&here, "is not a dict".into()));
            };
            let mut f = Fields {
                pairs: entries,
                object: here.clone(),
            };
            let dtype = f.str("dtype")?;
            let shape = match f.take("shape")? {
                PyValue::Tuple(d) | PyValue::List(d) => d
                    .into_iter()
                    .map(|d| match d {
                        PyValue::Int(n) => usize::try_from(n).ok(),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>(),
                _ => None,
            }
            .ok_or_else(|| {
                PayloadError::invalid(&format!("{here}.shape"), "is not a tuple of sizes".into())
            })?;
            let names = match f.maybe("names") {
                None | Some(PyValue::None) => Vec::new(),
                Some(PyValue::List(n) | PyValue::Tuple(n)) => n
                    .into_iter()
                    .map(|n| match n {
                        PyValue::Str(s) => Some(s),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        PayloadError::invalid(&format!("{here}.names"), "are not all str".into())
                    })?,
                Some(_) => {
                    return Err(PayloadError::invalid(
                        &format!("{here}.names"),
                        "is not a list".into(),
                    ))
                }
            };
            Ok((
                name,
                Feature {
                    dtype,
                    shape,
                    names,
                },
            ))
        })
        .collect()
}

/// A dict of str to str.
fn str_pairs(v: PyValue, field: &str) -> Result<Vec<(String, String)>, PayloadError> {
    let PyValue::Dict(pairs) = v else {
        return Err(PayloadError::invalid(field, "is not a dict".into()));
    };
    pairs
        .into_iter()
        .map(|p| match p {
            (PyValue::Str(k), PyValue::Str(v)) => Ok((k, v)),
            _ => Err(PayloadError::invalid(
                field,
                "holds a pair that is not str: str".into(),
            )),
        })
        .collect()
}

/// A Python value's kind, for errors.
fn kind(v: &PyValue) -> &'static str {
    match v {
        PyValue::None => "None",
        PyValue::Bool(_) => "a bool",
        PyValue::Int(_) | PyValue::BigInt(_) => "an int",
        PyValue::Float(_) => "a float",
        PyValue::Str(_) => "a str",
        PyValue::Bytes(_) => "bytes",
        PyValue::Tuple(_) => "a tuple",
        PyValue::List(_) => "a list",
        PyValue::Dict(_) => "a dict",
        PyValue::Global(_) => "a global",
        PyValue::Call { .. } => "an object",
    }
}

/// The fields of a dataclass instance (its `BUILD` state) or of a dict, taken one by one.
struct Fields {
    pairs: Vec<(PyValue, PyValue)>,
    object: String,
}

impl Fields {
    /// The fields of `value`, which must be `NEWOBJ(helpers.<class>)` with a dict state.
    fn of(value: PyValue, class: &str) -> Result<Fields, PayloadError> {
        let wrong = |got: String| {
            PayloadError::invalid(
                "payload",
                format!("expected a {HELPERS}.{class}, got {got}"),
            )
        };
        let PyValue::Call {
            callable, state, ..
        } = value
        else {
            return Err(wrong(kind(&value).to_string()));
        };
        if callable.module != HELPERS || callable.name != class {
            return Err(wrong(callable.to_string()));
        }
        match state.map(|s| *s) {
            Some(PyValue::Dict(pairs)) => Ok(Fields {
                pairs,
                object: class.to_string(),
            }),
            _ => Err(PayloadError::invalid(
                class,
                "has no field dict (BUILD state)".into(),
            )),
        }
    }

    fn maybe(&mut self, name: &str) -> Option<PyValue> {
        let i = self
            .pairs
            .iter()
            .position(|(k, _)| matches!(k, PyValue::Str(s) if s == name))?;
        Some(self.pairs.swap_remove(i).1)
    }

    fn take(&mut self, name: &str) -> Result<PyValue, PayloadError> {
        self.maybe(name).ok_or_else(|| {
            PayloadError::invalid(&format!("{}.{name}", self.object), "is missing".into())
        })
    }

    fn str(&mut self, name: &str) -> Result<String, PayloadError> {
        match self.take(name)? {
            PyValue::Str(s) => Ok(s),
            v => Err(self.wrong(name, "a str", &v)),
        }
    }

    fn int(&mut self, name: &str) -> Result<i64, PayloadError> {
        match self.take(name)? {
            PyValue::Int(i) => Ok(i),
            v => Err(self.wrong(name, "an int", &v)),
        }
    }

    fn float(&mut self, name: &str) -> Result<f64, PayloadError> {
        match self.take(name)? {
            PyValue::Float(x) => Ok(x),
            PyValue::Int(i) => Ok(i as f64),
            v => Err(self.wrong(name, "a float", &v)),
        }
    }

    fn wrong(&self, name: &str, want: &str, got: &PyValue) -> PayloadError {
        PayloadError::invalid(
            &format!("{}.{name}", self.object),
            format!("is {}, not {want}", kind(got)),
        )
    }
}
