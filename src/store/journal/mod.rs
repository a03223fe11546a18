//! The optional write-ahead journal: every change is appended before the reply that
//! acknowledges it is sent (group commit: one sync per batch of commands), and the store is
//! rebuilt from it on start.
//!
//! On disk, a directory holds generation `G`: `snapshot-G` (every live task at the moment
//! generation `G` began; absent for generation 0) and `journal-G.log` (the changes since).
//! Both are sequences of framed JSON records (see [`frame`]). A log holds one frame per
//! group-commit batch (a JSON array of the batch's records, read back whole or not at all),
//! so only its last frame can be torn by a crash; headers and snapshot records are framed one
//! by one. Compaction writes `snapshot-(G+1)` (its header counts its tasks) through a
//! synced temporary file and a rename, starts `journal-(G+1).log`, then deletes generation
//! `G`; a crash at any point leaves a directory recovery reads correctly, because a
//! generation's log is only ever replayed over its own snapshot. A compaction that fails
//! is undone (the new generation's files removed) and the current log goes on. No crash tears a snapshot,
//! so a broken or short one is damage, never a torn tail. Recovery reads
//! the newest snapshot's generation and deletes only older ones; a log newer than that
//! snapshot means a snapshot was lost, and is refused rather than deleted.
//!
//! A store holds an exclusive lock on the directory's `LOCK` file for as long as its journal
//! is open, so a second store (say, a restarted server overlapping the old one) is refused
//! instead of appending to the same log. The lock is advisory and dies with its process: a
//! `LOCK` file left behind by a crash does not block the next start.

mod frame;

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::record::{RecoveryPolicy, TaskRecord};
use crate::model::{depth, TaskId};
use crate::StoreError;

/// When an acknowledged change is safe.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Durability {
    /// Each batch is written and `fdatasync`ed before its replies: acknowledged changes
    /// survive a power loss. The default.
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
    /// salvage took that name), and a warning says so (default: off, and a
    /// damaged log is an error). Acknowledged changes after the damage are lost, which is
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
/// could tear a batch in the middle; this build reads it and rewrites it as version 2 at
/// start (see [`Journal::should_compact`]).
const VERSION: u32 = 2;
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
}

/// An open journal, appending to `journal-G.log`.
#[derive(Debug)]
pub(crate) struct Journal {
    config: JournalConfig,
    generation: u64,
    log: BufWriter<File>,
    log_bytes: u64,
    /// Size of the live data when the generation began (its snapshot), for compaction.
    base_bytes: u64,
    /// The batch being appended: a JSON array of records, written as one frame by
    /// [`commit`](Journal::commit).
    batch: Vec<u8>,
    /// An exclusive lock on `LOCK` in the directory, held while the journal lives: a second
    /// store appending to the same log would reuse sequence numbers and lose tasks. The
    /// operating system drops it with the file, and with a process that dies.
    _lock: File,
    /// The files read at start were in an older format: compact at once, so that no file
    /// mixes formats and an older build meeting the new one says so by its version (and a
    /// snapshot that did not count its tasks is rewritten with the count).
    legacy: bool,
    /// After a failed compaction: no new attempt before the log holds this many bytes.
    retry_at: u64,
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

/// Writes a snapshot (its header, then every task) to `path` and syncs it; its size.
fn write_snapshot(path: &Path, header: &Record, tasks: Vec<TaskRecord>) -> io::Result<u64> {
    let mut out = BufWriter::new(File::create(path)?);
    let mut bytes = frame::write_frame(&mut out, &serde_json::to_vec(header)?)? as u64;
    for task in tasks {
        let record = Record::Put(task);
        bytes += frame::write_frame(&mut out, &serde_json::to_vec(&record)?)? as u64;
    }
    out.flush()?;
    out.get_ref().sync_all()?;
    Ok(bytes)
}

/// Removes a new generation's log (if it was created), then its snapshot, each removal
/// made durable before the next: at every moment recovery finds either the new snapshot
/// (whose log is at most a header) or the current generation.
fn undo_generation(dir: &Path, snapshot: &Path, log: Option<&Path>) -> io::Result<()> {
    for path in log.into_iter().chain([snapshot]) {
        match fs::remove_file(path) {
            Ok(()) => sync_dir(dir).map_err(at(dir))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(at(path)(e)),
        }
    }
    Ok(())
}

/// A batch buffer larger than this is not kept for reuse after its batch.
const BATCH_KEEP: usize = 1024 * 1024;

fn io_error(path: &Path, what: &str, e: io::Error) -> StoreError {
    StoreError::Journal(format!("{what} {}: {e}", path.display()))
}

fn snapshot_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("snapshot-{generation:016x}"))
}

fn log_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("journal-{generation:016x}.log"))
}

/// Generations present in `dir`: snapshots and logs, by number.
fn generations(dir: &Path) -> Result<(Vec<u64>, Vec<u64>), StoreError> {
    let (mut snapshots, mut logs) = (Vec::new(), Vec::new());
    let entries = fs::read_dir(dir).map_err(|e| io_error(dir, "cannot read", e))?;
    for entry in entries {
        let name = entry
            .map_err(|e| io_error(dir, "cannot read", e))?
            .file_name();
        let name = name.to_string_lossy();
        let parse = |hex: &str| u64::from_str_radix(hex, 16).ok();
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
    /// `journal-G.log`: a crash can tear its last, unacknowledged batch, which is cut off.
    Log,
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
    header: bool,
    /// The task count the header promises (absent in snapshots written before it was).
    promised: Option<u64>,
    puts: u64,
}

impl Tally {
    fn count(&mut self, record: &Record) {
        match record {
            Record::Header { tasks, .. } => {
                self.header = true;
                self.promised = *tasks;
            }
            Record::Put(_) => self.puts += 1,
            Record::Remove { .. } => {}
        }
    }
}

/// Reads one file's records into `state`. A log's torn tail is cut off the file; damage,
/// and any tear in a snapshot, is an error naming the file and the offset. Returns the
/// length of the valid data.
fn replay(
    path: &Path,
    kind: FileKind,
    salvage: bool,
    state: &mut BTreeMap<TaskId, TaskRecord>,
    recovered: &mut Recovered,
) -> Result<u64, StoreError> {
    let bytes = fs::read(path).map_err(|e| io_error(path, "cannot read", e))?;
    let mut salvaged = false;
    let (frames, ending) = match frame::read_frames(&bytes) {
        Ok(read) => read,
        Err(damage) if kind == FileKind::Log && salvage => {
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
        Err(damage) if kind == FileKind::Log => {
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
        Err(damage) => return Err(damaged(path, damage.offset, damage.reason)),
    };
    if let (FileKind::Snapshot, frame::Ending::TornTail { offset }) = (kind, &ending) {
        return Err(damaged(
            path,
            *offset,
            "a snapshot is synced before it is renamed into place, so a broken record in it \
             is not a torn write",
        ));
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
        check_whole(path, &tally, offset, recovered)?;
    }
    if let frame::Ending::TornTail { offset } = ending {
        if !salvaged {
            log::warn!(
                "{}: dropping a torn batch at byte offset {offset} (a write cut short by a \
                 crash)",
                path.display()
            );
        }
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| io_error(path, "cannot open", e))?;
        file.set_len(offset)
            .and_then(|_| file.sync_all())
            .map_err(|e| io_error(path, "cannot truncate", e))?;
        return Ok(offset);
    }
    Ok(bytes.len() as u64)
}

/// Checks that a snapshot of `len` bytes holds everything its header promises: a snapshot
/// cut on a frame boundary reads as a clean file, and only the count tells.
fn check_whole(
    path: &Path,
    tally: &Tally,
    len: u64,
    recovered: &mut Recovered,
) -> Result<(), StoreError> {
    if !tally.header {
        return Err(damaged(path, 0, "the snapshot has no header"));
    }
    match tally.promised {
        Some(promised) if promised != tally.puts => Err(damaged(
            path,
            len,
            format!(
                "the snapshot's header promises {promised} tasks and it holds {}",
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
    }
    Ok(())
}

/// Refuses a log newer than `generation`, the newest snapshot's (0 without one).
///
/// Compaction renames a generation's snapshot into place, and syncs the directory, before
/// it creates that generation's log, so a log never outlives its snapshot by a crash. A log
/// without its snapshot means the snapshot was lost: its tasks are gone, and the log's
/// changes cannot be applied without them. Recovering the older generation instead would
/// delete the log and every change acknowledged since; refusing keeps both for a human.
fn check_no_newer_log(dir: &Path, generation: u64, logs: &[u64]) -> Result<(), StoreError> {
    match logs.last() {
        Some(&newest) if newest > generation => Err(StoreError::Journal(format!(
            "{} needs {}, which is missing: recovering an older generation instead would \
             lose every change in the log; refusing to start",
            log_path(dir, newest).display(),
            snapshot_path(dir, newest).display(),
        ))),
        _ => Ok(()),
    }
}

/// Takes the directory's exclusive lock, or says that another store holds it.
fn lock_dir(dir: &Path) -> Result<File, StoreError> {
    let path = dir.join("LOCK");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| io_error(&path, "cannot open", e))?;
    // A child process this one starts shares the lock (through its copy of the file)
    // from its fork until its exec, so a lock this process just let go of may still be
    // held for a moment: try again for a while before calling the directory in use.
    let deadline = Instant::now() + LOCK_PATIENCE;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
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

/// How long a store waits for the directory's lock before calling it in use.
const LOCK_PATIENCE: Duration = Duration::from_secs(1);

/// Makes the entries of `dir` (files created, renamed or removed in it) durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(test)]
    tests::SYNCED_DIRS.with(|synced| synced.borrow_mut().push(dir.to_owned()));
    File::open(dir)?.sync_all()
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

/// Makes the entries `open` created durable: a new log's in `dir`, and each created
/// directory's in its parent. Without this a power loss can take the first log, and every
/// batch acknowledged in it, with it: `fdatasync` on a file does not persist its name.
fn sync_created(dir: &Path, created_dirs: &[PathBuf], new_log: bool) -> Result<(), StoreError> {
    let sync = |d: &Path| sync_dir(d).map_err(|e| io_error(d, "cannot sync", e));
    if new_log || !created_dirs.is_empty() {
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
        let created_dirs = missing_dirs(dir);
        fs::create_dir_all(dir).map_err(|e| io_error(dir, "cannot create", e))?;
        // Before reading anything: what another store is writing is not ours to recover.
        let lock = lock_dir(dir)?;
        let (snapshots, logs) = generations(dir)?;
        let generation = snapshots.last().copied().unwrap_or(0);
        check_no_newer_log(dir, generation, &logs)?;
        let mut recovered = Recovered::default();
        let mut state = BTreeMap::new();
        let mut base_bytes = 0;
        if snapshots.last().is_some() {
            base_bytes = replay(
                &snapshot_path(dir, generation),
                FileKind::Snapshot,
                false,
                &mut state,
                &mut recovered,
            )?;
        }
        let path = log_path(dir, generation);
        let log_bytes = if logs.contains(&generation) {
            replay(
                &path,
                FileKind::Log,
                config.salvage,
                &mut state,
                &mut recovered,
            )?
        } else {
            0
        };
        // Older generations (and leftovers of an interrupted compaction) are obsolete; no
        // newer one is left (checked above).
        for old in snapshots.iter().chain(&logs).filter(|g| **g < generation) {
            let _ = fs::remove_file(snapshot_path(dir, *old));
            let _ = fs::remove_file(log_path(dir, *old));
        }
        let _ = fs::remove_file(dir.join("snapshot.tmp"));
        let new_log = !logs.contains(&generation);
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| io_error(&path, "cannot open", e))?;
        // Only `Fsync` promises that acknowledged batches survive a power loss; the other
        // modes lose them to one anyway.
        if config.durability == Durability::Fsync {
            sync_created(dir, &created_dirs, new_log)?;
        }
        let mut tasks: Vec<TaskRecord> = state.into_values().collect();
        tasks.sort_unstable_by_key(|t| t.seq);
        recovered.tasks = tasks;
        let journal = Journal {
            config: config.clone(),
            generation,
            log: BufWriter::with_capacity(64 * 1024, file),
            log_bytes,
            base_bytes,
            batch: Vec::new(),
            _lock: lock,
            legacy: recovered.legacy,
            retry_at: 0,
        };
        Ok((journal, recovered))
    }

    /// Whether this log is new (it needs a header before anything else).
    pub(crate) fn is_empty(&self) -> bool {
        self.log_bytes == 0
    }

    /// Appends a record to the current batch (written by [`commit`](Self::commit)).
    pub(crate) fn append(&mut self, record: &Record) -> io::Result<()> {
        self.batch
            .push(if self.batch.is_empty() { b'[' } else { b',' });
        serde_json::to_writer(&mut self.batch, record)?;
        Ok(())
    }

    /// Writes the batch as one frame and makes it as durable as the configuration asks.
    pub(crate) fn commit(&mut self) -> io::Result<()> {
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
        self.log_bytes += frame::write_frame(&mut self.log, &payload)? as u64;
        Ok(())
    }

    /// Whether the log has outgrown the live data enough to compact, or was read in an
    /// older format (compacting rewrites it in this one).
    pub(crate) fn should_compact(&self, live_bytes_estimate: u64) -> bool {
        if self.log_bytes < self.retry_at {
            return false;
        }
        if self.legacy {
            return true;
        }
        let live = live_bytes_estimate.max(self.base_bytes).max(1);
        self.log_bytes >= self.config.compact_min_bytes
            && self.log_bytes / live >= u64::from(self.config.compact_ratio)
    }

    /// Bytes written to the current log.
    pub(crate) fn log_bytes(&self) -> u64 {
        self.log_bytes
    }

    /// Starts a new generation whose snapshot holds `tasks`, then drops the old one.
    ///
    /// A compaction that fails part way is undone where it can be, so that recovery still
    /// finds the current generation and everything appended to its log afterwards:
    /// [`CompactError::Abandoned`], and the next attempt waits for the log to grow (a full
    /// disk is the likely cause, and a snapshot needs room for all the live data). Only
    /// when the undo fails too is the journal's state unknown: [`CompactError::Broken`].
    pub(crate) fn compact(
        &mut self,
        cursor_key: u64,
        next_seq: u64,
        tasks: Vec<TaskRecord>,
    ) -> Result<(), CompactError> {
        debug_assert!(self.batch.is_empty(), "compaction runs between batches");
        // Whatever the log holds must be in its file before a snapshot stands for it; a
        // log that cannot take it is as broken as a failed commit.
        self.log.flush().map_err(CompactError::Broken)?;
        let dir = self.config.dir.clone();
        let Some(next) = self.generation.checked_add(1) else {
            return Err(self.abandon(io::Error::other("no generation number is left")));
        };
        let tmp = dir.join("snapshot.tmp");
        let (snapshot, log) = (snapshot_path(&dir, next), log_path(&dir, next));
        // How far the new generation got: its snapshot named, its log created.
        let (mut named, mut created) = (false, false);
        let staged = (|| {
            let header = Record::Header {
                version: VERSION,
                generation: next,
                cursor_key,
                next_seq,
                tasks: Some(tasks.len() as u64),
            };
            let bytes = write_snapshot(&tmp, &header, tasks).map_err(at(&tmp))?;
            fs::rename(&tmp, &snapshot).map_err(at(&snapshot))?;
            named = true;
            // Named for good before the new log exists: recovery refuses a log newer
            // than the newest snapshot.
            sync_dir(&dir).map_err(at(&dir))?;
            let mut new_log = BufWriter::with_capacity(
                64 * 1024,
                OpenOptions::new()
                    .create(true)
                    .truncate(true)
                    .write(true)
                    .open(&log)
                    .map_err(at(&log))?,
            );
            created = true;
            let header = Record::Header {
                version: VERSION,
                generation: next,
                cursor_key,
                next_seq,
                tasks: None,
            };
            let header_bytes = frame::write_frame(&mut new_log, &serde_json::to_vec(&header)?)
                .and_then(|n| {
                    new_log.flush()?;
                    new_log.get_ref().sync_all()?;
                    Ok(n)
                })
                .map_err(at(&log))?;
            sync_dir(&dir).map_err(at(&dir))?;
            Ok::<_, io::Error>((bytes, new_log, header_bytes as u64))
        })();
        let (bytes, new_log, header_bytes) = match staged {
            Ok(staged) => staged,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                if !named {
                    return Err(self.abandon(e));
                }
                // Recovery would take the new snapshot for the current state and drop
                // this log, and with it whatever is appended from now on: unname it.
                let log = created.then_some(log.as_path());
                return match undo_generation(&dir, &snapshot, log) {
                    Ok(()) => Err(self.abandon(e)),
                    Err(undo) => Err(CompactError::Broken(io::Error::other(format!(
                        "{e}; undoing the new generation failed too: {undo}"
                    )))),
                };
            }
        };
        let old = self.generation;
        self.log = new_log;
        self.generation = next;
        self.log_bytes = header_bytes;
        self.base_bytes = bytes;
        self.legacy = false;
        self.retry_at = 0;
        let _ = fs::remove_file(log_path(&dir, old));
        let _ = fs::remove_file(snapshot_path(&dir, old));
        Ok(())
    }

    /// Gives up this compaction: the next waits until the log has doubled (and grown by
    /// at least `compact_min_bytes`), so a full disk is not asked for a snapshot per batch.
    ///
    /// A log in an older format is the exception: going on would append batches in this
    /// format to it, and an older build would then call it unreadable instead of naming
    /// the version it cannot read. It is broken, as it was before compaction could fail
    /// without harm (at start, the store does not open).
    fn abandon(&mut self, e: io::Error) -> CompactError {
        if self.legacy {
            return CompactError::Broken(io::Error::new(
                e.kind(),
                format!("rewriting a log of an older format: {e}"),
            ));
        }
        self.retry_at = self
            .log_bytes
            .saturating_mul(2)
            .max(self.log_bytes.saturating_add(self.config.compact_min_bytes));
        CompactError::Abandoned(e)
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
    }

    /// Opens a journal on `config` and returns the directories it synced on the way.
    fn synced_by_open(config: &JournalConfig) -> Vec<PathBuf> {
        SYNCED_DIRS.with(|synced| synced.borrow_mut().clear());
        drop(Journal::open(config).unwrap());
        SYNCED_DIRS.with(|synced| synced.take())
    }

    /// A store on `dir` that writes nothing at start (running tasks are kept).
    fn open(dir: &Path) -> Store {
        let mut config = JournalConfig::new(dir);
        config.recovery = RecoveryPolicy::Keep;
        Store::builder().journal(config).build().unwrap()
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
        // Reopened, the log and the directories are already durable: nothing to sync.
        assert_eq!(
            synced_by_open(&JournalConfig::new(&dir)),
            Vec::<PathBuf>::new()
        );
    }

    #[test]
    fn a_new_log_in_an_existing_directory_is_synced_into_it() {
        let dir = tempfile::tempdir().unwrap();
        let synced = synced_by_open(&JournalConfig::new(dir.path()));
        assert_eq!(synced, vec![dir.path().to_path_buf()]);
    }

    #[test]
    fn modes_that_do_not_promise_power_loss_safety_sync_no_directory_at_open() {
        for durability in [Durability::Flush, Durability::None] {
            let root = tempfile::tempdir().unwrap();
            let mut config = JournalConfig::new(root.path().join("new"));
            config.durability = durability;
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
        // Rewrite the log as version 1 wrote it: its header says 1, each record is framed
        // alone.
        let log = only(dir.path(), "journal-");
        let bytes = fs::read(&log).unwrap();
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
        fs::write(&log, &old).unwrap();
        let store = open(dir.path());
        for id in &ids {
            assert!(store.get(*id, None).is_ok());
        }
        drop(store);
        // Opening compacted it: a version 2 snapshot now holds every task.
        let snapshot = fs::read(only(dir.path(), "snapshot-")).unwrap();
        let (frames, _) = frame::read_frames(&snapshot).unwrap();
        let header: serde_json::Value = serde_json::from_slice(frames[0]).unwrap();
        assert_eq!(header["version"], VERSION);
        assert_eq!(frames.len(), 1 + ids.len());
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
            (0..3)
                .map(|_| store.create(CreateTask::new()).unwrap().task_id)
                .collect()
        };
        // Rewrite the snapshot as builds before the count wrote it.
        let path = only(dir.path(), "snapshot-");
        let bytes = fs::read(&path).unwrap();
        let (frames, _) = frame::read_frames(&bytes).unwrap();
        let mut header: serde_json::Value = serde_json::from_slice(frames[0]).unwrap();
        assert_eq!(header["tasks"], 3);
        header.as_object_mut().unwrap().remove("tasks");
        let mut old = Vec::new();
        frame::write_frame(&mut old, &serde_json::to_vec(&header).unwrap()).unwrap();
        for payload in &frames[1..] {
            frame::write_frame(&mut old, payload).unwrap();
        }
        fs::write(&path, &old).unwrap();
        let store = open(dir.path());
        for id in &ids {
            assert!(store.get(*id, None).is_ok());
        }
        drop(store);
        let bytes = fs::read(only(dir.path(), "snapshot-")).unwrap();
        let (frames, _) = frame::read_frames(&bytes).unwrap();
        let header: serde_json::Value = serde_json::from_slice(frames[0]).unwrap();
        assert_eq!(header["tasks"], 3, "rewritten with the count");
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
        assert!(message.contains("format version 3"), "{message}");
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
