//! The JSON pieces the encoders write by hand around shared bytes (frame prefixes, bookmarks,
//! list headers): a string, escaped, and a decimal integer. One writer of each, for every
//! buffer type.

use bytes::BufMut;

/// Appends `s` as a JSON string, quoted and escaped.
pub(crate) fn put_str(out: &mut impl BufMut, s: &str) {
    // serde_json writes a &str into an in-memory buffer without failing.
    let _ = serde_json::to_writer(out.writer(), s);
}

/// Appends `n` in decimal.
pub(crate) fn put_u64(out: &mut impl BufMut, n: u64) {
    out.put_slice(itoa::Buffer::new().format(n).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    #[test]
    fn strings_are_escaped_and_numbers_decimal_into_any_buffer() {
        let mut v = Vec::new();
        put_str(&mut v, "a\"b\\c\n");
        put_u64(&mut v, 18446744073709551615);
        assert_eq!(v, br#""a\"b\\c\n"18446744073709551615"#);
        let mut b = BytesMut::new();
        put_str(&mut b, "Pod");
        put_u64(&mut b, 0);
        assert_eq!(&b[..], br#""Pod"0"#);
    }
}
