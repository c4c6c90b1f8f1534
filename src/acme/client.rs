//! The HTTPS client instant-acme talks to the CA through: hyper over rustls
//! on our explicit aws-lc-rs provider, trusting webpki-roots plus the extra
//! roots of `AcmeSettings::extra_roots` (a private or test CA such as
//! pebble's). It runs on whatever tokio runtime awaits it, current-thread
//! included: hyper's connection tasks are spawned onto that runtime.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Limited;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use instant_acme::{BodyWrapper, BytesResponse, HttpClient};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use super::{describe, AcmeError};

/// How long one request to the CA may take, connect to last body byte.
/// hyper has no timeout of its own: without this a CA that accepts the
/// connection and then says nothing would hold `obtain` forever.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The most a CA's answer may hold. Chains and problem documents are a few
/// KiB; without a bound a broken CA could fill memory before the timeout.
const MAX_BODY: usize = 1 << 20;

// Clone shares the connection pool.
#[derive(Clone)]
pub(crate) struct AcmeHttp(Client<HttpsConnector<HttpConnector>, BodyWrapper<Bytes>>);

impl AcmeHttp {
    pub(crate) fn new(extra_roots: Option<&Path>) -> Result<AcmeHttp, AcmeError> {
        let mut roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        if let Some(path) = extra_roots {
            let bad = |detail: String| AcmeError::Roots {
                path: path.to_path_buf(),
                detail,
            };
            let mut added = 0;
            let pem = crate::safe_open::read(path).map_err(|e| bad(e.to_string()))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| bad(e.to_string()))?;
                roots.add(cert).map_err(|e| bad(e.to_string()))?;
                added += 1;
            }
            if added == 0 {
                return Err(bad("it holds no PEM CERTIFICATE block".into()));
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::aws_lc_rs::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| AcmeError::Tls {
            detail: e.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false); // the https connector below checks the scheme
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1()
            .wrap_connector(http);
        Ok(AcmeHttp(
            Client::builder(TokioExecutor::new()).build(connector),
        ))
    }
}

impl HttpClient for AcmeHttp {
    fn request(
        &self,
        req: http::Request<BodyWrapper<Bytes>>,
    ) -> Pin<Box<dyn Future<Output = Result<BytesResponse, instant_acme::Error>> + Send>> {
        let fut = tokio::time::timeout(REQUEST_TIMEOUT, self.0.request(req));
        Box::pin(async move {
            match fut.await {
                Ok(Ok(rsp)) => Ok(BytesResponse::from(
                    rsp.map(|body| Limited::new(body, MAX_BODY)),
                )),
                Ok(Err(e)) => Err(instant_acme::Error::Other(Box::new(e))),
                Err(_) => Err(instant_acme::Error::Other(
                    format!(
                        "no answer within {} s (timed out)",
                        REQUEST_TIMEOUT.as_secs()
                    )
                    .into(),
                )),
            }
        })
    }
}

/// Fetch the directory through `http` and check that it is one:
/// instant-acme builds requests from the directory URL and from its
/// newNonce URL with an `expect`, so a malformed URL, ours or the CA's,
/// would panic there. Checked here first, it is an error naming the
/// directory instead. Any client, for the unit tests' fake CA.
pub(crate) async fn check_directory(http: &impl HttpClient, url: &str) -> Result<(), AcmeError> {
    let fail = |detail: String| AcmeError::Directory {
        url: url.to_string(),
        detail,
    };
    let uri = http::Uri::try_from(url).map_err(|e| fail(format!("not a URL ({e})")))?;
    if uri.scheme_str() != Some("https") || uri.authority().is_none() {
        return Err(fail("not an https:// URL".into()));
    }
    let request = http::Request::get(uri)
        .body(BodyWrapper::default())
        .map_err(|e| fail(e.to_string()))?;
    let mut response = http
        .request(request)
        .await
        .map_err(|e| fail(describe(&e)))?;
    let status = response.parts.status;
    let body = response
        .body
        .into_bytes()
        .await
        .map_err(|e| fail(format!("reading the answer: {e}")))?;
    if !status.is_success() {
        return Err(fail(format!("HTTP status {status}")));
    }
    let directory: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
        fail(format!(
            "the answer is not an ACME directory (not JSON: {e})"
        ))
    })?;
    for field in ["newNonce", "newAccount", "newOrder"] {
        let valid = directory
            .get(field)
            .and_then(serde_json::Value::as_str)
            .is_some_and(|u| http::Uri::try_from(u).is_ok());
        if !valid {
            return Err(fail(format!(
                "the answer is not an ACME directory (no valid {field} URL)"
            )));
        }
    }
    Ok(())
}
