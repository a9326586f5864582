//! `--http ADDR` of `weir run` and `weir emu`: a live web page, its JSON and Prometheus
//! metrics, served by weir itself.
//!
//! * `GET /` — one page (HTML, CSS and script embedded in the binary, nothing fetched
//!   from elsewhere) that polls `/api/snapshot` every second and draws, per direction,
//!   the class tree (assured rate, ceiling, current rate with a sparkline of the last
//!   minutes kept by the page, queue and its flows, drops by cause and ECN marks,
//!   borrowing), the rules' hits, the
//!   emulators, the connection table, the policy's generation and reloads, the adaptive
//!   controller.
//! * `GET /api/snapshot` — the statistics document, as `weir stats --json` prints it.
//! * `GET /metrics` — the same counters for Prometheus ([`metrics`]).
//!
//! # Where the data comes from
//! The web server is a client of the statistics socket (`--stats-socket`): every request
//! reads the newest document the data path published ([`weir_io::stats::query`]). The
//! data path publishes once a second whether or not anyone asks, and the socket's server
//! thread hands out the same immutable document to every client, so requests cost the
//! forwarding loop nothing (measured: docs/web.md).
//!
//! # Access
//! A loopback address (`127.0.0.1:9000`, `[::1]:9000`) needs nothing. Any other address
//! is refused unless `--http-token` is given; then every request must carry the token,
//! as `Authorization: Bearer TOKEN` or `?token=TOKEN` (the page passes on the one in its
//! own address), else it gets 401. The server runs on its own thread (a one-thread tokio
//! runtime), never on the forwarding thread.

pub mod metrics;

use anyhow::{bail, Context};
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// The page, embedded.
const PAGE: &str = include_str!("page.html");

/// Options of the web server.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct HttpArgs {
    /// Serve a live web page, /api/snapshot (JSON) and /metrics (Prometheus) on this
    /// address, e.g. 127.0.0.1:9000 (default: off).
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,
    /// The token every request must carry (Authorization: Bearer TOKEN, or ?token=TOKEN);
    /// required to serve on a non-loopback address.
    #[arg(long, value_name = "TOKEN", requires = "http")]
    pub http_token: Option<String>,
}

struct Shared {
    socket: PathBuf,
    token: Option<String>,
}

/// Refuse an address the options do not allow (before anything else starts).
pub fn check(a: &HttpArgs) -> anyhow::Result<()> {
    let Some(addr) = a.http else { return Ok(()) };
    if let Some(t) = &a.http_token {
        if t.len() < 8 || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
            bail!("--http-token: expected at least 8 characters without spaces");
        }
    } else if !addr.ip().is_loopback() {
        bail!(
            "--http {addr}: serving the statistics on a non-loopback address needs --http-token TOKEN \
             (or use 127.0.0.1:{})",
            addr.port()
        );
    }
    Ok(())
}

/// The running server: dropped, it stops.
pub struct WebServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl WebServer {
    /// Bind `a.http` (an error says which address and why) and serve the documents of the
    /// statistics socket `socket` from a thread of its own. `None` without `--http`.
    pub fn start(a: &HttpArgs, socket: PathBuf) -> anyhow::Result<Option<WebServer>> {
        check(a)?;
        let Some(addr) = a.http else { return Ok(None) };
        let std_listener =
            std::net::TcpListener::bind(addr).with_context(|| format!("--http {addr}"))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let shared = Arc::new(Shared {
            socket,
            token: a.http_token.clone(),
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .context("--http: the web server's runtime")?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("weir-http".into())
            .spawn(move || {
                rt.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(std_listener) {
                        Ok(l) => l,
                        Err(e) => {
                            weir_io::log::error(&format!("--http {addr}: {e}"));
                            return;
                        }
                    };
                    let r = axum::serve(listener, app(shared))
                        .with_graceful_shutdown(async {
                            let _ = stopped.await;
                        })
                        .await;
                    if let Err(e) = r {
                        weir_io::log::error(&format!("--http {addr}: {e}"));
                    }
                })
            })?;
        Ok(Some(WebServer {
            addr,
            stop: Some(stop),
            thread: Some(thread),
        }))
    }

    /// The address it serves on (the port chosen when `--http` said port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for WebServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn app(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(page))
        .route("/api/snapshot", get(snapshot))
        .route("/metrics", get(metrics_text))
        .layer(middleware::from_fn_with_state(shared.clone(), auth))
        .with_state(shared)
}

/// 401 unless the request carries the token (when there is one).
async fn auth(
    State(s): State<Arc<Shared>>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
    req: Request,
    next: Next,
) -> Response {
    if let Some(want) = &s.token {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|h| h.to_str().ok())
            .and_then(|h| h.strip_prefix("Bearer "));
        let given = bearer.or(q.get("token").map(String::as_str));
        if !given.is_some_and(|g| same(g.as_bytes(), want.as_bytes())) {
            return (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer realm=\"weir\"")],
                "weir: this address needs the token given to --http-token (Authorization: Bearer TOKEN, or ?token=TOKEN)\n",
            )
                .into_response();
        }
    }
    next.run(req).await
}

/// Equal, in a time that does not depend on where they differ.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        PAGE,
    )
        .into_response()
}

/// The newest statistics document, or 503 saying why there is none.
async fn document(s: &Shared) -> Result<String, Response> {
    let path = s.socket.clone();
    let r = tokio::task::spawn_blocking(move || weir_io::stats::query(&path)).await;
    match r {
        Ok(Ok(doc)) => Ok(doc),
        Ok(Err(e)) => Err((
            StatusCode::SERVICE_UNAVAILABLE,
            format!("weir: statistics: {e}\n"),
        )
            .into_response()),
        Err(e) => Err((StatusCode::INTERNAL_SERVER_ERROR, format!("weir: {e}\n")).into_response()),
    }
}

async fn snapshot(State(s): State<Arc<Shared>>) -> Response {
    match document(&s).await {
        Ok(doc) => (
            [
                (header::CONTENT_TYPE, "application/json"),
                (header::CACHE_CONTROL, "no-store"),
            ],
            doc,
        )
            .into_response(),
        Err(r) => r,
    }
}

async fn metrics_text(State(s): State<Arc<Shared>>) -> Response {
    let doc = match document(&s).await {
        Ok(d) => d,
        Err(r) => return r,
    };
    match metrics::render(&doc) {
        Ok(text) => ([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("weir: {e}\n")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(addr: &str, token: Option<&str>) -> HttpArgs {
        HttpArgs {
            http: Some(addr.parse().unwrap()),
            http_token: token.map(String::from),
        }
    }

    #[test]
    fn non_loopback_needs_a_token() {
        assert!(check(&args("127.0.0.1:9000", None)).is_ok());
        assert!(check(&args("[::1]:9000", None)).is_ok());
        let e = check(&args("0.0.0.0:9000", None)).unwrap_err().to_string();
        assert!(e.contains("--http-token"), "{e}");
        assert!(check(&args("0.0.0.0:9000", Some("s3cret-token"))).is_ok());
        let e = check(&args("0.0.0.0:9000", Some("short")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("at least 8"), "{e}");
        assert!(check(&HttpArgs::default()).is_ok());
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(same(b"abcdefgh", b"abcdefgh"));
        assert!(!same(b"abcdefgh", b"abcdefgx"));
        assert!(!same(b"abcdefgh", b"abcdefg"));
        assert!(!same(b"", b"a"));
    }
}
