//! HTTP/1.1 for a static file server: request heads, target paths, ranges,
//! preconditions and response heads (no I/O), and the session that drives
//! them over a TLS transport.

pub mod conditional;
pub mod path;
pub mod range;
pub mod request;
pub mod response;
pub mod session;
