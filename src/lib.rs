//! tlsfront: a TLS front end for Linux. It serves static files over HTTPS
//! and hands record encryption to the kernel (kTLS) after the handshake, so
//! file bodies go out with `sendfile()`; where the kernel cannot take a
//! connection it stays in user-space TLS (rustls), transparently.
//!
//! The parts: [`tls`] (rustls configuration, handshake, user-space path),
//! [`ktls`] (the kernel handoff and kTLS sockets), [`http`] (requests and
//! responses), [`files`] (the document root), [`server`] (workers and
//! connections), [`proxy`] (TLS termination for TCP backends),
//! [`config`], [`metrics`], [`privileges`] (running as another user),
//! [`acme`] (certificates from an ACME CA, answered with TLS-ALPN-01).

pub mod acme;
pub mod bench;
pub mod check;
pub mod cli;
pub mod config;
pub mod files;
pub mod http;
pub mod ktls;
pub mod lograte;
pub mod metrics;
pub mod privileges;
pub mod proxy;
pub mod server;
pub mod sys;
pub mod tls;
pub mod transport;
