//! Compaction that does not stop the store.
//!
//! Writing a snapshot of every live task took the owner thread away from its callers for
//! as long as the snapshot took: about 0.5 s at 300,000 tasks (1.8 us a task), seconds at a
//! million, and longer with the sync. Now a compaction is three steps, and only the first
//! is done at once:
//!
//! 1. **Switch.** The current log `G` is flushed (and synced, under `Fsync` durability),
//!    `journal-(G+1).log` is created with its header, and every batch from then on goes
//!    there. Recovery reads the chain
//!    `snapshot-B, journal-B.log, …, journal-(G+1).log` (`B` the newest snapshot), so the
//!    directory is whole at every moment from here on.
//! 2. **Walk.** Between batches, the owner thread writes the live tasks into `snapshot.tmp`
//!    in creation order, a few at a time ([`SNAPSHOT_HOLD`] of work per turn), each as it is
//!    at that moment. Tasks created after the switch are left out: the new log has them.
//!    The snapshot is fuzzy (a task changed during the walk is written as changed), which
//!    is sound because a log's records are whole states: replaying the new log from its
//!    start over the snapshot ends with each task's latest state, and a task removed before
//!    the walk reached it is removed again, harmlessly. A count closes the snapshot.
//! 3. **Finish.** The owner thread writes out what the new log still buffers (under `None`
//!    durability), so that the snapshot shows no change the log could lose. A thread of
//!    its own syncs the new log (without `Fsync`; with it, every batch was synced before
//!    its reply) and the snapshot, renames it to `snapshot-(G+1)`, syncs the directory,
//!    and deletes the generations it replaces. The owner thread collects the outcome at a
//!    later batch.
//!
//! A failure in the walk or the finish leaves the chain as it is (the temporary file is
//! removed): the next compaction waits for the log to double, as before. Only a failure to
//! flush the current log, or to take back a half-created new one, stops the store, and a
//! compaction that cannot begin while the log appended to is of an older format (see
//! [`Journal::abandon`]).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{at, frame, log_path, snapshot_path, sync_dir, CompactError, Journal, Record};
use super::{Durability, TaskRecord, VERSION};

/// Owner-thread time one turn of the walk may take before callers are served again.
pub(crate) const SNAPSHOT_HOLD: Duration = Duration::from_micros(200);

/// Records written between looks at the clock during a walk...
const RECORDS_PER_LOOK: u64 = 16;
/// ...or fewer, once they add up to this many bytes: a task may hold megabytes (its
/// request, its result), and sixteen of those would keep the owner thread far past
/// [`SNAPSHOT_HOLD`]. A look costs tens of nanoseconds, writing this much hundreds of
/// microseconds.
const BYTES_PER_LOOK: u64 = 64 * 1024;

/// A compaction under way.
#[derive(Debug)]
pub(crate) struct Compaction {
    /// The generation whose snapshot is being made (the new log's).
    next: u64,
    stage: Stage,
}

#[derive(Debug)]
enum Stage {
    /// The owner thread is writing the live tasks into `snapshot.tmp`.
    Walking {
        out: BufWriter<File>,
        /// The last task written, by creation sequence number.
        after: Option<u64>,
        /// The first sequence number the switch had not given out: tasks from there on
        /// are in the new log.
        until: u64,
        tasks: u64,
        bytes: u64,
    },
    /// A thread of its own is syncing, naming and cleaning up; it returns the snapshot's
    /// size.
    Finishing(JoinHandle<io::Result<u64>>),
}

/// Where a walk resumes: after the task numbered `after` (from the first when `None`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Walk {
    pub(crate) after: Option<u64>,
}

/// How a walk's turn went.
#[derive(Debug)]
pub(crate) enum Turn {
    /// Time ran out with tasks left: another turn is needed.
    More,
    /// Every task is written; the snapshot is being finished.
    Walked,
    /// The snapshot could not be written; the compaction is given up.
    Failed(io::Error),
}

impl Journal {
    /// Whether a compaction is under way (only one runs at a time).
    pub(crate) fn compacting(&self) -> bool {
        self.compaction.is_some()
    }

    /// Where the walk resumes, while one is under way.
    pub(crate) fn walk(&self) -> Option<Walk> {
        match &self.compaction.as_ref()?.stage {
            Stage::Walking { after, .. } => Some(Walk { after: *after }),
            Stage::Finishing(_) => None,
        }
    }

    /// Starts a compaction: writes out the current log (and syncs it, under `Fsync`), moves
    /// appending to a new one, and opens the snapshot the walk writes. `next_seq` is the
    /// first sequence number not given out.
    pub(crate) fn begin_compaction(
        &mut self,
        cursor_key: u64,
        next_seq: u64,
    ) -> Result<(), CompactError> {
        debug_assert!(self.batch.is_empty(), "compaction begins between batches");
        debug_assert!(self.compaction.is_none(), "one compaction at a time");
        // The new log's batches must not reach the disk before the old log's last ones:
        // recovery would replay the new log over a hole. `Fsync` has synced every batch
        // already, so this costs it little; the other modes promise nothing across a power
        // loss, and syncing a log written without syncs stalled the owner thread (102 ms
        // for a 100,000-task store under `Flush`), so they only hand it to the system.
        let fsync = self.config.durability == Durability::Fsync;
        self.log
            .flush()
            .and_then(|()| match fsync {
                true => self.log.get_ref().sync_all(),
                false => Ok(()),
            })
            .map_err(|e| CompactError::Broken(self.log_error()(e)))?;
        let dir = self.config.dir.clone();
        let Some(next) = self.generation.checked_add(1) else {
            return Err(self.abandon(io::Error::other("no generation number is left")));
        };
        let header = |tasks| Record::Header {
            version: VERSION,
            generation: next,
            cursor_key,
            next_seq,
            tasks,
        };
        // The snapshot's file first: when there is no room for it, nothing has changed.
        let tmp = dir.join("snapshot.tmp");
        let opened = File::create(&tmp).and_then(|file| {
            let mut out = BufWriter::with_capacity(256 * 1024, file);
            let bytes = frame::write_frame(&mut out, &serde_json::to_vec(&header(None))?)?;
            Ok((out, bytes as u64))
        });
        let (out, bytes) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                let _ = fs::remove_file(&tmp);
                return Err(self.abandon(at(&tmp)(e)));
            }
        };
        let log = log_path(&dir, next);
        let file = OpenOptions::new().create_new(true).write(true).open(&log);
        let file = match file {
            Ok(file) => file,
            Err(e) => {
                drop(out);
                let _ = fs::remove_file(&tmp);
                return Err(self.abandon(at(&log)(e)));
            }
        };
        let started = (|| {
            let mut new_log = BufWriter::with_capacity(64 * 1024, file);
            let header_bytes =
                frame::write_frame(&mut new_log, &serde_json::to_vec(&header(None))?)?;
            new_log.flush()?;
            // Batches acknowledged from now on are in this file: under `Fsync` it must
            // be there after a power loss.
            if fsync {
                new_log.get_ref().sync_all()?;
                sync_dir(&dir)?;
            }
            Ok::<_, io::Error>((new_log, header_bytes as u64))
        })();
        let (new_log, header_bytes) = match started {
            Ok(started) => started,
            Err(e) => {
                drop(out);
                let _ = fs::remove_file(&tmp);
                // Left in place, the new log would end the chain while batches go on to
                // the current one: a crash tearing those would read as damage.
                return match remove_durably(&dir, &log) {
                    Ok(()) => Err(self.abandon(at(&log)(e))),
                    Err(undo) => Err(CompactError::Broken(io::Error::other(format!(
                        "{}: {e}; removing it failed too: {undo}",
                        log.display()
                    )))),
                };
            }
        };
        self.log = new_log;
        self.legacy_log = false;
        self.seq_written = self.seq_written.max(next_seq);
        self.generation = next;
        self.older_bytes = self.older_bytes.saturating_add(self.log_bytes);
        self.log_bytes = header_bytes;
        self.compaction = Some(Compaction {
            next,
            stage: Stage::Walking {
                out,
                after: None,
                until: next_seq,
                tasks: 0,
                bytes,
            },
        });
        Ok(())
    }

    /// Writes `records` (the live tasks after the walk's position, in creation order) into
    /// the snapshot for up to `hold` (all of them with `None`). When they run out, the
    /// snapshot is closed and handed to the thread that finishes it.
    pub(crate) fn walk_turn(
        &mut self,
        records: impl Iterator<Item = TaskRecord>,
        hold: Option<Duration>,
    ) -> Turn {
        let Some(Compaction {
            next,
            stage:
                Stage::Walking {
                    out,
                    after,
                    until,
                    tasks,
                    bytes,
                },
        }) = &mut self.compaction
        else {
            return Turn::Walked;
        };
        let started = Instant::now();
        let mut written = 0u64;
        // Bytes written since the last look at the clock.
        let mut unlooked = 0u64;
        let mut records = records.take_while(|task| task.seq < *until);
        let wrote = loop {
            let look =
                written % RECORDS_PER_LOOK == RECORDS_PER_LOOK - 1 || unlooked >= BYTES_PER_LOOK;
            if let (Some(hold), true) = (hold, look) {
                if started.elapsed() >= hold {
                    break Ok(false);
                }
                unlooked = 0;
            }
            let Some(task) = records.next() else {
                break Ok(true);
            };
            let seq = task.seq;
            let framed = serde_json::to_vec(&Record::Put(task))
                .map_err(io::Error::from)
                .and_then(|payload| frame::write_frame(out, &payload));
            match framed {
                Ok(n) => {
                    *bytes += n as u64;
                    unlooked += n as u64;
                }
                Err(e) => break Err(e),
            }
            *after = Some(seq);
            *tasks += 1;
            written += 1;
        };
        match wrote {
            Ok(false) => Turn::More,
            Ok(true) => {
                // The snapshot holds tasks as changed by batches that may still sit in the
                // log's buffer (under `None` durability). Named, it would outlive them in a
                // crash: a task's later change kept, another's earlier one lost. Written
                // out now, the log holds every change the snapshot shows before the
                // snapshot can count.
                // The finishing thread also syncs it, before the snapshot is named: else,
                // under `Flush`, a power loss could keep the snapshot and lose the log
                // records of changes it shows, and the log's older records for those
                // tasks would take them back to an earlier state.
                // Not under `Fsync`: every change the snapshot shows was synced before its
                // reply, and the thread's sync, through a duplicate of this thread's
                // descriptor (one open file, one error state), would take a write error
                // of a batch under way for its own and leave this thread's sync to report
                // success: a batch acknowledged and lost.
                let fsync = self.config.durability == Durability::Fsync;
                let log = match self.log.flush().and_then(|()| match fsync {
                    true => Ok(None),
                    false => self.log.get_ref().try_clone().map(Some),
                }) {
                    Ok(log) => log,
                    Err(e) => return self.give_up(e),
                };
                let end = serde_json::to_vec(&Record::End { tasks: *tasks })
                    .map_err(io::Error::from)
                    .and_then(|payload| frame::write_frame(out, &payload));
                let n = match end {
                    Ok(n) => n as u64,
                    Err(e) => return self.give_up(e),
                };
                let total = *bytes + n;
                let next = *next;
                let dir = self.config.dir.clone();
                let replaced = (self.base..next).collect::<Vec<_>>();
                let Some(Compaction {
                    stage: Stage::Walking { out, .. },
                    ..
                }) = self.compaction.take()
                else {
                    unreachable!("matched above")
                };
                let finishing = std::thread::Builder::new()
                    .name("mcp-task-store-snapshot".into())
                    .spawn(move || {
                        finish(&dir, out, log.as_ref(), next, &replaced).map(|()| total)
                    });
                match finishing {
                    Ok(handle) => {
                        self.compaction = Some(Compaction {
                            next,
                            stage: Stage::Finishing(handle),
                        });
                        Turn::Walked
                    }
                    // `out` went with the closure: the file is closed.
                    Err(e) => self.give_up(e),
                }
            }
            Err(e) => self.give_up(e),
        }
    }

    /// The outcome of a compaction whose snapshot is being finished, once there is one
    /// (waiting for it with `wait`): `Some(Ok(()))` when the new generation stands.
    pub(crate) fn collect_compaction(&mut self, wait: bool) -> Option<io::Result<()>> {
        let Some(Compaction {
            stage: Stage::Finishing(handle),
            ..
        }) = &self.compaction
        else {
            return None;
        };
        if !wait && !handle.is_finished() {
            return None;
        }
        let Some(Compaction {
            next,
            stage: Stage::Finishing(handle),
        }) = self.compaction.take()
        else {
            unreachable!("matched above")
        };
        let outcome = handle
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("the snapshot's thread panicked")));
        Some(match outcome {
            Ok(bytes) => {
                self.base = next;
                self.base_bytes = bytes;
                // The logs before this generation's are gone.
                self.older_bytes = 0;
                self.legacy = false;
                self.rewrite = false;
                self.retry_at = 0;
                Ok(())
            }
            Err(e) => {
                self.backoff();
                Err(e)
            }
        })
    }

    /// Gives up a compaction whose walk failed: the chain stands as it is.
    fn give_up(&mut self, e: io::Error) -> Turn {
        self.compaction = None;
        let _ = fs::remove_file(self.config.dir.join("snapshot.tmp"));
        self.backoff();
        Turn::Failed(e)
    }

    /// Ends whatever compaction is under way when the journal closes: a walk is dropped
    /// (the chain is a whole directory), a finish is waited for (this journal's lock must
    /// outlive its last change to the directory).
    pub(super) fn stop_compaction(&mut self) {
        match self.compaction.take().map(|c| c.stage) {
            Some(Stage::Walking { out, .. }) => {
                drop(out);
                let _ = fs::remove_file(self.config.dir.join("snapshot.tmp"));
            }
            Some(Stage::Finishing(handle)) => {
                let _ = handle.join();
            }
            None => {}
        }
    }
}

/// Syncs the new log when given (it holds every change the snapshot shows; under `Fsync`
/// it is synced already), then makes the walked snapshot generation `next`'s and deletes
/// what it replaces. On error,
/// the temporary file is gone and the older generations are kept (whether or not the new
/// snapshot's name reached the disk, recovery finds a whole chain).
fn finish(
    dir: &Path,
    mut out: BufWriter<File>,
    log: Option<&File>,
    next: u64,
    replaced: &[u64],
) -> io::Result<()> {
    let tmp = dir.join("snapshot.tmp");
    let snapshot = snapshot_path(dir, next);
    let named = (|| {
        if let Some(log) = log {
            log.sync_data()?;
        }
        out.flush()?;
        out.get_ref().sync_all()?;
        drop(out);
        fs::rename(&tmp, &snapshot)?;
        sync_dir(dir)
    })();
    if let Err(e) = named {
        let _ = fs::remove_file(&tmp);
        return Err(at(&snapshot)(e));
    }
    // Recovery reads from the newest snapshot on, so these are obsolete; deleting them
    // is only tidying (the next start deletes whatever is left).
    for generation in replaced {
        let _ = fs::remove_file(log_path(dir, *generation));
        let _ = fs::remove_file(snapshot_path(dir, *generation));
    }
    Ok(())
}

/// Removes `path` and makes the removal durable; a file that is not there is no error.
fn remove_durably(dir: &Path, path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Ok(()) => sync_dir(dir),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
pub(super) mod tests {
    //! The journal alone, driven the way the owner thread drives it, against a model of
    //! the live tasks: whatever the interleaving of changes, walk turns, finishes and
    //! crashes, recovery finds exactly the model.

    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;
    use crate::model::{Origin, TaskId, TaskStatus, Timestamp};
    use crate::store::journal::JournalConfig;
    use crate::store::record::RecoveryPolicy;

    #[derive(Clone, Debug)]
    enum Step {
        Create,
        Update(usize),
        Remove(usize),
        Begin,
        Turn,
        Finish,
        Crash,
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => Just(Step::Create),
            3 => any::<usize>().prop_map(Step::Update),
            1 => any::<usize>().prop_map(Step::Remove),
            1 => Just(Step::Begin),
            3 => Just(Step::Turn),
            1 => Just(Step::Finish),
            1 => Just(Step::Crash),
        ]
    }

    /// A running task with sequence number `seq` and an origin naming it.
    pub(in crate::store::journal) fn task(seq: u64) -> TaskRecord {
        TaskRecord {
            id: TaskId::random(),
            seq,
            status: TaskStatus::Working,
            expired: false,
            message: None,
            created_at: Timestamp(seq),
            last_updated_at: Timestamp(seq),
            ttl: None,
            session: None,
            origin: Some(Origin::from(serde_json::json!({"seq": seq}))),
            outcome: None,
            pending: BTreeMap::new(),
            answers: BTreeMap::new(),
            used_keys: Vec::new(),
        }
    }

    /// A journal in `dir` that never syncs (these tests cut no power) and keeps running
    /// tasks running at start.
    fn unsynced(dir: &Path) -> JournalConfig {
        let mut config = JournalConfig::new(dir);
        config.durability = crate::store::journal::Durability::None;
        config.recovery = RecoveryPolicy::Keep;
        config
    }

    /// Opens the journal in `config.dir`, checking that it recovers `model` exactly.
    fn reopen(config: &JournalConfig, model: &BTreeMap<u64, TaskRecord>) -> Journal {
        let (mut journal, recovered) = Journal::open(config).unwrap();
        let found: Vec<(u64, TaskId, Option<String>, Option<String>)> = recovered
            .tasks
            .iter()
            .map(|t| {
                let origin = t.origin.as_ref().map(|o| o.as_json().to_owned());
                (t.seq, t.id, t.message.clone(), origin)
            })
            .collect();
        let expected: Vec<_> = model
            .values()
            .map(|t| {
                let origin = t.origin.as_ref().map(|o| o.as_json().to_owned());
                (t.seq, t.id, t.message.clone(), origin)
            })
            .collect();
        assert_eq!(found, expected);
        if journal.is_empty() {
            journal.write_header(7, 0).unwrap();
            journal.commit().unwrap();
        }
        journal
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn recovery_finds_every_change_whatever_compaction_was_doing(
            steps in proptest::collection::vec(step(), 1..120)
        ) {
            let dir = tempfile::tempdir().unwrap();
            let config = unsynced(dir.path());
            let mut model: BTreeMap<u64, TaskRecord> = BTreeMap::new();
            let mut next_seq = 0u64;
            let mut journal = reopen(&config, &model);
            for (n, step) in steps.into_iter().enumerate() {
                let pick = |i: usize| model.keys().nth(i % model.len().max(1)).copied();
                match step {
                    Step::Create => {
                        let task = task(next_seq);
                        next_seq += 1;
                        journal.append(&Record::Put(task.clone())).unwrap();
                        model.insert(task.seq, task);
                    }
                    Step::Update(i) => {
                        if let Some(seq) = pick(i) {
                            let task = model.get_mut(&seq).unwrap();
                            task.message = Some(format!("step {n}"));
                            let mut record = task.clone();
                            record.origin = None; // as the owner thread logs updates
                            journal.append(&Record::Put(record)).unwrap();
                        }
                    }
                    Step::Remove(i) => {
                        if let Some(seq) = pick(i) {
                            let id = model.remove(&seq).unwrap().id;
                            journal.append(&Record::Remove { id }).unwrap();
                        }
                    }
                    Step::Begin => {
                        journal.commit().unwrap();
                        if !journal.compacting() {
                            journal.begin_compaction(7, next_seq).unwrap();
                        }
                    }
                    Step::Turn | Step::Finish => {
                        journal.commit().unwrap();
                        let finish = matches!(step, Step::Finish);
                        if let Some(walk) = journal.walk() {
                            let rest = model
                                .range(walk.after.map_or(0, |a| a + 1)..)
                                .map(|(_, t)| t.clone());
                            let hold = (!finish).then_some(Duration::ZERO);
                            let turn = journal.walk_turn(rest, hold);
                            assert!(!matches!(turn, Turn::Failed(_)), "{turn:?}");
                        }
                        if let Some(outcome) = journal.collect_compaction(finish) {
                            outcome.unwrap();
                        }
                    }
                    Step::Crash => {
                        journal.commit().unwrap();
                        drop(journal);
                        journal = reopen(&config, &model);
                    }
                }
            }
            journal.commit().unwrap();
            drop(journal);
            drop(reopen(&config, &model));
        }
    }

    #[test]
    fn once_appending_to_a_new_log_a_compaction_that_cannot_begin_does_not_stop_the_store() {
        // A log of an older format: a compaction that cannot begin must not let batches
        // of this format go on into it, so that is fatal (at start, the store does not
        // open). Once a compaction has switched to a log of this format, that reason is
        // gone, even if the compaction failed (its walk, say, with no room for the
        // snapshot).
        let dir = tempfile::tempdir().unwrap();
        let header = Record::Header {
            version: 2,
            generation: 0,
            cursor_key: 7,
            next_seq: 0,
            tasks: None,
        };
        let mut old = Vec::new();
        frame::write_frame(&mut old, &serde_json::to_vec(&header).unwrap()).unwrap();
        fs::write(dir.path().join("journal-0000000000000000.log"), &old).unwrap();
        let mut config = JournalConfig::new(dir.path());
        config.recovery = RecoveryPolicy::Keep;
        let (mut journal, recovered) = Journal::open(&config).unwrap();
        assert!(recovered.legacy);
        journal.begin_compaction(7, 0).unwrap();
        let failed = journal.give_up(io::Error::other("no room for the snapshot"));
        assert!(matches!(failed, Turn::Failed(_)));
        // The next attempt cannot even begin (no room for the snapshot's file).
        fs::create_dir(dir.path().join("snapshot.tmp")).unwrap();
        match journal.begin_compaction(7, 0) {
            Err(CompactError::Abandoned(_)) => {}
            Err(CompactError::Broken(e)) => panic!("the store would stop: {e}"),
            Ok(()) => panic!("began"),
        }
        journal.append(&Record::Put(task(0))).unwrap();
        journal.commit().unwrap();
    }

    #[test]
    fn a_compaction_cut_short_is_due_again_at_the_next_start() {
        // A compaction that a crash or a shutdown ends before its snapshot is named leaves
        // its logs in the chain, and every start replays them all: the next start must see
        // them as due, not only the new log (which may never grow large enough), or each
        // interrupted compaction adds a log the chain keeps for good.
        let dir = tempfile::tempdir().unwrap();
        let mut config = unsynced(dir.path());
        config.compact_min_bytes = 4096;
        let mut model = BTreeMap::new();
        let mut journal = reopen(&config, &model);
        let mut one = task(0);
        for n in 0..100 {
            one.message = Some(format!("step {n}"));
            journal.append(&Record::Put(one.clone())).unwrap();
            journal.commit().unwrap();
        }
        model.insert(0, one);
        let live = 256;
        assert!(journal.should_compact(live));
        journal.begin_compaction(7, 1).unwrap();
        // Shut down (or killed) before the walk ends.
        drop(journal);
        let journal = reopen(&config, &model);
        assert!(
            journal.should_compact(live),
            "the chain holds the whole log that was due"
        );
    }

    #[test]
    fn a_turn_of_the_walk_ends_after_a_large_record_once_its_time_is_up() {
        // A task can hold megabytes (its request, its result): fifteen of them before the
        // first look at the clock kept the owner thread, and every caller, for as long as
        // writing them all takes, however short the turn was meant to be.
        let dir = tempfile::tempdir().unwrap();
        let config = unsynced(dir.path());
        let mut model: BTreeMap<u64, TaskRecord> = BTreeMap::new();
        let mut journal = reopen(&config, &model);
        for seq in 0..4 {
            let mut task = task(seq);
            task.message = Some("x".repeat(256 * 1024));
            journal.append(&Record::Put(task.clone())).unwrap();
            model.insert(seq, task);
        }
        journal.commit().unwrap();
        journal.begin_compaction(7, 4).unwrap();
        let turn = journal.walk_turn(model.values().cloned(), Some(Duration::ZERO));
        assert!(matches!(turn, Turn::More), "{turn:?}");
        let walked = journal.walk().unwrap().after;
        assert_eq!(walked, Some(0), "the clock is read after a large record");
        let rest = model.range(1..).map(|(_, t)| t.clone());
        assert!(matches!(journal.walk_turn(rest, None), Turn::Walked));
        journal.collect_compaction(true).unwrap().unwrap();
        drop(journal);
        drop(reopen(&config, &model));
    }

    /// Ends `journal` as a crash would: what its log's buffer holds is lost.
    fn crash(mut journal: Journal) {
        let scratch = BufWriter::new(tempfile::tempfile().unwrap());
        std::mem::forget(std::mem::replace(&mut journal.log, scratch));
        drop(journal);
    }

    #[test]
    fn a_crash_under_none_never_keeps_a_later_change_and_loses_an_earlier_one() {
        // `None` durability may lose the last changes to a crash, never one change while
        // keeping a later one: the snapshot, synced and named, must not hold a task in a
        // state the log's buffer alone knows about.
        let dir = tempfile::tempdir().unwrap();
        let config = unsynced(dir.path());
        let mut model: BTreeMap<u64, TaskRecord> = BTreeMap::new();
        let mut journal = reopen(&config, &model);
        for seq in 0..17 {
            let task = task(seq);
            journal.append(&Record::Put(task.clone())).unwrap();
            model.insert(seq, task);
        }
        journal.commit().unwrap();
        journal.begin_compaction(7, 17).unwrap();
        // One turn writes the first 15 tasks as they are.
        let turn = journal.walk_turn(model.values().cloned(), Some(Duration::ZERO));
        assert!(matches!(turn, Turn::More), "{turn:?}");
        // Then the first task changes, and after it the last one.
        for (seq, message) in [(0, "earlier"), (16, "later")] {
            let task = model.get_mut(&seq).unwrap();
            task.message = Some(message.into());
            let mut record = task.clone();
            record.origin = None;
            journal.append(&Record::Put(record)).unwrap();
            journal.commit().unwrap();
        }
        // The rest of the walk writes the last task as changed.
        let rest = model.range(15..).map(|(_, t)| t.clone());
        assert!(matches!(journal.walk_turn(rest, None), Turn::Walked));
        journal.collect_compaction(true).unwrap().unwrap();
        crash(journal);
        let (_, recovered) = Journal::open(&config).unwrap();
        let message = |seq: u64| {
            let task = recovered.tasks.iter().find(|t| t.seq == seq).unwrap();
            task.message.clone()
        };
        if message(16).as_deref() == Some("later") {
            assert_eq!(
                message(0).as_deref(),
                Some("earlier"),
                "kept a later change only"
            );
        }
    }
}
