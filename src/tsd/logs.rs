//! The server's recent log lines, for `/logs` (OpenTSDB keeps them in
//! logback's `CyclicBufferAppender`): a `tracing` layer that keeps the
//! last [`CAPACITY`] events, and a level that `/logs?level=` changes while
//! the server runs. [`install`] sets both up as the process' subscriber,
//! next to the usual log on stderr.

use std::collections::{BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::sync::OnceLock;

use parking_lot::Mutex;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer, reload};

/// logback's `MaxSize` in OpenTSDB's configuration.
pub const CAPACITY: usize = 1024;

/// One event as `/logs` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    pub time_ms: i64,
    pub level: Level,
    pub thread: String,
    /// The event's target: OpenTSDB's logger name.
    pub target: String,
    pub message: String,
}

impl LogLine {
    /// `LogsRpc`'s line: seconds, level, thread, logger, message, tabbed.
    pub fn format(&self) -> String {
        format!(
            "{}\t{}\t{}\t{}\t{}",
            self.time_ms / 1000,
            self.level,
            self.thread,
            self.target,
            self.message
        )
    }
}

/// Why the level could not be changed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LevelError {
    #[error("Invalid level: {0}")]
    Level(String),
    #[error("Invalid logger: {0}")]
    Logger(String),
    /// No [`install`]ed subscriber: nothing records log lines.
    #[error("No log buffer installed: this process logs only to stderr")]
    NotInstalled,
}

type Reloader = Box<dyn Fn(EnvFilter) -> Result<(), String> + Send + Sync>;

/// The process' ring of lines and its level control.
pub struct LogRing {
    lines: Mutex<VecDeque<LogLine>>,
    /// Targets seen so far: the "loggers" `?logger=` may name.
    targets: Mutex<BTreeSet<String>>,
    /// The directives in force, most recent last.
    directives: Mutex<Vec<String>>,
    reload: OnceLock<Reloader>,
}

static RING: OnceLock<LogRing> = OnceLock::new();

/// The ring, if [`install`] ran in this process.
pub fn ring() -> Option<&'static LogRing> {
    RING.get().filter(|r| r.reload.get().is_some())
}

fn global() -> &'static LogRing {
    RING.get_or_init(|| LogRing {
        lines: Mutex::new(VecDeque::with_capacity(CAPACITY)),
        targets: Mutex::new(BTreeSet::new()),
        directives: Mutex::new(Vec::new()),
        reload: OnceLock::new(),
    })
}

/// Installs the process' subscriber: `directives` (an `EnvFilter`, or
/// `RUST_LOG` when set) decide what is logged, to stderr (`ansi`
/// colours on a terminal) and to the ring. Fails if a subscriber is
/// already set.
pub fn install(directives: &str, ansi: bool) -> Result<(), String> {
    let initial = std::env::var("RUST_LOG").unwrap_or_else(|_| directives.to_string());
    let filter = EnvFilter::try_new(&initial).unwrap_or_else(|_| EnvFilter::new(directives));
    let (filter, handle) = reload::Layer::new(filter);
    tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(ansi),
        )
        .with(RingLayer)
        .try_init()
        .map_err(|e| e.to_string())?;
    let ring = global();
    *ring.directives.lock() = vec![initial];
    let _ = ring.reload.set(Box::new(move |f| {
        handle.reload(f).map_err(|e| e.to_string())
    }));
    Ok(())
}

/// logback's `Level.toLevel`: its names, any case; `None` if unknown.
/// `OFF` and `ALL` are levels there too.
fn parse_level(s: &str) -> Option<&'static str> {
    Some(match s.to_ascii_uppercase().as_str() {
        "ALL" | "TRACE" => "trace",
        "DEBUG" => "debug",
        "INFO" => "info",
        "WARN" => "warn",
        "ERROR" => "error",
        "OFF" => "off",
        _ => return None,
    })
}

impl LogRing {
    /// The lines kept, newest first (as `LogsRpc` iterates them).
    pub fn lines(&self) -> Vec<LogLine> {
        self.lines.lock().iter().rev().cloned().collect()
    }

    /// `/logs?level=<level>[&logger=<name>]`: sets the level of every
    /// logger, or of one target; answers with how many loggers changed.
    pub fn set_level(&self, level: &str, logger: Option<&str>) -> Result<usize, LevelError> {
        let lvl = parse_level(level).ok_or_else(|| LevelError::Level(level.to_string()))?;
        let reload = self.reload.get().ok_or(LevelError::NotInstalled)?;
        let targets = self.targets.lock().clone();
        let mut directives = self.directives.lock();
        let changed = match logger {
            None => {
                // Every logger: one directive for all, dropping the
                // per-target ones that would override it.
                directives.clear();
                directives.push(lvl.to_string());
                targets.len() + 1
            }
            Some(name) => {
                if !targets.contains(name) {
                    return Err(LevelError::Logger(name.to_string()));
                }
                directives.retain(|d| !d.starts_with(&format!("{name}=")));
                directives.push(format!("{name}={lvl}"));
                1
            }
        };
        let filter = EnvFilter::try_new(directives.join(","))
            .map_err(|_| LevelError::Level(level.to_string()))?;
        reload(filter).map_err(|_| LevelError::NotInstalled)?;
        Ok(changed)
    }

    /// logback's name for a level.
    pub fn level_name(level: &str) -> Option<String> {
        parse_level(level).map(|_| level.to_ascii_uppercase())
    }

    fn push(&self, line: LogLine) {
        {
            let mut t = self.targets.lock();
            if !t.contains(&line.target) {
                t.insert(line.target.clone());
            }
        }
        let mut lines = self.lines.lock();
        if lines.len() == CAPACITY {
            lines.pop_front();
        }
        lines.push_back(line);
    }
}

/// The layer feeding the ring.
struct RingLayer;

/// Collects an event's message and its other fields (`key=value`).
#[derive(Default)]
struct Message {
    message: String,
    fields: String,
}

impl Visit for Message {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}

impl<S: Subscriber> Layer<S> for RingLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut m = Message::default();
        event.record(&mut m);
        let meta = event.metadata();
        let thread = std::thread::current();
        global().push(LogLine {
            time_ms: chrono::Utc::now().timestamp_millis(),
            level: *meta.level(),
            thread: thread.name().unwrap_or("unnamed").to_string(),
            target: meta.target().to_string(),
            message: format!("{}{}", m.message, m.fields),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_format_is_tabbed() {
        let l = LogLine {
            time_ms: 1_356_998_400_123,
            level: Level::WARN,
            thread: "main".into(),
            target: "rtsdb::tsd".into(),
            message: "hello".into(),
        };
        assert_eq!(l.format(), "1356998400\tWARN\tmain\trtsdb::tsd\thello");
    }

    #[test]
    fn levels_as_logback_reads_them() {
        assert_eq!(parse_level("warn"), Some("warn"));
        assert_eq!(parse_level("ALL"), Some("trace"));
        assert_eq!(parse_level("loud"), None);
        assert_eq!(LogRing::level_name("debug").as_deref(), Some("DEBUG"));
    }
}
