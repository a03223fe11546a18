//! The optional write-ahead journal: every change is appended before the reply that
//! acknowledges it is sent (group commit: one sync per batch of commands), and the store is
//! rebuilt from it on start.
//!
//! On disk, a directory holds generation `B`: `snapshot-B` (every live task when it was
//! written; absent for generation 0), `journal-B.log`, and the logs after it,
//! `journal-(B+1).log` and on, each with the changes after the one before. All are
//! sequences of framed JSON records (see [`frame`]). A log holds one frame per group-commit
//! batch (a JSON array of the batch's records, read back whole or not at all; a batch over
//! 4 GiB takes several, see [`Journal::append`]), so a crash can tear only the newest
//! log's last frame (under `Fsync`; the other modes do not sync a log before the next
//! begins, and a power loss can cut the end of any log of the chain); a log's first header
//! and snapshot records are framed one by one (a header later in a log is a salvage's,
//! framed alone, or one a batch carries, see [`Journal::keep_seq`]). Compaction (see
//! [`compaction`]) starts `journal-(G+1).log` at once, then writes `snapshot-(G+1)` while
//! the store goes on serving, through a synced temporary file and a rename, and deletes
//! what it replaces.
//! A crash at any point leaves a directory recovery reads correctly: the newest snapshot,
//! then its log and every newer one. A compaction that fails leaves the chain as it was,
//! and the store goes on. No crash tears a snapshot, so a broken or short one is damage,
//! never a torn tail. Recovery deletes only generations older than the newest snapshot; a
//! log that does not continue the chain means a snapshot or a log was lost, and is refused
//! rather than deleted.
//!
//! A store holds an exclusive lock on the directory's `LOCK` file for as long as its journal
//! is open, so a second store (say, a restarted server overlapping the old one) is refused
//! instead of appending to the same log. The lock is advisory and dies with its process: a
//! `LOCK` file left behind by a crash does not block the next start.

mod compaction;
mod frame;

pub(crate) use compaction::{Turn, SNAPSHOT_HOLD};

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::record::{RecoveryPolicy, TaskRecord};
use crate::model::forks::ForkPrivate;
use crate::model::{depth, TaskId};
use crate::StoreError;

/// When an acknowledged change is safe.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Durability {
    /// Each batch is written and `fdatasync`ed before its replies: acknowledged changes
    /// survive a power loss. The default. A store opened in this mode first syncs what
    /// an earlier run in another mode may have left unsynced (its logs, and the names of
    /// those in the directory).
    #[default]
    Fsync,
    /// Each batch is handed to the operating system before its replies: acknowledged
    /// changes survive the process crashing, not the machine.
    Flush,
    /// Records are buffered and written when the buffer fills: fastest, and a crash may
    /// lose the last acknowledged changes.
    None,
}

/// Where and how the store keeps its journal.
#[derive(Clone, PartialEq, Debug)]
pub struct JournalConfig {
    /// The journal's directory (created if missing).
    pub dir: PathBuf,
    /// When acknowledged changes are safe (default: fsync).
    pub durability: Durability,
    /// Compact (snapshot and start a new log) once the log is this many times larger than
    /// the live data, and at least `compact_min_bytes` (defaults 4 and 1 MiB).
    pub compact_ratio: u32,
    /// See `compact_ratio`.
    pub compact_min_bytes: u64,
    /// What to do with tasks found still running at start (default: fail them).
    pub recovery: RecoveryPolicy,
    /// Start even when the current log is damaged (a broken record with valid ones after
    /// it), keeping what comes before the damage: the rest of the log is set aside in
    /// `journal-G.log.damaged-OFFSET` next to it (`.1`, `.2`, … appended when an earlier
    /// salvage took that name), any newer log of the chain (left by a compaction that had
    /// not finished) whole in `journal-H.log.damaged-0`, since its changes came after the
    /// damage, and a warning says so (default: off, and a
    /// damaged log is an error). List cursors issued before a salvage are refused after it
    /// (`InvalidCursor`): the tasks they may point into are gone, and new tasks take their
    /// sequence numbers. Acknowledged changes after the damage are lost, which is
    /// why it is never the default. With `Fsync` durability damage means the disk or
    /// someone else broke the file; with `Flush` or `None` a power loss alone can leave a
    /// hole before pages that reached the disk. A damaged snapshot is an error all the same.
    pub salvage: bool,
}

impl JournalConfig {
    /// A journal in `dir` with the defaults.
    pub fn new(dir: impl Into<PathBuf>) -> JournalConfig {
        JournalConfig {
            dir: dir.into(),
            durability: Durability::Fsync,
            compact_ratio: 4,
            compact_min_bytes: 1024 * 1024,
            recovery: RecoveryPolicy::FailRunning,
            salvage: false,
        }
    }
}

/// The format this build writes. Version 1 framed every log record by itself, so a crash
/// could tear a batch in the middle. Version 2 counted a snapshot's tasks in its header.
/// Version 3 counts them in an [`End`](Record::End) record instead (a snapshot is written
/// while the store serves, so the count is known only at the end), and a generation's log
/// may be followed by newer logs before its snapshot is replaced (see [`compaction`]).
/// This build reads the older ones and rewrites them at start (see
/// [`Journal::should_compact`]).
const VERSION: u32 = 3;
/// The oldest format this build reads.
const OLDEST_VERSION: u32 = 1;

/// One record in a journal or snapshot file.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(crate) enum Record {
    /// First record of every file.
    Header {
        version: u32,
        generation: u64,
        cursor_key: u64,
        next_seq: u64,
        /// In a snapshot, how many task records follow: a snapshot cut short on a frame
        /// boundary reads as a whole file, and only this tells. Absent in logs, and in
        /// snapshots of builds before it (older builds ignore it, so the version stays).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tasks: Option<u64>,
    },
    /// A task's full state (its origin only in its first record).
    Put(TaskRecord),
    /// A task is gone.
    Remove { id: TaskId },
    /// The last record of a snapshot (version 3 on): how many tasks it holds. A snapshot
    /// cut short on a frame boundary reads as a whole file, and only this tells.
    End { tasks: u64 },
}

/// What recovery found.
#[derive(Debug, Default)]
pub(crate) struct Recovered {
    pub(crate) cursor_key: Option<u64>,
    pub(crate) next_seq: u64,
    pub(crate) tasks: Vec<TaskRecord>,
    /// A file was written in an older format than [`VERSION`], or is a snapshot that does
    /// not count its tasks.
    pub(crate) legacy: bool,
    /// Two tasks share a sequence number, which only damage makes: the store keeps the
    /// first and skips the other (see [`StoreMachine::restore`](crate::StoreMachine::restore)).
    pub(crate) skips: bool,
}

/// An open journal, appending to `journal-G.log`.
#[derive(Debug)]
pub(crate) struct Journal {
    config: JournalConfig,
    /// The generation of the log being appended to.
    generation: u64,
    /// The generation recovery starts from: the newest snapshot's (0 without one). The
    /// logs from this one to `generation` form the chain recovery replays.
    base: u64,
    log: BufWriter<File>,
    log_bytes: u64,
    /// Bytes of the chain's logs before the current one: a compaction that did not finish
    /// leaves them, and recovery replays them all, so they count towards the next one.
    older_bytes: u64,
    /// Size of the live data when the base generation began (its snapshot), for
    /// compaction.
    base_bytes: u64,
    /// The batch being appended: a JSON array of records, written as one frame by
    /// [`commit`](Journal::commit).
    batch: Vec<u8>,
    /// The parts of a batch too large for one frame that are closed already (each a JSON
    /// array of records), written before `batch`.
    sealed: Vec<Vec<u8>>,
    /// [`FRAME_LIMIT`]; smaller in tests.
    frame_limit: usize,
    /// The compaction under way, if any (see [`compaction`]).
    compaction: Option<compaction::Compaction>,
    /// An exclusive lock on `LOCK` in the directory, held while the journal lives: a second
    /// store appending to the same log would reuse sequence numbers and lose tasks. The
    /// operating system drops it with the file, and with a process that dies. Kept from
    /// forked children (see [`Locked`]), which would otherwise hold it too.
    _lock: Locked,
    /// The files read at start were in an older format: compact at once, so that no file
    /// mixes formats and an older build meeting the new one says so by its version (and a
    /// snapshot that did not count its tasks is rewritten with the count).
    legacy: bool,
    /// The log being appended to is in an older format (it is the one read at start, and
    /// its header says so): until a compaction switches to a new log, one that cannot
    /// begin stops the store (see [`abandon`](Journal::abandon)).
    legacy_log: bool,
    /// What the files hold is not what the store keeps (recovery skipped a record that
    /// shares its task's sequence number): compact at once, or the skipped task comes back
    /// at a later start, once the task that shadowed it is gone. Unlike `legacy`, a
    /// compaction that fails is tried again later like any other.
    rewrite: bool,
    /// After a failed compaction: no new attempt before the log holds this many bytes.
    retry_at: u64,
    /// The first sequence number recovery would give out from what is written so far
    /// (headers and task records included, the current batch too).
    seq_written: u64,
}

impl Drop for Journal {
    fn drop(&mut self) {
        self.stop_compaction();
    }
}

/// How a compaction failed.
#[derive(Debug)]
pub(crate) enum CompactError {
    /// Nothing changed on disk that recovery reads: the current generation goes on, and
    /// its log takes the next batches as before.
    Abandoned(io::Error),
    /// The new generation could be neither finished nor undone: what recovery would find
    /// is unknown, so nothing more may be acknowledged.
    Broken(io::Error),
}

/// Prefixes an error with the path it concerns.
fn at(path: &Path) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// A batch buffer larger than this is not kept for reuse after its batch.
const BATCH_KEEP: usize = 1024 * 1024;

/// The largest payload a frame holds (its length is 32 bits). A batch beyond it is written
/// as several frames (see [`Journal::append`]).
const FRAME_LIMIT: usize = u32::MAX as usize;

fn io_error(path: &Path, what: &str, e: io::Error) -> StoreError {
    StoreError::Journal(format!("{what} {}: {e}", path.display()))
}

fn snapshot_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("snapshot-{generation:016x}"))
}

fn log_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("journal-{generation:016x}.log"))
}

/// Generations present in `dir`: snapshots and logs, by number (files named otherwise
/// are left alone).
fn generations(dir: &Path) -> Result<(Vec<u64>, Vec<u64>), StoreError> {
    let (mut snapshots, mut logs) = (Vec::new(), Vec::new());
    let entries = fs::read_dir(dir).map_err(|e| io_error(dir, "cannot read", e))?;
    for entry in entries {
        let name = entry
            .map_err(|e| io_error(dir, "cannot read", e))?
            .file_name();
        let name = name.to_string_lossy();
        // Only the names `snapshot_path` and `log_path` give: another name that parses
        // ("journal-1.log", uppercase, a sign, more digits) would stand for a file that is
        // not there.
        let parse = |hex: &str| {
            let canonical =
                hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            canonical
                .then(|| u64::from_str_radix(hex, 16).ok())
                .flatten()
        };
        if let Some(g) = name.strip_prefix("snapshot-").and_then(parse) {
            snapshots.push(g);
        } else if let Some(g) = name
            .strip_prefix("journal-")
            .and_then(|n| n.strip_suffix(".log"))
            .and_then(parse)
        {
            logs.push(g);
        }
    }
    snapshots.sort_unstable();
    logs.sort_unstable();
    Ok((snapshots, logs))
}

/// What a file is, which decides what a broken end means.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum FileKind {
    /// `snapshot-G`: written whole to a temporary file, synced, then renamed into place, so
    /// no crash tears it. Any broken or missing end is damage.
    Snapshot,
    /// `journal-G.log`, the newest (or any, without `Fsync`): a crash can tear its last
    /// batch, which is cut off.
    Log,
    /// Under `Fsync`, a log with a newer one after it: synced before the newer one began,
    /// so a broken end is damage too.
    EarlierLog,
}

/// How much of a log replay kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replayed {
    /// Every record (a torn tail of the newest log is not one): the valid length.
    Whole(u64),
    /// Salvaged: damage starts at this offset, where the file is to be cut (see
    /// [`cut_with_new_key`]). What any newer log held came after it, and is set aside.
    Cut(u64),
}

impl Replayed {
    fn bytes(self) -> u64 {
        match self {
            Replayed::Whole(bytes) | Replayed::Cut(bytes) => bytes,
        }
    }
}

/// The journal error for damage found in `path` at byte `offset`.
fn damaged(path: &Path, offset: u64, reason: impl std::fmt::Display) -> StoreError {
    StoreError::Journal(format!(
        "{} is damaged at byte offset {offset}: {reason}",
        path.display()
    ))
}

/// Deepest nesting a record may have: a payload as deep as a store keeps
/// ([`MAX_PAYLOAD_DEPTH`](crate::model::MAX_PAYLOAD_DEPTH)) plus the few levels a record
/// wraps it in (a batch, a record, an outcome or an answer map), with room to spare.
/// serde_json's own read limit (128) would refuse records written from a request the
/// server took; this bound keeps a crafted file from running the reader's stack out.
const MAX_RECORD_DEPTH: usize = crate::model::MAX_PAYLOAD_DEPTH + 64;

/// Reads one payload (a record, or a batch of them), as deep as [`MAX_RECORD_DEPTH`].
fn read_record<T: serde::de::DeserializeOwned>(payload: &[u8]) -> serde_json::Result<T> {
    if depth::text_depth(payload) > MAX_RECORD_DEPTH {
        return Err(serde::de::Error::custom(format_args!(
            "nested deeper than {MAX_RECORD_DEPTH} levels"
        )));
    }
    let mut reader = serde_json::Deserializer::from_slice(payload);
    reader.disable_recursion_limit();
    let value = T::deserialize(&mut reader)?;
    reader.end()?;
    Ok(value)
}

/// Copies `bytes[at..]` of the log at `path` into `<path>.damaged-<at>`, durably, before the
/// log is cut at `at`: a salvage keeps what it drops for whoever looks into the damage.
/// A file left by an earlier salvage is never overwritten: the next free name is taken
/// (`…damaged-<at>.1`, `.2`, …), since it may be the only copy of what that salvage dropped.
fn set_aside(path: &Path, bytes: &[u8], at: u64) -> Result<PathBuf, StoreError> {
    let named = |n: u32| {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".damaged-{at}"));
        if n > 0 {
            name.push(format!(".{n}"));
        }
        PathBuf::from(name)
    };
    let mut n = 0;
    let (aside, mut file) = loop {
        let aside = named(n);
        match OpenOptions::new().write(true).create_new(true).open(&aside) {
            Ok(file) => break (aside, file),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) => return Err(io_error(&aside, "cannot create", e)),
        }
    };
    file.write_all(&bytes[at as usize..])
        .and_then(|()| file.sync_all())
        .map_err(|e| io_error(&aside, "cannot write", e))?;
    let dir = parent_dir(path);
    sync_dir(dir).map_err(|e| io_error(dir, "cannot sync", e))?;
    Ok(aside)
}

/// What a snapshot's records said about it, to check it is whole.
#[derive(Default)]
struct Tally {
    /// The header's format version, once read.
    version: Option<u32>,
    /// The task count the header (version 2) or the end (version 3) promises; absent in
    /// snapshots written before either did.
    promised: Option<u64>,
    /// An end was read; nothing may follow it.
    ended: bool,
    /// A record followed the end.
    after_end: bool,
    puts: u64,
}

impl Tally {
    fn count(&mut self, record: &Record) {
        self.after_end |= self.ended;
        match record {
            Record::Header { version, tasks, .. } => {
                self.version = Some(*version);
                self.promised = *tasks;
            }
            Record::Put(_) => self.puts += 1,
            Record::Remove { .. } => {}
            Record::End { tasks } => {
                self.ended = true;
                self.promised = Some(*tasks);
            }
        }
    }
}

/// Reads one file's records into `state`, and returns how much of it was kept and the
/// format version its header names (`None` for a file without one). The newest log's
/// torn tail is cut off the file; damage, and any tear in a snapshot or an earlier log, is
/// an error naming the file and the offset (a log's damage is salvaged instead when
/// `salvage` is set).
///
/// `later` are the logs after this one in the chain: a salvage sets them aside whole
/// before it cuts this one, since their changes came after what is lost. In the other
/// order, a salvage stopped between the two (by a crash, or by no room to set them aside)
/// would leave a log that reads as whole followed by the later ones, and the next start
/// would replay them over the hole without a word.
fn replay(
    path: &Path,
    kind: FileKind,
    salvage: bool,
    later: &[PathBuf],
    state: &mut BTreeMap<TaskId, TaskRecord>,
    recovered: &mut Recovered,
) -> Result<(Replayed, Option<u32>), StoreError> {
    let bytes = fs::read(path).map_err(|e| io_error(path, "cannot read", e))?;
    let mut salvaged = false;
    let read = match frame::read_frames(&bytes) {
        Ok((_, frame::Ending::TornTail { offset })) if kind == FileKind::EarlierLog => {
            Err(frame::Damaged {
                offset,
                reason: "under Fsync durability a log is complete before a newer one \
                         begins, so a broken record at the end of one with a newer log after \
                         it is not a torn write; a power loss under Flush or None leaves one, \
                         so if the directory was last written under either, open it once with \
                         that durability (Durability::Flush, mcp-task-server --durability \
                         flush): the cut batch is dropped and the newer logs kept. Salvage \
                         sets the newer logs aside too"
                    .into(),
            })
        }
        read => read,
    };
    let (frames, ending) = match read {
        Ok(read) => read,
        Err(damage) if kind != FileKind::Snapshot && salvage => {
            let at = damage.offset;
            let aside = set_aside(path, &bytes, at)?;
            log::warn!(
                "{} is damaged at byte offset {at} ({}); salvaging: the log is cut there, and \
                 the {} bytes from there on are set aside in {}",
                path.display(),
                damage.reason,
                bytes.len() as u64 - at,
                aside.display()
            );
            salvaged = true;
            // Everything before the damage was read as valid frames already.
            let (frames, _) = frame::read_frames(&bytes[..at as usize])
                .map_err(|again| damaged(path, again.offset, again.reason))?;
            (frames, frame::Ending::TornTail { offset: at })
        }
        Err(damage) if kind != FileKind::Snapshot => {
            return Err(damaged(
                path,
                damage.offset,
                format!(
                    "{}; to start anyway, losing this record and every one after it (set \
                     aside next to the log), set JournalConfig::salvage \
                     (mcp-task-server --journal-salvage)",
                    damage.reason
                ),
            ))
        }
        Err(damage) => return Err(in_snapshot(damaged(path, damage.offset, damage.reason))),
    };
    if let (FileKind::Snapshot, frame::Ending::TornTail { offset }) = (kind, &ending) {
        return Err(in_snapshot(damaged(
            path,
            *offset,
            "a snapshot is synced before it is renamed into place, so a broken record in it \
             is not a torn write",
        )));
    }
    let mut offset = 0u64;
    let mut tally = Tally::default();
    for payload in frames {
        let unreadable = |e: serde_json::Error| {
            StoreError::Journal(format!(
                "{} has an unreadable record at byte offset {offset}: {e}",
                path.display()
            ))
        };
        // A batch is an array of records; a header or snapshot record (and every record
        // of a version 1 log) is framed alone.
        let records: Vec<Record> = if payload.first() == Some(&b'[') {
            read_record(payload).map_err(unreadable)?
        } else {
            vec![read_record(payload).map_err(unreadable)?]
        };
        offset += 8 + payload.len() as u64;
        for record in records {
            tally.count(&record);
            apply(path, record, state, recovered)?;
        }
    }
    if kind == FileKind::Snapshot {
        check_whole(path, &tally, offset, recovered).map_err(in_snapshot)?;
    }
    if let frame::Ending::TornTail { offset } = ending {
        if salvaged {
            // Newest first: stopped half way, the chain is still whole up to the damage,
            // which the next start meets again. The cut itself is the caller's (see
            // `cut_with_new_key`).
            for later in later.iter().rev() {
                set_aside_whole(later)?;
            }
            return Ok((Replayed::Cut(offset), tally.version));
        }
        log::warn!(
            "{}: dropping a torn batch at byte offset {offset} (a write cut short by a \
             crash)",
            path.display()
        );
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| io_error(path, "cannot open", e))?;
        file.set_len(offset)
            .and_then(|_| file.sync_all())
            .map_err(|e| io_error(path, "cannot truncate", e))?;
        return Ok((Replayed::Whole(offset), tally.version));
    }
    Ok((Replayed::Whole(bytes.len() as u64), tally.version))
}

/// Ends a damaged snapshot's error with what is (not) left to do.
fn in_snapshot(e: StoreError) -> StoreError {
    match e {
        StoreError::Journal(why) => StoreError::Journal(format!(
            "{why}; salvage does not apply to a snapshot (its tasks are in no other file, \
             and its logs hold only later changes): restore the directory from a backup"
        )),
        other => other,
    }
}

/// Checks that a snapshot of `len` bytes holds everything its header promises: a snapshot
/// cut on a frame boundary reads as a clean file, and only the count tells.
fn check_whole(
    path: &Path,
    tally: &Tally,
    len: u64,
    recovered: &mut Recovered,
) -> Result<(), StoreError> {
    let Some(version) = tally.version else {
        return Err(damaged(path, 0, "the snapshot has no header"));
    };
    if tally.after_end {
        return Err(damaged(path, len, "records follow the snapshot's end"));
    }
    if version >= 3 && !tally.ended {
        return Err(damaged(
            path,
            len,
            "the snapshot has no end: it was cut short",
        ));
    }
    match tally.promised {
        Some(promised) if promised != tally.puts => Err(damaged(
            path,
            len,
            format!(
                "the snapshot promises {promised} tasks and it holds {}",
                tally.puts
            ),
        )),
        Some(_) => Ok(()),
        // Written before snapshots counted their tasks: rewrite it with a count at once.
        None => {
            recovered.legacy = true;
            Ok(())
        }
    }
}

/// Applies one record read back from `path` to the recovered state.
fn apply(
    path: &Path,
    record: Record,
    state: &mut BTreeMap<TaskId, TaskRecord>,
    recovered: &mut Recovered,
) -> Result<(), StoreError> {
    match record {
        Record::Header {
            version,
            cursor_key,
            next_seq,
            ..
        } => {
            if !(OLDEST_VERSION..=VERSION).contains(&version) {
                return Err(StoreError::Journal(format!(
                    "{} has format version {version}; this build reads {OLDEST_VERSION} to {VERSION}",
                    path.display()
                )));
            }
            recovered.legacy |= version < VERSION;
            recovered.cursor_key = Some(cursor_key);
            recovered.next_seq = recovered.next_seq.max(next_seq);
        }
        Record::Put(mut task) => {
            if task.origin.is_none() {
                task.origin = state.get(&task.id).and_then(|t| t.origin.clone());
            }
            // Out of range is refused by the restore that follows, not wrapped here.
            recovered.next_seq = recovered.next_seq.max(task.seq.saturating_add(1));
            state.insert(task.id, task);
        }
        Record::Remove { id } => {
            state.remove(&id);
        }
        // Only closes a snapshot (see `Tally`); it changes no task.
        Record::End { .. } => {}
    }
    Ok(())
}

/// The logs recovery replays over the snapshot of generation `base` (the newest; 0 when
/// there is none): `journal-base.log` and every newer one, which must follow each other
/// without a gap. Empty when there is no log from `base` on.
///
/// Compaction starts the next log before it writes that generation's snapshot, so a chain
/// of several logs is what a compaction under way (or one that failed) leaves. A log that
/// does not continue the chain means a file was lost: a snapshot (its tasks are gone, and
/// the log's changes cannot be applied without them) or a log between. Recovering the
/// older generation alone would delete the newer logs and every change acknowledged in
/// them; refusing keeps every file for a human.
fn chain(dir: &Path, base: u64, logs: &[u64]) -> Result<Vec<u64>, StoreError> {
    let chain: Vec<u64> = logs.iter().copied().filter(|g| *g >= base).collect();
    let mut expected = base;
    for &g in &chain {
        if g != expected {
            let missing = if expected == base {
                snapshot_path(dir, g)
            } else {
                log_path(dir, expected)
            };
            return Err(StoreError::Journal(format!(
                "{} needs {}, which is missing: recovering an older generation instead would \
                 lose every change in the log; refusing to start (put it back, from a backup, \
                 and start again)",
                log_path(dir, g).display(),
                missing.display(),
            )));
        }
        expected = g.saturating_add(1);
    }
    Ok(chain)
}

/// Sets a whole log aside (`<path>.damaged-0`) and removes it: a salvage cut an older log
/// of its chain, and this one's changes came after what was lost.
fn set_aside_whole(path: &Path) -> Result<(), StoreError> {
    let bytes = fs::read(path).map_err(|e| io_error(path, "cannot read", e))?;
    let aside = set_aside(path, &bytes, 0)?;
    fs::remove_file(path).map_err(|e| io_error(path, "cannot remove", e))?;
    let dir = parent_dir(path);
    sync_dir(dir).map_err(|e| io_error(dir, "cannot sync", e))?;
    log::warn!(
        "{} follows a log cut by salvage; it is set aside whole in {}",
        path.display(),
        aside.display()
    );
    Ok(())
}

/// Cuts the log at `path` (generation `generation`, in format `version` when it has a
/// header) where a salvage found damage, at `at`, and gives list cursors a new key; returns
/// the log's new length.
///
/// The tasks a salvage drops leave their sequence numbers free, and the next tasks take
/// them again: a cursor issued before the damage that names one of the dropped tasks would
/// page on after the new tasks that took the numbers, and the client would never see them.
/// With a new key it is refused (`InvalidCursor`). The key goes into a header appended
/// right after the cut, synced before anything is served, also to a log cut to nothing
/// (whose header, with the key, would otherwise come only when the store first writes).
/// Written over the damage before the cut instead, it could end just where a valid record
/// of the damaged part begins: a process stopped between the two would leave a log that
/// reads as whole with that record replayed after the hole. Stopped between the cut and
/// the header, a start finds the log whole with the old key: only the cursors are not
/// refused.
fn cut_with_new_key(
    path: &Path,
    generation: u64,
    at: u64,
    version: Option<u32>,
    recovered: &mut Recovered,
) -> Result<u64, StoreError> {
    let cursor_key = TaskId::random().as_u128() as u64;
    recovered.cursor_key = Some(cursor_key);
    let header = Record::Header {
        version: version.unwrap_or(VERSION),
        generation,
        cursor_key,
        next_seq: recovered.next_seq,
        tasks: None,
    };
    let cut = (|| {
        let mut frame = Vec::new();
        frame::write_frame(&mut frame, &serde_json::to_vec(&header)?)?;
        let mut file = OpenOptions::new().write(true).open(path)?;
        file.set_len(at)?;
        file.sync_all()?;
        file.seek(SeekFrom::Start(at))?;
        file.write_all(&frame)?;
        file.sync_data()?;
        Ok::<_, io::Error>(at + frame.len() as u64)
    })();
    let len = cut.map_err(|e| io_error(path, "cannot cut", e))?;
    log::warn!(
        "{}: cut at byte offset {at}; list cursors issued before the salvage are refused \
         from now on",
        path.display()
    );
    Ok(len)
}

/// The directory's lock, held: the `LOCK` file, kept from forked children (see
/// [`Journal`]'s `_lock`). The registration goes first when dropped.
#[derive(Debug)]
struct Locked {
    _private: ForkPrivate,
    _file: File,
}

/// Takes the directory's exclusive lock, or says that another store holds it. The file is
/// kept from children forked from the moment it is open, before the lock is taken (a
/// child forked later shares the lock) and while the journal is read, which may take a
/// while.
fn lock_dir(dir: &Path) -> Result<Locked, StoreError> {
    let path = dir.join("LOCK");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| io_error(&path, "cannot open", e))?;
    let private = ForkPrivate::new(lock_fd(&file));
    // A child process this one starts shares the lock (through its copy of the file)
    // from its fork until its exec, so a lock this process just let go of may still be
    // held for a moment: try again for a while before calling the directory in use.
    let deadline = Instant::now() + LOCK_PATIENCE;
    loop {
        match file.try_lock() {
            Ok(()) => {
                return Ok(Locked {
                    _private: private,
                    _file: file,
                })
            }
            Err(TryLockError::WouldBlock) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(TryLockError::WouldBlock) => {
                return Err(StoreError::Journal(format!(
                    "{} is in use by another store (its LOCK file is held)",
                    dir.display()
                )))
            }
            Err(TryLockError::Error(e)) => return Err(io_error(&path, "cannot lock", e)),
        }
    }
}

/// The descriptor of the lock file, for [`ForkPrivate`].
#[cfg(unix)]
fn lock_fd(lock: &File) -> std::os::fd::RawFd {
    std::os::fd::AsRawFd::as_raw_fd(lock)
}

#[cfg(not(unix))]
fn lock_fd(_: &File) {}

/// How long a store waits for the directory's lock before calling it in use.
const LOCK_PATIENCE: Duration = Duration::from_secs(1);

/// Makes the entries of `dir` (files created, renamed or removed in it) durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(test)]
    tests::SYNCED_DIRS.with(|synced| synced.borrow_mut().push(dir.to_owned()));
    File::open(dir)?.sync_all()
}

/// Makes the data of the log at `path` (open as `file`) durable, at start.
fn sync_log(path: &Path, file: &File) -> Result<(), StoreError> {
    #[cfg(test)]
    tests::SYNCED_FILES.with(|synced| synced.borrow_mut().push(path.to_owned()));
    file.sync_data()
        .map_err(|e| io_error(path, "cannot sync", e))
}

/// `dir` and those of its ancestors that do not exist yet, deepest first: what
/// `create_dir_all` is about to create.
fn missing_dirs(dir: &Path) -> Vec<PathBuf> {
    dir.ancestors()
        .filter(|d| !d.as_os_str().is_empty())
        .take_while(|d| !d.exists())
        .map(Path::to_path_buf)
        .collect()
}

/// The directory holding `path`'s entry (`.` for a bare relative name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Makes the entries `open` created durable: a new log's in `dir` (and every entry of `dir`
/// when `entries`), and each created directory's in its parent. Without this a power loss
/// can take the first log, and every batch acknowledged in it, with it: `fdatasync` on a
/// file does not persist its name.
fn sync_created(dir: &Path, created_dirs: &[PathBuf], entries: bool) -> Result<(), StoreError> {
    let sync = |d: &Path| sync_dir(d).map_err(|e| io_error(d, "cannot sync", e));
    if entries || !created_dirs.is_empty() {
        sync(dir)?;
    }
    for created in created_dirs {
        sync(parent_dir(created))?;
    }
    Ok(())
}

impl Journal {
    /// Opens (or creates) the journal in `config.dir` and reads back what it holds.
    pub(crate) fn open(config: &JournalConfig) -> Result<(Journal, Recovered), StoreError> {
        let dir = &config.dir;
        // Else a file here fails creating it with "File exists", and no path with an error
        // about a file named "".
        if dir.as_os_str().is_empty() {
            return Err(StoreError::Journal("no directory given".into()));
        }
        if dir.exists() && !dir.is_dir() {
            return Err(StoreError::Journal(format!(
                "{} is not a directory",
                dir.display()
            )));
        }
        let created_dirs = missing_dirs(dir);
        fs::create_dir_all(dir).map_err(|e| io_error(dir, "cannot create", e))?;
        // Before reading anything: what another store is writing is not ours to recover.
        let lock = lock_dir(dir)?;
        let (snapshots, logs) = generations(dir)?;
        let base = snapshots.last().copied().unwrap_or(0);
        let chain = chain(dir, base, &logs)?;
        let mut recovered = Recovered::default();
        let mut state = BTreeMap::new();
        let mut base_bytes = 0;
        if snapshots.last().is_some() {
            base_bytes = replay(
                &snapshot_path(dir, base),
                FileKind::Snapshot,
                false,
                &[],
                &mut state,
                &mut recovered,
            )?
            .0
            .bytes();
        }
        // The logs of the chain, oldest first.
        let mut log_bytes = 0;
        let mut older_bytes = 0u64;
        let mut generation = base;
        // The format of the log appended to from here on (`None` while it has no header:
        // it gets one of this format).
        let mut log_version = None;
        for (n, &g) in chain.iter().enumerate() {
            let path = log_path(dir, g);
            let last = n + 1 == chain.len();
            // Under `Fsync` every log was synced before the next began, so a broken end of
            // one with a newer log after it is damage. The other modes do not sync at the
            // switch (it stalled every caller): a power loss can cut such a log's end as it
            // can the newest's, and its lost batches are dropped alike, the later logs
            // replayed after it (each record is a task's whole state, so a task ends in
            // its latest surviving one).
            let kind = if last || config.durability != Durability::Fsync {
                FileKind::Log
            } else {
                FileKind::EarlierLog
            };
            generation = g;
            let later: Vec<PathBuf> = chain[n + 1..].iter().map(|&g| log_path(dir, g)).collect();
            let (replayed, version) = replay(
                &path,
                kind,
                config.salvage,
                &later,
                &mut state,
                &mut recovered,
            )?;
            log_version = version;
            match replayed {
                Replayed::Whole(bytes) => {
                    older_bytes = older_bytes.saturating_add(log_bytes);
                    log_bytes = bytes;
                }
                Replayed::Cut(at) => {
                    older_bytes = older_bytes.saturating_add(log_bytes);
                    // Salvaged: the later logs, whose changes came after the damage, are
                    // set aside already.
                    log_bytes = cut_with_new_key(&path, g, at, version, &mut recovered)?;
                    break;
                }
            }
        }
        // Older generations (and leftovers of an interrupted compaction) are obsolete; the
        // chain is all that is newer.
        for old in snapshots.iter().chain(&logs).filter(|g| **g < base) {
            let _ = fs::remove_file(snapshot_path(dir, *old));
            let _ = fs::remove_file(log_path(dir, *old));
        }
        let _ = fs::remove_file(dir.join("snapshot.tmp"));
        let path = log_path(dir, generation);
        let new_log = chain.is_empty();
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| io_error(&path, "cannot open", e))?;
        let fsync = config.durability == Durability::Fsync;
        if fsync {
            // Only `Fsync` promises that acknowledged batches survive a power loss, and
            // this run may follow one under another mode, which synced neither its logs
            // nor the names of those its compactions began. A power loss during this run
            // would then cut an older log that recovery under `Fsync` takes as whole
            // (damage, and a salvage would set aside this run's log after it), or take a
            // log and what this run acknowledged in it. Logs written under `Fsync` are
            // durable already, and syncing them again costs next to nothing.
            for &g in chain.iter().take_while(|&&g| g < generation) {
                let older = log_path(dir, g);
                let log = OpenOptions::new()
                    .write(true)
                    .open(&older)
                    .map_err(|e| io_error(&older, "cannot open", e))?;
                sync_log(&older, &log)?;
            }
            if !new_log {
                sync_log(&path, &file)?;
            }
        }
        // In every mode, once: a later run may be under `Fsync`, and cannot tell what an
        // earlier one created.
        sync_created(dir, &created_dirs, new_log || fsync)?;
        let mut tasks: Vec<TaskRecord> = state.into_values().collect();
        // Stable: tasks sharing a sequence number stay in id order, so that every start
        // keeps the same one.
        tasks.sort_by_key(|t| t.seq);
        recovered.skips = tasks.windows(2).any(|pair| pair[0].seq == pair[1].seq);
        recovered.tasks = tasks;
        let journal = Journal {
            config: config.clone(),
            generation,
            base,
            log: BufWriter::with_capacity(64 * 1024, file),
            log_bytes,
            older_bytes,
            base_bytes,
            batch: Vec::new(),
            sealed: Vec::new(),
            frame_limit: FRAME_LIMIT,
            compaction: None,
            _lock: lock,
            legacy: recovered.legacy,
            rewrite: recovered.skips,
            // Only the log appended to matters: an older one before it in the chain (left
            // by an upgrade's compaction cut short) is never written again.
            legacy_log: log_version.is_some_and(|v| v < VERSION),
            retry_at: 0,
            seq_written: recovered.next_seq,
        };
        Ok((journal, recovered))
    }

    /// Whether this log is new (it needs a header before anything else).
    pub(crate) fn is_empty(&self) -> bool {
        self.log_bytes == 0
    }

    /// Appends a record to the current batch (written by [`commit`](Self::commit)).
    ///
    /// A batch that outgrows one frame goes out in several, each closed before the record
    /// that would not fit, rather than stopping the store (a few hundred commands storing
    /// results of some megabytes each get there). Replayed alone, the first parts still
    /// give each task a whole state: a task has one record per batch. Nothing of the batch
    /// is acknowledged before its last part is durable, and under `Fsync` each part is
    /// synced before the next is written, so only the last frame written can be torn.
    /// A single record over the limit cannot be split: it fails the commit.
    pub(crate) fn append(&mut self, record: &Record) -> io::Result<()> {
        let start = self.batch.len();
        self.batch.push(if start == 0 { b'[' } else { b',' });
        serde_json::to_writer(&mut self.batch, record)?;
        self.note_seq(record);
        // One byte for the `]` that closes the part.
        if self.batch.len() >= self.frame_limit && start > 0 {
            // The record moves to the next part with one copy, and the closed part gives
            // back the memory past its bytes (glibc shrinks a large allocation in place).
            let mut next = Vec::with_capacity(self.batch.len() - start);
            next.push(b'[');
            next.extend_from_slice(&self.batch[start + 1..]);
            self.batch.truncate(start + 1);
            self.batch[start] = b']';
            self.batch.shrink_to_fit();
            self.sealed.push(std::mem::replace(&mut self.batch, next));
        }
        Ok(())
    }

    /// Whether the log appended to is of an older format: a compaction must switch to a
    /// new log before any batch is written.
    pub(crate) fn appends_to_older_format(&self) -> bool {
        self.legacy_log
    }

    /// Whether records wait in the current batch for [`commit`](Self::commit).
    pub(crate) fn has_batch(&self) -> bool {
        !self.batch.is_empty()
    }

    /// Makes sure recovery gives out no sequence number below `next_seq`: appends a header
    /// carrying it to the batch when nothing written says so already.
    ///
    /// A task created and removed within one batch writes nothing (see
    /// [`Change::then`](crate::store::Change)), so the number it took is known only to the
    /// running store. A list page served in that batch may end on the task, and its cursor
    /// names that number: after a restart the next task would take the number again and
    /// sort next to the cursor, where a client paging on from it could miss it. A header
    /// in the middle of a log is what a salvage appends too; recovery takes the largest
    /// `next_seq` it reads.
    pub(crate) fn keep_seq(&mut self, next_seq: u64, cursor_key: u64) -> io::Result<()> {
        // A log of an older format is never appended a header of this one: the next start
        // would take the whole log for this format. Its compaction, due at once, writes
        // the number into the new log's header.
        if next_seq <= self.seq_written || self.legacy_log {
            return Ok(());
        }
        self.append(&Record::Header {
            version: VERSION,
            generation: self.generation,
            cursor_key,
            next_seq,
            tasks: None,
        })
    }

    /// Follows the sequence numbers `record` tells recovery of.
    fn note_seq(&mut self, record: &Record) {
        let next = match record {
            Record::Header { next_seq, .. } => *next_seq,
            Record::Put(task) => task.seq.saturating_add(1),
            Record::Remove { .. } | Record::End { .. } => return,
        };
        self.seq_written = self.seq_written.max(next);
    }

    /// Writes the batch as one frame and makes it as durable as the configuration asks. An
    /// error names the log, so that whoever reads it knows which disk to look at.
    pub(crate) fn commit(&mut self) -> io::Result<()> {
        self.write_batch().map_err(self.log_error())
    }

    /// Prefixes an error writing the current log with its path.
    fn log_error(&self) -> impl FnOnce(io::Error) -> io::Error {
        let path = log_path(&self.config.dir, self.generation);
        move |e| at(&path)(e)
    }

    fn write_batch(&mut self) -> io::Result<()> {
        for part in std::mem::take(&mut self.sealed) {
            self.log_bytes += frame::write_frame(&mut self.log, &part)? as u64;
            if self.config.durability == Durability::Fsync {
                self.log.flush()?;
                self.log.get_ref().sync_data()?;
            }
        }
        if !self.batch.is_empty() {
            self.batch.push(b']');
            let written = frame::write_frame(&mut self.log, &self.batch);
            self.batch.clear();
            if self.batch.capacity() > BATCH_KEEP {
                self.batch = Vec::new();
            }
            self.log_bytes += written? as u64;
        }
        match self.config.durability {
            Durability::Fsync => {
                self.log.flush()?;
                self.log.get_ref().sync_data()
            }
            Durability::Flush => self.log.flush(),
            Durability::None => Ok(()),
        }
    }

    /// Writes one record as a frame of its own, ahead of any batch: a header, which an
    /// older build must be able to read to report the format version.
    fn write_alone(&mut self, record: &Record) -> io::Result<()> {
        debug_assert!(self.batch.is_empty(), "a header goes before any batch");
        let payload = serde_json::to_vec(record)?;
        let written = frame::write_frame(&mut self.log, &payload).map_err(self.log_error())?;
        self.log_bytes += written as u64;
        self.note_seq(record);
        Ok(())
    }

    /// Whether the log has outgrown the live data enough to compact, or was read in an
    /// older format (compacting rewrites it in this one).
    pub(crate) fn should_compact(&self, live_bytes_estimate: u64) -> bool {
        let logs = self.log_bytes();
        if self.compaction.is_some() || logs < self.retry_at {
            return false;
        }
        if self.legacy || self.rewrite {
            return true;
        }
        let live = live_bytes_estimate.max(self.base_bytes).max(1);
        logs >= self.config.compact_min_bytes && logs / live >= u64::from(self.config.compact_ratio)
    }

    /// Bytes of log that recovery would replay: the current log's and those of any older
    /// log still in the chain.
    pub(crate) fn log_bytes(&self) -> u64 {
        self.older_bytes.saturating_add(self.log_bytes)
    }

    /// Gives up this compaction: the next waits until the log has doubled (and grown by
    /// at least `compact_min_bytes`), so a full disk is not asked for a snapshot per batch.
    ///
    /// A log in an older format is the exception: going on would append batches in this
    /// format to it, and an older build would then call it unreadable instead of naming
    /// the version it cannot read. It is broken, as it was before compaction could fail
    /// without harm (at start, the store does not open). Once a compaction has switched to
    /// a log of this format, failed or not, that is no longer so.
    fn abandon(&mut self, e: io::Error) -> CompactError {
        if self.legacy_log {
            return CompactError::Broken(io::Error::new(
                e.kind(),
                format!("rewriting a log of an older format: {e}"),
            ));
        }
        self.backoff();
        CompactError::Abandoned(e)
    }

    /// After a failed compaction: the next waits until the log has doubled (and grown by
    /// at least `compact_min_bytes`), so a full disk is not asked for a snapshot per batch.
    fn backoff(&mut self) {
        let logs = self.log_bytes();
        self.retry_at = logs
            .saturating_mul(2)
            .max(logs.saturating_add(self.config.compact_min_bytes));
    }

    /// Writes the header a fresh log starts with.
    pub(crate) fn write_header(&mut self, cursor_key: u64, next_seq: u64) -> io::Result<()> {
        self.write_alone(&Record::Header {
            version: VERSION,
            generation: self.generation,
            cursor_key,
            next_seq,
            tasks: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::CreateTask;
    use crate::Store;
    use std::cell::RefCell;

    thread_local! {
        /// The directories [`sync_dir`] synced on this thread, in order (a test's seam:
        /// no test can cut the power).
        pub(super) static SYNCED_DIRS: RefCell<Vec<PathBuf>> = const { RefCell::new(Vec::new()) };
        /// The logs [`sync_log`] synced on this thread, in order.
        pub(super) static SYNCED_FILES: RefCell<Vec<PathBuf>> = const { RefCell::new(Vec::new()) };
    }

    /// Opens a journal on `config` and returns the directories it synced on the way.
    fn synced_by_open(config: &JournalConfig) -> Vec<PathBuf> {
        SYNCED_DIRS.with(|synced| synced.borrow_mut().clear());
        drop(Journal::open(config).unwrap());
        SYNCED_DIRS.with(|synced| synced.take())
    }

    /// A batch too large for one frame is written in several, and read back whole: the
    /// store does not stop on a batch of many large results (a frame's length is 32 bits).
    #[test]
    fn a_batch_larger_than_a_frame_is_written_in_several() {
        let dir = tempfile::tempdir().unwrap();
        let config = JournalConfig::new(dir.path());
        let (mut journal, _) = Journal::open(&config).unwrap();
        journal.write_header(7, 0).unwrap();
        // About three records per frame.
        let record_bytes = serde_json::to_vec(&Record::Put(compaction::tests::task(0)))
            .unwrap()
            .len();
        journal.frame_limit = record_bytes * 3 + 16;
        let tasks: Vec<TaskRecord> = (0..10).map(compaction::tests::task).collect();
        for task in &tasks {
            journal.append(&Record::Put(task.clone())).unwrap();
        }
        journal.commit().unwrap();
        let limit = journal.frame_limit;
        drop(journal);
        let bytes = fs::read(log_path(dir.path(), 0)).unwrap();
        let (frames, _) = frame::read_frames(&bytes).unwrap();
        // The header, then the batch in parts, none over the limit.
        assert_eq!(frames.len(), 1 + 4, "{} frames", frames.len());
        assert!(frames.iter().all(|f| f.len() <= limit));
        let (_, recovered) = Journal::open(&config).unwrap();
        let ids: Vec<TaskId> = recovered.tasks.iter().map(|t| t.id).collect();
        assert_eq!(ids, tasks.iter().map(|t| t.id).collect::<Vec<_>>());
        assert_eq!(recovered.next_seq, 10);
    }

    /// Closing a part of a batch too large for one frame moves the record that did not fit
    /// with one copy, and the closed part keeps no memory past its own bytes: the whole
    /// batch is in memory until its commit, and near 4 GiB a part that kept the moved
    /// record's bytes (or a second copy of them) costs as much again as that record.
    #[test]
    fn a_closed_part_of_a_batch_keeps_no_memory_past_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let config = JournalConfig::new(dir.path());
        let (mut journal, _) = Journal::open(&config).unwrap();
        journal.write_header(7, 0).unwrap();
        let mut big = compaction::tests::task(0);
        big.message = Some("x".repeat(64 * 1024));
        journal.frame_limit = 32 * 1024;
        journal
            .append(&Record::Put(compaction::tests::task(1)))
            .unwrap();
        journal.append(&Record::Put(big)).unwrap();
        assert_eq!(journal.sealed.len(), 1);
        let part = &journal.sealed[0];
        assert_eq!(
            part.capacity(),
            part.len(),
            "the closed part is {} bytes",
            part.len()
        );
        journal.commit().unwrap();
        drop(journal);
        let (_, recovered) = Journal::open(&config).unwrap();
        assert_eq!(recovered.tasks.len(), 2);
    }

    /// The lock is kept from forked children from the moment it is taken, not only once
    /// the journal is read: recovery of a long log takes a while, and a host that forks a
    /// worker meanwhile (a pre-fork server starting up) must not leave the child holding
    /// the directory for as long as it lives.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_child_forked_while_the_journal_is_read_does_not_hold_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        // As `Journal::open` holds it while it reads the files.
        let held = lock_dir(dir.path()).unwrap();
        let lock = dir.path().join("LOCK").canonicalize().unwrap();
        let fd: i32 = fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(Result::ok)
            .find(|entry| fs::read_link(entry.path()).is_ok_and(|target| target == lock))
            .and_then(|entry| entry.file_name().to_str()?.parse().ok())
            .expect("the lock file is open");
        // Made before the fork: the child allocates nothing.
        let path = format!("/proc/self/fd/{fd}\0");
        let mut fds = [0i32; 2];
        // SAFETY: the array is live and has room for two descriptors.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: the child only calls readlink and write, then leaves with `_exit`, never
        // returning into the test harness.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            let mut target = [0u8; 256];
            // SAFETY: a NUL-terminated path and a live buffer of its length; `_exit` ends
            // the child at once.
            unsafe {
                let n = libc::readlink(path.as_ptr().cast(), target.as_mut_ptr().cast(), 256);
                let n = n.clamp(0, 256) as usize;
                libc::write(fds[1], target.as_ptr().cast(), n);
                libc::_exit(0);
            }
        }
        // SAFETY: the write end is ours to close; the child's copy ends its writes.
        unsafe { libc::close(fds[1]) };
        let mut target = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            // SAFETY: a read into a live buffer of its length.
            let n = unsafe { libc::read(fds[0], buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            target.extend_from_slice(&buf[..n as usize]);
        }
        // SAFETY: the pid is our child's; the read end is ours.
        unsafe {
            libc::waitpid(child, std::ptr::null_mut(), 0);
            libc::close(fds[0]);
        }
        assert_eq!(String::from_utf8_lossy(&target), "/dev/null");
        drop(held);
    }

    /// A store on `dir` that writes nothing at start (running tasks are kept).
    fn open(dir: &Path) -> Store {
        let mut config = JournalConfig::new(dir);
        config.recovery = RecoveryPolicy::Keep;
        Store::builder().journal(config).build().unwrap()
    }

    /// Rewrites the log at `path` as version 1 wrote it (its header says 1, each record is
    /// framed alone), and returns its new bytes.
    fn rewrite_as_version_1(path: &Path) -> Vec<u8> {
        let bytes = fs::read(path).unwrap();
        let (frames, ending) = frame::read_frames(&bytes).unwrap();
        assert_eq!(ending, frame::Ending::Clean);
        let mut old = Vec::new();
        for payload in frames {
            let mut value: serde_json::Value = serde_json::from_slice(payload).unwrap();
            let records = match value.as_array_mut() {
                Some(batch) => std::mem::take(batch),
                None => {
                    value["version"] = 1.into();
                    vec![value]
                }
            };
            for record in records {
                frame::write_frame(&mut old, &serde_json::to_vec(&record).unwrap()).unwrap();
            }
        }
        fs::write(path, &old).unwrap();
        old
    }

    fn only(dir: &Path, prefix: &str) -> PathBuf {
        let mut found: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(prefix))
            .collect();
        assert_eq!(found.len(), 1, "{found:?}");
        found.pop().unwrap()
    }

    #[test]
    fn a_fresh_open_syncs_the_new_log_and_every_directory_it_created_into_its_parent() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("a").join("b");
        let synced = synced_by_open(&JournalConfig::new(&dir));
        // `b` holds the new log's entry, `a` holds `b`'s, the root holds `a`'s.
        let expected = [
            dir.clone(),
            root.path().join("a"),
            root.path().to_path_buf(),
        ];
        for d in &expected {
            assert!(synced.contains(d), "{d:?} not synced: {synced:?}");
        }
        // Reopened, the directories are durable already; the directory's own entries are
        // synced again, since a run under another mode may have left them unsynced.
        assert_eq!(synced_by_open(&JournalConfig::new(&dir)), vec![dir]);
    }

    #[test]
    fn a_new_log_in_an_existing_directory_is_synced_into_it() {
        let dir = tempfile::tempdir().unwrap();
        let synced = synced_by_open(&JournalConfig::new(dir.path()));
        assert_eq!(synced, vec![dir.path().to_path_buf()]);
    }

    #[test]
    fn an_fsync_start_makes_durable_what_a_run_without_fsync_left_unsynced() {
        // A run under `Flush` or `None` syncs no log, and no directory entry of a log its
        // compaction began. A later run under `Fsync` acknowledges changes once its own
        // batch is synced: a power loss must not then take what the earlier run left (the
        // newer log's name, the older log's end, which recovery under `Fsync` would call
        // damage), nor the directories the earlier run created.
        for durability in [Durability::Flush, Durability::None] {
            let root = tempfile::tempdir().unwrap();
            let dir = root.path().join("a").join("b");
            let mut config = JournalConfig::new(&dir);
            config.durability = durability;
            config.recovery = RecoveryPolicy::Keep;
            SYNCED_DIRS.with(|synced| synced.borrow_mut().clear());
            SYNCED_FILES.with(|synced| synced.borrow_mut().clear());
            {
                // A chain of two logs, as a compaction cut short leaves it.
                let (mut journal, _) = Journal::open(&config).unwrap();
                journal.write_header(7, 0).unwrap();
                journal.commit().unwrap();
                journal.begin_compaction(7, 0).unwrap();
            }
            let earlier = SYNCED_DIRS.with(|synced| synced.take());
            config.durability = Durability::Fsync;
            drop(Journal::open(&config).unwrap());
            let dirs = SYNCED_DIRS.with(|synced| synced.take());
            let files = SYNCED_FILES.with(|synced| synced.take());
            assert!(
                dirs.contains(&dir),
                "{durability:?}: the newer log's entry is not synced: {dirs:?}"
            );
            for created in [root.path().to_path_buf(), root.path().join("a")] {
                assert!(
                    earlier.contains(&created) || dirs.contains(&created),
                    "{durability:?}: {created:?} never synced: {earlier:?}, {dirs:?}"
                );
            }
            for log in [log_path(&dir, 0), log_path(&dir, 1)] {
                assert!(
                    files.contains(&log),
                    "{durability:?}: {log:?} not synced: {files:?}"
                );
            }
        }
    }

    #[test]
    fn modes_without_fsync_sync_what_they_create_once_and_nothing_at_a_reopen() {
        // What they create is synced in every mode (a later run may be under `Fsync`, and
        // cannot tell); a reopen adds no sync to modes that do not promise power loss
        // safety.
        for durability in [Durability::Flush, Durability::None] {
            let root = tempfile::tempdir().unwrap();
            let dir = root.path().join("new");
            let mut config = JournalConfig::new(&dir);
            config.durability = durability;
            let expected = vec![dir.clone(), root.path().to_path_buf()];
            assert_eq!(synced_by_open(&config), expected, "{durability:?}");
            assert_eq!(
                synced_by_open(&config),
                Vec::<PathBuf>::new(),
                "{durability:?}"
            );
        }
    }

    #[test]
    fn a_torn_run_of_frames_at_the_end_is_dropped_and_cut_off() {
        let dir = tempfile::tempdir().unwrap();
        let id = open(dir.path()).create(CreateTask::new()).unwrap().task_id;
        let log = only(dir.path(), "journal-");
        let mut bytes = fs::read(&log).unwrap();
        let good = bytes.len() as u64;
        // An unacknowledged batch of two records, framed one by one as version 1 did: the
        // file's size reached the disk, its data only for the first 20 bytes.
        let payload = serde_json::to_vec(&Record::Remove { id }).unwrap();
        let mut batch = Vec::new();
        frame::write_frame(&mut batch, &payload).unwrap();
        frame::write_frame(&mut batch, &payload).unwrap();
        batch[20..].fill(0);
        bytes.extend_from_slice(&batch);
        fs::write(&log, &bytes).unwrap();
        let store = open(dir.path());
        assert!(
            store.get(id, None).is_ok(),
            "the torn removal is not applied"
        );
        drop(store);
        assert_eq!(fs::metadata(&log).unwrap().len(), good);
    }

    #[test]
    fn a_version_1_journal_is_read_and_rewritten_in_the_current_format() {
        let dir = tempfile::tempdir().unwrap();
        let ids: Vec<TaskId> = {
            let store = open(dir.path());
            (0..3)
                .map(|_| store.create(CreateTask::new()).unwrap().task_id)
                .collect()
        };
        let log = only(dir.path(), "journal-");
        rewrite_as_version_1(&log);
        let store = open(dir.path());
        for id in &ids {
            assert!(store.get(*id, None).is_ok());
        }
        drop(store);
        // Opening compacted it: a snapshot in this format now holds every task, and ends
        // with their count.
        let snapshot = fs::read(only(dir.path(), "snapshot-")).unwrap();
        let (frames, _) = frame::read_frames(&snapshot).unwrap();
        let header: serde_json::Value = serde_json::from_slice(frames[0]).unwrap();
        assert_eq!(header["version"], VERSION);
        assert_eq!(frames.len(), 1 + ids.len() + 1);
        let end: serde_json::Value = serde_json::from_slice(frames[ids.len() + 1]).unwrap();
        assert_eq!(end, serde_json::json!({"kind": "end", "tasks": 3}));
        assert!(!log.exists(), "the version 1 log is gone");
    }

    #[test]
    fn a_snapshot_that_does_not_count_its_tasks_is_read_and_rewritten_with_the_count() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = JournalConfig::new(dir.path());
        config.recovery = RecoveryPolicy::Keep;
        config.compact_ratio = 0;
        config.compact_min_bytes = 0;
        let ids: Vec<TaskId> = {
            let store = Store::builder().journal(config).build().unwrap();
            let ids = (0..3)
                .map(|_| store.create(CreateTask::new()).unwrap().task_id)
                .collect();
            store.sync().unwrap();
            ids
        };
        let path = only(dir.path(), "snapshot-");
        let bytes = fs::read(&path).unwrap();
        let (frames, _) = frame::read_frames(&bytes).unwrap();
        assert_eq!(frames.len(), 1 + 3 + 1, "a header, three tasks, an end");
        // Rewrite the snapshot as version 2 wrote it (the count in its header), and as
        // builds before that did (no count at all): both are read; the second is rewritten.
        let rewrite = |count: Option<u64>| {
            let mut header: serde_json::Value = serde_json::from_slice(frames[0]).unwrap();
            header["version"] = 2.into();
            match count {
                Some(count) => header["tasks"] = count.into(),
                None => drop(header.as_object_mut().unwrap().remove("tasks")),
            }
            let mut old = Vec::new();
            frame::write_frame(&mut old, &serde_json::to_vec(&header).unwrap()).unwrap();
            for payload in &frames[1..4] {
                frame::write_frame(&mut old, payload).unwrap();
            }
            fs::write(&path, &old).unwrap();
        };
        rewrite(Some(4));
        let Err(StoreError::Journal(message)) = Store::builder()
            .journal(JournalConfig::new(dir.path()))
            .build()
        else {
            panic!("a version 2 snapshot short of its count is damage")
        };
        assert!(
            message.contains("promises 4 tasks and it holds 3"),
            "{message}"
        );
        for count in [Some(3), None] {
            rewrite(count);
            let store = open(dir.path());
            for id in &ids {
                assert!(store.get(*id, None).is_ok(), "{count:?}");
            }
            drop(store);
        }
        let bytes = fs::read(only(dir.path(), "snapshot-")).unwrap();
        let (frames, _) = frame::read_frames(&bytes).unwrap();
        let end: serde_json::Value = serde_json::from_slice(frames[4]).unwrap();
        assert_eq!(end["tasks"], 3, "rewritten with the count");
    }

    #[test]
    fn a_newer_format_is_refused_by_its_version() {
        let dir = tempfile::tempdir().unwrap();
        drop(open(dir.path()));
        let log = only(dir.path(), "journal-");
        let header = Record::Header {
            version: VERSION + 1,
            generation: 0,
            cursor_key: 1,
            next_seq: 1,
            tasks: None,
        };
        let mut bytes = Vec::new();
        frame::write_frame(&mut bytes, &serde_json::to_vec(&header).unwrap()).unwrap();
        fs::write(&log, &bytes).unwrap();
        let err = Store::builder()
            .journal(JournalConfig::new(dir.path()))
            .build()
            .unwrap_err();
        let StoreError::Journal(message) = err else {
            panic!("{err:?}")
        };
        let newer = format!("format version {}", VERSION + 1);
        assert!(message.contains(&newer), "{message}");
    }

    #[test]
    fn a_task_skipped_for_sharing_its_sequence_number_stays_gone_after_a_restart() {
        // Found by the `journal` fuzz target. Two tasks with one sequence number (only
        // damage makes them): recovery keeps the first and skips the second. The first
        // expires at once; had the skipped record stayed in the log, the next start would
        // find the second task alone under its number and bring it back.
        let dir = tempfile::tempdir().unwrap();
        drop(open(dir.path()));
        let log = only(dir.path(), "journal-");
        let header = Record::Header {
            version: VERSION,
            generation: 0,
            cursor_key: 1,
            next_seq: 2,
            tasks: None,
        };
        let task = |id: &str, status: &str, ttl: u64| {
            serde_json::json!({
                "kind": "put", "id": id, "seq": 1, "status": status,
                "created_at": "2020-01-01T00:00:00.000Z",
                "last_updated_at": "2020-01-01T00:00:00.000Z", "ttl": ttl,
            })
        };
        let first = "00000000-0000-4000-8000-000000000001";
        let second = "00000000-0000-4000-8000-000000000002";
        let batch = serde_json::json!([
            task(first, "completed", 1),
            task(second, "working", u64::MAX),
        ]);
        let mut bytes = Vec::new();
        frame::write_frame(&mut bytes, &serde_json::to_vec(&header).unwrap()).unwrap();
        frame::write_frame(&mut bytes, &serde_json::to_vec(&batch).unwrap()).unwrap();
        fs::write(&log, &bytes).unwrap();
        let (first, second): (TaskId, TaskId) = (first.parse().unwrap(), second.parse().unwrap());
        for start in ["first", "second"] {
            let store = open(dir.path());
            assert!(store.get(first, None).is_err(), "{start} start: expired");
            assert!(store.get(second, None).is_err(), "{start} start: skipped");
        }
    }

    #[test]
    fn a_salvage_that_cuts_a_log_to_nothing_still_writes_the_new_cursor_key_at_once() {
        // The new key must be on disk with the cut: a start after it, salvage or not, reads
        // the log as whole. Here the damage is the log's header, so the cut leaves the log
        // empty; had its header waited for the store's first write, a process stopped
        // before it would take the old key back from the snapshot.
        let dir = tempfile::tempdir().unwrap();
        let mut config = JournalConfig::new(dir.path());
        config.recovery = RecoveryPolicy::Keep;
        config.compact_ratio = 0;
        config.compact_min_bytes = 0;
        let store = Store::builder().journal(config.clone()).build().unwrap();
        store.create(CreateTask::new()).unwrap();
        store.sync().unwrap();
        drop(store);
        let snapshot = fs::read(only(dir.path(), "snapshot-")).unwrap();
        let (frames, _) = frame::read_frames(&snapshot).unwrap();
        let header: serde_json::Value = serde_json::from_slice(frames[0]).unwrap();
        let old_key = header["cursor_key"].as_u64().unwrap();
        // The log's header broken, a batch whole after it: damage at offset 0.
        let log = only(dir.path(), "journal-");
        let mut bytes = fs::read(&log).unwrap();
        bytes[10] ^= 1;
        let batch = serde_json::to_vec(&serde_json::json!([])).unwrap();
        frame::write_frame(&mut bytes, &batch).unwrap();
        fs::write(&log, &bytes).unwrap();
        config.salvage = true;
        let (journal, salvaged) = Journal::open(&config).unwrap();
        // The process stops here, before the store writes anything.
        drop(journal);
        config.salvage = false;
        let (_, reopened) = Journal::open(&config).unwrap();
        assert_eq!(reopened.cursor_key, salvaged.cursor_key);
        assert_ne!(reopened.cursor_key, Some(old_key));
    }

    /// A log holding just `header`, for generation 0 in `dir` (opened once before).
    fn header_only(dir: &Path, header: Record) -> PathBuf {
        drop(open(dir));
        let log = only(dir, "journal-");
        let mut bytes = Vec::new();
        frame::write_frame(&mut bytes, &serde_json::to_vec(&header).unwrap()).unwrap();
        fs::write(&log, &bytes).unwrap();
        log
    }

    #[test]
    fn a_store_opened_at_the_last_sequence_number_is_refused_not_left_unopenable() {
        let dir = tempfile::tempdir().unwrap();
        let header = Record::Header {
            version: VERSION,
            generation: 0,
            cursor_key: 1,
            next_seq: 1 << 63,
            tasks: None,
        };
        header_only(dir.path(), header);
        // Opened, its next task would be numbered past what a restore accepts.
        let mut config = JournalConfig::new(dir.path());
        config.recovery = RecoveryPolicy::Keep;
        match Store::builder().journal(config).build() {
            Err(StoreError::Journal(why)) => assert!(why.contains("out of range"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_log_of_this_format_after_one_of_an_older_format_is_appended_to_even_if_no_compaction_can_run(
    ) {
        // An upgrade's compaction switched from a version 2 log to a new one of this format,
        // and the process ended before the snapshot was named. Batches go to the new log,
        // which is of this format: no compaction is needed before appending to it, and the
        // store must open when there is no room for one, as it went on serving when the
        // same compaction failed before the restart.
        let dir = tempfile::tempdir().unwrap();
        let header = Record::Header {
            version: 2,
            generation: 0,
            cursor_key: 1,
            next_seq: 0,
            tasks: None,
        };
        header_only(dir.path(), header);
        let mut config = JournalConfig::new(dir.path());
        config.recovery = RecoveryPolicy::Keep;
        let (mut journal, recovered) = Journal::open(&config).unwrap();
        assert!(recovered.legacy);
        journal.begin_compaction(1, 0).unwrap();
        drop(journal);
        fs::create_dir(dir.path().join("snapshot.tmp")).unwrap();
        let store = Store::builder().journal(config.clone()).build().unwrap();
        let id = store.create(CreateTask::new()).unwrap().task_id;
        drop(store);
        fs::remove_dir(dir.path().join("snapshot.tmp")).unwrap();
        let store = Store::builder().journal(config).build().unwrap();
        assert!(store.get(id, None).is_ok());
    }

    /// A log of version 1 whose rewrite cannot run is refused and left as version 1 wrote
    /// it, also when recovery changed tasks (running ones failed): a batch frame appended
    /// before the rewrite failed would make a version 1 build call the log unreadable
    /// instead of naming the format it cannot read, and leave a mixed file behind.
    #[test]
    fn a_version_1_log_whose_rewrite_fails_is_not_appended_recovery_changes() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = open(dir.path());
            store.create(CreateTask::new()).unwrap();
        }
        let log = only(dir.path(), "journal-");
        let old = rewrite_as_version_1(&log);
        // No room for the snapshot that rewrites it; the running task is failed at start.
        fs::create_dir(dir.path().join("snapshot.tmp")).unwrap();
        match Store::builder()
            .journal(JournalConfig::new(dir.path()))
            .build()
        {
            Err(StoreError::Journal(why)) => assert!(why.contains("older format"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            fs::read(&log).unwrap(),
            old,
            "the version 1 log is untouched"
        );
    }

    #[test]
    fn a_log_of_an_older_format_that_cannot_be_rewritten_is_refused_not_mixed() {
        let dir = tempfile::tempdir().unwrap();
        let header = Record::Header {
            version: 1,
            generation: 0,
            cursor_key: 1,
            next_seq: 0,
            tasks: None,
        };
        let log = header_only(dir.path(), header);
        // No room for the snapshot that rewrites it in this format.
        fs::create_dir(dir.path().join("snapshot.tmp")).unwrap();
        let mut config = JournalConfig::new(dir.path());
        config.recovery = RecoveryPolicy::Keep;
        match Store::builder().journal(config).build() {
            Err(StoreError::Journal(why)) => assert!(why.contains("older format"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Untouched: still all version 1.
        let bytes = fs::read(&log).unwrap();
        let (frames, _) = frame::read_frames(&bytes).unwrap();
        assert!(frames.iter().all(|f| f.first() != Some(&b'[')));
    }
}
