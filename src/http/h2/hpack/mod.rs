//! HPACK (RFC 7541): the decoder of request header blocks, with its dynamic
//! table, and the encoder of response header blocks. The errors of
//! decoding live here; `decode`, `encode`, `huffman` and `table` hold the
//! rest.

mod decode;
mod encode;
mod huffman;
mod table;

pub use decode::{Decoded, Decoder};
pub use encode::Encoder;

/// Why a header block could not be decoded: every variant is a connection
/// error of type COMPRESSION_ERROR (RFC 9113 §4.3), since the dynamic table
/// can no longer be trusted to be in step with the peer's.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone, Copy)]
pub enum DecodeError {
    /// The block ends inside a field representation.
    #[error("HPACK: the header block ends inside a field")]
    Truncated,
    /// An integer (§5.1) too large for any index, length or size.
    #[error("HPACK: integer too large")]
    IntegerOverflow,
    /// Index 0, or past the static and dynamic tables (§2.3.3).
    #[error("HPACK: index not in the static or dynamic table")]
    BadIndex,
    /// A dynamic table size update above our SETTINGS_HEADER_TABLE_SIZE
    /// (§6.3).
    #[error("HPACK: dynamic table size update above SETTINGS_HEADER_TABLE_SIZE")]
    TableSizeUpdateTooLarge,
    /// A dynamic table size update after the first field of a block (§4.2).
    #[error("HPACK: dynamic table size update after a header field")]
    TableSizeUpdateNotFirst,
    /// A Huffman-coded string holds the EOS symbol (§5.2).
    #[error("HPACK: EOS symbol inside a Huffman-coded string")]
    HuffmanEos,
    /// A Huffman-coded string's padding is longer than 7 bits or not all
    /// ones (§5.2).
    #[error("HPACK: Huffman padding longer than 7 bits or not the EOS prefix")]
    HuffmanPadding,
}

impl DecodeError {
    /// A short stable label, for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            DecodeError::Truncated => "truncated",
            DecodeError::IntegerOverflow => "integer_overflow",
            DecodeError::BadIndex => "bad_index",
            DecodeError::TableSizeUpdateTooLarge => "table_size_too_large",
            DecodeError::TableSizeUpdateNotFirst => "table_size_not_first",
            DecodeError::HuffmanEos => "huffman_eos",
            DecodeError::HuffmanPadding => "huffman_padding",
        }
    }
}
