//! HPACK's Huffman code (RFC 7541 §5.2, Appendix B): the code table, the
//! decoder's state machine (built from the table at compile time) and the
//! encoder.

use super::DecodeError;

/// RFC 7541 Appendix B: the code of each symbol (0..=255, then EOS as 256)
/// as (code, length in bits), the code right-aligned, most significant bit
/// first on the wire. The comment shows the symbol and the code's bits.
pub(super) const CODES: [(u32, u8); 257] = [
    (0x00001ff8, 13), //   0   |1111111111000
    (0x007fffd8, 23), //   1   |11111111111111111011000
    (0x0fffffe2, 28), //   2   |1111111111111111111111100010
    (0x0fffffe3, 28), //   3   |1111111111111111111111100011
    (0x0fffffe4, 28), //   4   |1111111111111111111111100100
    (0x0fffffe5, 28), //   5   |1111111111111111111111100101
    (0x0fffffe6, 28), //   6   |1111111111111111111111100110
    (0x0fffffe7, 28), //   7   |1111111111111111111111100111
    (0x0fffffe8, 28), //   8   |1111111111111111111111101000
    (0x00ffffea, 24), //   9   |111111111111111111101010
    (0x3ffffffc, 30), //  10   |111111111111111111111111111100
    (0x0fffffe9, 28), //  11   |1111111111111111111111101001
    (0x0fffffea, 28), //  12   |1111111111111111111111101010
    (0x3ffffffd, 30), //  13   |111111111111111111111111111101
    (0x0fffffeb, 28), //  14   |1111111111111111111111101011
    (0x0fffffec, 28), //  15   |1111111111111111111111101100
    (0x0fffffed, 28), //  16   |1111111111111111111111101101
    (0x0fffffee, 28), //  17   |1111111111111111111111101110
    (0x0fffffef, 28), //  18   |1111111111111111111111101111
    (0x0ffffff0, 28), //  19   |1111111111111111111111110000
    (0x0ffffff1, 28), //  20   |1111111111111111111111110001
    (0x0ffffff2, 28), //  21   |1111111111111111111111110010
    (0x3ffffffe, 30), //  22   |111111111111111111111111111110
    (0x0ffffff3, 28), //  23   |1111111111111111111111110011
    (0x0ffffff4, 28), //  24   |1111111111111111111111110100
    (0x0ffffff5, 28), //  25   |1111111111111111111111110101
    (0x0ffffff6, 28), //  26   |1111111111111111111111110110
    (0x0ffffff7, 28), //  27   |1111111111111111111111110111
    (0x0ffffff8, 28), //  28   |1111111111111111111111111000
    (0x0ffffff9, 28), //  29   |1111111111111111111111111001
    (0x0ffffffa, 28), //  30   |1111111111111111111111111010
    (0x0ffffffb, 28), //  31   |1111111111111111111111111011
    (0x00000014, 6),  // ' '   |010100
    (0x000003f8, 10), // '!'   |1111111000
    (0x000003f9, 10), // '"'   |1111111001
    (0x00000ffa, 12), // '#'   |111111111010
    (0x00001ff9, 13), // '$'   |1111111111001
    (0x00000015, 6),  // '%'   |010101
    (0x000000f8, 8),  // '&'   |11111000
    (0x000007fa, 11), // '\''  |11111111010
    (0x000003fa, 10), // '('   |1111111010
    (0x000003fb, 10), // ')'   |1111111011
    (0x000000f9, 8),  // '*'   |11111001
    (0x000007fb, 11), // '+'   |11111111011
    (0x000000fa, 8),  // ','   |11111010
    (0x00000016, 6),  // '-'   |010110
    (0x00000017, 6),  // '.'   |010111
    (0x00000018, 6),  // '/'   |011000
    (0x00000000, 5),  // '0'   |00000
    (0x00000001, 5),  // '1'   |00001
    (0x00000002, 5),  // '2'   |00010
    (0x00000019, 6),  // '3'   |011001
    (0x0000001a, 6),  // '4'   |011010
    (0x0000001b, 6),  // '5'   |011011
    (0x0000001c, 6),  // '6'   |011100
    (0x0000001d, 6),  // '7'   |011101
    (0x0000001e, 6),  // '8'   |011110
    (0x0000001f, 6),  // '9'   |011111
    (0x0000005c, 7),  // ':'   |1011100
    (0x000000fb, 8),  // ';'   |11111011
    (0x00007ffc, 15), // '<'   |111111111111100
    (0x00000020, 6),  // '='   |100000
    (0x00000ffb, 12), // '>'   |111111111011
    (0x000003fc, 10), // '?'   |1111111100
    (0x00001ffa, 13), // '@'   |1111111111010
    (0x00000021, 6),  // 'A'   |100001
    (0x0000005d, 7),  // 'B'   |1011101
    (0x0000005e, 7),  // 'C'   |1011110
    (0x0000005f, 7),  // 'D'   |1011111
    (0x00000060, 7),  // 'E'   |1100000
    (0x00000061, 7),  // 'F'   |1100001
    (0x00000062, 7),  // 'G'   |1100010
    (0x00000063, 7),  // 'H'   |1100011
    (0x00000064, 7),  // 'I'   |1100100
    (0x00000065, 7),  // 'J'   |1100101
    (0x00000066, 7),  // 'K'   |1100110
    (0x00000067, 7),  // 'L'   |1100111
    (0x00000068, 7),  // 'M'   |1101000
    (0x00000069, 7),  // 'N'   |1101001
    (0x0000006a, 7),  // 'O'   |1101010
    (0x0000006b, 7),  // 'P'   |1101011
    (0x0000006c, 7),  // 'Q'   |1101100
    (0x0000006d, 7),  // 'R'   |1101101
    (0x0000006e, 7),  // 'S'   |1101110
    (0x0000006f, 7),  // 'T'   |1101111
    (0x00000070, 7),  // 'U'   |1110000
    (0x00000071, 7),  // 'V'   |1110001
    (0x00000072, 7),  // 'W'   |1110010
    (0x000000fc, 8),  // 'X'   |11111100
    (0x00000073, 7),  // 'Y'   |1110011
    (0x000000fd, 8),  // 'Z'   |11111101
    (0x00001ffb, 13), // '['   |1111111111011
    (0x0007fff0, 19), // '\'   |1111111111111110000
    (0x00001ffc, 13), // ']'   |1111111111100
    (0x00003ffc, 14), // '^'   |11111111111100
    (0x00000022, 6),  // '_'   |100010
    (0x00007ffd, 15), // '`'   |111111111111101
    (0x00000003, 5),  // 'a'   |00011
    (0x00000023, 6),  // 'b'   |100011
    (0x00000004, 5),  // 'c'   |00100
    (0x00000024, 6),  // 'd'   |100100
    (0x00000005, 5),  // 'e'   |00101
    (0x00000025, 6),  // 'f'   |100101
    (0x00000026, 6),  // 'g'   |100110
    (0x00000027, 6),  // 'h'   |100111
    (0x00000006, 5),  // 'i'   |00110
    (0x00000074, 7),  // 'j'   |1110100
    (0x00000075, 7),  // 'k'   |1110101
    (0x00000028, 6),  // 'l'   |101000
    (0x00000029, 6),  // 'm'   |101001
    (0x0000002a, 6),  // 'n'   |101010
    (0x00000007, 5),  // 'o'   |00111
    (0x0000002b, 6),  // 'p'   |101011
    (0x00000076, 7),  // 'q'   |1110110
    (0x0000002c, 6),  // 'r'   |101100
    (0x00000008, 5),  // 's'   |01000
    (0x00000009, 5),  // 't'   |01001
    (0x0000002d, 6),  // 'u'   |101101
    (0x00000077, 7),  // 'v'   |1110111
    (0x00000078, 7),  // 'w'   |1111000
    (0x00000079, 7),  // 'x'   |1111001
    (0x0000007a, 7),  // 'y'   |1111010
    (0x0000007b, 7),  // 'z'   |1111011
    (0x00007ffe, 15), // '{'   |111111111111110
    (0x000007fc, 11), // '|'   |11111111100
    (0x00003ffd, 14), // '}'   |11111111111101
    (0x00001ffd, 13), // '~'   |1111111111101
    (0x0ffffffc, 28), // 127   |1111111111111111111111111100
    (0x000fffe6, 20), // 128   |11111111111111100110
    (0x003fffd2, 22), // 129   |1111111111111111010010
    (0x000fffe7, 20), // 130   |11111111111111100111
    (0x000fffe8, 20), // 131   |11111111111111101000
    (0x003fffd3, 22), // 132   |1111111111111111010011
    (0x003fffd4, 22), // 133   |1111111111111111010100
    (0x003fffd5, 22), // 134   |1111111111111111010101
    (0x007fffd9, 23), // 135   |11111111111111111011001
    (0x003fffd6, 22), // 136   |1111111111111111010110
    (0x007fffda, 23), // 137   |11111111111111111011010
    (0x007fffdb, 23), // 138   |11111111111111111011011
    (0x007fffdc, 23), // 139   |11111111111111111011100
    (0x007fffdd, 23), // 140   |11111111111111111011101
    (0x007fffde, 23), // 141   |11111111111111111011110
    (0x00ffffeb, 24), // 142   |111111111111111111101011
    (0x007fffdf, 23), // 143   |11111111111111111011111
    (0x00ffffec, 24), // 144   |111111111111111111101100
    (0x00ffffed, 24), // 145   |111111111111111111101101
    (0x003fffd7, 22), // 146   |1111111111111111010111
    (0x007fffe0, 23), // 147   |11111111111111111100000
    (0x00ffffee, 24), // 148   |111111111111111111101110
    (0x007fffe1, 23), // 149   |11111111111111111100001
    (0x007fffe2, 23), // 150   |11111111111111111100010
    (0x007fffe3, 23), // 151   |11111111111111111100011
    (0x007fffe4, 23), // 152   |11111111111111111100100
    (0x001fffdc, 21), // 153   |111111111111111011100
    (0x003fffd8, 22), // 154   |1111111111111111011000
    (0x007fffe5, 23), // 155   |11111111111111111100101
    (0x003fffd9, 22), // 156   |1111111111111111011001
    (0x007fffe6, 23), // 157   |11111111111111111100110
    (0x007fffe7, 23), // 158   |11111111111111111100111
    (0x00ffffef, 24), // 159   |111111111111111111101111
    (0x003fffda, 22), // 160   |1111111111111111011010
    (0x001fffdd, 21), // 161   |111111111111111011101
    (0x000fffe9, 20), // 162   |11111111111111101001
    (0x003fffdb, 22), // 163   |1111111111111111011011
    (0x003fffdc, 22), // 164   |1111111111111111011100
    (0x007fffe8, 23), // 165   |11111111111111111101000
    (0x007fffe9, 23), // 166   |11111111111111111101001
    (0x001fffde, 21), // 167   |111111111111111011110
    (0x007fffea, 23), // 168   |11111111111111111101010
    (0x003fffdd, 22), // 169   |1111111111111111011101
    (0x003fffde, 22), // 170   |1111111111111111011110
    (0x00fffff0, 24), // 171   |111111111111111111110000
    (0x001fffdf, 21), // 172   |111111111111111011111
    (0x003fffdf, 22), // 173   |1111111111111111011111
    (0x007fffeb, 23), // 174   |11111111111111111101011
    (0x007fffec, 23), // 175   |11111111111111111101100
    (0x001fffe0, 21), // 176   |111111111111111100000
    (0x001fffe1, 21), // 177   |111111111111111100001
    (0x003fffe0, 22), // 178   |1111111111111111100000
    (0x001fffe2, 21), // 179   |111111111111111100010
    (0x007fffed, 23), // 180   |11111111111111111101101
    (0x003fffe1, 22), // 181   |1111111111111111100001
    (0x007fffee, 23), // 182   |11111111111111111101110
    (0x007fffef, 23), // 183   |11111111111111111101111
    (0x000fffea, 20), // 184   |11111111111111101010
    (0x003fffe2, 22), // 185   |1111111111111111100010
    (0x003fffe3, 22), // 186   |1111111111111111100011
    (0x003fffe4, 22), // 187   |1111111111111111100100
    (0x007ffff0, 23), // 188   |11111111111111111110000
    (0x003fffe5, 22), // 189   |1111111111111111100101
    (0x003fffe6, 22), // 190   |1111111111111111100110
    (0x007ffff1, 23), // 191   |11111111111111111110001
    (0x03ffffe0, 26), // 192   |11111111111111111111100000
    (0x03ffffe1, 26), // 193   |11111111111111111111100001
    (0x000fffeb, 20), // 194   |11111111111111101011
    (0x0007fff1, 19), // 195   |1111111111111110001
    (0x003fffe7, 22), // 196   |1111111111111111100111
    (0x007ffff2, 23), // 197   |11111111111111111110010
    (0x003fffe8, 22), // 198   |1111111111111111101000
    (0x01ffffec, 25), // 199   |1111111111111111111101100
    (0x03ffffe2, 26), // 200   |11111111111111111111100010
    (0x03ffffe3, 26), // 201   |11111111111111111111100011
    (0x03ffffe4, 26), // 202   |11111111111111111111100100
    (0x07ffffde, 27), // 203   |111111111111111111111011110
    (0x07ffffdf, 27), // 204   |111111111111111111111011111
    (0x03ffffe5, 26), // 205   |11111111111111111111100101
    (0x00fffff1, 24), // 206   |111111111111111111110001
    (0x01ffffed, 25), // 207   |1111111111111111111101101
    (0x0007fff2, 19), // 208   |1111111111111110010
    (0x001fffe3, 21), // 209   |111111111111111100011
    (0x03ffffe6, 26), // 210   |11111111111111111111100110
    (0x07ffffe0, 27), // 211   |111111111111111111111100000
    (0x07ffffe1, 27), // 212   |111111111111111111111100001
    (0x03ffffe7, 26), // 213   |11111111111111111111100111
    (0x07ffffe2, 27), // 214   |111111111111111111111100010
    (0x00fffff2, 24), // 215   |111111111111111111110010
    (0x001fffe4, 21), // 216   |111111111111111100100
    (0x001fffe5, 21), // 217   |111111111111111100101
    (0x03ffffe8, 26), // 218   |11111111111111111111101000
    (0x03ffffe9, 26), // 219   |11111111111111111111101001
    (0x0ffffffd, 28), // 220   |1111111111111111111111111101
    (0x07ffffe3, 27), // 221   |111111111111111111111100011
    (0x07ffffe4, 27), // 222   |111111111111111111111100100
    (0x07ffffe5, 27), // 223   |111111111111111111111100101
    (0x000fffec, 20), // 224   |11111111111111101100
    (0x00fffff3, 24), // 225   |111111111111111111110011
    (0x000fffed, 20), // 226   |11111111111111101101
    (0x001fffe6, 21), // 227   |111111111111111100110
    (0x003fffe9, 22), // 228   |1111111111111111101001
    (0x001fffe7, 21), // 229   |111111111111111100111
    (0x001fffe8, 21), // 230   |111111111111111101000
    (0x007ffff3, 23), // 231   |11111111111111111110011
    (0x003fffea, 22), // 232   |1111111111111111101010
    (0x003fffeb, 22), // 233   |1111111111111111101011
    (0x01ffffee, 25), // 234   |1111111111111111111101110
    (0x01ffffef, 25), // 235   |1111111111111111111101111
    (0x00fffff4, 24), // 236   |111111111111111111110100
    (0x00fffff5, 24), // 237   |111111111111111111110101
    (0x03ffffea, 26), // 238   |11111111111111111111101010
    (0x007ffff4, 23), // 239   |11111111111111111110100
    (0x03ffffeb, 26), // 240   |11111111111111111111101011
    (0x07ffffe6, 27), // 241   |111111111111111111111100110
    (0x03ffffec, 26), // 242   |11111111111111111111101100
    (0x03ffffed, 26), // 243   |11111111111111111111101101
    (0x07ffffe7, 27), // 244   |111111111111111111111100111
    (0x07ffffe8, 27), // 245   |111111111111111111111101000
    (0x07ffffe9, 27), // 246   |111111111111111111111101001
    (0x07ffffea, 27), // 247   |111111111111111111111101010
    (0x07ffffeb, 27), // 248   |111111111111111111111101011
    (0x0ffffffe, 28), // 249   |1111111111111111111111111110
    (0x07ffffec, 27), // 250   |111111111111111111111101100
    (0x07ffffed, 27), // 251   |111111111111111111111101101
    (0x07ffffee, 27), // 252   |111111111111111111111101110
    (0x07ffffef, 27), // 253   |111111111111111111111101111
    (0x07fffff0, 27), // 254   |111111111111111111111110000
    (0x03ffffee, 26), // 255   |11111111111111111111101110
    (0x3fffffff, 30), // EOS   |111111111111111111111111111111
];

/// The symbol that ends the code space: never sent inside a string (§5.2).
const EOS: usize = 256;

/// One transition of the decoder: from a state (a node of the code tree,
/// 0 the root) on 4 input bits. Four bits complete at most one symbol,
/// because no code is shorter than 5 bits.
#[derive(Clone, Copy)]
struct Step {
    next: u8,
    sym: u8,
    flags: u8,
}

/// `sym` is a decoded byte.
const EMIT: u8 = 1;
/// The bits completed EOS: the string is malformed.
const FAIL: u8 = 2;
/// The string may end in `next`: it is the root or a node reached from it
/// by at most 7 one bits, which is valid padding (a prefix of EOS).
const ACCEPT: u8 = 4;

/// In the tree built below, a child that is a leaf has this bit set and the
/// symbol in the low bits; 0 means "no child yet" (the root is no child).
const LEAF: u16 = 0x8000;

/// A complete prefix code of 257 symbols has 256 inner nodes: each is a
/// state and fits a `u8`.
const STATES: usize = 256;

/// The decoder's transitions, `[state][nibble]`.
static DECODE: [[Step; 16]; STATES] = build_decoder();

/// Builds the code tree from `CODES`, then, for every inner node and every
/// 4-bit input, walks the 4 bits. Runs at compile time; a table that is
/// not a complete prefix code fails the build.
const fn build_decoder() -> [[Step; 16]; STATES] {
    let mut child = [[0u16; 2]; STATES];
    let mut nodes = 1usize;
    let mut sym = 0usize;
    while sym < CODES.len() {
        let (code, len) = CODES[sym];
        let mut node = 0usize;
        let mut i = len;
        while i > 1 {
            i -= 1;
            let bit = ((code >> i) & 1) as usize;
            if child[node][bit] == 0 {
                assert!(
                    nodes < STATES,
                    "Appendix B: more inner nodes than a prefix code has"
                );
                child[node][bit] = nodes as u16;
                nodes += 1;
            }
            assert!(
                child[node][bit] & LEAF == 0,
                "Appendix B: a code extends another"
            );
            node = child[node][bit] as usize;
        }
        let bit = (code & 1) as usize;
        assert!(
            child[node][bit] == 0,
            "Appendix B: a code is a prefix of another"
        );
        child[node][bit] = LEAF | sym as u16;
        sym += 1;
    }
    assert!(nodes == STATES, "Appendix B: not a complete code");

    // The padding states: the root and the first 7 nodes down the all-ones
    // path (EOS is 30 one bits).
    let mut accept = [false; STATES];
    accept[0] = true;
    let mut node = 0usize;
    let mut depth = 0;
    while depth < 7 {
        node = child[node][1] as usize;
        accept[node] = true;
        depth += 1;
    }

    let mut table = [[Step {
        next: 0,
        sym: 0,
        flags: 0,
    }; 16]; STATES];
    let mut state = 0usize;
    while state < STATES {
        let mut nibble = 0usize;
        while nibble < 16 {
            let mut cur = state;
            let mut step = Step {
                next: 0,
                sym: 0,
                flags: 0,
            };
            let mut b = 4;
            while b > 0 {
                b -= 1;
                let c = child[cur][(nibble >> b) & 1];
                assert!(c != 0, "Appendix B: not a complete code");
                if c & LEAF != 0 {
                    let s = (c & !LEAF) as usize;
                    if s == EOS {
                        step.flags |= FAIL;
                        break;
                    }
                    step.sym = s as u8;
                    step.flags |= EMIT;
                    cur = 0;
                } else {
                    cur = c as usize;
                }
            }
            step.next = cur as u8;
            if accept[cur] {
                step.flags |= ACCEPT;
            }
            table[state][nibble] = step;
            nibble += 1;
        }
        state += 1;
    }
    table
}

/// Decodes a Huffman-coded string, appending to `out`: at most
/// `src.len() * 8 / 5` bytes, the shortest code being 5 bits.
pub(super) fn decode(src: &[u8], out: &mut Vec<u8>) -> Result<(), DecodeError> {
    out.reserve(src.len() * 8 / 5);
    let mut state = 0u8;
    let mut accept = true;
    for &byte in src {
        for nibble in [byte >> 4, byte & 0x0f] {
            let step = DECODE[usize::from(state)][usize::from(nibble)];
            if step.flags & FAIL != 0 {
                return Err(DecodeError::HuffmanEos);
            }
            if step.flags & EMIT != 0 {
                out.push(step.sym);
            }
            state = step.next;
            accept = step.flags & ACCEPT != 0;
        }
    }
    // Ending inside a code: fine only in up to 7 bits of EOS's prefix.
    if accept {
        Ok(())
    } else {
        Err(DecodeError::HuffmanPadding)
    }
}

/// The length of `src` Huffman-coded, in bytes.
pub(super) fn encoded_len(src: &[u8]) -> usize {
    let bits: usize = src
        .iter()
        .map(|&b| usize::from(CODES[usize::from(b)].1))
        .sum();
    bits.div_ceil(8)
}

/// Appends `src` Huffman-coded, padded with the high bits of EOS (ones).
pub(super) fn encode(src: &[u8], out: &mut Vec<u8>) {
    // Bits not yet written, right-aligned; fewer than 8 between symbols, so
    // a 30-bit code always fits.
    let mut acc: u64 = 0;
    let mut n: u32 = 0;
    for &b in src {
        let (code, len) = CODES[usize::from(b)];
        acc = (acc << len) | u64::from(code);
        n += u32::from(len);
        while n >= 8 {
            n -= 8;
            out.push((acc >> n) as u8);
        }
        acc &= (1 << n) - 1;
    }
    if n > 0 {
        out.push(((acc << (8 - n)) as u8) | (0xff >> n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec(src: &[u8]) -> Result<Vec<u8>, DecodeError> {
        let mut out = Vec::new();
        decode(src, &mut out).map(|()| out)
    }

    fn enc(src: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(src, &mut out);
        assert_eq!(out.len(), encoded_len(src));
        out
    }

    /// The table is Appendix B's as the RFC describes it: canonical (codes
    /// of one length are consecutive, in symbol order, each length's first
    /// code follows from the shorter ones), lengths 5 to 30, and complete
    /// (Kraft sum exactly 1). The build itself already failed if it were
    /// not a prefix code.
    #[test]
    fn table_is_canonical_and_complete() {
        let mut order: Vec<usize> = (0..CODES.len()).collect();
        order.sort_by_key(|&s| (CODES[s].1, s));
        let mut next: u64 = 0;
        let mut len = CODES[order[0]].1;
        assert_eq!(len, 5);
        for &s in &order {
            let (code, l) = CODES[s];
            assert!((5..=30).contains(&l), "symbol {s}: length {l}");
            next <<= l - len;
            len = l;
            assert_eq!(u64::from(code), next, "symbol {s} out of canonical order");
            next += 1;
        }
        assert_eq!(next, 1 << 30, "the codes do not fill the code space");
        assert_eq!(CODES[EOS], (0x3fff_ffff, 30));
        let kraft: f64 = CODES.iter().map(|&(_, l)| 0.5f64.powi(l.into())).sum();
        assert_eq!(kraft, 1.0);
    }

    /// The state machine against the table: every symbol alone, padded
    /// with ones, decodes to itself, from the code as the table gives it.
    #[test]
    fn every_symbol_decodes_from_its_code() {
        for sym in 0..=255u8 {
            let (code, len) = CODES[usize::from(sym)];
            let pad = (8 - u32::from(len) % 8) % 8;
            let bits = (u64::from(code) << pad) | ((1 << pad) - 1);
            let bytes = (u32::from(len) + pad) / 8;
            let src: Vec<u8> = (0..bytes).rev().map(|i| (bits >> (8 * i)) as u8).collect();
            assert_eq!(dec(&src), Ok(vec![sym]), "symbol {sym}");
            assert_eq!(enc(&[sym]), src, "symbol {sym}");
        }
    }

    #[test]
    fn round_trips_all_bytes_in_every_alignment() {
        let all: Vec<u8> = (0..=255).collect();
        for start in 0..8 {
            let s: Vec<u8> = all
                .iter()
                .cycle()
                .skip(start * 37)
                .take(600)
                .copied()
                .collect();
            assert_eq!(dec(&enc(&s)).unwrap(), s);
        }
        assert_eq!(dec(&[]), Ok(vec![]));
        assert_eq!(enc(b""), b"");
    }

    /// RFC 7541 C.4.1's value: the encoder's output is the RFC's.
    #[test]
    fn rfc_example_string() {
        let coded = [
            0xf1, 0xe3, 0xc2, 0xe5, 0xf2, 0x3a, 0x6b, 0xa0, 0xab, 0x90, 0xf4, 0xff,
        ];
        assert_eq!(enc(b"www.example.com"), coded);
        assert_eq!(dec(&coded).unwrap(), b"www.example.com");
    }

    #[test]
    fn eos_in_the_string_is_an_error() {
        // EOS (30 ones) then 2 bits of padding.
        assert_eq!(dec(&[0xff, 0xff, 0xff, 0xff]), Err(DecodeError::HuffmanEos));
        // 'a' (00011) then EOS then padding.
        let mut src = vec![0b0001_1111, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(dec(&src), Err(DecodeError::HuffmanEos));
        src.truncate(1);
        assert_eq!(dec(&src), Ok(b"a".to_vec()));
    }

    #[test]
    fn bad_padding_is_an_error() {
        // 'a' (00011) then 3 bits of padding that are not all ones.
        assert_eq!(dec(&[0b0001_1110]), Err(DecodeError::HuffmanPadding));
        assert_eq!(dec(&[0b0001_1011]), Err(DecodeError::HuffmanPadding));
        // A whole byte of padding: more than 7 bits.
        assert_eq!(dec(&[0xff]), Err(DecodeError::HuffmanPadding));
        assert_eq!(dec(&[0b0001_1111, 0xff]), Err(DecodeError::HuffmanPadding));
        // 'a' then a truncated code ('0' is 00000): padding of zeros.
        assert_eq!(dec(&[0b0001_1000]), Err(DecodeError::HuffmanPadding));
        // Up to 7 one bits are fine.
        assert_eq!(dec(&[0b0001_1111]), Ok(b"a".to_vec()));
    }
}
