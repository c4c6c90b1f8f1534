//! The client half of HTTP/1.1, as small as a benchmark needs: the GET
//! request bytes, and reading one response (head parsed by httparse; body
//! framed by Content-Length, chunked transfer coding, or connection close)
//! while counting and discarding the body.

use super::url::Target;
use std::io;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// Largest response head accepted.
const MAX_HEAD: usize = 64 * 1024;
/// Most header fields in a response head.
const MAX_HEADERS: usize = 128;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("connection error: {0}")]
    Io(#[from] io::Error),
    #[error("the server closed the connection without answering")]
    ClosedBeforeResponse,
    #[error("the connection ended inside the response head")]
    TruncatedHead,
    #[error("the response head is larger than 64 KiB")]
    HeadTooLarge,
    #[error("malformed response head: {0}")]
    BadHead(String),
    #[error("bad Content-Length {0:?}")]
    BadLength(String),
    #[error("bad chunked body: {0}")]
    BadChunk(&'static str),
    #[error("the body ended after {got} of {expected} bytes (Content-Length)")]
    ShortBody { got: u64, expected: u64 },
    #[error("no data from the server for {0:?}")]
    Idle(Duration),
}

/// How the response body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body (1xx, 204, 304).
    Empty,
    Length(u64),
    Chunked,
    /// Read until the server closes the connection.
    Close,
}

/// One response, body counted but not kept.
#[derive(Clone, Debug)]
pub struct Response {
    pub status: u16,
    pub reason: String,
    pub framing: Framing,
    /// Body bytes received (after removing chunked framing).
    pub body_bytes: u64,
    /// The connection may carry another request.
    pub keep_alive: bool,
    /// When the first byte of the response arrived.
    pub first_byte: Instant,
}

impl Response {
    /// Content-Length, when the server sent one.
    pub fn content_length(&self) -> Option<u64> {
        match self.framing {
            Framing::Length(n) => Some(n),
            _ => None,
        }
    }
}

/// The bytes of `GET <path> HTTP/1.1` for `target`.
pub fn get_request(target: &Target) -> Vec<u8> {
    format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUser-Agent: tlsfront-bench/{}\r\nAccept: */*\r\n\r\n",
        target.path,
        target.host_header,
        env!("CARGO_PKG_VERSION")
    )
    .into_bytes()
}

/// Fill the read buffer, waiting at most `idle` for data. An end of stream
/// without TLS close_notify counts as an end of stream.
async fn fill<R: AsyncBufRead + Unpin>(
    r: &mut R,
    idle: Option<Duration>,
) -> Result<&[u8], HttpError> {
    let res = match idle {
        None => r.fill_buf().await,
        Some(d) => match tokio::time::timeout(d, r.fill_buf()).await {
            Ok(res) => res,
            Err(_) => return Err(HttpError::Idle(d)),
        },
    };
    match res {
        Ok(b) => Ok(b),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(&[]),
        Err(e) => Err(HttpError::Io(e)),
    }
}

/// Append one line (through `\n`) to `out`. `Ok(false)` at end of stream.
async fn read_line<R: AsyncBufRead + Unpin>(
    r: &mut R,
    out: &mut Vec<u8>,
    limit: usize,
    idle: Option<Duration>,
    too_long: fn() -> HttpError,
) -> Result<bool, HttpError> {
    loop {
        let buf = fill(r, idle).await?;
        if buf.is_empty() {
            return Ok(false);
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        out.extend_from_slice(&buf[..take]);
        r.consume(take);
        if out.len() > limit {
            return Err(too_long());
        }
        if done {
            return Ok(true);
        }
    }
}

/// Read and count up to `n` bytes; fewer only at end of stream.
async fn discard<R: AsyncBufRead + Unpin>(
    r: &mut R,
    n: u64,
    idle: Option<Duration>,
) -> Result<u64, HttpError> {
    let mut got = 0u64;
    while got < n {
        let buf = fill(r, idle).await?;
        if buf.is_empty() {
            break;
        }
        let take = buf
            .len()
            .min(usize::try_from(n - got).unwrap_or(usize::MAX));
        r.consume(take);
        got += take as u64;
    }
    Ok(got)
}

struct Head {
    status: u16,
    reason: String,
    framing: Framing,
    keep_alive: bool,
}

fn parse_head(head: &[u8]) -> Result<Head, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut headers);
    match resp.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err(HttpError::BadHead("incomplete".into())),
        Err(e) => return Err(HttpError::BadHead(e.to_string())),
    }
    let status = resp.code.unwrap_or(0);
    let http11 = resp.version == Some(1);
    let mut length: Option<u64> = None;
    let mut chunked = None;
    let mut close = false;
    let mut keep_alive = false;
    for h in resp.headers.iter() {
        let value = String::from_utf8_lossy(h.value);
        let value = value.trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            let n = value
                .parse::<u64>()
                .ok()
                .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| HttpError::BadLength(value.to_string()))?;
            if length.is_some_and(|l| l != n) {
                return Err(HttpError::BadLength(value.to_string()));
            }
            length = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            let last = value.rsplit(',').next().unwrap_or("").trim();
            chunked = Some(last.eq_ignore_ascii_case("chunked"));
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in value.split(',') {
                close |= token.trim().eq_ignore_ascii_case("close");
                keep_alive |= token.trim().eq_ignore_ascii_case("keep-alive");
            }
        }
    }
    let framing = if (100..200).contains(&status) || status == 204 || status == 304 {
        Framing::Empty
    } else {
        match (chunked, length) {
            (Some(true), _) => Framing::Chunked,
            (Some(false), _) => Framing::Close,
            (None, Some(n)) => Framing::Length(n),
            (None, None) => Framing::Close,
        }
    };
    let keep_alive =
        framing != Framing::Close && if http11 { !close } else { keep_alive && !close };
    Ok(Head {
        status,
        reason: resp.reason.unwrap_or("").to_string(),
        framing,
        keep_alive,
    })
}

async fn read_chunked<R: AsyncBufRead + Unpin>(
    r: &mut R,
    idle: Option<Duration>,
) -> Result<u64, HttpError> {
    let mut total = 0u64;
    let mut line = Vec::new();
    let too_long = || HttpError::BadChunk("chunk-size line too long");
    loop {
        line.clear();
        if !read_line(r, &mut line, 4096, idle, too_long).await? {
            return Err(HttpError::BadChunk("the connection ended inside the body"));
        }
        let text = std::str::from_utf8(&line)
            .map_err(|_| HttpError::BadChunk("chunk size is not text"))?;
        let size = text.split(';').next().unwrap_or("").trim();
        let size =
            u64::from_str_radix(size, 16).map_err(|_| HttpError::BadChunk("bad chunk size"))?;
        if size == 0 {
            // Trailer fields, then the empty line.
            loop {
                line.clear();
                if !read_line(r, &mut line, 4096, idle, too_long).await? {
                    return Err(HttpError::BadChunk(
                        "the connection ended inside the trailer",
                    ));
                }
                if line == b"\r\n" || line == b"\n" {
                    return Ok(total);
                }
            }
        }
        let got = discard(r, size, idle).await?;
        total += got;
        if got < size {
            return Err(HttpError::BadChunk("the connection ended inside a chunk"));
        }
        line.clear();
        read_line(r, &mut line, 4096, idle, too_long).await?;
        if line != b"\r\n" && line != b"\n" {
            return Err(HttpError::BadChunk("no CRLF after chunk data"));
        }
    }
}

/// Read one response from `r`, skipping interim 1xx responses. `idle`
/// bounds each wait for data.
pub async fn read_response<R: AsyncBufRead + Unpin>(
    r: &mut R,
    idle: Option<Duration>,
) -> Result<Response, HttpError> {
    let mut head = Vec::new();
    let mut first_byte = None;
    let parsed = loop {
        head.clear();
        loop {
            let start = head.len();
            if !read_line(r, &mut head, MAX_HEAD, idle, || HttpError::HeadTooLarge).await? {
                return Err(if head.is_empty() && first_byte.is_none() {
                    HttpError::ClosedBeforeResponse
                } else {
                    HttpError::TruncatedHead
                });
            }
            first_byte.get_or_insert_with(Instant::now);
            let line = &head[start..];
            if line == b"\r\n" || line == b"\n" {
                if start == 0 {
                    head.clear();
                    continue;
                }
                break;
            }
        }
        let parsed = parse_head(&head)?;
        if (100..200).contains(&parsed.status) && parsed.status != 101 {
            continue;
        }
        break parsed;
    };
    let body_bytes = match parsed.framing {
        Framing::Empty => 0,
        Framing::Length(n) => {
            let got = discard(r, n, idle).await?;
            if got < n {
                return Err(HttpError::ShortBody { got, expected: n });
            }
            got
        }
        Framing::Chunked => read_chunked(r, idle).await?,
        Framing::Close => discard(r, u64::MAX, idle).await?,
    };
    Ok(Response {
        status: parsed.status,
        reason: parsed.reason,
        framing: parsed.framing,
        body_bytes,
        keep_alive: parsed.keep_alive,
        first_byte: first_byte.unwrap_or_else(Instant::now),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(bytes: &[u8]) -> Result<(Response, usize), HttpError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut r = bytes;
            let resp = read_response(&mut r, None).await?;
            Ok((resp, r.len()))
        })
    }

    #[test]
    fn request_bytes() {
        let t = super::super::url::parse("https://[::1]:8443/a?b").unwrap();
        let req = String::from_utf8(get_request(&t)).unwrap();
        assert!(
            req.starts_with("GET /a?b HTTP/1.1\r\nHost: [::1]:8443\r\n"),
            "{req}"
        );
        assert!(req.ends_with("\r\n\r\n"));
    }

    #[test]
    fn content_length_and_keep_alive() {
        let (r, left) = read(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhelloNEXT").unwrap();
        assert_eq!(
            (r.status, r.body_bytes, r.keep_alive, left),
            (200, 5, true, 4)
        );
        assert_eq!(r.content_length(), Some(5));
        let (r, _) =
            read(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n").unwrap();
        assert!(!r.keep_alive);
        let (r, _) = read(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\nx").unwrap();
        assert!(!r.keep_alive);
        let (r, _) =
            read(b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 1\r\n\r\nx")
                .unwrap();
        assert!(r.keep_alive);
    }

    #[test]
    fn chunked_close_interim_and_empty() {
        let (r, left) =
            read(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\nA\r\n0123456789\r\n0\r\nT: 1\r\n\r\nZ")
                .unwrap();
        assert_eq!((r.body_bytes, r.framing, left), (13, Framing::Chunked, 1));
        let (r, _) = read(b"HTTP/1.1 200 OK\r\n\r\nuntil close").unwrap();
        assert_eq!(
            (r.body_bytes, r.framing, r.keep_alive),
            (11, Framing::Close, false)
        );
        let (r, _) = read(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno",
        )
        .unwrap();
        assert_eq!(
            (r.status, r.reason.as_str(), r.body_bytes),
            (404, "Not Found", 2)
        );
        let (r, left) =
            read(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 99\r\n\r\nrest").unwrap();
        assert_eq!((r.body_bytes, left), (0, 4));
    }

    #[test]
    fn errors() {
        assert!(matches!(read(b""), Err(HttpError::ClosedBeforeResponse)));
        assert!(matches!(
            read(b"HTTP/1.1 200 OK\r\n"),
            Err(HttpError::TruncatedHead)
        ));
        assert!(matches!(
            read(b"garbage\r\n\r\n"),
            Err(HttpError::BadHead(_))
        ));
        assert!(matches!(
            read(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort"),
            Err(HttpError::ShortBody {
                got: 5,
                expected: 10
            })
        ));
        assert!(matches!(
            read(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx"),
            Err(HttpError::BadLength(_))
        ));
        assert!(matches!(
            read(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"),
            Err(HttpError::BadLength(_))
        ));
        assert!(matches!(
            read(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab"),
            Err(HttpError::BadChunk(_))
        ));
        assert!(matches!(
            read(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"),
            Err(HttpError::BadChunk(_))
        ));
        let big = format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "a".repeat(70_000));
        assert!(matches!(read(big.as_bytes()), Err(HttpError::HeadTooLarge)));
    }
}
