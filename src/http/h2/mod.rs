//! HTTP/2's wire format, with no I/O: the frame layer (RFC 9113 §4, §6)
//! and header compression (HPACK, RFC 7541). The static file service's
//! HTTP/2 sessions (`serve::h2`) drive them over a TLS transport.

pub mod frame;
pub mod hpack;
