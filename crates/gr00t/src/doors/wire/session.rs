//! `session_id` as the msgpack doors read it (ZMQ `options.session_id`, the websocket
//! message's `session_id`): one parser, one refusal text.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

use super::error::WireError;
use super::msg::{Msg, View};
use super::msgpack_numpy::{decode_array, get, type_name};
use gr00t_core::session::check_session_id;

/// `session_id` among a message's keys: a str, an int, a numpy integer scalar or an integer
/// array of one element (RoboArena's `np.zeros(1, np.int32)`), the last three as their decimal
/// text; absent or nil is `None`. Errors name `prefix` + `session_id`.
pub fn session_id<M: Msg>(m: &[(M, M)], prefix: &str) -> Result<Option<String>, WireError> {
    let field = format!("{prefix}session_id");
    let bad = |got: String| {
        format!("{field} must be a str, an int or an int array of one element. Got {got}")
    };
    let Some(v) = get(m, "session_id") else {
        return Ok(None);
    };
    let id = match v.view() {
        View::Nil => return Ok(None),
        View::String(_, s) => s
            .ok_or_else(|| WireError::field(&field, format!("{field} is not valid UTF-8")))?
            .to_string(),
        View::Integer(i) => i.to_string(),
        View::Map(n) if get(n, "__npgeneric__").is_some() => match get(n, "data").map(Msg::view) {
            Some(View::Integer(i)) => i.to_string(),
            _ => return Err(WireError::field(&field, bad(type_name(v).into()))),
        },
        _ => match decode_array(v) {
            Some((_, Ok(a))) => match a.int_values().as_deref() {
                Some([one]) => one.to_string(),
                _ => {
                    return Err(WireError::field(
                        &field,
                        bad(format!(
                            "a {} array of shape {}",
                            a.dtype.name(),
                            a.shape_text()
                        )),
                    ))
                }
            },
            Some((_, Err(e))) => return Err(WireError::field(&field, format!("{field}: {e}"))),
            None => return Err(WireError::field(&field, bad(type_name(v).into()))),
        },
    };
    check_session_id(&id).map_err(|e| WireError::field(&field, format!("{field}: {e}")))?;
    Ok(Some(id))
}

/// `session_token` among a message's keys: the str a session's answer carried, echoed; only
/// beside a session (`in_session`). Errors name `prefix` + `session_token`.
pub fn session_token<M: Msg>(
    m: &[(M, M)],
    prefix: &str,
    in_session: bool,
) -> Result<Option<String>, WireError> {
    let field = format!("{prefix}session_token");
    let Some(v) = get(m, "session_token") else {
        return Ok(None);
    };
    match v.view() {
        View::Nil => Ok(None),
        View::String(..) if !in_session => Err(WireError::field(
            &field,
            format!("{field} names a session's incarnation: send it with {prefix}session_id"),
        )),
        View::String(_, s) => {
            let s =
                s.ok_or_else(|| WireError::field(&field, format!("{field} is not valid UTF-8")))?;
            check_session_id(s).map_err(|e| WireError::field(&field, format!("{field}: {e}")))?;
            Ok(Some(s.to_string()))
        }
        _ => Err(WireError::field(
            &field,
            format!("{field} must be a str. Got {}", type_name(v)),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doors::wire::msgpack_numpy::{gr00t_array, nd_array, openpi_array, str_map};
    use crate::doors::wire::ndarray::{DType, NdArray};
    use rmpv::Value;

    fn i32s(v: &[i32]) -> NdArray {
        let data = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        NdArray::new(DType::parse("<i4").unwrap(), vec![v.len()], data).unwrap()
    }

    fn parse(v: Value, prefix: &str) -> Result<Option<String>, WireError> {
        session_id(&[(Value::from("session_id"), v)], prefix)
    }

    #[test]
    fn every_form_a_client_sends_is_its_decimal_or_text_id() {
        let ok = |v: Value| parse(v, "").unwrap();
        assert_eq!(ok(Value::from("ep-1-A")), Some("ep-1-A".into()));
        assert_eq!(ok(Value::from(7)), Some("7".into()));
        assert_eq!(ok(Value::from(-3)), Some("-3".into()));
        // RoboArena's int32 (1,) in openpi's form, msgpack-numpy's and the .npy map; a numpy
        // scalar as msgpack-numpy writes it.
        assert_eq!(ok(openpi_array(&i32s(&[7]))), Some("7".into()));
        assert_eq!(ok(nd_array(&i32s(&[-3]))), Some("-3".into()));
        assert_eq!(ok(gr00t_array(&i32s(&[12]))), Some("12".into()));
        let scalar = str_map([
            ("__npgeneric__", Value::Boolean(true)),
            ("data", Value::from(5)),
        ]);
        assert_eq!(ok(scalar), Some("5".into()));
        assert_eq!(ok(Value::Nil), None);
        assert_eq!(session_id::<Value>(&[], "options."), Ok(None));
    }

    #[test]
    fn a_token_is_a_str_beside_a_session() {
        let m = |v: Value| vec![(Value::from("session_token"), v)];
        let t = session_token(&m(Value::from("ab12")), "options.", true);
        assert_eq!(t, Ok(Some("ab12".into())));
        assert_eq!(session_token(&m(Value::Nil), "", true), Ok(None));
        assert_eq!(session_token::<Value>(&[], "", false), Ok(None));
        let e = session_token(&m(Value::from("ab12")), "options.", false)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("options.session_token names"), "{e}");
        let e = session_token(&m(Value::from(7)), "", true)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "session_token must be a str. Got int");
        assert!(session_token(&m(Value::from("a b")), "", true).is_err());
    }

    #[test]
    fn refusals_name_the_field_with_its_prefix() {
        let bad = [
            openpi_array(&i32s(&[1, 2])),
            openpi_array(&NdArray::from_f32(vec![1], &[1.5])),
            Value::F64(1.0),
            Value::Boolean(true),
            str_map([("x", Value::from(1))]),
            Value::from(""),
            Value::from("a b"),
            Value::from("x".repeat(300)),
        ];
        for v in bad {
            for prefix in ["", "options."] {
                let e = parse(v.clone(), prefix).unwrap_err();
                let field = format!("{prefix}session_id");
                assert!(
                    matches!(&e, WireError::Invalid { field: f, .. } if *f == field),
                    "{e:?}"
                );
                assert!(e.to_string().starts_with(&field), "{e}");
            }
        }
        let e = parse(Value::F64(1.0), "options.").unwrap_err().to_string();
        assert_eq!(
            e,
            "options.session_id must be a str, an int or an int array of one element. Got float"
        );
        let e = parse(openpi_array(&i32s(&[1, 2])), "")
            .unwrap_err()
            .to_string();
        assert!(e.ends_with("Got a int32 array of shape (2,)"), "{e}");
    }
}
