//! The protocol-neutral request and response of the static file service:
//! a [`Request`] holds what the handler acts on (no connection management:
//! keep-alive, `Expect` and body framing stay with HTTP/1.1), and a
//! [`Response`] is the plan the handler makes (status, ordered headers, and
//! a body that is nothing, an in-memory page, or a range of an open file),
//! which a protocol's framing turns into bytes and `send_file` calls.

use crate::http::conditional::{ETag, Preconditions};
use crate::http::path::NormPath;
use crate::http::request::{Method, RequestHead};
use std::fs::File;
use std::sync::Arc;
use std::time::SystemTime;

/// What the handler needs to know of a request.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a Method,
    /// The target in origin-form (path and query), not yet normalised.
    pub target: &'a str,
    /// The host the request is for (lower-case, no port); `None` only for
    /// an HTTP/1.0 request without Host.
    pub authority: Option<&'a str>,
    pub preconditions: Preconditions<'a>,
    pub range: Option<&'a str>,
    pub accept_encoding: Option<&'a str>,
    /// The connection presented a client certificate its site's
    /// `client_ca` verified.
    pub client_verified: bool,
}

impl Request<'_> {
    /// The same request, on a connection whose client certificate was
    /// verified (`true`) or not.
    pub fn verified(self, client_verified: bool) -> Self {
        Request {
            client_verified,
            ..self
        }
    }
}

impl<'a> From<&'a RequestHead> for Request<'a> {
    fn from(h: &'a RequestHead) -> Self {
        Request {
            method: &h.method,
            target: &h.target,
            authority: h.host.as_deref(),
            preconditions: h.into(),
            range: h.range.as_deref(),
            accept_encoding: h.accept_encoding.as_deref(),
            client_verified: false,
        }
    }
}

/// A header value, kept typed until a framing writes it.
#[derive(Debug)]
pub enum Value<'a> {
    Text(&'a str),
    Owned(String),
    /// An HTTP date (`Last-Modified`).
    Date(SystemTime),
    ETag(ETag),
}

impl Value<'_> {
    /// The value as text; a date is left to the framing (its cache).
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            Value::Owned(s) => Some(s),
            Value::ETag(t) => Some(t.as_str()),
            Value::Date(_) => None,
        }
    }
}

/// A range of an open file to send as the body.
#[derive(Debug)]
pub struct FileRange {
    pub file: Arc<File>,
    pub offset: u64,
    pub len: u64,
}

/// What follows the head.
#[derive(Debug)]
pub enum Body {
    /// No body and no length (a 304).
    Empty,
    /// A page made in memory (error pages, redirects, listings).
    Page(String),
    File(FileRange),
}

impl Body {
    /// The body's length as the head states it (`None` for [`Body::Empty`]).
    pub fn content_length(&self) -> Option<u64> {
        match self {
            Body::Empty => None,
            Body::Page(p) => Some(p.len() as u64),
            Body::File(f) => Some(f.len),
        }
    }
}

/// The handler's answer to one request: what to send, not how.
#[derive(Debug)]
pub struct Response<'a> {
    pub status: u16,
    /// In the order they are written; framing adds its own (`Server`,
    /// `Date`, the length and the connection's).
    pub headers: Vec<(&'a str, Value<'a>)>,
    pub body: Body,
    /// The normalised path of the request, when it had one: names the file
    /// in a warning should it shrink while being sent.
    pub path: Option<NormPath>,
}

impl<'a> Response<'a> {
    pub fn new(status: u16) -> Self {
        Response {
            status,
            headers: Vec::with_capacity(8),
            body: Body::Empty,
            path: None,
        }
    }

    pub fn header(&mut self, name: &'a str, value: Value<'a>) -> &mut Self {
        self.headers.push((name, value));
        self
    }

    /// The value of the first header `name` (any case), as text.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| v.as_text())
    }
}
