//! Large answers as copies of a tuple kept for them.
//!
//! Under the stable ABI, each subscriber put into a new list is two calls into the interpreter
//! (`Py_IncRef`, `PyList_SetItem`), 3 to 5 ns, where `list(t)` of a tuple copies in CPython's
//! own loop with the reference counts inline, about 1 ns. A broker's fan-out topic returns the
//! same hundreds of subscribers on every message. So each registry (a matcher's, shared with
//! its snapshots) keeps, for topics whose
//! answers have at least [`MIN_IDS`] subscribers, a tuple of the objects of the answer and the
//! ids it was made from; a lookup whose ids from the core are the same, in the same order,
//! answers with a copy of the tuple (`PySequence_List`), and `lookup_flat` copies it into its
//! one list (`PyList_SetSlice`), in CPython's own loop either way.
//!
//! An answer a result cache stored comes with its stamp ([`AnswerStamp`]), which names its ids
//! for good: its tuple is kept under the stamp, made on the first conversion (the cache stored
//! only a topic seen before), and served on the stamp alone, with no compare of the topic or
//! the ids (which, with thousands of answers of hundreds of subscribers, are rarely in the
//! processor's caches). Any other answer is kept under its topic, with its ids compared.
//!
//! Why a copy never returns a wrong object: the core's ids are the answer; the tuple only
//! spares turning them into objects again. It is made only from ids that were all live, under
//! the lookup's epoch guard, and stamped with the registry's count of releases read before the
//! objects were. An id keeps its object from the moment it is handed out until it is released,
//! and a release moves that count; so while the count stands still every id of the tuple still
//! has the object the tuple holds for it, and a copy is what converting the ids would give.
//! Once it moves, every kept tuple is stale: the release takes them all out of their slots
//! (and drops them once the registry's lock is let go), so a subscriber no longer subscribed is
//! not kept alive by a tuple; each is made again on its topic's next lookups. A tuple stored
//! while a release clears them checks the count again after storing and takes itself out.
//!
//! Bounds: [`SETS`] sets of [`WAYS`] topics a matcher, by the topic's hash, and [`MAX_IDS`]
//! ids in all (the tuples hold references to objects the registry already keeps alive: 8 bytes
//! a subscriber, plus 4 for its id). A topic's tuple is made the second time its large answer
//! is converted (a doorkeeper bit per hash, cleared when half are set), so topics seen once
//! cost a hash and a bit. Tuples kept under topics hold at most [`TOPIC_MAX_IDS`] ids of
//! answers shorter than [`TOPIC_LARGE`], what stays in a processor's caches: a bare matcher
//! with thousands of such answers converts most of them, which is faster than copying tuples
//! from memory, and keeps the first ones seen twice until a release clears them (a bit per
//! kept topic spares the others the probe of their set). The tables are allocated on the
//! first large answer: a matcher that never returns one pays nothing.
//!
//! Locks: a slot's mutex is held only to clone or swap an `Arc`, never while Python code can
//! run (a tuple dropped can run a subscriber's `__del__`, which may look up this matcher).

use std::hash::BuildHasher;
use std::sync::atomic::Ordering::{Acquire, Relaxed};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::cstrie::WordsHasher;
use crate::matcher::{AnswerStamp, SubscriberId};

/// Answers this long or longer are kept as tuples. Not tuned: where a copy starts to beat
/// converting (a hash, a slot and a compare against a call or two per subscriber) has not
/// been measured; at 180 subscribers a copy costs half as much.
pub(crate) const MIN_IDS: usize = 32;

/// Sets of kept answers, and topics a set holds: 16,384 topics, enough for the OpenAMQ
/// experiment's 7,560 with few sets overflowing.
const SETS: usize = 4096;
const WAYS: usize = 4;

/// Ids held in all of a matcher's tuples: at most 24 MiB of tuples and ids.
const MAX_IDS: usize = 1 << 21;

/// Ids held in the tuples kept under topics (a bare matcher's answers, compared id by id): at
/// most 768 KiB of tuples and ids, which stay in a processor's caches. A copy of a tuple beats
/// converting only while its ids and objects are there: on the OpenAMQ experiment, 7,560
/// answers of about 170 (5 MB of ids, 10 MB of tuples), the bare `CSTrie`'s `lookup_many` ran
/// at 55M matches/s with every answer kept and 91M with none, while one hot answer of 180
/// cost 6.9 ns a subscriber kept and 10.6 converted (2026-11-28).
const TOPIC_MAX_IDS: usize = 1 << 16;

/// Answers kept under topics this long or longer do not count in [`TOPIC_MAX_IDS`]: copying
/// them beats converting even from memory, where the cost of finding a tuple (a few cold
/// lines) is small beside the subscribers'. Not tuned: a hot answer of 100,000 cost 8.9 ns a
/// subscriber copied and 10.7 converted (`Trie`), 15.4-16.0 and 20.3-20.7 (`CSTrie`), and
/// cold answers of about 170 converted faster; where between the two it turns is not measured.
const TOPIC_LARGE: usize = 1024;

/// Doorkeeper bits, a few per slot.
const DOOR_BITS: usize = 1 << 16;

/// Bits of the topics whose answers may be kept (set by the hash when one is kept, cleared
/// with all the answers by a release): a lookup of a topic whose bit is clear skips the probe
/// of its set, a line that is rarely in the caches once thousands of topics pass (on the
/// OpenAMQ experiment, about 50 ns a message).
const KEPT_BITS: usize = 1 << 16;

/// What a lookup's answer is kept under.
#[derive(Clone, Copy)]
pub(crate) enum Key<'a> {
    /// An answer a result cache stored: the stamp names its ids.
    Stamp(AnswerStamp),
    /// Any other: its topic, and its ids are compared.
    Topic(&'a str),
}

impl Key<'_> {
    /// The hash the answer is kept by: computed once per lookup and handed to the methods.
    pub(crate) fn hash(self) -> u64 {
        match self {
            // Odd-constant multiplication spreads the counter into the high bits a set is
            // picked by.
            Key::Stamp(stamp) => stamp.get().wrapping_mul(0x9e37_79b9_7f4a_7c15),
            Key::Topic(topic) => WordsHasher.hash_one(topic),
        }
    }
}

/// What a kept answer was made for.
enum Made {
    Stamp(AnswerStamp),
    Topic(Box<str>, Box<[SubscriberId]>),
}

impl Made {
    fn of(key: Key<'_>, ids: &[SubscriberId]) -> Self {
        match key {
            Key::Stamp(stamp) => Made::Stamp(stamp),
            Key::Topic(topic) => Made::Topic(topic.into(), ids.into()),
        }
    }

    /// Whether this is the answer `key` names (its ids still to compare for a topic).
    fn is(&self, key: Key<'_>) -> bool {
        match (self, key) {
            (Made::Stamp(a), Key::Stamp(b)) => *a == b,
            (Made::Topic(a, _), Key::Topic(b)) => **a == *b,
            _ => false,
        }
    }

    /// Whether `ids`, the answer of the lookup that found this, are the ones it was made of.
    fn holds(&self, ids: &[SubscriberId]) -> bool {
        match self {
            // A stored answer's ids never change.
            Made::Stamp(_) => true,
            Made::Topic(_, kept) => **kept == *ids,
        }
    }
}

/// One kept answer.
struct Answer {
    hash: u64,
    made: Made,
    /// Subscribers in the tuple, counted in [`Answers::held`] (and in
    /// [`Answers::held_topics`] for an answer kept under its topic).
    len: usize,
    /// The registry's release count read before the objects were.
    releases: u64,
    tuple: Py<PyTuple>,
}

impl Answer {
    /// Its subscribers counted in [`Answers::held_topics`].
    fn topic_len(&self) -> usize {
        match self.made {
            Made::Topic(..) => topic_len(self.len),
            Made::Stamp(_) => 0,
        }
    }
}

/// The ids an answer of `len` kept under its topic counts in [`Answers::held_topics`].
fn topic_len(len: usize) -> usize {
    if len < TOPIC_LARGE {
        len
    } else {
        0
    }
}

/// A slot: the hash of the topic it holds, read before its lock so that a probe locks only
/// the slot that may hold its topic (0 when emptied, or a hash that happened to be 0; the
/// answer under the lock decides).
#[derive(Default)]
struct Slot {
    hash: AtomicU64,
    answer: Mutex<Option<Arc<Answer>>>,
}

struct Tables {
    slots: Box<[Slot]>,
    /// The slots holding an answer, for [`Answers::take_all`].
    used: Mutex<Vec<u32>>,
    door: Box<[AtomicU64]>,
    /// Bits set in `door`.
    door_set: AtomicUsize,
    /// See [`KEPT_BITS`].
    kept_topics: Box<[AtomicU64]>,
}

impl Tables {
    /// The word of `kept_topics` that holds the bit of hash `h`, and the bit.
    fn kept_bit(&self, h: u64) -> (&AtomicU64, u64) {
        let bit = h as usize % KEPT_BITS;
        (&self.kept_topics[bit / 64], 1u64 << (bit % 64))
    }
}

/// The tuple kept for a stored answer, found during a batch's lookups (without the GIL), so
/// that the core did not copy the answer's ids out. A batch drops it in its conversion, with
/// the GIL held; dropped without it (a batch that failed), the tuple's release is deferred to
/// the next time a thread attaches, as for any `Py` dropped so.
pub(crate) struct KeptTuple(Arc<Answer>);

impl KeptTuple {
    /// The tuple, borrowed: copying it takes no reference of its own.
    pub(crate) fn bind<'a, 'py>(&'a self, py: Python<'py>) -> &'a Bound<'py, PyTuple> {
        self.0.tuple.bind(py)
    }

    /// Subscribers in the tuple.
    pub(crate) fn len(&self) -> usize {
        self.0.len
    }
}

/// A matcher's kept answers.
#[derive(Default)]
pub(crate) struct Answers {
    tables: OnceLock<Tables>,
    /// Ids held by all kept answers.
    held: AtomicUsize,
    /// Ids held by the answers kept under their topics.
    held_topics: AtomicUsize,
}

impl Answers {
    /// The kept tuple of the answer `key` names (of hash `h`, see [`Key::hash`]), whose ids
    /// from the core are `ids`, if one holds these ids. `releases` is the registry's release
    /// count now.
    pub(crate) fn tuple<'py>(
        &self,
        py: Python<'py>,
        h: u64,
        key: Key<'_>,
        ids: &[SubscriberId],
        releases: u64,
    ) -> Option<Bound<'py, PyTuple>> {
        let tables = self.tables.get()?;
        if let Key::Topic(_) = key {
            let (word, mask) = tables.kept_bit(h);
            if word.load(Relaxed) & mask == 0 {
                return None;
            }
        }
        let (_, answer) = find(set(tables, h), h, key)?;
        if answer.releases != releases || !answer.made.holds(ids) {
            return None;
        }
        Some(answer.tuple.bind(py).clone())
    }

    /// The tuple kept for the stored answer `stamp`, if it was made while the registry's
    /// release count stood at `releases`, its value now: then no id of it has been released
    /// since, and each still has the object the tuple holds for it. Takes no GIL.
    pub(crate) fn stamped(&self, stamp: AnswerStamp, releases: u64) -> Option<KeptTuple> {
        let key = Key::Stamp(stamp);
        let h = key.hash();
        let (_, answer) = find(set(self.tables.get()?, h), h, key)?;
        (answer.releases == releases).then_some(KeptTuple(answer))
    }

    /// Whether a tuple should be made now for the answer `key` names (of hash `h`): its ids
    /// are many, and it is a cache's stored answer or was converted before.
    pub(crate) fn wants(&self, h: u64, key: Key<'_>, ids: &[SubscriberId]) -> bool {
        if ids.len() < MIN_IDS || ids.len() > MAX_IDS {
            return false;
        }
        let tables = self.tables.get_or_init(|| Tables {
            slots: (0..SETS * WAYS).map(|_| Slot::default()).collect(),
            used: Mutex::default(),
            door: (0..DOOR_BITS / 64).map(|_| AtomicU64::new(0)).collect(),
            door_set: AtomicUsize::new(0),
            kept_topics: (0..KEPT_BITS / 64).map(|_| AtomicU64::new(0)).collect(),
        });
        if let Key::Stamp(_) = key {
            return true;
        }
        if self.held_topics.load(Relaxed) + topic_len(ids.len()) > TOPIC_MAX_IDS {
            // Full: kept until a release clears them, the answers already kept stay the ones
            // served (no churn of tuples made and dropped).
            return false;
        }
        let bit = h as usize % DOOR_BITS;
        let (word, mask) = (&tables.door[bit / 64], 1u64 << (bit % 64));
        if word.fetch_or(mask, Relaxed) & mask != 0 {
            return true;
        }
        if tables.door_set.fetch_add(1, Relaxed) + 1 >= DOOR_BITS / 2 {
            // Half set: forget them all, so the bits keep telling repeats from first sights.
            tables.door_set.store(0, Relaxed);
            for w in &*tables.door {
                w.store(0, Relaxed);
            }
        }
        false
    }

    /// Keeps `tuple`, the objects of `ids` (all live when read, after the release count
    /// `released` stood at `releases`), as the answer `key` names (of hash `h`), unless that
    /// would pass the budget. It takes the answer's own slot if it has one, else an empty one,
    /// else one picked by the hash's low bits. What it lets go of goes into `stale`, to be
    /// dropped by the caller once it holds no lock.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn keep(
        &self,
        h: u64,
        key: Key<'_>,
        ids: &[SubscriberId],
        releases: u64,
        released: &AtomicU64,
        tuple: Py<PyTuple>,
        stale: &mut Stale,
    ) {
        let Some(tables) = self.tables.get() else {
            return;
        };
        let slots = set(tables, h);
        let way = find(slots, h, key)
            .map(|(way, _)| way)
            .or_else(|| slots.iter().position(|s| lock(&s.answer).is_none()))
            .unwrap_or(h as usize % WAYS);
        // The budget counts the ids of the answer this one replaces as gone: a full table
        // still takes new answers in place of old ones (a stored answer's stamp changes each
        // time a write makes its cache entry again, and the old stamp's tuple is never served
        // after that).
        let (replaced, replaced_topic) = lock(&slots[way].answer)
            .as_ref()
            .map_or((0, 0), |a| (a.len, a.topic_len()));
        if self.held.fetch_add(ids.len(), Relaxed) + ids.len() > MAX_IDS + replaced {
            self.held.fetch_sub(ids.len(), Relaxed);
            return;
        }
        let (topic, counted) = match key {
            Key::Topic(_) => (true, topic_len(ids.len())),
            Key::Stamp(_) => (false, 0),
        };
        if self.held_topics.fetch_add(counted, Relaxed) + counted > TOPIC_MAX_IDS + replaced_topic {
            self.held.fetch_sub(ids.len(), Relaxed);
            self.held_topics.fetch_sub(counted, Relaxed);
            return;
        }
        if topic {
            // Before it is stored: a probe that finds the bit clear only misses a copy.
            let (word, mask) = tables.kept_bit(h);
            word.fetch_or(mask, Relaxed);
        }
        let answer = Arc::new(Answer {
            hash: h,
            made: Made::of(key, ids),
            len: ids.len(),
            releases,
            tuple,
        });
        let mut slot = lock(&slots[way].answer);
        let old = slot.replace(Arc::clone(&answer));
        // A hint only: a probe checks the topic again under the lock.
        slots[way].hash.store(h, Relaxed);
        if old.is_none() {
            let index = u32::try_from(set_start(h) + way).expect("slots fit in u32");
            lock(&tables.used).push(index);
        }
        drop(slot);
        if let Some(old) = old {
            self.unbudget(&old);
            stale.0.push(old);
        }
        if released.load(Acquire) != releases {
            // A release came while this was made, and may have cleared the slots before this
            // one was stored: take it out again, if nothing replaced it meanwhile.
            let mut slot = lock(&slots[way].answer);
            if slot.as_ref().is_some_and(|a| Arc::ptr_eq(a, &answer)) {
                let mine = slot.take();
                drop(slot);
                self.unbudget(&answer);
                stale.0.extend(mine);
            }
        }
    }

    /// Gives back the budget `answer` held, once it is out of its slot.
    fn unbudget(&self, answer: &Answer) {
        self.held.fetch_sub(answer.len, Relaxed);
        self.held_topics.fetch_sub(answer.topic_len(), Relaxed);
    }

    /// Takes the answer `key` names out of its slot into `stale`, to be dropped by the caller
    /// once it holds no lock.
    pub(crate) fn forget(&self, key: Key<'_>, stale: &mut Stale) {
        let h = key.hash();
        let Some(tables) = self.tables.get() else {
            return;
        };
        let slots = set(tables, h);
        let Some((way, found)) = find(slots, h, key) else {
            return;
        };
        stale.0.push(found);
        let mut slot = lock(&slots[way].answer);
        if let Some(taken) = slot.take_if(|a| a.hash == h && a.made.is(key)) {
            slots[way].hash.store(0, Relaxed);
            drop(slot);
            self.unbudget(&taken);
            stale.0.push(taken);
        }
    }

    /// Takes every kept answer out of its slot into `stale`, to be dropped by the caller once
    /// it holds no lock: after a release, none can be served again.
    pub(crate) fn take_all(&self, stale: &mut Stale) {
        let Some(tables) = self.tables.get() else {
            return;
        };
        let used = std::mem::take(&mut *lock(&tables.used));
        // An answer kept meanwhile whose bit this clears is not served (and holds its budget)
        // until the next release takes it out.
        for w in &*tables.kept_topics {
            w.store(0, Relaxed);
        }
        for index in used {
            let slot = &tables.slots[index as usize];
            let mut held = lock(&slot.answer);
            let taken = held.take();
            slot.hash.store(0, Relaxed);
            drop(held);
            if let Some(answer) = taken {
                self.unbudget(&answer);
                stale.0.push(answer);
            }
        }
    }
}

/// Kept answers taken out of their slots by a release, dropped with this once the registry's
/// lock is let go (dropping a tuple can run a subscriber's `__del__`).
#[derive(Default)]
pub(crate) struct Stale(Vec<Arc<Answer>>);

fn set_start(h: u64) -> usize {
    (h >> 32) as usize % SETS * WAYS
}

fn set(tables: &Tables, h: u64) -> &[Slot] {
    &tables.slots[set_start(h)..set_start(h) + WAYS]
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The way of `slots` that holds the answer `key` names, and the answer. Only a way whose
/// hash hint is `h` is locked.
fn find(slots: &[Slot], h: u64, key: Key<'_>) -> Option<(usize, Arc<Answer>)> {
    slots.iter().enumerate().find_map(|(way, slot)| {
        if slot.hash.load(Relaxed) != h {
            return None;
        }
        match &*lock(&slot.answer) {
            Some(a) if a.hash == h && a.made.is(key) => Some((way, Arc::clone(a))),
            _ => None,
        }
    })
}

/// While alive, the cyclic garbage collector does not run (if it was enabled, it is enabled
/// again on drop).
///
/// A batch's lists are all alive until the batch returns; a collection triggered by the
/// allocations of its conversion would walk every subscriber of every list made so far, once
/// per young collection and again in the older ones, which cost a third of a batch of 10,000
/// lists of 180 subscribers. The lists still count as allocations, so the collection the
/// batch's lists would have triggered runs at the next allocation after it returns, over the
/// lists still alive then (none, if the caller has used and dropped them). Pausing also keeps
/// finalizers from running in the middle of a conversion.
///
/// The GIL is held from pause to resume and no Python code runs in between (references are
/// taken and lists allocated, nothing is released), so no other thread sees the pause.
pub(crate) struct CollectorPaused<'py> {
    _py: Python<'py>,
    was_enabled: bool,
}

impl<'py> CollectorPaused<'py> {
    pub(crate) fn new(py: Python<'py>) -> Self {
        #[allow(unsafe_code)]
        // SAFETY: `py` proves this thread is attached to the interpreter, which is all
        // `PyGC_Disable` needs; it only clears a flag and returns the flag's old value.
        let was_enabled = unsafe { pyo3::ffi::PyGC_Disable() } == 1;
        CollectorPaused {
            _py: py,
            was_enabled,
        }
    }
}

impl Drop for CollectorPaused<'_> {
    fn drop(&mut self) {
        if self.was_enabled {
            #[allow(unsafe_code)]
            // SAFETY: as in `new`: `_py` is still held, so this thread is attached.
            unsafe {
                pyo3::ffi::PyGC_Enable();
            }
        }
    }
}
