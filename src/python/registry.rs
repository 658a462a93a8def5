//! Python subscribers to core ids and back.
//!
//! The core stores `u32` ids; Python callers pass any hashable object. The registry maps an
//! object to its id with a Python `dict` (so hashing and equality are Python's own) and an id
//! back to its object with a table read on every lookup. Each id counts the pairs that use it;
//! an id whose count falls to zero is released, and its number is reused later.
//!
//! Reuse is where the care goes. A lookup reads ids from the core and then turns them into
//! objects; if an id were released and handed to another subscriber in between, the lookup
//! would return a subscriber that never subscribed. So:
//!
//! 1. every lookup converts its ids while pinned to a crossbeam-epoch guard, and a released id
//!    is returned to the free list only by a function deferred on that epoch: it cannot be
//!    reused until every lookup that might have read it has finished;
//! 2. while a snapshot taken before an id's release is alive, the id keeps its object (the
//!    snapshot may still hold it) and waits in `pending` until every such snapshot is gone.
//!    Snapshots taken after the release cannot hold it, so a program that always keeps some
//!    snapshot alive (taking the next before dropping the last) still gets its ids back.
//!
//! `lookup_arrow` maps an id below [`IntTable::same_below`] to its own number without reading
//! the table; rule 1 is what makes that sound. A pinned lookup may map an id released after it
//! read it, which orders the lookup before the release, as a reader of the table before the
//! release's write would; the id cannot have been reused with another value while it is
//! pinned, and a reuse lowers the published run before the id reaches the core.
//!
//! Locks: `slots` is taken with `lock_py_attached`, which detaches from the interpreter while it
//! waits, because the `dict` calls made under it can run Python code (`__hash__`, `__eq__`).
//! `objects` is read while lists are made from it, and an allocation can start a collection
//! that runs Python code (a `gc.callbacks` entry, a finalizer) and lets another thread take
//! the interpreter: so it too is taken detached when it must wait, or a writer holding the
//! interpreter would wait forever for a reader waiting for the interpreter.
//!
//! Neither lock is held while Python code runs that could reach this registry again on the
//! same thread: a finalizer that unsubscribes, run by a collection that an allocation under
//! the read of `objects` started, would wait for the write of `objects` behind its own
//! thread's read, forever. So both are held with the cyclic collector paused ([`Reading`],
//! [`SlotsHeld`]), and what a conversion lets go of (kept answers replaced or stale) is
//! dropped once the lock is let go. Python code the `dict` runs under `slots` (a subscriber's
//! `__hash__` or `__eq__`) is the subscriber's own; if it calls the matcher back, the call
//! finds `slots` held by its own thread ([`Registry::owner`]) and raises `RuntimeError`
//! instead of waiting for itself forever, and a snapshot it drops is forgotten by the next
//! holder of the lock ([`Registry::late_drops`]).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::ops::{Deref, DerefMut};
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard};

use pyo3::prelude::*;
use pyo3::sync::{MutexExt, RwLockExt};
use pyo3::types::{PyDict, PyInt, PyList, PyTuple};

use super::answers::{Answers, CollectorPaused, KeptTuple, Key, Stale, MIN_IDS};
use super::ints::{IntTable, IntValue};
use crate::groups::GROUP_BIT;
use crate::matcher::{AnswerStamp, SubscriberId};

/// One topic's answer from the core, as the conversions take it.
#[derive(Clone, Copy)]
pub(crate) struct Found<'a> {
    pub(crate) topic: &'a str,
    /// Empty when `kept` holds the answer.
    pub(crate) ids: &'a [SubscriberId],
    /// Set when a result cache stored the answer.
    pub(crate) stamp: Option<AnswerStamp>,
    /// The tuple of a stored answer, found with it (see [`Registry::stamped`]).
    pub(crate) kept: Option<&'a KeptTuple>,
}

impl Found<'_> {
    /// Subscribers in the answer.
    pub(crate) fn len(&self) -> usize {
        self.kept.map_or(self.ids.len(), KeptTuple::len)
    }

    /// What its tuple is kept under.
    fn key(&self) -> Key<'_> {
        self.stamp.map_or(Key::Topic(self.topic), Key::Stamp)
    }
}

#[derive(Default)]
struct Slots {
    /// Pairs (and in-flight subscribes) using each id; 0 for a free id.
    counts: Vec<u32>,
    /// Ids whose count fell to zero while snapshots were alive, each with the number the next
    /// snapshot would get at that moment: only snapshots numbered below it may hold the id.
    /// In release order, so in order of that number.
    pending: VecDeque<(u64, SubscriberId)>,
    /// For each id in `pending`, the number of its latest entry: an id whose count fell to
    /// zero, rose and fell again waits for the snapshots before its last fall, not its first.
    latest: HashMap<SubscriberId, u64>,
    /// The numbers of the live snapshots sharing this registry.
    snapshots: BTreeSet<u64>,
    /// The number the next snapshot gets.
    next_snapshot: u64,
}

/// What releases let go of, dropped with this once the registry's lock is let go: the last
/// reference to a subscriber (the caller may have unsubscribed an equal object, or a snapshot
/// held the id) runs its `__del__`, which may call back into this matcher and take the lock.
#[derive(Default)]
struct Released {
    objects: Vec<Py<PyAny>>,
    answers: Stale,
}

/// The object ↔ id maps of one matcher and its snapshots.
pub(crate) struct Registry {
    ids: Py<PyDict>,
    slots: Mutex<Slots>,
    objects: RwLock<Vec<Option<Py<PyAny>>>>,
    /// Beside `objects`, each live id's subscriber as an `i64` when it is an int that fits,
    /// read without the GIL by `lookup_arrow`. Same guard rule as `objects`.
    ints: RwLock<IntTable>,
    /// `ints`' [`IntTable::same_below`], stored under its write lock after each change, so
    /// that `int_values` can map ids below it without taking the lock. Lowered before a
    /// reused id reaches the core: a lookup that finds the id reads it lowered.
    ints_same: AtomicUsize,
    /// How many ids have been released: an id's object changes only through a release, so
    /// while this stands still every live id keeps its object (what [`Answers`] relies on).
    releases: AtomicU64,
    /// Tuples of the objects of large answers that repeat, copied instead of converted; a
    /// release empties it. Shared by a matcher and its snapshots: an answer is served only
    /// when the ids it was made from are the lookup's, whichever core gave them.
    answers: Answers,
    /// Ids whose epoch has passed: safe to hand out again.
    free: Arc<Mutex<Vec<SubscriberId>>>,
    /// The thread holding `slots` ([`this_thread`]), or 0. Only that thread stores its own
    /// number here, and clears it before it lets go, so a thread reads its own number only
    /// when it holds the lock itself: a call back from Python code run under the lock.
    owner: AtomicUsize,
    /// Snapshots dropped by a thread that held `slots` already (a subscriber's `__eq__` that
    /// made and dropped one): the next holder of the lock forgets them.
    late_drops: Mutex<Vec<u64>>,
    has_late_drops: AtomicBool,
}

/// A number for the calling thread, never 0, distinct from every other live thread's: the
/// address of a thread-local.
fn this_thread() -> usize {
    std::thread_local! {
        static MARK: u8 = const { 0 };
    }
    MARK.with(|m| m as *const u8 as usize)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The table of objects, read for a conversion (see the module's "Locks"): the cyclic
/// collector is paused while it is held, and kept answers let go meanwhile wait in `stale`.
/// Fields drop in order: the lock is let go, the collector resumes, then the answers go (a
/// tuple's last reference may run a finalizer).
struct Reading<'a, 'py> {
    objects: RwLockReadGuard<'a, Vec<Option<Py<PyAny>>>>,
    _paused: CollectorPaused<'py>,
    stale: Stale,
}

/// `slots`, locked with the cyclic collector paused (see the module's "Locks"). Fields drop
/// in order after `drop` cleared the owner: the lock is let go, the collector resumes, then
/// what the holder released goes (see [`Released`]).
struct SlotsHeld<'a, 'py> {
    slots: MutexGuard<'a, Slots>,
    owner: &'a AtomicUsize,
    _paused: CollectorPaused<'py>,
    released: Released,
}

impl Drop for SlotsHeld<'_, '_> {
    fn drop(&mut self) {
        self.owner.store(0, Relaxed);
    }
}

impl Deref for SlotsHeld<'_, '_> {
    type Target = Slots;
    fn deref(&self) -> &Slots {
        &self.slots
    }
}

impl DerefMut for SlotsHeld<'_, '_> {
    fn deref_mut(&mut self) -> &mut Slots {
        &mut self.slots
    }
}

impl Registry {
    pub(crate) fn new(py: Python<'_>) -> Self {
        Registry {
            ids: PyDict::new(py).unbind(),
            slots: Mutex::default(),
            objects: RwLock::default(),
            ints: RwLock::default(),
            ints_same: AtomicUsize::new(0),
            releases: AtomicU64::new(0),
            answers: Answers::default(),
            free: Arc::default(),
            owner: AtomicUsize::new(0),
            late_drops: Mutex::default(),
            has_late_drops: AtomicBool::new(false),
        }
    }

    /// `slots`, locked; the collector is paused once the lock is held (pausing first would
    /// leave it paused for the threads that run while this one waits detached). Snapshots
    /// dropped while the lock's holder ran Python code are forgotten first.
    ///
    /// `RuntimeError` if this thread holds it already: Python code run under it (a
    /// subscriber's `__hash__` or `__eq__`) called the matcher back.
    fn lock_slots<'py>(&self, py: Python<'py>) -> PyResult<SlotsHeld<'_, 'py>> {
        let me = this_thread();
        if self.owner.load(Relaxed) == me {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "a subscriber's __hash__ or __eq__ called its matcher back; the matcher is in \
                 the middle of a call on this thread",
            ));
        }
        let slots = self
            .slots
            .lock_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner);
        self.owner.store(me, Relaxed);
        let mut held = SlotsHeld {
            slots,
            owner: &self.owner,
            _paused: CollectorPaused::new(py),
            released: Released::default(),
        };
        // Cleared before the list is taken: a drop pushed meanwhile sets it again.
        if self.has_late_drops.load(Relaxed) && self.has_late_drops.swap(false, Acquire) {
            let late = std::mem::take(&mut *lock(&self.late_drops));
            for n in late {
                self.forget_snapshot(py, &mut held, n);
            }
        }
        Ok(held)
    }

    /// The table of objects, read for a conversion; as [`Registry::lock_slots`].
    fn read_objects<'py>(&self, py: Python<'py>) -> Reading<'_, 'py> {
        let objects = self
            .objects
            .read_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner);
        Reading {
            objects,
            _paused: CollectorPaused::new(py),
            stale: Stale::default(),
        }
    }

    /// The id of `obj` if it is a subscriber now.
    pub(crate) fn id_of(&self, obj: &Bound<'_, PyAny>) -> PyResult<Option<SubscriberId>> {
        let py = obj.py();
        let _slots = self.lock_slots(py)?;
        match self.ids.bind(py).get_item(obj)? {
            Some(id) => Ok(Some(id.extract()?)),
            None => Ok(None),
        }
    }

    /// The id of `obj`, created if needed, with its count raised by one so it cannot be released
    /// until [`Registry::unpin`] gives the count back or a pair takes it over.
    pub(crate) fn pin(&self, obj: &Bound<'_, PyAny>) -> PyResult<SubscriberId> {
        let py = obj.py();
        obj.hash()?; // unhashable subscribers fail here, with Python's own TypeError
        let mut slots = self.lock_slots(py)?;
        let slots = &mut *slots;
        let ids = self.ids.bind(py);
        if let Some(id) = ids.get_item(obj)? {
            let id: SubscriberId = id.extract()?;
            slots.counts[id as usize] += 1;
            return Ok(id);
        }
        let id = match lock(&self.free).pop() {
            Some(id) => id,
            // Ids from `GROUP_BIT` up number shared-subscription groups in the core.
            None => SubscriberId::try_from(slots.counts.len())
                .ok()
                .filter(|&id| id < GROUP_BIT)
                .ok_or_else(|| {
                    pyo3::exceptions::PyOverflowError::new_err("too many subscribers")
                })?,
        };
        if let Err(e) = ids.set_item(obj, id) {
            lock(&self.free).push(id);
            return Err(e);
        }
        if id as usize == slots.counts.len() {
            slots.counts.push(0);
        }
        slots.counts[id as usize] = 1;
        let mut objects = self
            .objects
            .write_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner);
        if id as usize >= objects.len() {
            objects.resize_with(id as usize + 1, || None);
        }
        objects[id as usize] = Some(obj.clone().unbind());
        drop(objects);
        let value = match obj.cast::<PyInt>() {
            Ok(int) => int.extract().map_or(IntValue::NotInt, IntValue::Int),
            Err(_) => IntValue::NotInt,
        };
        self.set_int(py, id, value);
        Ok(id)
    }

    /// Pins each subscriber `objs` gives, once a pair: their ids in order. If one fails (an
    /// unhashable object, or one `objs` could not make), the pins taken are given back and
    /// its error returned.
    pub(crate) fn pin_each<'py>(
        &self,
        py: Python<'py>,
        objs: impl Iterator<Item = PyResult<Bound<'py, PyAny>>>,
    ) -> PyResult<Vec<SubscriberId>> {
        let mut ids = Vec::with_capacity(objs.size_hint().0);
        for obj in objs {
            match obj.and_then(|obj| self.pin(&obj)) {
                Ok(id) => ids.push(id),
                Err(e) => {
                    for &id in &ids {
                        self.unpin(py, id, 1);
                    }
                    return Err(e);
                }
            }
        }
        Ok(ids)
    }

    /// Runs a write that may add one pair for `obj`: pins the id, runs `add` with it, and
    /// gives the pin back unless `add` reports a new pair.
    pub(crate) fn adding(
        &self,
        obj: &Bound<'_, PyAny>,
        add: impl FnOnce(SubscriberId) -> PyResult<bool>,
    ) -> PyResult<bool> {
        let id = self.pin(obj)?;
        let result = add(id);
        if !matches!(result, Ok(true)) {
            self.unpin(obj.py(), id, 1);
        }
        result
    }

    /// Runs a write that removes pairs of `obj`, if it is a subscriber at all: `remove` gets
    /// its id and returns how many pairs went, and the id's count drops by as many.
    pub(crate) fn removing(
        &self,
        obj: &Bound<'_, PyAny>,
        remove: impl FnOnce(SubscriberId) -> PyResult<usize>,
    ) -> PyResult<usize> {
        let Some(id) = self.id_of(obj)? else {
            return Ok(0);
        };
        let n = remove(id)?;
        self.unpin(obj.py(), id, n);
        Ok(n)
    }

    /// Lowers the count of `id` by `n`, releasing the id when nothing uses it any more.
    pub(crate) fn unpin(&self, py: Python<'_>, id: SubscriberId, n: usize) {
        if n == 0 {
            return;
        }
        // Only after a `pin` or an `id_of` of the same call, which took the lock and let it
        // go: a call back from under the lock raised there.
        let Ok(mut slots) = self.lock_slots(py) else {
            unreachable!("unpin without a pin or id_of before it");
        };
        let count = &mut slots.counts[id as usize];
        *count = count.saturating_sub(u32::try_from(n).unwrap_or(u32::MAX));
        if *count == 0 {
            if slots.snapshots.is_empty() {
                let mut released = std::mem::take(&mut slots.released);
                self.release(py, id, &mut released);
                slots.released = released;
            } else {
                let taken = slots.next_snapshot;
                slots.pending.push_back((taken, id));
                slots.latest.insert(id, taken);
            }
        }
    }

    /// Forgets the object of `id` now and frees the number once no lookup can hold it. The
    /// object and the kept answers (all stale now) go into `released`, for the caller to drop
    /// once it has let go of `slots`, which it holds.
    fn release(&self, py: Python<'_>, id: SubscriberId, released: &mut Released) {
        let obj = self
            .objects
            .write_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner)[id as usize]
            .take();
        let Some(obj) = obj else {
            // Already released: the id must reach the free list once only.
            return;
        };
        self.set_int(py, id, IntValue::Released);
        // After the object is gone from the table: a reader that saw the old count and then
        // reads the table either finds the object gone or stamps a tuple with a stale count.
        self.releases.fetch_add(1, Release);
        self.answers.take_all(&mut released.answers);
        // The object hashed when it was added; if its hash now fails, it stays in the dict
        // (unreachable) rather than leaving the registry half-updated.
        let _ = self.ids.bind(py).del_item(obj.bind(py));
        released.objects.push(obj);
        let free = Arc::clone(&self.free);
        let guard = crossbeam_epoch::pin();
        guard.defer(move || lock(&free).push(id));
        // Hand the deferred function to the global queue now, so any thread can run it.
        guard.flush();
    }

    /// Records a new snapshot sharing this registry; returns its number, for
    /// [`Registry::drop_snapshot`].
    pub(crate) fn add_snapshot(&self, py: Python<'_>) -> PyResult<u64> {
        let mut slots = self.lock_slots(py)?;
        let n = slots.next_snapshot;
        slots.next_snapshot += 1;
        slots.snapshots.insert(n);
        Ok(n)
    }

    /// Records that snapshot `n` is gone, and releases the ids that waited only for snapshots
    /// older than every one still alive. Dropped by Python code that runs under the lock on
    /// this thread, it is left to the lock's next holder.
    pub(crate) fn drop_snapshot(&self, py: Python<'_>, n: u64) {
        match self.lock_slots(py) {
            Ok(mut slots) => self.forget_snapshot(py, &mut slots, n),
            Err(_) => {
                lock(&self.late_drops).push(n);
                self.has_late_drops.store(true, Release);
            }
        }
    }

    /// [`Registry::drop_snapshot`]'s work, under the lock.
    fn forget_snapshot(&self, py: Python<'_>, slots: &mut SlotsHeld<'_, '_>, n: u64) {
        let mut released = std::mem::take(&mut slots.released);
        slots.snapshots.remove(&n);
        let oldest = slots.snapshots.first().copied().unwrap_or(u64::MAX);
        while let Some(&(taken, id)) = slots.pending.front() {
            // Snapshots numbered `taken` and later came after the release: none can hold `id`.
            if taken > oldest {
                break;
            }
            slots.pending.pop_front();
            if slots.latest.get(&id) != Some(&taken) {
                continue; // a later entry of the same id decides
            }
            slots.latest.remove(&id);
            if slots.counts[id as usize] == 0 {
                self.release(py, id, &mut released);
            }
        }
        slots.released = released;
    }

    /// The list of the objects of `ids`, the answer for `topic` (stamped `stamp` if a result
    /// cache stored it): a copy of the tuple `answers` keeps for it when it holds these ids
    /// (see `answers.rs`), else converted. Caller holds an epoch guard taken before the ids
    /// were read from the core; an id released since then is skipped (its removal came first).
    pub(crate) fn answer<'py>(
        &self,
        py: Python<'py>,
        found: Found<'_>,
    ) -> PyResult<Bound<'py, PyList>> {
        let releases = self.releases.load(Acquire);
        let mut reading = self.read_objects(py);
        self.answer_of(py, &mut reading, releases, found)
    }

    /// One list per answer, under one read of the table: a batch's conversion. Same guard
    /// rule as [`Registry::answer`].
    pub(crate) fn answers<'py, 'a>(
        &self,
        py: Python<'py>,
        found: impl Iterator<Item = Found<'a>>,
    ) -> PyResult<Vec<Bound<'py, PyList>>> {
        let releases = self.releases.load(Acquire);
        let mut reading = self.read_objects(py);
        found
            .map(|f| self.answer_of(py, &mut reading, releases, f))
            .collect()
    }

    /// The list for one answer: a copy of its kept tuple, or converted. `releases` was read
    /// before `objects`.
    fn answer_of<'py>(
        &self,
        py: Python<'py>,
        reading: &mut Reading<'_, 'py>,
        releases: u64,
        found: Found<'_>,
    ) -> PyResult<Bound<'py, PyList>> {
        if let Some(kept) = found.kept {
            return kept.bind(py).as_sequence().to_list();
        }
        match self.kept(py, reading, releases, found)? {
            Some(tuple) => tuple.as_sequence().to_list(),
            None => list_of(py, &reading.objects, found.ids),
        }
    }

    /// The tuple of the objects of an answer, if one is kept for its ids, or made now (and
    /// kept) because the answer is large, repeated (or stored by a cache) and all live; `None`
    /// when the answer is to be converted id by id. `releases` was read before `objects`.
    /// (An answer found with its tuple, `found.kept`, is copied by the callers directly.)
    fn kept<'py>(
        &self,
        py: Python<'py>,
        reading: &mut Reading<'_, 'py>,
        releases: u64,
        found: Found<'_>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let ids = found.ids;
        if ids.len() < MIN_IDS {
            return Ok(None);
        }
        let key = found.key();
        let h = key.hash();
        if let Some(tuple) = self.answers.tuple(py, h, key, ids, releases) {
            return Ok(Some(tuple));
        }
        if !self.answers.wants(h, key, ids) {
            return Ok(None);
        }
        let objects = &reading.objects;
        let live: Option<Vec<&Py<PyAny>>> = ids.iter().map(|&id| live(objects, id)).collect();
        let Some(live) = live else {
            return Ok(None);
        };
        let tuple = PyTuple::new(py, live.iter().map(|o| o.bind(py)))?;
        self.answers.keep(
            h,
            key,
            ids,
            releases,
            &self.releases,
            tuple.clone().unbind(),
            &mut reading.stale,
        );
        if let Key::Stamp(_) = key {
            // The topic's answer is stored now: a tuple kept under its topic before (while
            // the cache had not stored it yet) would only hold budget and a slot.
            self.answers
                .forget(Key::Topic(found.topic), &mut reading.stale);
        }
        Ok(Some(tuple))
    }

    /// The tuple kept for the stored answer `stamp` with `len` subscribers, if there is one
    /// and no id has been released since it was made (see `Answers::stamped`): asked during a
    /// batch's lookups, without the GIL, so that the core need not copy the answer out. The
    /// caller holds an epoch guard, as for any lookup.
    pub(crate) fn stamped(&self, stamp: AnswerStamp, len: usize) -> Option<KeptTuple> {
        if len < MIN_IDS {
            return None;
        }
        self.answers.stamped(stamp, self.releases.load(Acquire))
    }

    /// Appends the objects of each answer to `flat`, and the length of `flat` after each to
    /// `ends`: `lookup_flat`'s conversion, under one read of the table. A kept tuple goes in
    /// as one slice assignment (CPython's own copy); any other answer object by object. Same
    /// guard rule as [`Registry::answer`].
    pub(crate) fn extend_flat<'py, 'a>(
        &self,
        flat: &Bound<'py, PyList>,
        ends: &mut Vec<usize>,
        found: impl Iterator<Item = Found<'a>>,
    ) -> PyResult<()> {
        let py = flat.py();
        let releases = self.releases.load(Acquire);
        let mut reading = self.read_objects(py);
        for f in found {
            let end = flat.len();
            if let Some(kept) = f.kept {
                flat.set_slice(end, end, kept.bind(py).as_any())?;
                ends.push(flat.len());
                continue;
            }
            match self.kept(py, &mut reading, releases, f)? {
                Some(tuple) => flat.set_slice(end, end, tuple.as_any())?,
                None => {
                    // A released id is skipped, as in `list_of`.
                    for o in f.ids.iter().filter_map(|&id| live(&reading.objects, id)) {
                        flat.append(o.bind(py))?;
                    }
                }
            }
            ends.push(flat.len());
        }
        Ok(())
    }

    /// The list of the objects of `ids`, converted. Same guard rule as [`Registry::answer`].
    pub(crate) fn list<'py>(
        &self,
        py: Python<'py>,
        ids: &[SubscriberId],
    ) -> PyResult<Bound<'py, PyList>> {
        list_of(py, &self.read_objects(py).objects, ids)
    }

    /// Appends the subscribers of `ids` as `i64`s to `values`, read without the GIL under one
    /// read lock (one a subscriber was most of a cached `lookup_arrow` batch), or with no lock
    /// and no read when every id is below the ids that are their own value. Released ids are
    /// left out; the first id whose subscriber is not an int that fits is returned, and the
    /// rest still appended. Same guard rule as `objects`.
    pub(crate) fn int_values(
        &self,
        ids: &[SubscriberId],
        values: &mut Vec<i64>,
    ) -> Option<SubscriberId> {
        // Acquire: pairs with `set_int`'s store, which a write makes before its id reaches
        // the core, where the lookup that gave `ids` found it.
        let same = self.ints_same.load(Acquire);
        if ids.iter().all(|&id| (id as usize) < same) {
            values.extend(ids.iter().map(|&id| i64::from(id)));
            return None;
        }
        self.ints
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(ids, values)
    }

    /// Sets `id`'s int value, and publishes how many ids are their own value.
    fn set_int(&self, py: Python<'_>, id: SubscriberId, value: IntValue) {
        let mut ints = self
            .ints
            .write_py_attached(py)
            .unwrap_or_else(PoisonError::into_inner);
        ints.set(id, value);
        // Under the lock, so that stores of it are in the order of the changes.
        self.ints_same.store(ints.same_below(), Release);
    }

    /// The object of one id, or `None` if it was released. Same guard rule as `objects`.
    pub(crate) fn object<'py>(
        &self,
        py: Python<'py>,
        id: SubscriberId,
    ) -> Option<Bound<'py, PyAny>> {
        live(&self.read_objects(py).objects, id).map(|o| o.bind(py).clone())
    }
}

/// The object of `id` in `objects`, or `None` if it was released.
fn live(objects: &[Option<Py<PyAny>>], id: SubscriberId) -> Option<&Py<PyAny>> {
    objects.get(id as usize).and_then(Option::as_ref)
}

/// The list of the objects of `ids` in `objects`, skipping released ids.
fn list_of<'py>(
    py: Python<'py>,
    objects: &[Option<Py<PyAny>>],
    ids: &[SubscriberId],
) -> PyResult<Bound<'py, PyList>> {
    let live = |id: SubscriberId| live(objects, id);
    if ids.iter().all(|&id| live(id).is_some()) {
        // The common case, every id live: the list is made at its final length and filled in
        // place, with no vector in between. `none` is never used: every id was just checked.
        let none = py.None().into_bound(py);
        PyList::new(
            py,
            ids.iter().map(|&id| live(id).map_or(&none, |o| o.bind(py))),
        )
    } else {
        let objs: Vec<_> = ids.iter().filter_map(|&id| live(id)).collect();
        PyList::new(py, objs.iter().map(|o| o.bind(py)))
    }
}
