//! Shared subscriptions and queue groups: each message goes to every plain subscriber and to
//! one member of each group whose filter matches it.
//!
//! MQTT 5 (section 4.8.2) writes a shared subscription `$share/{ShareName}/{filter}`; NATS
//! gives a queue name beside the subject. [`Grouped`] wraps any [`Matcher`] and offers both:
//! in the MQTT dialect a `$share/` filter given to `subscribe_str` joins a group, and every
//! dialect has [`Grouped::join`] and [`Grouped::leave`] with the group named apart.
//!
//! # How
//!
//! A group is identified by its name and its filter, as in MQTT. While it has members, the
//! matcher behind holds one pair for it: the group's filter and a *group id*, an id with
//! [`GROUP_BIT`] set. A lookup asks the matcher behind, takes the group ids out of the answer
//! and puts in one member of each, chosen in turn (round robin, per group, with one atomic
//! counter): over many messages the members share the load evenly, and a member that joins or
//! leaves between two lookups changes nothing for the others. The members are read from a
//! table behind a reader-writer lock, taken only by lookups whose answer holds a group id.
//!
//! Group ids are never reused: a lookup that read a group id just before the group's last
//! member left finds no group by that id and delivers to nobody for it, which is what it
//! would have done a moment later. `2^31` groups can be created over a matcher's life.
//!
//! Writes that create or remove a group hold the table's write lock across their write to the
//! matcher behind, so under the read lock the table and the group pairs of the matcher behind
//! agree: what [`Grouped::snapshot_with`] and [`Matcher::len`] rely on.
//!
//! A subscriber that is both a plain subscriber and the member chosen for a group, or the
//! member chosen for two groups, appears once in [`Matcher::lookup`]'s answer, which is a set
//! of subscribers; a broker that delivers one copy per subscription asks
//! [`Grouped::lookup_groups`] and chooses itself.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::{Acquire, Relaxed, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::dialect::{Dialect, Pattern, Topic};
use crate::error::{Error, Invalid, Result};
use crate::matcher::{AnswerStamp, Known, Matcher, SubscriberId};

/// The bit that marks a group id inside the matcher behind. Subscriber ids stay below it.
pub const GROUP_BIT: SubscriberId = 1 << 31;

/// The prefix of an MQTT shared subscription's filter (MQTT 5, section 4.8.2).
pub const SHARE_PREFIX: &str = "$share/";

/// A subscription as written: plain, or a member's subscription to a group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subscription<'a> {
    /// An ordinary pattern.
    Plain(&'a str),
    /// A shared subscription: the group's name and its filter.
    Shared {
        /// The share name (MQTT) or queue name (NATS).
        group: &'a str,
        /// The pattern the group subscribes to.
        filter: &'a str,
    },
}

/// Reads `text` as a subscription of `dialect`: in MQTT a filter that starts with `$share/` is
/// a shared subscription, checked by the rules of MQTT 5 section 4.8.2 (a share name of at
/// least one character without `/`, `+` or `#`, then `/` and a valid filter). Every other text
/// is a plain pattern, checked as such.
pub fn parse_subscription(dialect: Dialect, text: &str) -> Result<Subscription<'_>> {
    match shared_parts(dialect, text) {
        Some(parts) => parts.map(|(group, filter)| Subscription::Shared { group, filter }),
        None => {
            dialect.check_pattern(text)?;
            Ok(Subscription::Plain(text))
        }
    }
}

/// The group and filter of a `$share/` subscription, checked; `None` for text that is not one
/// (left unchecked: the matcher behind checks it as it parses it, so a plain write pays for
/// one check, not two).
fn shared_parts(dialect: Dialect, text: &str) -> Option<Result<(&str, &str)>> {
    let rest = text.strip_prefix(SHARE_PREFIX)?;
    (dialect == Dialect::Mqtt).then(|| shared_rest(dialect, text, rest))
}

fn shared_rest<'t>(dialect: Dialect, text: &'t str, rest: &'t str) -> Result<(&'t str, &'t str)> {
    let fail =
        |at: usize, why: &str| Error::InvalidPattern(Invalid::new(Some(dialect), text, at, why));
    let Some((group, filter)) = rest.split_once('/') else {
        return Err(fail(
            text.len(),
            "a shared subscription is $share/{ShareName}/{filter}: no filter after the name",
        ));
    };
    check_group(dialect, group).map_err(|e| match e {
        Error::InvalidPattern(i) => fail(SHARE_PREFIX.len() + i.position, &i.reason),
        other => other,
    })?;
    let filter_at = SHARE_PREFIX.len() + group.len() + 1;
    if filter.starts_with(SHARE_PREFIX) {
        // EMQX rejects it too: a filter that would read as a second share.
        return Err(fail(
            filter_at,
            "a shared subscription's filter is not itself shared",
        ));
    }
    dialect.check_pattern(filter).map_err(|e| match e {
        Error::InvalidPattern(i) => fail(filter_at + i.position, &i.reason),
        other => other,
    })?;
    Ok((group, filter))
}

/// Checks a subscription as [`Grouped::subscribe_in`] takes it: `text` and, if given, the
/// group it joins (then `text` is the group's filter, not a `$share/` one).
pub fn check_subscription(dialect: Dialect, text: &str, group: Option<&str>) -> Result<()> {
    let parsed = parse_subscription(dialect, text)?;
    match (group, parsed) {
        (None, _) => Ok(()),
        (Some(group), Subscription::Plain(_)) => check_group(dialect, group),
        (Some(_), Subscription::Shared { .. }) => Err(Error::InvalidPattern(Invalid::new(
            Some(dialect),
            text,
            0,
            "a $share/ filter names its group itself: give the group once",
        ))),
    }
}

/// Checks a group's name: at least one character; in MQTT without `/`, `+` or `#` (a share
/// name, MQTT 5 section 4.8.2); in NATS without white space (a queue name, as the NATS clients
/// check it).
pub fn check_group(dialect: Dialect, group: &str) -> Result<()> {
    let fail = |at: usize, why: &str| {
        Err(Error::InvalidPattern(Invalid::new(
            Some(dialect),
            group,
            at,
            why,
        )))
    };
    if group.is_empty() {
        return fail(
            0,
            match dialect {
                Dialect::Mqtt => "a share name is at least one character long",
                _ => "a group name is at least one character long",
            },
        );
    }
    let bad: &[u8] = match dialect {
        Dialect::Mqtt => b"/+#\0",
        Dialect::Nats => b" \t\r\n\x0c",
        Dialect::Amqp => b"",
    };
    if let Some(at) = group.bytes().position(|b| bad.contains(&b)) {
        return fail(
            at,
            match dialect {
                Dialect::Mqtt => "a share name holds no '/', '+', '#' or NUL",
                _ => "a queue group name holds no white space",
            },
        );
    }
    Ok(())
}

/// One group: its name, its filter, its members in the order they joined, and whose turn it
/// is.
#[derive(Debug)]
struct Group {
    name: Arc<str>,
    filter: Arc<str>,
    members: Vec<SubscriberId>,
    turn: AtomicUsize,
}

impl Clone for Group {
    fn clone(&self) -> Self {
        Group {
            name: Arc::clone(&self.name),
            filter: Arc::clone(&self.filter),
            members: self.members.clone(),
            turn: AtomicUsize::new(self.turn.load(Relaxed)),
        }
    }
}

impl Group {
    /// The member whose turn it is, moving the turn on; `None` for a group without members.
    fn next_member(&self) -> Option<SubscriberId> {
        if self.members.is_empty() {
            return None;
        }
        let turn = self.turn.fetch_add(1, Relaxed);
        Some(self.members[turn % self.members.len()])
    }
}

#[derive(Clone, Debug, Default)]
struct Table {
    /// Group id of each (name, filter).
    ids: HashMap<(Arc<str>, Arc<str>), SubscriberId>,
    groups: HashMap<SubscriberId, Group>,
    /// The number the next group gets (below `GROUP_BIT`).
    next: u32,
    /// Memberships over all groups.
    members: usize,
}

/// A group a topic matched, with all its members: what [`Grouped::lookup_groups`] returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupMatch {
    /// The group's name.
    pub name: Arc<str>,
    /// The group's filter.
    pub filter: Arc<str>,
    /// Its members, in the order they joined.
    pub members: Vec<SubscriberId>,
}

/// A matcher with shared subscriptions: see the [module docs](self).
#[derive(Debug)]
pub struct Grouped<M> {
    inner: M,
    table: RwLock<Table>,
    /// Set before the first group id reaches the matcher behind, and never cleared: until
    /// then a lookup has no group id to look for.
    ever: AtomicBool,
}

impl<M: Matcher> Grouped<M> {
    /// Shared subscriptions over `inner`, which must hold no ids from [`GROUP_BIT`] up.
    pub fn new(inner: M) -> Self {
        Grouped {
            inner,
            table: RwLock::default(),
            ever: AtomicBool::new(false),
        }
    }

    /// The matcher behind.
    pub fn matcher(&self) -> &M {
        &self.inner
    }

    fn read(&self) -> RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The same groups over another matcher made from this one's (a snapshot of it): the
    /// table is copied under its read lock, while `make` runs, so the two agree.
    pub fn snapshot_with<N: Matcher>(&self, make: impl FnOnce(&M) -> N) -> Grouped<N> {
        let table = self.read();
        Grouped {
            inner: make(&self.inner),
            table: RwLock::new(table.clone()),
            ever: AtomicBool::new(self.ever.load(Acquire)),
        }
    }

    /// Adds `id` to the group `group` on `filter`, creating the group if it has no members;
    /// `true` if `id` was not a member. A `$share/` filter given here is an error: the group
    /// is named once.
    pub fn join(&self, group: &str, filter: &str, id: SubscriberId) -> Result<bool> {
        let d = self.dialect();
        check_subscriber(id);
        check_subscription(d, filter, Some(group))?;
        let mut table = self.write();
        let table = &mut *table;
        let key: (Arc<str>, Arc<str>) = (group.into(), filter.into());
        if let Some(gid) = table.ids.get(&key) {
            let members = &mut table.groups.get_mut(gid).expect("a named group").members;
            if members.contains(&id) {
                return Ok(false);
            }
            members.push(id);
            table.members += 1;
            return Ok(true);
        }
        if table.next >= GROUP_BIT {
            return Err(Error::TooComplex(format!(
                "this matcher has created {GROUP_BIT} groups, all it can number"
            )));
        }
        let gid = GROUP_BIT | table.next;
        table.next += 1;
        // Before the group id can be found by a lookup (the matcher's write publishes it).
        self.ever.store(true, SeqCst);
        self.inner.subscribe_str(filter, gid)?;
        table.groups.insert(
            gid,
            Group {
                name: Arc::clone(&key.0),
                filter: Arc::clone(&key.1),
                members: vec![id],
                turn: AtomicUsize::new(0),
            },
        );
        table.ids.insert(key, gid);
        table.members += 1;
        Ok(true)
    }

    /// Takes `id` out of the group `group` on `filter`, removing the group with its last
    /// member; `true` if `id` was a member.
    pub fn leave(&self, group: &str, filter: &str, id: SubscriberId) -> Result<bool> {
        let d = self.dialect();
        check_subscription(d, filter, Some(group))?;
        let mut table = self.write();
        let key: (Arc<str>, Arc<str>) = (group.into(), filter.into());
        let Some(&gid) = table.ids.get(&key) else {
            return Ok(false);
        };
        Ok(self.remove_member(&mut table, gid, id))
    }

    /// Subscribes `id` to `text`, or, with a group, adds it to the group on the filter
    /// `text`; `true` if the subscription is new.
    pub fn subscribe_in(&self, group: Option<&str>, text: &str, id: SubscriberId) -> Result<bool> {
        match group {
            None => self.subscribe_str(text, id),
            Some(group) => self.join(group, text, id),
        }
    }

    /// Undoes [`Grouped::subscribe_in`]; `true` if the subscription was there.
    pub fn unsubscribe_in(
        &self,
        group: Option<&str>,
        text: &str,
        id: SubscriberId,
    ) -> Result<bool> {
        match group {
            None => self.unsubscribe_str(text, id),
            Some(group) => self.leave(group, text, id),
        }
    }

    /// Removes `id` from the group `gid` (the caller holds the write lock); `true` if it was
    /// a member.
    fn remove_member(&self, table: &mut Table, gid: SubscriberId, id: SubscriberId) -> bool {
        let group = table.groups.get_mut(&gid).expect("a numbered group");
        let Some(at) = group.members.iter().position(|&m| m == id) else {
            return false;
        };
        group.members.remove(at);
        table.members -= 1;
        if group.members.is_empty() {
            let group = table.groups.remove(&gid).expect("a numbered group");
            let unsubscribed = self.inner.unsubscribe_str(&group.filter, gid);
            debug_assert_eq!(unsubscribed, Ok(true), "a group's pair is in the matcher");
            table
                .ids
                .remove(&(Arc::clone(&group.name), Arc::clone(&group.filter)));
        }
        true
    }

    /// Every group membership: `(group, filter, subscriber)`.
    pub fn group_subscriptions(&self) -> Vec<(Arc<str>, Arc<str>, SubscriberId)> {
        let table = self.read();
        table
            .groups
            .values()
            .flat_map(|g| {
                g.members
                    .iter()
                    .map(|&m| (Arc::clone(&g.name), Arc::clone(&g.filter), m))
            })
            .collect()
    }

    /// The plain subscribers of `topic`, each once, and every group it matches with all its
    /// members: for a broker that chooses the member itself.
    pub fn lookup_groups(&self, topic: &Topic<'_>) -> (Vec<SubscriberId>, Vec<GroupMatch>) {
        let mut plain = Vec::new();
        self.inner.lookup_into(topic, &mut plain);
        self.split_groups(plain)
    }

    /// [`Grouped::lookup_groups`] of a topic given as text.
    pub fn lookup_groups_str(&self, topic: &str) -> Result<(Vec<SubscriberId>, Vec<GroupMatch>)> {
        let mut plain = Vec::new();
        self.inner.lookup_str_into(topic, &mut plain)?;
        Ok(self.split_groups(plain))
    }

    fn split_groups(&self, mut ids: Vec<SubscriberId>) -> (Vec<SubscriberId>, Vec<GroupMatch>) {
        if !self.ever.load(Acquire) {
            return (ids, Vec::new());
        }
        let gids = take_group_ids(&mut ids, 0);
        if gids.is_empty() {
            return (ids, Vec::new());
        }
        let table = self.read();
        let groups = gids
            .iter()
            .filter_map(|gid| table.groups.get(gid))
            .map(|g| GroupMatch {
                name: Arc::clone(&g.name),
                filter: Arc::clone(&g.filter),
                members: g.members.clone(),
            })
            .collect();
        (ids, groups)
    }

    /// Replaces the group ids that a lookup appended to `out` from `start` on with one member
    /// of each group, leaving out members already in the answer.
    /// Replaces the group ids of `out[start..]` by a member of each; `false` when there were
    /// none, and `out` is as it was.
    fn expand(&self, out: &mut Vec<SubscriberId>, start: usize) -> bool {
        // A plain load: the matcher's read of a group id synchronised with the write that
        // put it there, which came after the store of `ever`.
        if !self.ever.load(Acquire) {
            return false;
        }
        let gids = take_group_ids(out, start);
        if gids.is_empty() {
            return false;
        }
        let table = self.read();
        let plain = out.len() - start;
        // Checking each chosen member against the answer is a scan of packed integers (a few
        // microseconds at 10,000); a set of the answer costs tens of them to build, so it
        // pays only for many groups in one answer.
        let seen: Option<HashSet<SubscriberId>> =
            (gids.len() > 64 && plain > 64).then(|| out[start..].iter().copied().collect());
        for gid in gids {
            let Some(member) = table.groups.get(&gid).and_then(Group::next_member) else {
                continue;
            };
            let there = match &seen {
                Some(seen) => seen.contains(&member) || out[start + plain..].contains(&member),
                None => out[start..].contains(&member),
            };
            if !there {
                out.push(member);
            }
        }
        true
    }
}

/// A subscriber id must stay below [`GROUP_BIT`]; one above is a programming error.
fn check_subscriber(id: SubscriberId) {
    assert!(
        id < GROUP_BIT,
        "subscriber ids from 2^31 up are group ids in a Grouped matcher"
    );
}

/// The group and filter of a parsed pattern that is a shared subscription. A `$share/` pattern
/// that MQTT 5 rejects (it parses as an ordinary filter) is a programming error here, as a
/// pattern of another dialect is: [`Matcher::subscribe_str`] returns the error instead.
fn shared(pattern: &Pattern) -> Option<(&str, &str)> {
    match shared_parts(pattern.dialect(), pattern.text())? {
        Ok(parts) => Some(parts),
        Err(e) => panic!("{e}: subscribe_str checks shared subscriptions"),
    }
}

/// Moves the group ids of `ids[start..]` out, keeping the order of the rest.
fn take_group_ids(ids: &mut Vec<SubscriberId>, start: usize) -> Vec<SubscriberId> {
    let mut gids = Vec::new();
    let mut kept = start;
    for read in start..ids.len() {
        let id = ids[read];
        if id & GROUP_BIT != 0 {
            gids.push(id);
        } else {
            ids[kept] = id;
            kept += 1;
        }
    }
    ids.truncate(kept);
    gids
}

impl<M: Matcher> Matcher for Grouped<M> {
    fn dialect(&self) -> Dialect {
        self.inner.dialect()
    }

    fn subscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        check_subscriber(id);
        match shared(pattern) {
            Some((group, filter)) => self
                .join(group, filter, id)
                .expect("a shared subscription checked by parse_subscription"),
            None => self.inner.subscribe(pattern, id),
        }
    }

    fn unsubscribe(&self, pattern: &Pattern, id: SubscriberId) -> bool {
        match shared(pattern) {
            Some((group, filter)) => self
                .leave(group, filter, id)
                .expect("a shared subscription checked by parse_subscription"),
            None => self.inner.unsubscribe(pattern, id),
        }
    }

    fn subscribe_str(&self, pattern: &str, id: SubscriberId) -> Result<bool> {
        check_subscriber(id);
        match shared_parts(self.dialect(), pattern) {
            None => self.inner.subscribe_str(pattern, id),
            Some(parts) => parts.and_then(|(group, filter)| self.join(group, filter, id)),
        }
    }

    /// The inner matcher's, when no pattern of `pairs` is a shared subscription.
    fn subscribe_each_str(
        &self,
        pairs: &[(&str, SubscriberId)],
        added: &mut Vec<bool>,
    ) -> Result<()> {
        let dialect = self.dialect();
        if pairs
            .iter()
            .any(|&(p, _)| shared_parts(dialect, p).is_some())
        {
            return crate::matcher::subscribe_one_by_one(self, pairs, added);
        }
        for &(_, id) in pairs {
            check_subscriber(id);
        }
        self.inner.subscribe_each_str(pairs, added)
    }

    fn unsubscribe_str(&self, pattern: &str, id: SubscriberId) -> Result<bool> {
        match shared_parts(self.dialect(), pattern) {
            None => self.inner.unsubscribe_str(pattern, id),
            Some(parts) => parts.and_then(|(group, filter)| self.leave(group, filter, id)),
        }
    }

    fn contains(&self, pattern: &str, id: SubscriberId) -> bool {
        match shared_parts(self.dialect(), pattern) {
            None => self.inner.contains(pattern, id),
            Some(Ok((group, filter))) => {
                let table = self.read();
                table
                    .ids
                    .get(&(Arc::from(group), Arc::from(filter)))
                    .is_some_and(|gid| table.groups[gid].members.contains(&id))
            }
            Some(Err(_)) => false,
        }
    }

    fn lookup_into(&self, topic: &Topic<'_>, out: &mut Vec<SubscriberId>) {
        let start = out.len();
        self.inner.lookup_into(topic, out);
        self.expand(out, start);
    }

    fn lookup_str_into(&self, topic: &str, out: &mut Vec<SubscriberId>) -> Result<()> {
        self.lookup_str_stamped(topic, out, &mut |_, _| false)
            .map(drop)
    }

    /// The stamp of a stored answer holds only while no group of it took a member: the
    /// members change from message to message. So an answer with a group id is never
    /// `known`, and comes back without its stamp.
    fn lookup_str_stamped(
        &self,
        topic: &str,
        out: &mut Vec<SubscriberId>,
        known: Known<'_>,
    ) -> Result<Option<AnswerStamp>> {
        let start = out.len();
        // `ever` is read after the ids, as in `expand`.
        let mut plain_known = |stamp: AnswerStamp, ids: &[SubscriberId]| {
            let grouped = self.ever.load(Acquire) && ids.iter().any(|&id| id & GROUP_BIT != 0);
            !grouped && known(stamp, ids)
        };
        let stamp = self
            .inner
            .lookup_str_stamped(topic, out, &mut plain_known)?;
        let expanded = self.expand(out, start);
        Ok(if expanded { None } else { stamp })
    }

    fn prefetches(&self) -> bool {
        self.inner.prefetches()
    }

    fn prefetch_str(&self, topic: &str, step: usize) {
        self.inner.prefetch_str(topic, step);
    }

    fn remove_subscriber(&self, id: SubscriberId) -> usize {
        let mut removed = self.inner.remove_subscriber(id);
        if self.ever.load(Acquire) {
            let mut table = self.write();
            let joined: Vec<SubscriberId> = table
                .groups
                .iter()
                .filter(|(_, g)| g.members.contains(&id))
                .map(|(&gid, _)| gid)
                .collect();
            for gid in joined {
                removed += usize::from(self.remove_member(&mut table, gid, id));
            }
        }
        removed
    }

    // A group holds its pair in the matcher behind only while it has members, so a lookup
    // that meets one has a member to give.
    fn has_interest(&self, topic: &Topic<'_>) -> bool {
        self.inner.has_interest(topic)
    }

    fn has_interest_str(&self, topic: &str) -> Result<bool> {
        self.inner.has_interest_str(topic)
    }

    /// The plain pairs that overlap `pattern`, and each member of a group whose filter does,
    /// with the group's filter.
    fn reverse_match(&self, pattern: &Pattern) -> Vec<(String, SubscriberId)> {
        let table = self.read();
        let mut pairs = self.inner.reverse_match(pattern);
        let gids = pairs
            .iter()
            .filter(|(_, id)| id & GROUP_BIT != 0)
            .map(|&(_, id)| id)
            .collect::<Vec<_>>();
        pairs.retain(|(_, id)| id & GROUP_BIT == 0);
        for gid in gids {
            if let Some(g) = table.groups.get(&gid) {
                pairs.extend(g.members.iter().map(|&m| (g.filter.to_string(), m)));
            }
        }
        pairs
    }

    /// Plain pairs and group memberships.
    fn len(&self) -> usize {
        let table = self.read();
        self.inner.len().saturating_sub(table.groups.len()) + table.members
    }

    /// The plain pairs; memberships are [`Grouped::group_subscriptions`].
    fn subscriptions(&self) -> Vec<(String, SubscriberId)> {
        let mut pairs = self.inner.subscriptions();
        pairs.retain(|(_, id)| id & GROUP_BIT == 0);
        pairs
    }
}
