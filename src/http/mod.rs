//! HTTP/1.1 for a static file server: request heads, target paths, ranges,
//! preconditions and response heads. No I/O here: the server drives it.

pub mod conditional;
pub mod path;
pub mod range;
pub mod request;
pub mod response;
