//! The reference model: the store contract (DESIGN.md §3 and the machine's doc comments)
//! written as plainly as possible. A `BTreeMap` of tasks keyed by creation index; expiry
//! is applied when a task is touched, when a list page window reaches it, when a create
//! finds a limit reached, and by `handle_timeout`, exactly the moments the contract names.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use mcp_task_store::{LimitScope, Outcome, SessionId, TaskStatus};

use super::{Cfg, DetailObs, ErrObs, Subject, TaskObs, EXPIRED, POLL_MS};

struct MTask {
    session: Option<SessionId>,
    status: TaskStatus,
    message: Option<String>,
    created: u64,
    updated: u64,
    ttl: Option<u64>,
    /// When the task is next settled: its TTL deadline, then (failed by expiry under the
    /// `Fail` policy) the end of its grace.
    deadline: Option<u64>,
    /// Failed by expiry and lingering for the grace period (no longer counts to limits).
    expired: bool,
    outcome: Option<Outcome>,
    pending: BTreeSet<String>,
    used: BTreeSet<String>,
}

pub(super) struct Model {
    cfg: Cfg,
    now: u64,
    tasks: BTreeMap<usize, MTask>,
    cursors: HashMap<u8, String>,
}

impl Model {
    pub(super) fn new(cfg: Cfg) -> Model {
        Model {
            cfg,
            now: 0,
            tasks: BTreeMap::new(),
            cursors: HashMap::new(),
        }
    }

    /// Requested TTL (0 = none), else the default, capped by the maximum.
    fn resolve_ttl(&self, requested: Option<u64>) -> Option<u64> {
        let wanted = requested.filter(|&ms| ms > 0).or(self.cfg.default_ttl);
        match (wanted, self.cfg.max_ttl) {
            (Some(w), Some(max)) => Some(w.min(max)),
            (None, max) => max,
            (w, None) => w,
        }
    }

    fn snapshot(&self, idx: usize) -> TaskObs {
        let t = &self.tasks[&idx];
        TaskObs {
            idx,
            status: t.status,
            message: t.message.clone(),
            created: t.created,
            updated: t.updated,
            ttl: t.ttl,
            poll: Some(POLL_MS),
        }
    }

    /// Expiry, exactly at the deadline: a terminal task (or any task under `Remove`) goes;
    /// a running one under `Fail` becomes `failed` and goes when its grace is over.
    fn settle(&mut self, idx: usize) {
        loop {
            let now = self.now;
            let Some(task) = self.tasks.get_mut(&idx) else {
                return;
            };
            match task.deadline {
                Some(at) if at <= now => {}
                _ => return,
            }
            match self.cfg.grace {
                Some(grace) if !task.status.is_terminal() => {
                    task.expired = true;
                    finish(task, now, TaskStatus::Failed, Some(EXPIRED.into()), None);
                    task.deadline = task.deadline.map(|at| at + grace);
                }
                _ => {
                    self.tasks.remove(&idx);
                }
            }
        }
    }

    fn settle_all(&mut self) {
        let ids: Vec<usize> = self.tasks.keys().copied().collect();
        for idx in ids {
            self.settle(idx);
        }
    }

    /// Settles the task, then checks the caller may see it.
    fn touch(&mut self, t: Option<usize>, s: Option<&SessionId>) -> Result<usize, ErrObs> {
        let idx = t.ok_or(ErrObs::NotFound)?;
        self.settle(idx);
        match self.tasks.get(&idx) {
            Some(task) if task.session.as_ref() == s => Ok(idx),
            _ => Err(ErrObs::NotFound),
        }
    }

    fn already_terminal(&self, idx: usize) -> Result<(), ErrObs> {
        if self.tasks[&idx].status.is_terminal() {
            return Err(ErrObs::AlreadyTerminal(Box::new(self.snapshot(idx))));
        }
        Ok(())
    }

    /// Live tasks that count toward the limits (lingering expired ones do not).
    fn counted(&self, session: Option<Option<&SessionId>>) -> usize {
        self.tasks
            .values()
            .filter(|t| !t.expired)
            .filter(|t| session.is_none_or(|s| t.session.as_ref() == s))
            .count()
    }

    fn limit_hit(&self, session: Option<&SessionId>) -> Option<ErrObs> {
        if self
            .cfg
            .max_tasks
            .is_some_and(|max| self.counted(None) >= max)
        {
            return Some(ErrObs::Limit(LimitScope::Global));
        }
        let per_session = self.cfg.max_per_session.filter(|_| session.is_some());
        if per_session.is_some_and(|max| self.counted(Some(session)) >= max) {
            return Some(ErrObs::Limit(LimitScope::Session));
        }
        None
    }

    fn session_name(s: Option<&SessionId>) -> &str {
        s.map_or("-", SessionId::as_str)
    }
}

fn finish(
    task: &mut MTask,
    now: u64,
    status: TaskStatus,
    message: Option<String>,
    outcome: Option<Outcome>,
) {
    task.status = status;
    task.message = message;
    task.outcome = outcome;
    task.updated = now;
    task.pending.clear();
}

impl Subject for Model {
    fn create(
        &mut self,
        idx: usize,
        session: Option<SessionId>,
        ttl: Option<u64>,
    ) -> Result<TaskObs, ErrObs> {
        if self.limit_hit(session.as_ref()).is_some() {
            // Expired tasks never count: everything due is reclaimed before judging.
            self.settle_all();
        }
        if let Some(e) = self.limit_hit(session.as_ref()) {
            return Err(e);
        }
        let ttl = self.resolve_ttl(ttl);
        let task = MTask {
            session,
            status: TaskStatus::Working,
            message: None,
            created: self.now,
            updated: self.now,
            ttl,
            deadline: ttl.map(|ms| self.now + ms),
            expired: false,
            outcome: None,
            pending: BTreeSet::new(),
            used: BTreeSet::new(),
        };
        self.tasks.insert(idx, task);
        Ok(self.snapshot(idx))
    }

    fn create_dup(&mut self, idx: usize, _session: Option<SessionId>) -> Result<TaskObs, ErrObs> {
        assert!(self.tasks.contains_key(&idx));
        Err(ErrObs::InvalidArgument)
    }

    fn holds(&self, idx: usize) -> Option<bool> {
        Some(self.tasks.contains_key(&idx))
    }

    fn get(&mut self, t: Option<usize>, s: Option<&SessionId>) -> Result<TaskObs, ErrObs> {
        let idx = self.touch(t, s)?;
        Ok(self.snapshot(idx))
    }

    fn get_detail(&mut self, t: Option<usize>, s: Option<&SessionId>) -> Result<DetailObs, ErrObs> {
        let idx = self.touch(t, s)?;
        let task = &self.tasks[&idx];
        Ok(DetailObs {
            task: self.snapshot(idx),
            session: task.session.clone(),
            pending: task.pending.iter().cloned().collect(),
            outcome: task.outcome.clone(),
        })
    }

    fn update_status(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
        status: TaskStatus,
        message: Option<String>,
    ) -> Result<TaskObs, ErrObs> {
        let idx = self.touch(t, s)?;
        let now = self.now;
        let task = self.tasks.get_mut(&idx).expect("visible");
        if task.status.is_terminal() {
            return Err(ErrObs::InvalidTransition {
                from: task.status,
                to: status,
            });
        }
        if status == TaskStatus::Working && !task.pending.is_empty() {
            return Err(ErrObs::InvalidArgument);
        }
        if status.is_terminal() {
            finish(task, now, status, message, None);
        } else {
            task.status = status;
            task.message = message;
            task.updated = now;
        }
        Ok(self.snapshot(idx))
    }

    fn store_result(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
        status: TaskStatus,
        outcome: Outcome,
        message: Option<String>,
    ) -> Result<TaskObs, ErrObs> {
        if !matches!(status, TaskStatus::Completed | TaskStatus::Failed) {
            return Err(ErrObs::InvalidArgument);
        }
        if status == TaskStatus::Completed && matches!(outcome, Outcome::Error(_)) {
            return Err(ErrObs::InvalidArgument);
        }
        let idx = self.touch(t, s)?;
        self.already_terminal(idx)?;
        let now = self.now;
        let task = self.tasks.get_mut(&idx).expect("visible");
        finish(task, now, status, message, Some(outcome));
        Ok(self.snapshot(idx))
    }

    fn get_result(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
    ) -> Result<(TaskObs, Outcome), ErrObs> {
        let idx = self.touch(t, s)?;
        let task = &self.tasks[&idx];
        match &task.outcome {
            Some(outcome) => Ok((self.snapshot(idx), outcome.clone())),
            None => Err(ErrObs::NoResult(task.status)),
        }
    }

    fn cancel(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
        message: Option<String>,
    ) -> Result<(TaskObs, bool), ErrObs> {
        let idx = self.touch(t, s)?;
        if self.tasks[&idx].status.is_terminal() {
            return Ok((self.snapshot(idx), false));
        }
        let now = self.now;
        let task = self.tasks.get_mut(&idx).expect("visible");
        finish(task, now, TaskStatus::Cancelled, message, None);
        Ok((self.snapshot(idx), true))
    }

    fn set_input(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
        keys: &BTreeSet<String>,
    ) -> Result<TaskObs, ErrObs> {
        if keys.is_empty() {
            return Err(ErrObs::InvalidArgument);
        }
        let idx = self.touch(t, s)?;
        self.already_terminal(idx)?;
        let now = self.now;
        let task = self.tasks.get_mut(&idx).expect("visible");
        if keys.iter().any(|k| task.used.contains(k)) {
            return Err(ErrObs::InputKeyReused);
        }
        task.used.extend(keys.iter().cloned());
        task.pending.extend(keys.iter().cloned());
        task.status = TaskStatus::InputRequired;
        task.updated = now;
        Ok(self.snapshot(idx))
    }

    fn resolve_input(
        &mut self,
        t: Option<usize>,
        s: Option<&SessionId>,
        keys: &BTreeSet<String>,
    ) -> Result<TaskObs, ErrObs> {
        let idx = self.touch(t, s)?;
        self.already_terminal(idx)?;
        let now = self.now;
        let task = self.tasks.get_mut(&idx).expect("visible");
        let answered: Vec<&String> = keys.iter().filter(|k| task.pending.contains(*k)).collect();
        if !answered.is_empty() {
            for key in answered {
                task.pending.remove(key);
            }
            if task.pending.is_empty() && task.status == TaskStatus::InputRequired {
                task.status = TaskStatus::Working;
            }
            task.updated = now;
        }
        Ok(self.snapshot(idx))
    }

    fn list(
        &mut self,
        s: Option<&SessionId>,
        cursor: Option<&str>,
    ) -> Result<(Vec<TaskObs>, Option<String>), ErrObs> {
        // Cursor: "<index of the last task on the page>/<session>".
        let after = match cursor {
            None => None,
            Some(text) => {
                let (pos, owner) = text.split_once('/').ok_or(ErrObs::InvalidCursor)?;
                let pos: usize = pos.parse().map_err(|_| ErrObs::InvalidCursor)?;
                if owner != Self::session_name(s) {
                    return Err(ErrObs::InvalidCursor);
                }
                Some(pos)
            }
        };
        let page_size = self.cfg.page_size;
        // The page window (one task beyond the page, to know whether there are more) is
        // settled before it is read; settling may remove tasks, so repeat until stable.
        let window = loop {
            let window: Vec<usize> = self
                .tasks
                .iter()
                .filter(|(idx, t)| after.is_none_or(|a| **idx > a) && t.session.as_ref() == s)
                .map(|(idx, _)| *idx)
                .take(page_size + 1)
                .collect();
            let now = self.now;
            let due: Vec<usize> = window
                .iter()
                .copied()
                .filter(|idx| self.tasks[idx].deadline.is_some_and(|at| at <= now))
                .collect();
            if due.is_empty() {
                break window;
            }
            for idx in due {
                self.settle(idx);
            }
        };
        let on_page = &window[..window.len().min(page_size)];
        let tasks = on_page.iter().map(|&idx| self.snapshot(idx)).collect();
        let next = match on_page.last() {
            Some(last) if window.len() > page_size => {
                Some(format!("{last}/{}", Self::session_name(s)))
            }
            _ => None,
        };
        Ok((tasks, next))
    }

    fn advance(&mut self, ms: u64) {
        self.now += ms;
    }

    fn handle_timeout(&mut self, _budget: usize) -> usize {
        self.settle_all();
        self.tasks.len()
    }

    fn len(&mut self) -> usize {
        self.tasks.len()
    }

    fn cursors(&mut self) -> &mut HashMap<u8, String> {
        &mut self.cursors
    }
}
