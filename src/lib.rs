//! tlsfront: a TLS front end for Linux. It serves static files over HTTPS
//! and hands record encryption to the kernel (kTLS) after the handshake, so
//! file bodies go out with `sendfile()`; where the kernel cannot take a
//! connection it stays in user-space TLS (rustls), transparently.
//!
//! The data path, in the order a connection meets it: [`server`] (workers,
//! listeners, the sites chosen by SNI, reloads), [`tls`] (rustls
//! configuration, the handshake, the user-space path), [`ktls`] (the
//! kernel handoff and kTLS sockets), then the site's service: [`serve`]
//! (static files: [`http`] for requests and responses, [`files`] for the
//! document root) or [`proxy`] (TLS termination for TCP backends). Beside
//! it: [`config`] (the settings model), [`acme`] (certificates from an ACME
//! CA), [`metrics`], [`accesslog`], [`privileges`] (running as another user).
//! Above it all, when started as root with `user` set: [`parent`], the
//! privileged parent that binds, reads keys and opens logs for the server
//! process, over [`privsep`]; [`safe_open`] is how files are opened while
//! tlsfront may be root.

pub mod accesslog;
pub mod acme;
pub mod check;
pub mod cli;
pub mod config;
pub mod files;
pub mod fleet;
pub mod http;
pub mod ktls;
pub mod lograte;
pub mod metrics;
pub mod parent;
pub mod pid_file;
pub mod privileges;
pub mod privsep;
pub mod proxy;
pub mod safe_open;
pub mod serve;
pub mod server;
pub mod sys;
pub mod tls;
pub mod transport;
