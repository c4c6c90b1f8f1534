//! The HPACK decoder (`http::h2::hpack::Decoder`) on arbitrary header
//! blocks, several in a row against one decoder as on one connection. The
//! first input byte picks the dynamic table's limit and the header list
//! limit; the rest is blocks, each after a length byte. Beyond "no panic":
//! the dynamic table never exceeds its limit; no field is longer than the
//! block's Huffman bound or the tables allow; the list limit only stops the
//! emitting (a twin decoder without the limit emits the same fields as a
//! longer list, gives the same result and keeps the same table size, so
//! the table stays in step); and the fields, written again by `Encoder`,
//! decode to themselves.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tlsfront::http::h2::hpack::{Decoded, Decoder, Encoder};

/// Our SETTINGS_HEADER_TABLE_SIZE, and small ones so eviction is reached.
const TABLE_SIZES: [usize; 4] = [4096, 256, 64, 0];
/// Small list limits so the limit is reached; 4096 as a roomy one.
const LIST_LIMITS: [usize; 4] = [0, 64, 200, 4096];

type Fields = Vec<(Vec<u8>, Vec<u8>)>;

fn decode(d: &mut Decoder, block: &[u8], max_list: usize) -> (Result<Decoded, String>, Fields) {
    let mut got = Vec::new();
    let r = d.decode(block, max_list, &mut |n, v| {
        got.push((n.to_vec(), v.to_vec()))
    });
    (r.map_err(|e| format!("{e:?}")), got)
}

fuzz_target!(|data: &[u8]| {
    let Some((&pick, mut rest)) = data.split_first() else {
        return;
    };
    let max_table = TABLE_SIZES[usize::from(pick & 3)];
    let max_list = LIST_LIMITS[usize::from((pick >> 2) & 3)];
    let mut limited = Decoder::new(max_table);
    let mut twin = Decoder::new(max_table);
    while let Some((&len, after)) = rest.split_first() {
        let (block, next) = after.split_at(usize::from(len).min(after.len()));
        rest = next;

        let (r, fields) = decode(&mut limited, block, max_list);
        let (r_all, all) = decode(&mut twin, block, usize::MAX);
        assert!(limited.table_size() <= max_table);
        assert_eq!(
            limited.table_size(),
            twin.table_size(),
            "tables out of step"
        );
        match (&r, &r_all) {
            (Ok(res), Ok(Decoded::Whole)) => {
                assert!(fields.len() <= all.len());
                assert_eq!(
                    fields[..],
                    all[..fields.len()],
                    "a field changed under the limit"
                );
                let listed: usize = fields.iter().map(|(n, v)| 32 + n.len() + v.len()).sum();
                assert!(listed <= max_list, "{listed} bytes emitted past {max_list}");
                let total: usize = all.iter().map(|(n, v)| 32 + n.len() + v.len()).sum();
                let want = if total <= max_list {
                    Decoded::Whole
                } else {
                    Decoded::TooLarge
                };
                assert_eq!(*res, want, "list of {total} against {max_list}");
            }
            // A decoding error does not depend on the list limit.
            (Err(a), Err(b)) => assert_eq!(a, b),
            _ => panic!("limited {r:?}, unlimited {r_all:?}"),
        }
        // A string of the block (Huffman: up to 8/5 of its bytes), an entry
        // of the dynamic table, or of the static table (the longest name,
        // access-control-allow-origin, is 27 bytes).
        let bound = (block.len() * 8 / 5).max(max_table).max(27);
        for (n, v) in &all {
            assert!(n.len() <= bound && v.len() <= bound);
        }
        if r_all.is_err() {
            // A connection error: the connection ends here.
            return;
        }

        // What was decoded, encoded again, decodes to itself, and leaves
        // no dynamic table state.
        let mut out = Vec::new();
        for (n, v) in &all {
            Encoder::field(&mut out, n, v);
        }
        let mut fresh = Decoder::new(0);
        let (r, again) = decode(&mut fresh, &out, usize::MAX);
        assert_eq!(r, Ok(Decoded::Whole));
        assert_eq!(again, all, "re-encoded fields differ");
        assert_eq!(fresh.table_size(), 0);
    }
});
