//! A fleet of tlsfront nodes sharing ACME account keys, certificate
//! private keys and ticket keys through etcd (docs/design/fleet.md).

pub mod seal;
