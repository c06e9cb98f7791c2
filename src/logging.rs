//! Where the daemon's log lines go: a file (`--log-file`), stderr (`-f`), or — for a daemon
//! in the background — syslog, so that the EIO causes and failed write-backs it reports reach
//! the journal instead of vanishing (as mountpoint-s3 does). Wherever they go, the recent
//! warnings and errors are also kept in memory, for `.zarrfs/errors` and `zarrfs status`: an
//! error only in a log nobody reads is no report.

use std::collections::VecDeque;
use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::sync::Mutex;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

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
    // what to do. Icechunk warns at every opening of a local repository that concurrent commits
    // are unsafe: zarrfs serializes them (a flock of the repository) and says so where it cannot.
    let default = match verbose {
        0 if terminal_only => "zarrfs=warn,fuser=error,rustls_platform_verifier=off,icechunk_arrow_object_store=error,warn",
        0 => "zarrfs=info,fuser=error,rustls_platform_verifier=off,icechunk_arrow_object_store=error,warn",
        1 => "zarrfs=debug,fuser=warn,rustls_platform_verifier=off,icechunk_arrow_object_store=error,info",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let registry = tracing_subscriber::registry().with(filter).with(Recent);
    let fmt = tracing_subscriber::fmt::layer().with_target(false);
    let result = match target {
        LogTarget::File(p) => registry.with(fmt.with_ansi(false).with_writer(LogFile::open(p)?)).try_init(),
        LogTarget::Syslog if let Some(syslog) = syslog => {
            registry.with(fmt.with_ansi(false).without_time().with_level(false).with_writer(syslog)).try_init()
        }
        // No colours: a line is escaped whole, the formatter's own escapes with a name's.
        LogTarget::Syslog | LogTarget::Stderr => {
            registry.with(fmt.with_ansi(false).with_writer(|| Printable(std::io::stderr()))).try_init()
        }
    };
    result.map_err(|e| e.to_string())
}

/// The log file, opened to append (made 0600 if new). Only a regular file: opening a FIFO would
/// wait for a reader for ever, and a device is no log.
pub fn open_log_file(p: &Path) -> Result<std::fs::File, String> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let refuse = |kind: std::fs::FileType| {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_socket() {
            "a socket"
        } else {
            "a device"
        };
        Err(format!("log file {} is {what}, not a regular file", p.display()))
    };
    if let Ok(meta) = std::fs::metadata(p)
        && !meta.is_file()
    {
        return refuse(meta.file_type());
    }
    // Opened without blocking all the same: a FIFO put there meanwhile fails (ENXIO) or is
    // refused below.
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(p)
        .map_err(|e| format!("log file {}: {e}", p.display()))?;
    let kind = f.metadata().map_err(|e| format!("log file {}: {e}", p.display()))?.file_type();
    if !kind.is_file() {
        return refuse(kind);
    }
    // Writes to a regular file never block; the flag only kept the open from waiting.
    rustix::fs::fcntl_setfl(&f, rustix::fs::OFlags::APPEND).map_err(|e| format!("log file {}: {e}", p.display()))?;
    Ok(f)
}

/// Writes each log line (the formatter writes an event whole) with its control characters
/// escaped but the final newline: a name from the store can neither forge a line nor drive a
/// terminal.
struct Printable<W: Write>(W);

impl<W: Write> Write for Printable<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf);
        let (body, end) = text.strip_suffix('\n').map_or((&*text, ""), |b| (b, "\n"));
        self.0.write_all(format!("{}{end}", crate::error::printable(body)).as_bytes())?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// A log file grows to this many bytes; then it becomes `<name>.1` (the one before goes) and
/// a new one begins, as logrotate's `size` rule would: a daemon that runs for months with `-v`
/// keeps at most twice this.
const MOST_LOG_BYTES: u64 = 16 << 20;

/// The log file: each line one append, under a lock so that the file is turned over between
/// lines.
struct LogFile {
    path: std::path::PathBuf,
    /// The open file and its length.
    file: std::sync::Mutex<(std::fs::File, u64)>,
}

impl LogFile {
    fn open(path: &Path) -> Result<LogFile, String> {
        let file = open_log_file(path)?;
        let len = file.metadata().map_or(0, |m| m.len());
        Ok(LogFile { path: path.to_path_buf(), file: std::sync::Mutex::new((file, len)) })
    }
}

/// One line to the log file.
struct LogLine<'a>(&'a LogFile);

impl Write for LogLine<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut held = crate::error::lock(&self.0.file);
        let (file, len) = &mut *held;
        let mut counted = Counted(&*file, 0);
        Printable(&mut counted).write(buf)?;
        *len += counted.1;
        if *len >= MOST_LOG_BYTES {
            let mut old = self.0.path.clone().into_os_string();
            old.push(".1");
            // Where the file cannot be turned over, it goes on growing rather than losing lines.
            if std::fs::rename(&self.0.path, &old).is_ok()
                && let Ok(new) = open_log_file(&self.0.path)
            {
                *held = (new, 0);
            }
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A writer that counts the bytes written through it.
struct Counted<W: Write>(W, u64);

impl<W: Write> Write for Counted<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.0.write(buf)?;
        self.1 += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

impl<'a> MakeWriter<'a> for LogFile {
    type Writer = LogLine<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LogLine(self)
    }
}

/// Whether a syslog daemon listens on this machine.
pub fn syslog_listens() -> bool {
    Syslog::connect().is_some()
}

/// How many warnings and errors are kept.
const RECENT_LINES: usize = 200;

static RECENT: Mutex<VecDeque<String>> = Mutex::new(VecDeque::new());

/// The warnings and errors logged lately, oldest first, one per line (time, level, message).
pub fn recent_errors() -> Vec<u8> {
    let recent = crate::error::lock(&RECENT);
    let mut out = Vec::new();
    for line in recent.iter() {
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out
}

/// Keeps warnings and errors in `RECENT`.
struct Recent;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recent {
    fn on_event(&self, event: &tracing::Event<'_>, _ctx: tracing_subscriber::layer::Context<'_, S>) {
        let level = *event.metadata().level();
        if level > tracing::Level::WARN {
            return;
        }
        let mut line = Line::default();
        event.record(&mut line);
        let text = format!("{} {level:>5} {}", utc_now(), crate::error::printable(&format!("{}{}", line.fields, line.message)));
        let mut recent = crate::error::lock(&RECENT);
        if recent.len() == RECENT_LINES {
            recent.pop_front();
        }
        recent.push_back(text);
    }
}

/// An event as text: `key=value` for each field, then the message.
#[derive(Default)]
struct Line {
    fields: String,
    message: String,
}

impl tracing::field::Visit for Line {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        use std::fmt::Write;
        let _ = match field.name() {
            "message" => write!(self.message, "{value:?}"),
            name => write!(self.fields, "{name}={value:?} "),
        };
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "message" => self.message.push_str(value),
            name => self.fields.push_str(&format!("{name}={value} ")),
        }
    }
}

/// The time now as RFC 3339, UTC, to the second.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rest / 3600, rest % 3600 / 60, rest % 60)
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
        let text = crate::error::printable(text.trim_end());
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_time_is_rfc_3339() {
        let t = super::utc_now();
        assert_eq!((t.len(), &t[4..5], &t[10..11], &t[19..]), (20, "-", "T", "Z"), "{t}");
        assert!(t.as_str() > "2024-01-01");
    }

    #[test]
    fn a_log_file_is_turned_over_past_its_size_and_no_line_is_lost() {
        use std::io::Write;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.log");
        let log = super::LogFile::open(&path).unwrap();
        let line = format!("{}\n", "x".repeat(1023));
        let lines = (super::MOST_LOG_BYTES / 1024 + 10) as usize;
        for _ in 0..lines {
            super::LogLine(&log).write_all(line.as_bytes()).unwrap();
        }
        let (old, new) = (std::fs::read(dir.path().join("m.log.1")).unwrap(), std::fs::read(&path).unwrap());
        assert_eq!(old.len() as u64, super::MOST_LOG_BYTES);
        assert_eq!(old.len() + new.len(), lines * 1024);
        assert!(new.ends_with(line.as_bytes()));
    }
}
