//! The Prometheus endpoint (`zarrfs mount --metrics-addr HOST:PORT`): what operators of gcsfuse
//! and mountpoint-s3 watch, in the text exposition format, served at `/metrics` by one thread.
//!
//! The mount's own counters (requests, cache, dirty bytes, store operations) are read from it
//! at each scrape; what happens deep below a mount (HTTP attempts, chunk codecs, write-backs and
//! conflicts) is counted here, once per process: a daemon serves one mount.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Upper bounds (seconds) of the latency buckets: a local disk's microseconds to a slow
/// bucket's tens of seconds (object_store gives up a request after 60).
const BOUNDS: [f64; 16] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0];

/// A latency histogram: counts per bucket (not cumulative: summed when shown), their sum.
#[derive(Default)]
pub struct Histogram {
    buckets: [AtomicU64; BOUNDS.len() + 1],
    sum_ns: AtomicU64,
}

impl Histogram {
    pub fn observe(&self, took: Duration) {
        let s = took.as_secs_f64();
        let i = BOUNDS.iter().position(|b| s <= *b).unwrap_or(BOUNDS.len());
        self.buckets[i].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// `work`, its time observed.
    pub fn time<T>(&self, work: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let out = work();
        self.observe(started.elapsed());
        out
    }

    fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut seen = 0;
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, bound) in BOUNDS.iter().enumerate() {
            seen += self.buckets[i].load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {seen}");
        }
        seen += self.buckets[BOUNDS.len()].load(Ordering::Relaxed);
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {seen}");
        let sum = self.sum_ns.load(Ordering::Relaxed) as f64 / 1e9;
        let braces = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {seen}");
    }
}

/// The HTTP methods object stores are asked with.
const METHODS: [&str; 6] = ["GET", "HEAD", "PUT", "POST", "DELETE", "other"];
/// The outcomes of an HTTP attempt: its status class, or no answer at all.
const OUTCOMES: [&str; 5] = ["2xx", "3xx", "4xx", "5xx", "error"];

/// What a process counts below its mount.
#[derive(Default)]
pub struct Counters {
    http: [[AtomicU64; OUTCOMES.len()]; METHODS.len()],
    http_seconds: [Histogram; METHODS.len()],
    /// Attempts answered in a way the object store client retries (5xx, 429, 408, no
    /// connection): retries, and the last attempt of those that ran out of them.
    pub http_retryable: AtomicU64,
    pub decode: Histogram,
    pub encode: Histogram,
    /// Chunks written back, and write-backs (of chunks or metadata) that failed.
    pub written_back: AtomicU64,
    pub write_back_failures: AtomicU64,
    /// Another writer's change met when storing: a chunk merged into it, or a write-back of an
    /// array whose metadata another writer changed refused.
    pub write_conflicts: AtomicU64,
}

pub static COUNTERS: std::sync::LazyLock<Counters> = std::sync::LazyLock::new(Counters::default);

/// One HTTP attempt at an object store: its method, its status (`None`: no answer) and time.
#[cfg(feature = "object-store")]
pub fn http_attempt(method: &str, status: Option<u16>, took: Duration) {
    let m = METHODS.iter().position(|x| *x == method).unwrap_or(METHODS.len() - 1);
    let o = match status {
        Some(s @ 200..=599) => usize::from(s / 100 - 2),
        _ => OUTCOMES.len() - 1,
    };
    let c = &*COUNTERS;
    c.http[m][o].fetch_add(1, Ordering::Relaxed);
    c.http_seconds[m].observe(took);
    if status.is_none_or(|s| s >= 500 || s == 429 || s == 408) {
        c.http_retryable.fetch_add(1, Ordering::Relaxed);
    }
}

/// A metric's samples in the exposition format, under its `# HELP` and `# TYPE`.
pub struct Exposition(String);

impl Exposition {
    pub fn new() -> Exposition {
        Exposition(String::with_capacity(16 << 10))
    }

    fn head(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// A counter or gauge of one sample.
    pub fn one(&mut self, name: &str, kind: &str, help: &str, value: f64) {
        self.head(name, kind, help);
        let _ = writeln!(self.0, "{name} {value}");
    }

    /// A counter or gauge with a sample per value of `label`.
    pub fn by(&mut self, name: &str, kind: &str, help: &str, label: &str, samples: impl IntoIterator<Item = (String, f64)>) {
        self.head(name, kind, help);
        for (value, sample) in samples {
            let _ = writeln!(self.0, "{name}{{{label}=\"{}\"}} {sample}", escape(&value));
        }
    }

    /// What this process counted below its mount.
    pub fn counters(&mut self) {
        let c = &*COUNTERS;
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64;
        let name = "zarrfs_store_http_requests_total";
        self.head(name, "counter", "HTTP requests to the object store, each attempt, by method and status class (error: no answer)");
        for (m, method) in METHODS.iter().enumerate() {
            for (o, outcome) in OUTCOMES.iter().enumerate() {
                let _ = writeln!(self.0, "{name}{{method=\"{method}\",status=\"{outcome}\"}} {}", load(&c.http[m][o]));
            }
        }
        let name = "zarrfs_store_http_request_seconds";
        self.head(name, "histogram", "Time from an HTTP request to the object store to its answer's headers (or its failure)");
        for (m, method) in METHODS.iter().enumerate() {
            c.http_seconds[m].render(&mut self.0, name, &format!("method=\"{method}\""));
        }
        self.one(
            "zarrfs_store_http_retryable_total",
            "counter",
            "HTTP attempts answered in a way the client retries (5xx, 429, 408, no connection), the last of a series out of retries included",
            load(&c.http_retryable),
        );
        for (name, histogram, help) in [
            ("zarrfs_chunk_decode_seconds", &c.decode, "Time to decode a chunk read from the store (its codecs)"),
            ("zarrfs_chunk_encode_seconds", &c.encode, "Time to encode a chunk to be stored (its codecs)"),
        ] {
            self.head(name, "histogram", help);
            histogram.render(&mut self.0, name, "");
        }
        self.one("zarrfs_write_back_chunks_total", "counter", "Chunks written back to the store", load(&c.written_back));
        self.one(
            "zarrfs_write_back_failures_total",
            "counter",
            "Write-backs of a chunk or of an array's metadata that failed (kept in memory, retried at the next flush)",
            load(&c.write_back_failures),
        );
        self.one(
            "zarrfs_write_conflicts_total",
            "counter",
            "Other writers' changes met while storing: a chunk merged into theirs, or a write-back refused because they changed the array",
            load(&c.write_conflicts),
        );
    }

    pub fn into_bytes(self) -> Vec<u8> {
        self.0.into_bytes()
    }
}

impl Default for Exposition {
    fn default() -> Self {
        Self::new()
    }
}

/// A label value as the exposition format quotes it.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The endpoint: a listener and the thread that answers it.
pub struct Endpoint {
    pub addr: SocketAddr,
}

/// Clients answered at once; past it, the one connected longest is let go to make room.
const MOST_CLIENTS: usize = 8;

/// The longest a scraper may take over its whole request, from connecting to taking the last
/// byte of the answer: a client that trickles holds its slot no longer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);

/// The address `--metrics-addr` names: `HOST:PORT`, or a port alone on the loopback address
/// (other hosts reach it only where the operator names an address they can reach).
pub fn address(addr: &str) -> String {
    match addr.parse::<u16>() {
        Ok(port) => format!("127.0.0.1:{port}"),
        Err(_) => addr.to_string(),
    }
}

/// The clients being answered, oldest first: a handle to each connection, to let it go.
type Clients = std::sync::Mutex<std::collections::VecDeque<(u64, TcpStream)>>;

/// Serve `render`'s exposition at `addr` (`HOST:PORT`, port 0 for any) from a thread, until
/// the process ends. The address is bound here, so that one in use fails the mount.
pub fn serve(addr: &str, render: Arc<dyn Fn() -> Vec<u8> + Send + Sync>) -> Result<Endpoint, String> {
    let addr = address(addr);
    let listener = TcpListener::bind(&addr).map_err(|e| format!("--metrics-addr {addr}: {e}"))?;
    let bound = listener.local_addr().map_err(|e| format!("--metrics-addr {addr}: {e}"))?;
    std::thread::Builder::new()
        .name("zarrfs-metrics".into())
        .spawn(move || {
            let clients: Arc<Clients> = Arc::default();
            for (id, conn) in listener.incoming().flatten().enumerate() {
                let id = id as u64;
                let Ok(handle) = conn.try_clone() else { continue };
                {
                    // Full: the client connected longest goes (a scrape takes milliseconds;
                    // one held that long is stalled), so that stalled clients, however many,
                    // never keep a scrape out. A thread each, 5 s at most, never the mount's
                    // memory or its requests.
                    let mut held = crate::error::lock(&clients);
                    if held.len() >= MOST_CLIENTS
                        && let Some((_, oldest)) = held.pop_front()
                    {
                        let _ = oldest.shutdown(std::net::Shutdown::Both);
                    }
                    held.push_back((id, handle));
                }
                let (render, done) = (render.clone(), clients.clone());
                let spawned = std::thread::Builder::new().name("zarrfs-metrics".into()).spawn(move || {
                    if let Err(e) = answer(conn, render.as_ref()) {
                        tracing::debug!("metrics request: {e}");
                    }
                    crate::error::lock(&done).retain(|(c, _)| *c != id);
                });
                if spawned.is_err() {
                    crate::error::lock(&clients).retain(|(c, _)| *c != id);
                }
            }
        })
        .map_err(|e| format!("cannot start the metrics thread: {e}"))?;
    Ok(Endpoint { addr: bound })
}

/// What is left of a client's time, or the error that ends it.
fn left(deadline: Instant) -> std::io::Result<Duration> {
    match deadline.checked_duration_since(Instant::now()) {
        Some(left) if !left.is_zero() => Ok(left),
        _ => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the client took longer than its time")),
    }
}

/// Answer one HTTP/1.x request on `conn`, then close it; all of it within `CLIENT_TIMEOUT`.
fn answer(mut conn: TcpStream, render: &(dyn Fn() -> Vec<u8> + Send + Sync)) -> std::io::Result<()> {
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    // The request's head, up to its blank line, bounded: nothing else of it is needed.
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && !head.windows(2).any(|w| w == b"\n\n") {
        conn.set_read_timeout(Some(left(deadline)?))?;
        let n = conn.read(&mut buf)?;
        if n == 0 || head.len() + n > 16 << 10 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(head.split(|b| *b == b'\n').next().unwrap_or_default()).into_owned();
    let mut parts = line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    let (status, kind, body) = match (method, path) {
        ("GET" | "HEAD", "/metrics") => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", render()),
        ("GET" | "HEAD", "/") => ("200 OK", "text/plain; charset=utf-8", b"zarrfs: the metrics are at /metrics\n".to_vec()),
        ("GET" | "HEAD", _) => ("404 Not Found", "text/plain; charset=utf-8", b"not found: the metrics are at /metrics\n".to_vec()),
        _ => ("405 Method Not Allowed", "text/plain; charset=utf-8", b"only GET\n".to_vec()),
    };
    let head = format!("HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
    let body = if method == "HEAD" { &[][..] } else { &body[..] };
    // Written a piece at a time, each with what is left of the time: a reader that takes a
    // byte now and then runs out of it as one that takes none.
    for piece in head.as_bytes().chunks(16 << 10).chain(body.chunks(16 << 10)) {
        conn.set_write_timeout(Some(left(deadline)?))?;
        conn.write_all(piece)?;
    }
    conn.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_shows_cumulative_buckets_its_sum_and_count() {
        let h = Histogram::default();
        h.observe(Duration::from_micros(50));
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(100));
        let mut out = String::new();
        h.render(&mut out, "x_seconds", "method=\"GET\"");
        assert!(out.contains("x_seconds_bucket{method=\"GET\",le=\"0.0001\"} 1\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{method=\"GET\",le=\"0.0025\"} 1\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{method=\"GET\",le=\"0.005\"} 2\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{method=\"GET\",le=\"60\"} 2\n"), "{out}");
        assert!(out.contains("x_seconds_bucket{method=\"GET\",le=\"+Inf\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_count{method=\"GET\"} 3\n"), "{out}");
        assert!(out.contains("x_seconds_sum{method=\"GET\"} 100.00305\n"), "{out}");
    }

    #[test]
    fn label_values_are_quoted_as_the_format_says() {
        let mut e = Exposition::new();
        e.by("m_total", "counter", "help", "kind", [("a\"b\\c\nd".to_string(), 2.0)]);
        let text = String::from_utf8(e.into_bytes()).unwrap();
        assert!(text.ends_with("m_total{kind=\"a\\\"b\\\\c\\nd\"} 2\n"), "{text}");
    }

    #[test]
    fn the_endpoint_answers_metrics_and_nothing_else() {
        let endpoint = serve("127.0.0.1:0", Arc::new(|| b"m 1\n".to_vec())).unwrap();
        let ask = |request: &str| {
            let mut c = TcpStream::connect(endpoint.addr).unwrap();
            c.write_all(request.as_bytes()).unwrap();
            let mut answer = String::new();
            c.read_to_string(&mut answer).unwrap();
            answer
        };
        let ok = ask("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200 OK\r\n") && ok.ends_with("\r\n\r\nm 1\n"), "{ok}");
        assert!(ok.contains("Content-Type: text/plain; version=0.0.4"), "{ok}");
        assert!(ask("GET /other HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 404"));
        assert!(ask("POST /metrics HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
        // Clients that never finish their requests hold up no one else's scrape, even when
        // there are more of them than clients answered at once.
        let _stalled: Vec<_> = (0..MOST_CLIENTS + 2).map(|_| TcpStream::connect(endpoint.addr).unwrap()).collect();
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        assert!(ask("GET /metrics HTTP/1.0\n\n").ends_with("m 1\n"));
        assert!(started.elapsed() < CLIENT_TIMEOUT);
    }

    #[test]
    fn a_client_that_trickles_its_request_is_let_go_within_its_time() {
        let endpoint = serve("127.0.0.1:0", Arc::new(|| b"m 1\n".to_vec())).unwrap();
        let mut c = TcpStream::connect(endpoint.addr).unwrap();
        let started = Instant::now();
        // A byte every 500 ms: each read is quick, the request never ends.
        let closed = (0..40).any(|_| {
            std::thread::sleep(Duration::from_millis(500));
            c.write_all(b"G").is_err()
        });
        let mut rest = Vec::new();
        let _ = c.read_to_end(&mut rest);
        assert!(closed || rest.is_empty(), "answered a request that never ended");
        assert!(started.elapsed() < CLIENT_TIMEOUT + Duration::from_secs(3), "held for {:?}", started.elapsed());
    }
}
