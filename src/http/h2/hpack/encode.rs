//! The HPACK encoder of response header blocks. It keeps no dynamic table
//! (no state per connection, and nothing for a peer's table size setting to
//! change): a field is the static table's index when the static table has
//! it whole, else a literal without indexing (§6.2.2) naming the static
//! table's entry when the name is there. Strings are Huffman-coded when
//! that is shorter.

use super::huffman;
use super::table::STATIC;

/// Writes response header blocks; see the module's doc.
pub struct Encoder;

impl Encoder {
    /// `:status`: the static table's entry for 200, 204, 206, 304, 400,
    /// 404 and 500, otherwise a literal naming index 8.
    pub fn status(out: &mut Vec<u8>, status: u16) {
        let index = match status {
            200 => 8,
            204 => 9,
            206 => 10,
            304 => 11,
            400 => 12,
            404 => 13,
            500 => 14,
            _ => {
                integer(out, 0x00, 4, 8);
                string(out, itoa::Buffer::new().format(status).as_bytes());
                return;
            }
        };
        integer(out, 0x80, 7, index);
    }

    /// One field; `name` must be lower-case already (HTTP/2 requires it,
    /// RFC 9113 §8.2.1, and the static table is).
    pub fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
        let mut name_index = None;
        for (i, &(n, v)) in STATIC.iter().enumerate() {
            if n == name {
                if v == value {
                    integer(out, 0x80, 7, i + 1);
                    return;
                }
                name_index.get_or_insert(i + 1);
            }
        }
        match name_index {
            Some(i) => integer(out, 0x00, 4, i),
            None => {
                out.push(0x00);
                string(out, name);
            }
        }
        string(out, value);
    }
}

/// An integer with an N-bit prefix (§5.1); `flags` are the first byte's
/// bits above the prefix.
fn integer(out: &mut Vec<u8>, flags: u8, prefix_bits: u32, value: usize) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        out.push(flags | value as u8);
        return;
    }
    out.push(flags | max as u8);
    let mut rest = value - max;
    while rest >= 0x80 {
        out.push(0x80 | (rest & 0x7f) as u8);
        rest >>= 7;
    }
    out.push(rest as u8);
}

/// A string literal (§5.2), Huffman-coded when that is shorter.
fn string(out: &mut Vec<u8>, s: &[u8]) {
    let coded = huffman::encoded_len(s);
    if coded < s.len() {
        integer(out, 0x80, 7, coded);
        huffman::encode(s, out);
    } else {
        integer(out, 0x00, 7, s.len());
        out.extend_from_slice(s);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Decoded, Decoder};
    use super::*;

    /// Decodes `block` with a fresh decoder, checking that it leaves the
    /// dynamic table empty (the encoder never adds to it).
    fn decode(block: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut d = Decoder::new(4096);
        let mut got = Vec::new();
        let r = d.decode(block, usize::MAX, &mut |n, v| {
            got.push((n.to_vec(), v.to_vec()))
        });
        assert_eq!(r, Ok(Decoded::Whole), "block {block:02x?}");
        assert_eq!(d.table_size(), 0);
        got
    }

    #[test]
    fn every_status_round_trips() {
        for status in 100..=599u16 {
            let mut out = Vec::new();
            Encoder::status(&mut out, status);
            let want = status.to_string().into_bytes();
            assert_eq!(
                decode(&out),
                vec![(b":status".to_vec(), want.clone())],
                "status {status}"
            );
            // Indexed (one byte) for the static table's seven, otherwise
            // name index 8 and three digits, Huffman-coded when that is
            // shorter (digits 0-2 have 5-bit codes, the others 6).
            match status {
                200 | 204 | 206 | 304 | 400 | 404 | 500 => assert_eq!(out.len(), 1),
                _ => {
                    assert_eq!(out[0], 0x08, "status {status}");
                    let short = want.iter().filter(|d| b"012".contains(d)).count() >= 2;
                    assert_eq!(
                        out.len(),
                        if short { 4 } else { 5 },
                        "status {status}: {out:02x?}"
                    );
                }
            }
        }
        let mut out = Vec::new();
        Encoder::status(&mut out, 200);
        Encoder::status(&mut out, 404);
        assert_eq!(out, [0x88, 0x8d]);
        // Outside 100..=599 too, though HTTP has no such status.
        for status in [0, 9, 1000, u16::MAX] {
            let mut out = Vec::new();
            Encoder::status(&mut out, status);
            let want = status.to_string().into_bytes();
            assert_eq!(decode(&out), vec![(b":status".to_vec(), want)]);
        }
    }

    #[test]
    fn response_fields_round_trip() {
        let long = "x".repeat(5000);
        let binary: Vec<u8> = (0..=255).collect();
        let fields: Vec<(&[u8], &[u8])> = vec![
            (b"content-type", b"text/html; charset=utf-8"),
            (b"content-length", b"1234567"),
            (b"content-length", b"0"),
            (b"etag", b"\"5f3c1a2b-1d4c\""),
            (b"last-modified", b"Mon, 21 Oct 2013 20:13:21 GMT"),
            (b"cache-control", b"public, max-age=31536000, immutable"),
            (b"date", b"Fri, 27 Nov 2026 10:00:00 GMT"),
            (b"server", b"tlsfront"),
            (b"content-range", b"bytes 0-99/1234"),
            (b"accept-ranges", b"bytes"),
            (b"location", b"https://www.example.com/a%20b/?q=1#frag"),
            (b"vary", b"accept-encoding"),
            (b"content-encoding", b"gzip"),
            (b"accept-encoding", b"gzip, deflate"),
            (b":authority", b""),
            (b"x-empty", b""),
            (b"", b""),
            (b"x-custom-header-with-a-rather-long-name", long.as_bytes()),
            (b"x-binary", &binary),
            (b"\x00\xff~{}", b"\x7f\x80 \t"),
            (
                b"strict-transport-security",
                b"max-age=63072000; includeSubDomains",
            ),
        ];
        let mut out = Vec::new();
        for &(n, v) in &fields {
            let mut one = Vec::new();
            Encoder::field(&mut one, n, v);
            assert_eq!(decode(&one), vec![(n.to_vec(), v.to_vec())]);
            out.extend_from_slice(&one);
        }
        let want: Vec<_> = fields
            .iter()
            .map(|&(n, v)| (n.to_vec(), v.to_vec()))
            .collect();
        assert_eq!(decode(&out), want);
    }

    #[test]
    fn representation_choices() {
        let enc = |n: &[u8], v: &[u8]| {
            let mut out = Vec::new();
            Encoder::field(&mut out, n, v);
            out
        };
        // Whole field in the static table: indexed.
        assert_eq!(enc(b"accept-encoding", b"gzip, deflate"), [0x90]);
        assert_eq!(enc(b"content-type", b""), [0x80 | 31]);
        // Name in the static table: without indexing, name index 4 bits
        // (continued past 14), value Huffman-coded when shorter, as the
        // RFC's C.6.1 and C.6.3 code these values.
        assert_eq!(
            enc(b"content-encoding", b"gzip"),
            [0x0f, 0x0b, 0x83, 0x9b, 0xd9, 0xab]
        );
        assert_eq!(
            enc(b"cache-control", b"private"),
            [0x0f, 0x09, 0x85, 0xae, 0xc3, 0x77, 0x1a, 0x4b]
        );
        assert_eq!(enc(b"etag", b"\x00"), [0x0f, 0x13, 0x01, 0x00]);
        // Index 15 is the prefix's all-ones value: a continuation byte of 0.
        assert_eq!(enc(b"accept-charset", b"\x00"), [0x0f, 0x00, 0x01, 0x00]);
        assert_eq!(enc(b"if-modified-since", b"\x00"), [0x0f, 0x19, 0x01, 0x00]);
        // Neither: literal name. The RFC's C.4.3 Huffman codings of both.
        assert_eq!(
            enc(b"custom-key", b"custom-value"),
            [
                0x00, 0x88, 0x25, 0xa8, 0x49, 0xe9, 0x5b, 0xa9, 0x7d, 0x7f, 0x89, 0x25, 0xa8, 0x49,
                0xe9, 0x5b, 0xb8, 0xe8, 0xb4, 0xbf
            ]
        );
        // A long string's length continues past the 7-bit prefix.
        let v = [0u8; 200];
        let out = enc(b"x", &v);
        assert_eq!(&out[..5], [0x00, 0x01, b'x', 0x7f, 200 - 127]);
    }
}
