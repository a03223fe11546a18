//! The two real implementations behind the [`Subject`] interface: the pure machine (ids
//! `TaskId::from_u128(index + 1)`, `Now::at(ms)`) and the threaded store (random ids,
//! a `ManualClock` advanced and then `sync`ed).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use mcp_task_store::{
    Clock, CreateTask, ManualClock, Now, Outcome, SessionId, Store, StoreError, StoreMachine, Task,
    TaskId, TaskStatus, Timestamp,
};
use serde_json::{json, Value};

use super::{Cfg, DetailObs, ErrObs, Subject, TaskObs, EXPIRED};

/// An id no subject ever issues.
const UNKNOWN: TaskId = TaskId::from_u128(u128::MAX);

fn requests(keys: &BTreeSet<String>) -> BTreeMap<String, Value> {
    keys.iter()
        .map(|k| {
            let request = json!({"method": "elicitation/create", "params": {"message": k}});
            (k.clone(), request)
        })
        .collect()
}

fn responses(keys: &BTreeSet<String>) -> BTreeMap<String, Value> {
    keys.iter()
        .map(|k| {
            (
                k.clone(),
                json!({"action": "accept", "content": {"key": k}}),
            )
        })
        .collect()
}

/// Normalises a snapshot: id -> creation index, wall clock -> ms since the store started.
fn task_obs(task: &Task, idx: usize, wall0: u64, loose: bool) -> TaskObs {
    let mut message = task.status_message.clone();
    if loose && task.status == TaskStatus::Failed {
        // The wording of the expiry message is the machine's own; the model only knows
        // that there is one.
        if message.as_deref().is_some_and(|m| m.contains("expired")) {
            message = Some(EXPIRED.into());
        }
    }
    TaskObs {
        idx,
        status: task.status,
        message,
        created: task.created_at.0 - wall0,
        updated: task.last_updated_at.0 - wall0,
        ttl: task.ttl,
        poll: task.poll_interval,
    }
}

fn err_obs(e: StoreError, task: impl Fn(&Task) -> TaskObs) -> ErrObs {
    match e {
        StoreError::NotFound => ErrObs::NotFound,
        StoreError::InvalidTransition { from, to } => ErrObs::InvalidTransition { from, to },
        StoreError::AlreadyTerminal(t) => ErrObs::AlreadyTerminal(Box::new(task(&t))),
        StoreError::NoResult { status, .. } => ErrObs::NoResult(status),
        StoreError::InvalidCursor => ErrObs::InvalidCursor,
        StoreError::LimitExceeded { scope, .. } => ErrObs::Limit(scope),
        StoreError::InputKeyReused { .. } => ErrObs::InputKeyReused,
        StoreError::InvalidArgument(_) => ErrObs::InvalidArgument,
        other => ErrObs::Other(format!("{other:?}")),
    }
}

// ----- the pure machine ------------------------------------------------------------------

pub(super) struct MachineSut {
    m: StoreMachine<u32>,
    now: u64,
    /// Reclaim everything due right after each advance, as the store's `sync` does.
    drain_on_advance: bool,
    /// Map the expiry status message onto the model's marker.
    loose: bool,
    cursors: HashMap<u8, String>,
}

impl MachineSut {
    pub(super) fn new(cfg: &Cfg, drain_on_advance: bool, loose: bool) -> MachineSut {
        MachineSut {
            m: StoreMachine::new(cfg.store_config(), 0x5eed).expect("valid config"),
            now: 0,
            drain_on_advance,
            loose,
            cursors: HashMap::new(),
        }
    }

    fn at(&self) -> Now {
        Now::at(self.now)
    }

    fn id(t: Option<usize>) -> TaskId {
        t.map_or(UNKNOWN, |idx| TaskId::from_u128(idx as u128 + 1))
    }

    fn obs(&self, task: &Task) -> TaskObs {
        let idx = usize::try_from(task.task_id.as_u128() - 1).expect("an id we issued");
        task_obs(task, idx, Now::at(0).wall.0, self.loose)
    }

    fn err(&self, e: StoreError) -> ErrObs {
        err_obs(e, |t| self.obs(t))
    }

    fn task(&self, r: Result<Task, StoreError>) -> Result<TaskObs, ErrObs> {
        r.map(|t| self.obs(&t)).map_err(|e| self.err(e))
    }
}

impl Subject for MachineSut {
    fn create(
        &mut self,
        idx: usize,
        session: Option<SessionId>,
        ttl: Option<u64>,
    ) -> Result<TaskObs, ErrObs> {
        let req = CreateTask {
            ttl,
            session,
            origin: None,
        };
        let r = self.m.create(self.at(), Self::id(Some(idx)), req);
        self.task(r)
    }

    fn create_dup(&mut self, idx: usize, session: Option<SessionId>) -> Result<TaskObs, ErrObs> {
        let req = CreateTask {
            ttl: None,
            session,
            origin: None,
        };
        let r = self.m.create(self.at(), Self::id(Some(idx)), req);
        self.task(r)
    }

    fn holds(&self, _idx: usize) -> Option<bool> {
        None
    }

    fn get(&mut self, t: Option<usize>, s: Option<&SessionId>) -> Result<TaskObs, ErrObs> {
        let r = self.m.get(self.at(), Self::id(t), s);
        self.task(r)
    }

    fn get_detail(&mut self, t: Option<usize>, s: Option<&SessionId>) -> Result<DetailObs, ErrObs> {
        match self.m.get_detail(self.at(), Self::id(t), s) {
            Ok(d) => Ok(DetailObs {
                task: self.obs(&d.task),
                session: d.session,
                pending: d.input_requests.into_keys().collect(),
                outcome: d.outcome,
            }),
            Err(e) => Err(self.err(e)),
        }
    }

    fn update_status(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
        status: TaskStatus,
        message: Option<String>,
    ) -> Result<TaskObs, ErrObs> {
        let r = self
            .m
            .update_status(self.at(), Self::id(t), s, status, message);
        self.task(r)
    }

    fn store_result(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
        status: TaskStatus,
        outcome: Outcome,
        message: Option<String>,
    ) -> Result<TaskObs, ErrObs> {
        let now = self.at();
        let r = self
            .m
            .store_result(now, Self::id(t), s, status, outcome, message);
        self.task(r)
    }

    fn get_result(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
    ) -> Result<(TaskObs, Outcome), ErrObs> {
        match self.m.get_result(self.at(), Self::id(t), s) {
            Ok(r) => Ok((self.obs(&r.task), r.outcome)),
            Err(e) => Err(self.err(e)),
        }
    }

    fn cancel(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
        message: Option<String>,
    ) -> Result<(TaskObs, bool), ErrObs> {
        match self.m.cancel(self.at(), Self::id(t), s, message) {
            Ok(c) => Ok((self.obs(&c.task), c.cancelled)),
            Err(e) => Err(self.err(e)),
        }
    }

    fn set_input(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
        keys: &BTreeSet<String>,
    ) -> Result<TaskObs, ErrObs> {
        let r = self
            .m
            .set_input_requests(self.at(), Self::id(t), s, requests(keys));
        self.task(r)
    }

    fn resolve_input(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
        keys: &BTreeSet<String>,
    ) -> Result<TaskObs, ErrObs> {
        let r = self
            .m
            .resolve_input(self.at(), Self::id(t), s, responses(keys));
        self.task(r)
    }

    fn list(
        &mut self,
        s: Option<&SessionId>,
        cursor: Option<&str>,
    ) -> Result<(Vec<TaskObs>, Option<String>), ErrObs> {
        match self.m.list(self.at(), s, cursor) {
            Ok(page) => Ok((
                page.tasks.iter().map(|t| self.obs(t)).collect(),
                page.next_cursor,
            )),
            Err(e) => Err(self.err(e)),
        }
    }

    fn advance(&mut self, ms: u64) {
        self.now += ms;
        if self.drain_on_advance {
            while self.m.handle_timeout(self.at(), usize::MAX) {}
        }
    }

    fn handle_timeout(&mut self, budget: usize) -> usize {
        let mut before = self.m.len();
        let mut rounds = 0;
        // Bounded batches: each call reclaims at most `budget` timers, never grows the store,
        // and reports whether more are due; loop until it says no.
        while self.m.handle_timeout(self.at(), budget) {
            let after = self.m.len();
            assert!(
                after <= before && before - after <= budget,
                "handle_timeout({budget}) went from {before} to {after} tasks"
            );
            before = after;
            rounds += 1;
            assert!(rounds < 100_000, "handle_timeout keeps reporting more work");
        }
        // Spurious or repeated calls are harmless.
        let len = self.m.len();
        assert!(!self.m.handle_timeout(self.at(), budget));
        assert_eq!(
            self.m.len(),
            len,
            "a repeated handle_timeout changed the store"
        );
        len
    }

    fn len(&mut self) -> usize {
        self.m.len()
    }

    fn cursors(&mut self) -> &mut HashMap<u8, String> {
        &mut self.cursors
    }
}

// ----- the threaded store ----------------------------------------------------------------

pub(super) struct StoreSut {
    store: Store,
    clock: ManualClock,
    /// The wall clock (ms) when the store started.
    wall0: u64,
    ids: Vec<TaskId>,
    index: HashMap<TaskId, usize>,
    cursors: HashMap<u8, String>,
}

impl StoreSut {
    pub(super) fn new(cfg: &Cfg) -> StoreSut {
        let clock = ManualClock::new();
        let wall0 = Timestamp::from_system_time(clock.now_utc()).0;
        let store = Store::builder()
            .config(cfg.store_config())
            .clock(clock.clone())
            .build()
            .expect("valid config");
        StoreSut {
            store,
            clock,
            wall0,
            ids: Vec::new(),
            index: HashMap::new(),
            cursors: HashMap::new(),
        }
    }

    fn id(&self, t: Option<usize>) -> TaskId {
        t.map_or(UNKNOWN, |idx| self.ids[idx])
    }

    fn obs(&self, task: &Task) -> TaskObs {
        let idx = self.index[&task.task_id];
        task_obs(task, idx, self.wall0, false)
    }

    fn err(&self, e: StoreError) -> ErrObs {
        err_obs(e, |t| self.obs(t))
    }

    fn task(&self, r: Result<Task, StoreError>) -> Result<TaskObs, ErrObs> {
        r.map(|t| self.obs(&t)).map_err(|e| self.err(e))
    }
}

impl Subject for StoreSut {
    fn create(
        &mut self,
        idx: usize,
        session: Option<SessionId>,
        ttl: Option<u64>,
    ) -> Result<TaskObs, ErrObs> {
        let req = CreateTask {
            ttl,
            session,
            origin: None,
        };
        let task = self.store.create(req).map_err(|e| self.err(e))?;
        assert_eq!(self.ids.len(), idx, "creation indices out of step");
        self.ids.push(task.task_id);
        self.index.insert(task.task_id, idx);
        Ok(self.obs(&task))
    }

    fn create_dup(&mut self, _idx: usize, _session: Option<SessionId>) -> Result<TaskObs, ErrObs> {
        unreachable!("the handle chooses its own ids")
    }

    fn holds(&self, _idx: usize) -> Option<bool> {
        None
    }

    fn get(&mut self, t: Option<usize>, s: Option<&SessionId>) -> Result<TaskObs, ErrObs> {
        self.task(self.store.get(self.id(t), s))
    }

    fn get_detail(&mut self, t: Option<usize>, s: Option<&SessionId>) -> Result<DetailObs, ErrObs> {
        match self.store.get_detail(self.id(t), s) {
            Ok(d) => Ok(DetailObs {
                task: self.obs(&d.task),
                session: d.session,
                pending: d.input_requests.into_keys().collect(),
                outcome: d.outcome,
            }),
            Err(e) => Err(self.err(e)),
        }
    }

    fn update_status(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
        status: TaskStatus,
        message: Option<String>,
    ) -> Result<TaskObs, ErrObs> {
        self.task(self.store.update_status(self.id(t), s, status, message))
    }

    fn store_result(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
        status: TaskStatus,
        outcome: Outcome,
        message: Option<String>,
    ) -> Result<TaskObs, ErrObs> {
        let r = self
            .store
            .store_result(self.id(t), s, status, outcome, message);
        self.task(r)
    }

    fn get_result(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
    ) -> Result<(TaskObs, Outcome), ErrObs> {
        match self.store.get_result(self.id(t), s) {
            Ok(r) => Ok((self.obs(&r.task), r.outcome)),
            Err(e) => Err(self.err(e)),
        }
    }

    fn cancel(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
        message: Option<String>,
    ) -> Result<(TaskObs, bool), ErrObs> {
        match self.store.cancel(self.id(t), s, message) {
            Ok(c) => Ok((self.obs(&c.task), c.cancelled)),
            Err(e) => Err(self.err(e)),
        }
    }

    fn set_input(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
        keys: &BTreeSet<String>,
    ) -> Result<TaskObs, ErrObs> {
        self.task(self.store.set_input_requests(self.id(t), s, requests(keys)))
    }

    fn resolve_input(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
        keys: &BTreeSet<String>,
    ) -> Result<TaskObs, ErrObs> {
        self.task(self.store.resolve_input(self.id(t), s, responses(keys)))
    }

    fn list(
        &mut self,
        s: Option<&SessionId>,
        cursor: Option<&str>,
    ) -> Result<(Vec<TaskObs>, Option<String>), ErrObs> {
        match self.store.list(s, cursor) {
            Ok(page) => Ok((
                page.tasks.iter().map(|t| self.obs(t)).collect(),
                page.next_cursor,
            )),
            Err(e) => Err(self.err(e)),
        }
    }

    fn advance(&mut self, ms: u64) {
        self.clock.advance(Duration::from_millis(ms));
        self.store.sync().expect("store alive");
    }

    fn handle_timeout(&mut self, _budget: usize) -> usize {
        self.store.sync().expect("store alive");
        self.len()
    }

    fn len(&mut self) -> usize {
        self.store.stats().expect("store alive").tasks
    }

    fn cursors(&mut self) -> &mut HashMap<u8, String> {
        &mut self.cursors
    }
}
