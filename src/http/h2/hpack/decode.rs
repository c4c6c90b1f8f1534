//! The HPACK decoder of request header blocks (RFC 7541 §3, §5, §6): field
//! representations, integers and strings, and the dynamic table updates
//! they make, with the header list size limit of RFC 9113 §6.5.2.

use super::huffman;
use super::table::{entry_size, DynamicTable, STATIC};
use super::DecodeError;
use std::sync::Arc;

/// Whether every field of a block was emitted.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Decoded {
    /// Every field was emitted.
    Whole,
    /// The list exceeded max_list; fields past the limit were not emitted.
    TooLarge,
}

/// The decoding side of one connection: its dynamic table.
pub struct Decoder {
    table: DynamicTable,
    /// Our SETTINGS_HEADER_TABLE_SIZE: the most a size update may ask.
    max_table_size: usize,
}

impl Decoder {
    /// `max_table_size`: our SETTINGS_HEADER_TABLE_SIZE (4096): the limit
    /// dynamic table size updates may not exceed, and the table's size
    /// until the peer sends one.
    pub fn new(max_table_size: usize) -> Decoder {
        Decoder {
            table: DynamicTable::new(max_table_size),
            max_table_size,
        }
    }

    /// Decode one complete header block (HEADERS + CONTINUATION payloads
    /// concatenated by the caller). Calls `emit(name, value)` for each
    /// field in order.
    ///
    /// The header list size is counted as RFC 9113 §6.5.2 does (32 plus
    /// name plus value per field) while decoding: once it would exceed
    /// `max_list`, no further field is emitted, but decoding goes on to the
    /// end so that the dynamic table stays in step with the peer's; the
    /// result says so.
    ///
    /// Memory: Huffman-coded strings decode into two scratch buffers that
    /// live for this call, each at most 8/5 of the block; the bytes copied
    /// into new entries are at most the block's strings (names taken from
    /// the dynamic table are shared), and the table holds at most its size.
    pub fn decode(
        &mut self,
        block: &[u8],
        max_list: usize,
        emit: &mut dyn FnMut(&[u8], &[u8]),
    ) -> Result<Decoded, DecodeError> {
        let mut r = Reader { buf: block };
        let mut name_buf = Vec::new();
        let mut value_buf = Vec::new();
        let mut list = 0usize;
        let mut field_seen = false;
        let mut out = |name: &[u8], value: &[u8]| {
            list = list.saturating_add(entry_size(name, value));
            if list <= max_list {
                emit(name, value);
            }
        };
        while let Some(&first) = r.buf.first() {
            if first & 0x80 != 0 {
                // Indexed field (§6.1).
                let index = r.integer(7)?;
                let (name, value) = self.field(index)?;
                out(name, value);
            } else if first & 0xe0 == 0x20 {
                // Dynamic table size update (§6.3): only before the first
                // field (§4.2); several in a row are allowed.
                let size = r.integer(5)?;
                if field_seen {
                    return Err(DecodeError::TableSizeUpdateNotFirst);
                }
                if size > self.max_table_size {
                    return Err(DecodeError::TableSizeUpdateTooLarge);
                }
                self.table.set_max_size(size);
                continue;
            } else {
                // A literal: with incremental indexing (01, §6.2.1),
                // without indexing (0000, §6.2.2) or never indexed (0001,
                // §6.2.3). The last two decode alike: "never" binds only
                // intermediaries that re-encode.
                let indexing = first & 0xc0 == 0x40;
                let index = r.integer(if indexing { 6 } else { 4 })?;
                if !indexing {
                    let name = match index {
                        0 => r.string(&mut name_buf)?,
                        i => self.field(i)?.0,
                    };
                    let value = r.string(&mut value_buf)?;
                    out(name, value);
                } else {
                    // A name from the dynamic table is shared, not copied
                    // (see `table::Entry`); it also outlives the eviction
                    // that adding this entry may make of the one it names.
                    let shared = match index {
                        i if i > STATIC.len() => Some(
                            self.table
                                .name(i - STATIC.len() - 1)
                                .ok_or(DecodeError::BadIndex)?,
                        ),
                        _ => None,
                    };
                    let name = match (&shared, index) {
                        (Some(name), _) => &name[..],
                        (None, 0) => r.string(&mut name_buf)?,
                        (None, i) => STATIC[i - 1].0,
                    };
                    let value = r.string(&mut value_buf)?;
                    out(name, value);
                    if self.table.fits(entry_size(name, value)) {
                        let name = shared.clone().unwrap_or_else(|| Arc::from(name));
                        self.table.insert(name, value.into());
                    } else {
                        // Larger than the whole table: it empties the table
                        // and is not added (§4.4).
                        self.table.clear();
                    }
                }
            }
            field_seen = true;
        }
        Ok(if list <= max_list {
            Decoded::Whole
        } else {
            Decoded::TooLarge
        })
    }

    /// Bytes the dynamic table holds now (RFC 7541 §4.1 size): for the
    /// per-connection memory figures.
    pub fn table_size(&self) -> usize {
        self.table.size()
    }

    /// The field at an HPACK index (§2.3.3): 1..=61 static, then dynamic.
    fn field(&self, index: usize) -> Result<(&[u8], &[u8]), DecodeError> {
        match index {
            0 => Err(DecodeError::BadIndex),
            i if i <= STATIC.len() => Ok(STATIC[i - 1]),
            i => self
                .table
                .get(i - STATIC.len() - 1)
                .ok_or(DecodeError::BadIndex),
        }
    }
}

/// The unread rest of a block.
struct Reader<'b> {
    buf: &'b [u8],
}

impl<'b> Reader<'b> {
    fn byte(&mut self) -> Result<u8, DecodeError> {
        let (&b, rest) = self.buf.split_first().ok_or(DecodeError::Truncated)?;
        self.buf = rest;
        Ok(b)
    }

    /// An integer with an N-bit prefix (§5.1). At most 5 continuation
    /// bytes and values up to `u32::MAX`: more than any index, length or
    /// size can be, and more would only be a way to make us loop or
    /// overflow.
    fn integer(&mut self, prefix_bits: u32) -> Result<usize, DecodeError> {
        let max = (1u8 << prefix_bits) - 1;
        let prefix = self.byte()? & max;
        if prefix < max {
            return Ok(usize::from(prefix));
        }
        let mut value = u64::from(max);
        let mut shift = 0;
        loop {
            let b = self.byte()?;
            value += u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 28 {
                return Err(DecodeError::IntegerOverflow);
            }
        }
        u32::try_from(value)
            .ok()
            .and_then(|v| usize::try_from(v).ok())
            .ok_or(DecodeError::IntegerOverflow)
    }

    /// A string literal (§5.2): its bytes in the block, or Huffman-decoded
    /// into `scratch`. Its length is bounded by what is left of the block.
    fn string<'s>(&mut self, scratch: &'s mut Vec<u8>) -> Result<&'s [u8], DecodeError>
    where
        'b: 's,
    {
        let huffman = self.buf.first().is_some_and(|&b| b & 0x80 != 0);
        let len = self.integer(7)?;
        if len > self.buf.len() {
            return Err(DecodeError::Truncated);
        }
        let (s, rest) = self.buf.split_at(len);
        self.buf = rest;
        if !huffman {
            return Ok(s);
        }
        scratch.clear();
        huffman::decode(s, scratch)?;
        Ok(scratch)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    type Fields = Vec<(String, String)>;

    fn decode_with(
        d: &mut Decoder,
        block: &[u8],
        max_list: usize,
    ) -> (Result<Decoded, DecodeError>, Fields) {
        let mut got = Vec::new();
        let r = d.decode(block, max_list, &mut |n, v| {
            got.push((
                String::from_utf8(n.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap(),
            ))
        });
        (r, got)
    }

    fn decode_ok(d: &mut Decoder, block: &[u8]) -> Fields {
        let (r, got) = decode_with(d, block, usize::MAX);
        assert_eq!(r, Ok(Decoded::Whole));
        got
    }

    fn fields(list: &[(&str, &str)]) -> Fields {
        list.iter()
            .map(|&(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    /// The dynamic table, newest first, and its size.
    fn table(d: &Decoder) -> (Fields, usize) {
        let entries = (0..d.table.len())
            .map(|i| {
                let (n, v) = d.table.get(i).unwrap();
                (
                    String::from_utf8(n.to_vec()).unwrap(),
                    String::from_utf8(v.to_vec()).unwrap(),
                )
            })
            .collect();
        (entries, d.table_size())
    }

    fn check(
        d: &mut Decoder,
        block: &str,
        want: &[(&str, &str)],
        want_table: &[(&str, &str)],
        size: usize,
    ) {
        assert_eq!(decode_ok(d, &hex(block)), fields(want), "block {block}");
        assert_eq!(table(d), (fields(want_table), size), "table after {block}");
    }

    #[test]
    fn rfc_c2_field_representations() {
        // C.2.1: literal with indexing, new name.
        let mut d = Decoder::new(4096);
        check(
            &mut d,
            "400a637573746f6d2d6b65790d637573746f6d2d686561646572",
            &[("custom-key", "custom-header")],
            &[("custom-key", "custom-header")],
            55,
        );
        // C.2.2: literal without indexing, indexed name.
        let mut d = Decoder::new(4096);
        check(
            &mut d,
            "040c2f73616d706c652f70617468",
            &[(":path", "/sample/path")],
            &[],
            0,
        );
        // C.2.3: literal never indexed, new name.
        let mut d = Decoder::new(4096);
        check(
            &mut d,
            "100870617373776f726406736563726574",
            &[("password", "secret")],
            &[],
            0,
        );
        // C.2.4: indexed field.
        let mut d = Decoder::new(4096);
        check(&mut d, "82", &[(":method", "GET")], &[], 0);
    }

    /// C.3 (plain strings) and C.4 (Huffman) are the same three requests.
    fn rfc_requests(blocks: [&str; 3]) {
        let mut d = Decoder::new(4096);
        let first = [
            (":method", "GET"),
            (":scheme", "http"),
            (":path", "/"),
            (":authority", "www.example.com"),
        ];
        check(
            &mut d,
            blocks[0],
            &first,
            &[(":authority", "www.example.com")],
            57,
        );
        let mut second = first.to_vec();
        second.push(("cache-control", "no-cache"));
        check(
            &mut d,
            blocks[1],
            &second,
            &[
                ("cache-control", "no-cache"),
                (":authority", "www.example.com"),
            ],
            110,
        );
        check(
            &mut d,
            blocks[2],
            &[
                (":method", "GET"),
                (":scheme", "https"),
                (":path", "/index.html"),
                (":authority", "www.example.com"),
                ("custom-key", "custom-value"),
            ],
            &[
                ("custom-key", "custom-value"),
                ("cache-control", "no-cache"),
                (":authority", "www.example.com"),
            ],
            164,
        );
    }

    #[test]
    fn rfc_c3_requests_without_huffman() {
        rfc_requests([
            "828684410f7777772e6578616d706c652e636f6d",
            "828684be58086e6f2d6361636865",
            "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
        ]);
    }

    #[test]
    fn rfc_c4_requests_with_huffman() {
        rfc_requests([
            "828684418cf1e3c2e5f23a6ba0ab90f4ff",
            "828684be5886a8eb10649cbf",
            "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
        ]);
    }

    /// C.5 (plain) and C.6 (Huffman): three responses through a 256-byte
    /// table, with evictions.
    fn rfc_responses(blocks: [&str; 3]) {
        let mut d = Decoder::new(256);
        let date1 = "Mon, 21 Oct 2013 20:13:21 GMT";
        let date2 = "Mon, 21 Oct 2013 20:13:22 GMT";
        let loc = "https://www.example.com";
        let cookie = "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1";
        check(
            &mut d,
            blocks[0],
            &[
                (":status", "302"),
                ("cache-control", "private"),
                ("date", date1),
                ("location", loc),
            ],
            &[
                ("location", loc),
                ("date", date1),
                ("cache-control", "private"),
                (":status", "302"),
            ],
            222,
        );
        check(
            &mut d,
            blocks[1],
            &[
                (":status", "307"),
                ("cache-control", "private"),
                ("date", date1),
                ("location", loc),
            ],
            &[
                (":status", "307"),
                ("location", loc),
                ("date", date1),
                ("cache-control", "private"),
            ],
            222,
        );
        check(
            &mut d,
            blocks[2],
            &[
                (":status", "200"),
                ("cache-control", "private"),
                ("date", date2),
                ("location", loc),
                ("content-encoding", "gzip"),
                ("set-cookie", cookie),
            ],
            &[
                ("set-cookie", cookie),
                ("content-encoding", "gzip"),
                ("date", date2),
            ],
            215,
        );
    }

    #[test]
    fn rfc_c5_responses_without_huffman() {
        rfc_responses([
            "4803333032580770726976617465611d4d6f6e2c203231204f63742032303133
             2032303a31333a323120474d546e1768747470733a2f2f7777772e6578616d70
             6c652e636f6d",
            "4803333037c1c0bf",
            "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d
             54c05a04677a69707738666f6f3d4153444a4b48514b425a584f5157454f5049
             5541585157454f49553b206d61782d6167653d333630303b2076657273696f6e
             3d31",
        ]);
    }

    #[test]
    fn rfc_c6_responses_with_huffman() {
        rfc_responses([
            "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a6
             2d1bff6e919d29ad171863c78f0b97c8e9ae82ae43d3",
            "4883640effc1c0bf",
            "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab
             77ad94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f
             9587316065c003ed4ee5b1063d5007",
        ]);
    }

    fn decode_err(max_table: usize, block: &[u8]) -> DecodeError {
        let mut d = Decoder::new(max_table);
        decode_with(&mut d, block, usize::MAX).0.unwrap_err()
    }

    #[test]
    fn truncated() {
        use DecodeError::Truncated;
        // An integer's continuation bytes missing.
        assert_eq!(decode_err(4096, &[0xff]), Truncated);
        assert_eq!(decode_err(4096, &[0xff, 0x80]), Truncated);
        // A literal with its name, or its value, missing.
        assert_eq!(decode_err(4096, &[0x40]), Truncated);
        assert_eq!(decode_err(4096, &[0x04]), Truncated);
        assert_eq!(decode_err(4096, &[0x00, 0x01, b'a']), Truncated);
        // A string longer than the rest of the block, plain and Huffman.
        assert_eq!(decode_err(4096, &[0x04, 0x03, b'a', b'b']), Truncated);
        assert_eq!(decode_err(4096, &[0x04, 0x83, 0xff]), Truncated);
        assert_eq!(decode_err(4096, &hex("04ffffffff0f")), Truncated);
    }

    #[test]
    fn integer_overflow() {
        // 6 continuation bytes.
        assert_eq!(
            decode_err(4096, &hex("ff808080808000")),
            DecodeError::IntegerOverflow
        );
        // 5, but past u32::MAX: 127 + 0x7f << 28 + ...
        assert_eq!(
            decode_err(4096, &hex("ffffffffff7f")),
            DecodeError::IntegerOverflow
        );
        // The largest accepted: an index that is then out of range.
        assert_eq!(
            decode_err(4096, &hex("ff80feffff0f")),
            DecodeError::BadIndex
        );
    }

    #[test]
    fn bad_index() {
        use DecodeError::BadIndex;
        assert_eq!(decode_err(4096, &[0x80]), BadIndex);
        // 62 with an empty dynamic table, as a field and as a name.
        assert_eq!(decode_err(4096, &[0xbe]), BadIndex);
        assert_eq!(decode_err(4096, &[0x7e, 0x00]), BadIndex);
        assert_eq!(decode_err(4096, &[0x0f, 0x2f, 0x00]), BadIndex);
        // 61 is the last static entry, 62 the first dynamic one.
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode_ok(&mut d, &[0xbd]),
            fields(&[("www-authenticate", "")])
        );
        decode_ok(&mut d, &hex("4001610162"));
        assert_eq!(decode_ok(&mut d, &[0xbe]), fields(&[("a", "b")]));
        assert_eq!(decode_with(&mut d, &[0xbf], usize::MAX).0, Err(BadIndex));
    }

    #[test]
    fn table_size_updates() {
        let mut d = Decoder::new(4096);
        decode_ok(&mut d, &hex("4001610162"));
        assert_eq!(d.table_size(), 34);
        // To 0 and back at the start of a block: the table is emptied.
        assert_eq!(
            decode_ok(&mut d, &hex("203fe11f82")),
            fields(&[(":method", "GET")])
        );
        assert_eq!(table(&d), (vec![], 0));
        // The largest allowed, 4096 = 31 + 4065 (e1 1f).
        decode_ok(&mut d, &hex("3fe11f"));
        // Above our setting.
        assert_eq!(
            decode_err(4096, &hex("3fe21f")),
            DecodeError::TableSizeUpdateTooLarge
        );
        assert_eq!(
            decode_err(256, &hex("3fe201")),
            DecodeError::TableSizeUpdateTooLarge
        );
        // After a field.
        assert_eq!(
            decode_err(4096, &hex("8220")),
            DecodeError::TableSizeUpdateNotFirst
        );
        assert_eq!(
            decode_err(4096, &hex("2082203fe11f")),
            DecodeError::TableSizeUpdateNotFirst
        );
        // A smaller size evicts the oldest entries: 3 entries of 34, then 68.
        let mut d = Decoder::new(4096);
        decode_ok(&mut d, &hex("400161016140016201624001630163"));
        assert_eq!(d.table_size(), 102);
        decode_ok(&mut d, &hex("3f25"));
        assert_eq!(table(&d), (fields(&[("c", "c"), ("b", "b")]), 68));
        // And entries are added within the new size.
        decode_ok(&mut d, &hex("4001640164"));
        assert_eq!(table(&d), (fields(&[("d", "d"), ("c", "c")]), 68));
    }

    #[test]
    fn entry_larger_than_the_table_empties_it() {
        let mut d = Decoder::new(64);
        decode_ok(&mut d, &hex("4001610161"));
        assert_eq!(d.table_size(), 34);
        // 32 + 1 + 32 = 65 > 64: emitted, not added, and the table emptied.
        let mut block = hex("40016120");
        block.extend_from_slice(&[b'x'; 32]);
        let got = decode_ok(&mut d, &block);
        assert_eq!(got, fields(&[("a", &"x".repeat(32))]));
        assert_eq!(table(&d), (vec![], 0));
        // Exactly 64 fits.
        let mut block = hex("4001611f");
        block.extend_from_slice(&[b'x'; 31]);
        decode_ok(&mut d, &block);
        assert_eq!(d.table_size(), 64);
        // An entry whose name is the entry it evicts.
        let got = decode_ok(&mut d, &hex("7e0179"));
        assert_eq!(got, fields(&[("a", "y")]));
        assert_eq!(table(&d), (fields(&[("a", "y")]), 34));
    }

    #[test]
    fn names_from_the_dynamic_table_are_shared() {
        let mut d = Decoder::new(4096);
        decode_ok(&mut d, &hex("4001610162"));
        // Three entries named by index 62 (each then the newest).
        decode_ok(&mut d, &hex("7e0163 7e0164 7e0165"));
        assert_eq!(
            table(&d).0,
            fields(&[("a", "e"), ("a", "d"), ("a", "c"), ("a", "b")])
        );
        let first = d.table.name(3).unwrap();
        for i in 0..3 {
            assert!(Arc::ptr_eq(&d.table.name(i).unwrap(), &first));
        }
    }

    /// The session keeps a decoder per connection in tasks that may move
    /// between threads.
    #[test]
    fn decoder_is_send() {
        fn send<T: Send + 'static>() {}
        send::<Decoder>();
    }

    /// More than two size updates at the start of a block: RFC 7541 §4.2
    /// sets no count, only the place.
    #[test]
    fn several_size_updates_at_the_start() {
        let mut d = Decoder::new(4096);
        decode_ok(&mut d, &hex("4001610162"));
        assert_eq!(
            decode_ok(&mut d, &hex("3f21 20 3fe11f 3f01 82")),
            fields(&[(":method", "GET")])
        );
        assert_eq!(table(&d), (vec![], 0));
    }

    #[test]
    fn huffman_errors() {
        // A literal value, Huffman-coded, of EOS then padding.
        assert_eq!(
            decode_err(4096, &hex("0484ffffffff")),
            DecodeError::HuffmanEos
        );
        // The name Huffman-coded: 'a' with padding of zeros.
        assert_eq!(
            decode_err(4096, &hex("00811800")),
            DecodeError::HuffmanPadding
        );
        // A value of 'a' followed by a whole byte of ones.
        assert_eq!(
            decode_err(4096, &hex("04821fff")),
            DecodeError::HuffmanPadding
        );
    }

    #[test]
    fn never_indexed_and_without_indexing_do_not_touch_the_table() {
        let mut d = Decoder::new(4096);
        let got = decode_ok(&mut d, &hex("0001610162 1001630164 0f2e0165 1f2e0166"));
        assert_eq!(
            got,
            fields(&[
                ("a", "b"),
                ("c", "d"),
                ("www-authenticate", "e"),
                ("www-authenticate", "f")
            ])
        );
        assert_eq!(table(&d), (vec![], 0));
    }

    #[test]
    fn every_error_has_a_distinct_kind() {
        use DecodeError::*;
        let all = [
            Truncated,
            IntegerOverflow,
            BadIndex,
            TableSizeUpdateTooLarge,
            TableSizeUpdateNotFirst,
            HuffmanEos,
            HuffmanPadding,
        ];
        let kinds: std::collections::HashSet<_> = all.iter().map(|e| e.kind()).collect();
        assert_eq!(kinds.len(), all.len());
        assert!(all.iter().all(|e| e.to_string().starts_with("HPACK: ")));
    }

    #[test]
    fn max_list_stops_emitting_but_keeps_the_table_in_step() {
        // C.3.1 counts 42 + 43 + 38 + 57 = 180 in all.
        let block = hex("828684410f7777772e6578616d706c652e636f6d");
        let mut d = Decoder::new(4096);
        let (r, got) = decode_with(&mut d, &block, 180);
        assert_eq!(r, Ok(Decoded::Whole));
        assert_eq!(got.len(), 4);
        let mut d = Decoder::new(4096);
        let (r, got) = decode_with(&mut d, &block, 179);
        assert_eq!(r, Ok(Decoded::TooLarge));
        assert_eq!(
            got,
            fields(&[(":method", "GET"), (":scheme", "http"), (":path", "/")])
        );
        // The :authority entry was added all the same.
        assert_eq!(
            table(&d),
            (fields(&[(":authority", "www.example.com")]), 57)
        );
        // No field at all once the first is past the limit, even though
        // later ones are small; the entries are added.
        let mut d = Decoder::new(4096);
        let (r, got) = decode_with(&mut d, &hex("4001610161 4001620162 82"), 33);
        assert_eq!(r, Ok(Decoded::TooLarge));
        assert!(got.is_empty());
        assert_eq!(table(&d).1, 68);
        // The next block refers to the entries added past the limit.
        assert_eq!(
            decode_ok(&mut d, &hex("bebf")),
            fields(&[("b", "b"), ("a", "a")])
        );
        // And C.3.2 after the truncated C.3.1 decodes right.
        let mut d = Decoder::new(4096);
        assert_eq!(
            decode_with(&mut d, &block, 0),
            (Ok(Decoded::TooLarge), vec![])
        );
        assert_eq!(
            decode_ok(&mut d, &hex("828684be58086e6f2d6361636865")),
            fields(&[
                (":method", "GET"),
                (":scheme", "http"),
                (":path", "/"),
                (":authority", "www.example.com"),
                ("cache-control", "no-cache"),
            ])
        );
    }
}
