//! Byte strings as text: the one lossless, injective mapping between the
//! bytes a probe reads (file names, `comm`, `str()` of user memory: any
//! bytes but NUL) and the Utf8 values of eBQL's Arrow columns, SQL literals
//! and outputs.
//!
//! * Valid UTF-8 is kept as it is, except for a backslash run that stands
//!   right before the text of an escape (below): such a run is doubled.
//! * Each byte that is not part of valid UTF-8 (always 0x80–0xff) becomes
//!   the escape `\xHH` (two lowercase hex digits, so `\x80` … `\xff`).
//! * Decoding reads a run of `m` backslashes followed by `xHH` (HH from
//!   `80` to `ff`, lowercase) as `m / 2` backslashes, then the byte HH if
//!   `m` is odd (else the text `xHH`); any other backslash is itself.
//!
//! So `decode(encode(b)) == b` for every byte string `b` (the mapping is
//! injective: two different byte strings are two different values), text
//! without a backslash before `x[89a-f][0-9a-f]` reads as itself, and only
//! values holding such a backslash look different from their bytes: the
//! four bytes `\x80` (a backslash, `x`, `8`, `0`) are the text `\\x80`, the
//! byte 0x80 is `\x80`. A literal compared with a string is read the same
//! way ([`decode`]); a literal that is no encoding of any byte string
//! ([`is_canonical`] false: `'\xc3\xa9'` spells the valid `é`, which encodes
//! as `é`) equals no value.

use std::borrow::Cow;
use std::fmt::Write as _;

/// The byte an escape starting at `s` (just after its backslash) stands for:
/// `x`, then two lowercase hex digits from `80` to `ff`.
fn escape_at(s: &[u8]) -> Option<u8> {
    let hex = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    match s {
        [b'x', h, l, ..] => {
            let (h, l) = (hex(*h)?, hex(*l)?);
            (h >= 8).then_some(h << 4 | l)
        }
        _ => None,
    }
}

/// Whether valid text `s` holds a backslash right before the text of an escape.
fn has_escape_text(s: &str) -> bool {
    let b = s.as_bytes();
    b.iter()
        .enumerate()
        .any(|(i, &c)| c == b'\\' && escape_at(&b[i + 1..]).is_some())
}

/// The text of the byte string `bytes` (borrowed when it is valid UTF-8
/// holding no backslash before the text of an escape: the common case).
pub fn encode(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(bytes) {
        if !has_escape_text(s) {
            return Cow::Borrowed(s);
        }
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    encode_into(&mut out, bytes);
    Cow::Owned(out)
}

/// Appends the text of `bytes` to `out` ([`encode`]).
pub fn encode_into(out: &mut String, bytes: &[u8]) {
    for chunk in bytes.utf8_chunks() {
        push_valid(out, chunk.valid(), !chunk.invalid().is_empty());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
}

/// Appends valid text, doubling each backslash run that the text of an
/// escape follows (`escape_follows`: an invalid byte's escape comes after `s`).
fn push_valid(out: &mut String, s: &str, escape_follows: bool) {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            let j = b[i..]
                .iter()
                .position(|&c| c == b'\\')
                .map_or(b.len(), |k| i + k);
            out.push_str(&s[i..j]);
            i = j;
            continue;
        }
        let start = i;
        while i < b.len() && b[i] == b'\\' {
            i += 1;
        }
        let run = &s[start..i];
        out.push_str(run);
        let doubled = if i == b.len() {
            escape_follows
        } else {
            escape_at(&b[i..]).is_some()
        };
        if doubled {
            out.push_str(run);
        }
    }
}

/// The bytes `text` stands for (the inverse of [`encode`]; defined on any
/// text: borrowed when it holds no backslash).
pub fn decode(text: &str) -> Cow<'_, [u8]> {
    let b = text.as_bytes();
    if !b.contains(&b'\\') {
        return Cow::Borrowed(b);
    }
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && b[i] == b'\\' {
            i += 1;
        }
        let m = i - start;
        match escape_at(&b[i..]) {
            Some(byte) => {
                out.resize(out.len() + m / 2, b'\\');
                if m % 2 == 1 {
                    out.push(byte);
                    i += 3;
                }
            }
            None => out.resize(out.len() + m, b'\\'),
        }
    }
    Cow::Owned(out)
}

/// Whether `text` is the encoding of a byte string (of [`decode`]`(text)`):
/// only such a literal can equal a value. Not canonical: escapes of bytes
/// that form valid UTF-8 (`\xc3\xa9`, which is `é`).
pub fn is_canonical(text: &str) -> bool {
    encode(&decode(text)) == text
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn valid_text_is_itself_and_bad_bytes_are_escapes() {
        assert!(matches!(encode(b"/usr/bin/ls"), Cow::Borrowed(_)));
        assert!(matches!(encode(b"C:\\new \\x41 \\x8"), Cow::Borrowed(_)));
        assert_eq!(encode(b"x-\x80"), "x-\\x80");
        assert_eq!(encode(b"x-\x81"), "x-\\x81");
        assert_eq!(encode("x-\u{fffd}".as_bytes()), "x-\u{fffd}");
        // The four bytes `\x80` are not the byte 0x80.
        assert_eq!(encode(b"x-\\x80"), "x-\\\\x80");
        assert_eq!(encode(b"\\\x80"), "\\\\\\x80");
        assert_eq!(encode(b"\xc3\xa9\xc3"), "\u{e9}\\xc3");
        assert_eq!(decode("x-\\x80").as_ref(), b"x-\x80");
        assert_eq!(decode("x-\\\\x80").as_ref(), b"x-\\x80");
        assert_eq!(decode("x-\\X80 \\x7f \\").as_ref(), b"x-\\X80 \\x7f \\");
        assert!(is_canonical("x-\\x80") && is_canonical("C:\\new"));
        assert!(!is_canonical("\\xc3\\xa9"), "é has one spelling: é");
    }

    /// Every string of up to 5 symbols over the bytes that matter
    /// (backslashes, escape text, bytes of valid and broken UTF-8)
    /// round-trips, and its text is canonical: two byte strings are never
    /// one value.
    #[test]
    fn every_short_byte_string_round_trips() {
        const A: [u8; 9] = [b'\\', b'x', b'8', b'f', b'a', 0x80, 0xc3, 0xa9, b'0'];
        let mut seen = std::collections::HashMap::new();
        let mut s: Vec<u8> = Vec::new();
        fn walk(
            s: &mut Vec<u8>,
            seen: &mut std::collections::HashMap<String, Vec<u8>>,
            depth: usize,
        ) {
            let text = encode(s).into_owned();
            assert_eq!(decode(&text).as_ref(), &s[..], "{text:?}");
            assert!(is_canonical(&text), "{text:?}");
            if let Some(other) = seen.insert(text.clone(), s.clone()) {
                panic!("{other:?} and {s:?} are both {text:?}");
            }
            if depth == 0 {
                return;
            }
            for c in A {
                s.push(c);
                walk(s, seen, depth - 1);
                s.pop();
            }
        }
        walk(&mut s, &mut seen, 5);
    }

    proptest! {
        #[test]
        fn any_bytes_round_trip(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let text = encode(&b);
            let back = decode(&text).into_owned();
            prop_assert_eq!(back, b);
        }

        #[test]
        fn any_text_decodes_to_bytes_whose_text_is_canonical(t in "[\\\\x8fa0é€\u{fffd}-]{0,16}") {
            let b = decode(&t).into_owned();
            prop_assert!(is_canonical(&encode(&b)));
            prop_assert_eq!(is_canonical(&t), encode(&b) == t);
        }
    }
}
