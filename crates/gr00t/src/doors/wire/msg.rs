//! A msgpack value as the wire readers see it: owned ([`rmpv::Value`], what replies and tests
//! build) or borrowed from the message ([`rmpv::ValueRef`], what the doors read, so that a
//! frame's bytes stay in the message until the frame copies them out). The readers are written
//! once, against [`Msg::view`].
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use rmpv::{Integer, Value, ValueRef};
use std::fmt::Display;

/// One msgpack value, as [`Msg::view`] shows it.
pub enum View<'v, M> {
    /// `nil`.
    Nil,
    /// `true` / `false`.
    Boolean(bool),
    /// An integer.
    Integer(Integer),
    /// A 32-bit float.
    F32(f32),
    /// A 64-bit float.
    F64(f64),
    /// A str: its bytes, and its text when they are UTF-8.
    String(&'v [u8], Option<&'v str>),
    /// A bin.
    Binary(&'v [u8]),
    /// An array.
    Array(&'v [M]),
    /// A map, its pairs in order.
    Map(&'v [(M, M)]),
    /// An ext value.
    Ext,
}

/// A msgpack value the wire readers can read, owned or borrowed.
pub trait Msg: Display + Sized {
    /// What the value is, its contents borrowed.
    fn view(&self) -> View<'_, Self>;

    /// Whether it is `nil`.
    fn is_nil(&self) -> bool {
        matches!(self.view(), View::Nil)
    }

    /// The pairs of a map, if it is one.
    fn as_map(&self) -> Option<&[(Self, Self)]> {
        match self.view() {
            View::Map(m) => Some(m),
            _ => None,
        }
    }
}

impl Msg for Value {
    fn view(&self) -> View<'_, Value> {
        match self {
            Value::Nil => View::Nil,
            Value::Boolean(b) => View::Boolean(*b),
            Value::Integer(i) => View::Integer(*i),
            Value::F32(x) => View::F32(*x),
            Value::F64(x) => View::F64(*x),
            Value::String(s) => View::String(s.as_bytes(), s.as_str()),
            Value::Binary(b) => View::Binary(b),
            Value::Array(items) => View::Array(items),
            Value::Map(m) => View::Map(m),
            Value::Ext(..) => View::Ext,
        }
    }
}

impl Msg for ValueRef<'_> {
    fn view(&self) -> View<'_, Self> {
        match self {
            ValueRef::Nil => View::Nil,
            ValueRef::Boolean(b) => View::Boolean(*b),
            ValueRef::Integer(i) => View::Integer(*i),
            ValueRef::F32(x) => View::F32(*x),
            ValueRef::F64(x) => View::F64(*x),
            ValueRef::String(s) => View::String(s.as_bytes(), s.as_str()),
            ValueRef::Binary(b) => View::Binary(b),
            ValueRef::Array(items) => View::Array(items),
            ValueRef::Map(m) => View::Map(m),
            ValueRef::Ext(..) => View::Ext,
        }
    }
}
