//! HPACK (RFC 7541): the decoder of request header blocks, with its dynamic
//! table, and the encoder of response header blocks.
