//! The plain-HTTP listener (`http_listen`, port 80): ACME HTTP-01
//! validations are answered from the orders in flight, every other request
//! for a name the sites answer is redirected to the same host and target
//! on `https://`, and requests for other names get 421 (Caddy's and the
//! usual nginx `listen 80; return 301 https://…` server's job). One request
//! per connection: a validator asks once, and a browser that follows the
//! redirect leaves for the TLS port, so keeping the connection would only
//! hold a descriptor. The head is read under the same limits and
//! `request_header` timeout as on the TLS listeners.

use super::sites::Sites;
use super::{timer, Front};
use crate::acme::{Challenges, HTTP01_PREFIX};
use crate::config::secs;
use crate::config::settings::Redirect;
use crate::http::request::{self, HeadLimits, Method, RequestError, RequestHead};
use crate::http::response::{Reply, ServerHeader};
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// What a plain-HTTP request gets.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// 301 or 308 to this `https://` URL.
    Redirect { status: u16, location: String },
    /// 200 with an HTTP-01 key authorization.
    Challenge(Arc<str>),
    /// 404: a validation for a token no order in flight has.
    NoChallenge,
    /// 421: a name no site here answers.
    Misdirected,
    /// 400, 414, 431 or 505: the head could not be used.
    Bad(RequestError),
}

impl Answer {
    /// The status code and the metric label.
    fn status(&self) -> (u16, &'static str) {
        match self {
            Answer::Redirect { status, .. } => (*status, "redirect"),
            Answer::Challenge(_) => (200, "acme_challenge"),
            Answer::NoChallenge => (404, "not_found"),
            Answer::Misdirected => (421, "misdirected"),
            Answer::Bad(e) => (e.status(), "bad_request"),
        }
    }
}

/// Decide what `head` gets: no I/O.
pub(crate) fn decide(
    head: &RequestHead,
    sites: &Sites,
    challenges: &Challenges,
    https_port: u16,
    redirect: Redirect,
) -> Answer {
    // Only origin-form targets (absolute-form ones arrive converted): `*`
    // and authority-form have no path to redirect to.
    if !head.target.starts_with('/') {
        return Answer::Bad(RequestError::Bad("request target is not a path"));
    }
    // The validator's request (RFC 8555 8.3): answered whatever the Host
    // (the token is the secret, and a CA may validate an address), and
    // never redirected when the token is ours.
    if let Some(token) = head.target.strip_prefix(HTTP01_PREFIX) {
        let token = token.split_once('?').map_or(token, |(t, _)| t);
        if matches!(head.method, Method::Get | Method::Head) {
            return match challenges.http_answer(token) {
                Some(key_authorization) => Answer::Challenge(key_authorization),
                None => Answer::NoChallenge,
            };
        }
    }
    let Some(host) = head.host.as_deref() else {
        return Answer::Bad(RequestError::Bad("no Host header"));
    };
    if !sites.redirects(host) {
        return Answer::Misdirected;
    }
    let port = match https_port {
        443 => String::new(),
        p => format!(":{p}"),
    };
    Answer::Redirect {
        status: redirect.status(matches!(head.method, Method::Get | Method::Head)),
        location: format!("https://{host}{port}{}", head.target),
    }
}

/// One connection on a plain-HTTP listener: read a head, answer, close.
pub(super) async fn connection(mut sock: TcpStream, front: &Front) {
    let sites = front.sites.load_full();
    let settings = &sites.settings;
    let l = &settings.limits;
    let limits = HeadLimits {
        request_line: l.request_line,
        header_bytes: l.header_bytes,
        headers: l.headers,
    };
    let read = read_head(&mut sock, &limits);
    let (answer, head_only) =
        match timer::timeout(secs(settings.timeouts.request_header), read).await {
            // The client closed, or the head did not come in time: nothing
            // to answer (nginx closes silently too).
            Ok(None) | Err(_) => return,
            Ok(Some(Err(e))) => (Answer::Bad(e), false),
            Ok(Some(Ok(head))) => (
                decide(
                    &head,
                    &sites,
                    &front.challenges,
                    front.https_port,
                    settings.http_redirect,
                ),
                head.method == Method::Head,
            ),
        };
    drop(sites);
    let (status, label) = answer.status();
    front.metrics.plain_http(label);
    let mut out = Vec::with_capacity(256);
    // The version is not given away on a port anyone may reach.
    let mut reply = Reply::closing(head_only, ServerHeader::from_tokens(false));
    let body: std::borrow::Cow<str> = match &answer {
        Answer::Challenge(k) => k.as_ref().into(),
        _ => crate::http::response::error_page(status).into(),
    };
    {
        let mut head = reply.start(&mut out, status);
        match &answer {
            Answer::Redirect { location, .. } => {
                head.header("Location", location);
                head.header("Content-Type", "text/html");
            }
            Answer::Challenge(_) => {
                head.header("Content-Type", "application/octet-stream");
            }
            _ => {
                head.header("Content-Type", "text/html");
            }
        }
        head.finish(Some(body.len() as u64));
    }
    if reply.with_body() {
        out.extend_from_slice(body.as_bytes());
    }
    let send = async {
        sock.write_all(&out).await?;
        sock.shutdown().await?;
        // What the client still sends is read and dropped (a bounded
        // amount) until it closes too: unread bytes would turn our close
        // into a reset that destroys the answer.
        let mut scratch = [0u8; 1024];
        let mut budget: usize = 64 * 1024;
        while budget > 0 {
            match sock.read(&mut scratch).await? {
                0 => break,
                n => budget = budget.saturating_sub(n),
            }
        }
        Ok::<_, std::io::Error>(())
    };
    let _ = timer::timeout(secs(front.timeouts.send), send).await;
}

/// Read until a whole head is in (`None`: the client closed first).
async fn read_head(
    sock: &mut TcpStream,
    limits: &HeadLimits,
) -> Option<Result<RequestHead, RequestError>> {
    let mut buf = vec![0u8; limits.header_bytes.max(limits.request_line) + 1];
    let mut filled = 0;
    loop {
        match sock.read(&mut buf[filled..]).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => filled += n,
        }
        match request::parse(&buf[..filled], limits) {
            Ok(Some(head)) => return Some(Ok(head)),
            Ok(None) if filled < buf.len() => continue,
            Ok(None) => return Some(Err(RequestError::HeadersTooLarge)),
            Err(e) => return Some(Err(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::sites::tests::sites;

    const LIMITS: HeadLimits = HeadLimits {
        request_line: 1024,
        header_bytes: 4096,
        headers: 32,
    };

    fn answer(sites: &Sites, c: &Challenges, port: u16, r: Redirect, req: &str) -> Answer {
        let head = request::parse(req.as_bytes(), &LIMITS).unwrap().unwrap();
        decide(&head, sites, c, port, r)
    }

    fn to(status: u16, location: &str) -> Answer {
        Answer::Redirect {
            status,
            location: location.into(),
        }
    }

    #[test]
    fn names_are_redirected_with_their_target_and_others_misdirected() {
        let s = sites(
            "[[site]]\nnames = [\"a.test\", \"*.w.test\"]\nroot = \".\"\ncert = \"c.pem\"\nkey = \"k.pem\"\n\
             [[site]]\nnames = [\"b.test\"]\nbackend = \"127.0.0.1:9\"\ncert = \"c.pem\"\nkey = \"k.pem\"\n",
        );
        let c = Challenges::default();
        let p = Redirect::Permanent;
        let get =
            |host: &str, target: &str| format!("GET {target} HTTP/1.1\r\nHost: {host}\r\n\r\n");
        assert_eq!(
            answer(&s, &c, 443, p, &get("a.test", "/x/y?q=1&r=%20")),
            to(308, "https://a.test/x/y?q=1&r=%20")
        );
        // The port the client used is dropped, the TLS listener's named.
        assert_eq!(
            answer(&s, &c, 8443, p, &get("A.Test:80", "/")),
            to(308, "https://a.test:8443/")
        );
        assert_eq!(
            answer(&s, &c, 443, p, &get("x.w.test", "/")),
            to(308, "https://x.w.test/")
        );
        // Backend sites' names too.
        assert_eq!(
            answer(&s, &c, 443, p, &get("b.test", "/")),
            to(308, "https://b.test/")
        );
        // Names no site lists: the default site lists some, so its
        // certificate would not name them.
        for host in ["other.test", "y.x.w.test", "127.0.0.1", "[::1]"] {
            assert_eq!(
                answer(&s, &c, 443, p, &get(host, "/")),
                Answer::Misdirected,
                "{host}"
            );
        }
        // An absolute-form target names the host.
        assert_eq!(
            answer(
                &s,
                &c,
                443,
                p,
                "GET http://a.test/abs HTTP/1.1\r\nHost: other.test\r\n\r\n"
            ),
            to(308, "https://a.test/abs")
        );
        // 301 only where it cannot change the method.
        let m = Redirect::Moved;
        assert_eq!(
            answer(&s, &c, 443, m, &get("a.test", "/")),
            to(301, "https://a.test/")
        );
        assert_eq!(
            answer(&s, &c, 443, m, "HEAD / HTTP/1.1\r\nHost: a.test\r\n\r\n"),
            to(301, "https://a.test/")
        );
        assert_eq!(
            answer(
                &s,
                &c,
                443,
                m,
                "POST /f HTTP/1.1\r\nHost: a.test\r\nContent-Length: 1\r\n\r\n"
            ),
            to(308, "https://a.test/f")
        );
        assert_eq!(
            answer(&s, &c, 443, p, "GET / HTTP/1.0\r\n\r\n"),
            Answer::Bad(RequestError::Bad("no Host header"))
        );
        assert!(matches!(
            answer(&s, &c, 443, p, "OPTIONS * HTTP/1.1\r\nHost: a.test\r\n\r\n"),
            Answer::Bad(_)
        ));
    }

    #[test]
    fn a_default_site_without_names_has_every_name_redirected() {
        let s = sites("root = \".\"\ncert = \"c.pem\"\nkey = \"k.pem\"\n");
        let c = Challenges::default();
        for host in ["a.test", "192.0.2.1", "[2001:db8::1]"] {
            let req = format!("GET /p HTTP/1.1\r\nHost: {host}\r\n\r\n");
            assert_eq!(
                answer(&s, &c, 443, Redirect::Permanent, &req),
                to(308, &format!("https://{host}/p"))
            );
        }
    }

    #[test]
    fn challenges_are_answered_by_token_while_up() {
        let s = sites(
            "[[site]]\nnames = [\"a.test\"]\nroot = \".\"\ncert = \"c.pem\"\nkey = \"k.pem\"\n",
        );
        let c = Challenges::default();
        let req = |host: &str, token: &str| {
            format!("GET /.well-known/acme-challenge/{token} HTTP/1.1\r\nHost: {host}\r\n\r\n")
        };
        let p = Redirect::Permanent;
        assert_eq!(
            answer(&s, &c, 443, p, &req("a.test", "tok")),
            Answer::NoChallenge
        );
        {
            let _up = c.answer_http("tok", "tok.thumb");
            for host in ["a.test", "unknown.test"] {
                assert_eq!(
                    answer(&s, &c, 443, p, &req(host, "tok")),
                    Answer::Challenge("tok.thumb".into())
                );
            }
            assert_eq!(
                answer(&s, &c, 443, p, &req("a.test", "tok?x")),
                Answer::Challenge("tok.thumb".into())
            );
            assert_eq!(
                answer(&s, &c, 443, p, &req("a.test", "other")),
                Answer::NoChallenge
            );
            // Not a validation: redirected like any other request.
            assert_eq!(
                answer(&s, &c, 443, p, "POST /.well-known/acme-challenge/tok HTTP/1.1\r\nHost: a.test\r\nContent-Length: 0\r\n\r\n"),
                to(308, "https://a.test/.well-known/acme-challenge/tok")
            );
        }
        assert_eq!(
            answer(&s, &c, 443, p, &req("a.test", "tok")),
            Answer::NoChallenge
        );
    }
}
