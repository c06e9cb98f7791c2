//! Where the daemon's log lines go: a file (`--log-file`), stderr (`-f`), or — for a daemon
//! in the background — syslog, so that the EIO causes and failed write-backs it reports reach
//! the journal instead of vanishing (as mountpoint-s3 does).

use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::path::Path;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// The local syslog socket (journald and rsyslog both listen there).
const SYSLOG_SOCKET: &str = "/dev/log";

pub enum LogTarget<'a> {
    File(&'a Path),
    Stderr,
    Syslog,
}

pub fn init(verbose: u8, target: LogTarget<'_>) -> Result<(), String> {
    let syslog = if matches!(target, LogTarget::Syslog) { Syslog::connect() } else { None };
    // A background daemon with no syslog has only the caller's terminal until it detaches, and
    // the mount's own error reaches the caller through the readiness pipe: it says only
    // warnings and errors there, so that a mount that works prints nothing.
    let terminal_only = matches!(target, LogTarget::Syslog) && syslog.is_none();
    // The TLS verifier logs each refused certificate; the request's error says it once, with
    // what to do.
    let default = match verbose {
        0 if terminal_only => "zarrfs=warn,fuser=error,rustls_platform_verifier=off,warn",
        0 => "zarrfs=info,fuser=error,rustls_platform_verifier=off,warn",
        1 => "zarrfs=debug,fuser=warn,rustls_platform_verifier=off,info",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_target(false);
    let result = match target {
        LogTarget::File(p) => {
            let f = std::fs::OpenOptions::new().create(true).append(true).open(p).map_err(|e| format!("log file {}: {e}", p.display()))?;
            builder.with_ansi(false).with_writer(std::sync::Mutex::new(f)).try_init()
        }
        LogTarget::Syslog if let Some(syslog) = syslog => {
            builder.with_ansi(false).without_time().with_level(false).with_writer(syslog).try_init()
        }
        LogTarget::Syslog | LogTarget::Stderr => {
            builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).with_writer(std::io::stderr).try_init()
        }
    };
    result.map_err(|e| e.to_string())
}

/// Sends each log line as one datagram in the BSD syslog form, facility `daemon`.
pub struct Syslog {
    socket: UnixDatagram,
}

impl Syslog {
    fn connect() -> Option<Syslog> {
        let socket = UnixDatagram::unbound().ok()?;
        socket.connect(SYSLOG_SOCKET).ok()?;
        Some(Syslog { socket })
    }
}

/// One event's line, sent when the formatter is done with it.
pub struct SyslogLine<'a> {
    socket: &'a UnixDatagram,
    priority: u8,
    line: Vec<u8>,
}

impl Write for SyslogLine<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.line.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for SyslogLine<'_> {
    fn drop(&mut self) {
        let text = String::from_utf8_lossy(&self.line);
        let text = text.trim_end();
        if !text.is_empty() {
            let msg = format!("<{}>zarrfs[{}]: {text}", self.priority, std::process::id());
            // A log line must never block or fail a request: a full or absent syslog loses it.
            let _ = self.socket.send(msg.as_bytes());
        }
    }
}

impl<'a> MakeWriter<'a> for Syslog {
    type Writer = SyslogLine<'a>;

    fn make_writer(&'a self) -> SyslogLine<'a> {
        SyslogLine { socket: &self.socket, priority: 3 * 8 + 6, line: Vec::new() }
    }

    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> SyslogLine<'a> {
        let severity = match *meta.level() {
            tracing::Level::ERROR => 3,
            tracing::Level::WARN => 4,
            tracing::Level::INFO => 6,
            _ => 7,
        };
        SyslogLine { socket: &self.socket, priority: 3 * 8 + severity, line: Vec::new() }
    }
}
