//! The static file service of a site with a `root` (beside `proxy`, the
//! service of a site with a `backend`): the site's files and settings, and
//! the accounting of each response (metrics, access log). The parts:
//! `model` (a protocol-neutral request and response plan), `handler` (what
//! to answer: routing by Host, files with ranges and preconditions,
//! redirects, listings, errors), and `h1` (HTTP/1.1 sessions: reading
//! requests and writing the plans, file bodies through the transport's
//! `send_file`, `sendfile()` on kTLS). Buffers exist only while a request
//! is being read or answered.

mod h1;
mod h2;
pub mod handler;
pub mod model;

use crate::config::settings::{Files, Site};
use crate::config::{Limits, Timeouts};
use crate::files::{Charset, DocRoot, RootError};
use crate::http::response::ServerHeader;
use crate::server::sites::{SiteJob, SiteRt};
use crate::server::{ConnInfo, Front, Tls};
use crate::transport::Path;
use handler::{Handler, Named, Route};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The static file service of one site.
pub struct StaticFiles {
    handler: Handler,
    cfg: FilesCfg,
}

/// What the framing reads of its site's settings.
struct FilesCfg {
    limits: Limits,
    timeouts: Timeouts,
    /// The site's `Server` header (`server_tokens`).
    server: ServerHeader,
}

impl StaticFiles {
    /// The socket and the file being sent (HTTP/1.1).
    pub const FDS_PER_CONNECTION: u64 = 2;
    /// The socket and the files of the streams being answered (HTTP/2).
    pub const FDS_PER_H2_CONNECTION: u64 = 1 + h2::FILE_STREAMS as u64;

    /// Open the site's document root.
    pub fn new(site: &Site, files: &Files) -> Result<StaticFiles, RootError> {
        let root = DocRoot::open(&files.root, files.follow_symlinks_outside, files.autoindex)?;
        if let Some(problem) = files
            .fallback
            .as_ref()
            .and_then(|f| root.fallback_problem(f))
        {
            tracing::warn!("site {}: {problem}", site.label());
        }
        Ok(StaticFiles {
            handler: Handler::new(
                root,
                files.precompressed.clone(),
                files.headers.clone(),
                files.fallback.clone(),
                Charset::new(files.charset.as_deref()),
                files.client_cert_paths.clone(),
            ),
            cfg: FilesCfg {
                limits: site.limits.clone(),
                timeouts: site.timeouts.clone(),
                server: ServerHeader::from_tokens(files.server_tokens),
            },
        })
    }

    /// The directory the document root leads to now.
    pub fn root_path(&self) -> std::path::PathBuf {
        self.handler.root_path()
    }

    /// Serve one connection. (Not an `async fn`: its arguments would be
    /// kept twice in the future, which every idle connection holds.)
    #[allow(clippy::manual_async_fn)]
    pub(crate) fn serve<'a>(
        &'a self,
        front: &'a Front,
        tls: Tls,
        info: ConnInfo,
        stop: watch::Receiver<bool>,
    ) -> impl std::future::Future<Output = ()> + Send + 'a {
        async move {
            let cx = Ctx {
                files: self,
                front,
                site: &info.metrics,
                info: &info,
            };
            let h2 = info.alpn.as_deref() == Some(b"h2");
            match tls {
                Tls::Kernel(k) if h2 => h2::session(k, &cx, stop).await,
                Tls::User(u) if h2 => h2::session(u, &cx, stop).await,
                Tls::Kernel(k) => h1::session(k, &cx, stop).await,
                Tls::User(u) => h1::session(u, &cx, stop).await,
            }
        }
    }
}

/// What a session needs to see.
struct Ctx<'a> {
    files: &'a StaticFiles,
    front: &'a Front,
    /// The site's counters.
    site: &'a crate::metrics::SiteMetrics,
    info: &'a ConnInfo,
}

/// Another static site answering a request, and the connection as it
/// sees it.
struct Elsewhere {
    site: Arc<SiteRt>,
    info: ConnInfo,
}

impl Elsewhere {
    /// The context a request answered there sees (`None`: the site is not
    /// a static one).
    fn ctx<'a>(&'a self, front: &'a Front) -> Option<Ctx<'a>> {
        match &self.site.job {
            SiteJob::Files(files) => Some(Ctx {
                files,
                front,
                site: &self.info.metrics,
                info: &self.info,
            }),
            SiteJob::Proxy(_) => None,
        }
    }
}

/// What writing one response put on the wire, as its framing reports it.
struct Tally {
    /// Where the records were sealed.
    path: Path,
    /// Bytes written: head and body.
    wire: u64,
    /// Body bytes known to be sent (the access log's `$body_bytes_sent`).
    body: u64,
    /// Framed as HTTP/2.
    http2: bool,
}

impl Tally {
    fn new(path: Path) -> Tally {
        Tally {
            path,
            wire: 0,
            body: 0,
            http2: false,
        }
    }
}

impl Ctx<'_> {
    /// Which site answers a request for `host` (see [`handler::route`]),
    /// among the sites as they are now.
    fn route(&self, host: Option<&str>) -> Route<Arc<SiteRt>> {
        handler::route(host, self.info.sni.as_deref(), |host| {
            let sites = self.front.sites.load();
            sites.named(host).map(|site| Named {
                // A site is the connection's own when it has the same
                // label (its first name, unique).
                own: site.label == self.info.site,
                files: matches!(site.job, SiteJob::Files(_)),
                asks_client_cert: site.settings.client_auth.is_some(),
                site: site.clone(),
            })
        })
    }

    /// What answering from `site` (another static site, see
    /// [`Ctx::route`]) needs: the connection's facts under its name, its
    /// counters and its log. Lives as long as the request.
    fn elsewhere(&self, site: Arc<SiteRt>) -> Elsewhere {
        let info = ConnInfo {
            site: site.label.clone(),
            metrics: site
                .metrics
                .get_or_init(|| self.front.metrics.site(&site.label))
                .clone(),
            log: site.access_log.clone(),
            ..self.info.clone()
        };
        Elsewhere { site, info }
    }

    /// Count and log one response: its status, what its writing put on
    /// the wire, for the request whose raw head (as far as it was read) is
    /// `head`, which took `took`; `served`: a request read whole and
    /// answered in full, which counts in the request durations.
    fn account(&self, status: u16, tally: &Tally, head: &[u8], took: Duration, served: bool) {
        self.site.status(status);
        self.front.metrics.protocol_response(tally.http2);
        if tally.wire > 0 {
            self.site.bytes(tally.path, tally.wire);
        }
        if let Some(log) = &self.info.log {
            let (request, user_agent, referer) = crate::accesslog::head_fields(head);
            log.http(&crate::accesslog::HttpRecord {
                info: self.info,
                request,
                user_agent,
                referer,
                status,
                body_bytes: tally.body,
                duration: took,
            });
        }
        if served {
            self.site.request_done(took.as_secs_f64());
        }
    }
}
