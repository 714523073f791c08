//! raft-rs's log lines into ours: raft-rs logs through `slog`; this drain
//! hands each record to `tracing` at the same level, target `raft`, with its
//! key-value pairs (the group and node the logger was made for, then the
//! record's own) after the message. A level `tracing` would not show is
//! not formatted at all.

use slog::{Drain, Level, OwnedKVList, Record, Serializer, KV};
use std::fmt::{self, Write as _};

/// The drain under every group's `slog::Logger`.
pub struct TracingDrain;

/// The logger for one replica of group `group` on node `node`.
pub fn logger(group: u32, node: u64) -> slog::Logger {
    slog::Logger::root(TracingDrain, slog::o!("group" => group, "node" => node))
}

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record, values: &OwnedKVList) -> Result<(), slog::Never> {
        if !enabled(record.level()) {
            return Ok(());
        }
        let line = format_line(record, values);
        match record.level() {
            Level::Critical | Level::Error => tracing::error!(target: "raft", "{line}"),
            Level::Warning => tracing::warn!(target: "raft", "{line}"),
            Level::Info => tracing::info!(target: "raft", "{line}"),
            Level::Debug => tracing::debug!(target: "raft", "{line}"),
            Level::Trace => tracing::trace!(target: "raft", "{line}"),
        }
        Ok(())
    }
}

fn enabled(level: Level) -> bool {
    match level {
        Level::Critical | Level::Error => tracing::enabled!(target: "raft", tracing::Level::ERROR),
        Level::Warning => tracing::enabled!(target: "raft", tracing::Level::WARN),
        Level::Info => tracing::enabled!(target: "raft", tracing::Level::INFO),
        Level::Debug => tracing::enabled!(target: "raft", tracing::Level::DEBUG),
        Level::Trace => tracing::enabled!(target: "raft", tracing::Level::TRACE),
    }
}

/// The message, then ` key=value` for the logger's pairs and the record's.
fn format_line(record: &Record, values: &OwnedKVList) -> String {
    let mut out = Pairs(record.msg().to_string());
    // Serializing into a String cannot fail.
    let _ = values.serialize(record, &mut out);
    let _ = record.kv().serialize(record, &mut out);
    out.0
}

/// Collects `key=value` pairs after the message.
struct Pairs(String);

impl Serializer for Pairs {
    fn emit_arguments(&mut self, key: slog::Key, val: &fmt::Arguments) -> slog::Result {
        let _ = write!(self.0, " {key}={val}");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;

    /// A tracing writer that sends what it is given to the test.
    #[derive(Clone)]
    struct Buf(crossbeam_channel::Sender<Vec<u8>>);

    impl io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            let _ = self.0.send(b.to_vec());
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn captured(max: tracing::Level, f: impl FnOnce()) -> String {
        let (tx, rx) = crossbeam_channel::unbounded();
        let w = Buf(tx);
        let sub =
            tracing_subscriber::fmt().with_max_level(max).with_ansi(false).with_writer(move || w.clone()).finish();
        tracing::subscriber::with_default(sub, f);
        String::from_utf8(rx.try_iter().flatten().collect()).unwrap()
    }

    #[test]
    fn a_record_keeps_its_level_message_and_pairs() {
        let out = captured(tracing::Level::INFO, || {
            let log = logger(3, 2);
            slog::info!(log, "became leader at term {term}", term = 7; "raft_id" => 2);
        });
        assert!(out.contains("INFO"), "{out}");
        assert!(out.contains("raft: became leader at term 7"), "{out}");
        assert!(out.contains("group=3") && out.contains("node=2") && out.contains("raft_id=2"), "{out}");
    }

    #[test]
    fn levels_tracing_would_not_show_are_dropped() {
        let out = captured(tracing::Level::INFO, || {
            let log = logger(0, 1);
            slog::debug!(log, "sent a heartbeat");
            slog::warn!(log, "lost the quorum");
        });
        assert!(!out.contains("heartbeat"), "{out}");
        assert!(out.contains("WARN") && out.contains("lost the quorum"), "{out}");
    }
}
