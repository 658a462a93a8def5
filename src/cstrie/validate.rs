//! The structural invariants of a `CSTrie`, checked on demand by [`CSTrie::validate`]: for
//! tests (after every proptest case, at the end of the stress tests) and for debugging. The
//! invariants themselves are stated where they are kept: `inode.rs`, `cnode.rs`, `hamt.rs`.

use std::sync::atomic::Ordering::Acquire;

use super::cnode::CNode;
use super::inode::{INode, Main};
use super::CSTrie;
use crate::matcher::Matcher;

/// Whether writes may have raced before the check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Quiescence {
    /// Every write ran alone, one after another: each remove cleaned the tombs it made, so no
    /// T-node and no empty C-node below the root is left.
    Sequential,
    /// Writes ran concurrently before the check (none runs during it): a remove whose cleaning
    /// lost a race leaves its tomb for the next writer on that path, so tombs are allowed.
    AfterConcurrentWrites,
}

impl CSTrie {
    /// Checks the trie's invariants and returns the first one broken. Call it while no write to
    /// this trie (or to the trie it is a snapshot of) is in flight: it reads main nodes as they
    /// are, without helping a GCAS along, to see what the writers left.
    ///
    /// Checked: the root is a C-node; every main node reached is committed (no pending or failed
    /// GCAS left); no I-node is of a generation newer than the root's; every branch holds a
    /// subscriber or a level below; subscribers of the empty pattern sit only at the root, and
    /// only in AMQP; every persistent map is well formed; the number of pairs equals `len()`;
    /// and with [`Quiescence::Sequential`], no tomb and no empty C-node below the root.
    pub fn validate(&self, quiescence: Quiescence) -> Result<(), String> {
        let guard = &self.pin();
        let root = self.rdcss_read_root(false, guard);
        let mut pairs = 0usize;
        // (I-node, depth, the pattern words above it, for messages)
        let mut stack: Vec<(&INode, usize, String)> = vec![(root, 0, String::new())];
        while let Some((inode, depth, path)) = stack.pop() {
            let at = if path.is_empty() { "the root" } else { &path };
            if inode.gen.0 > root.gen.0 {
                return Err(format!(
                    "{at}: an I-node of a newer generation than the root"
                ));
            }
            let m = inode.main.load(Acquire, guard);
            if m.is_null() {
                return Err(format!("{at}: an I-node without a main node"));
            }
            // SAFETY: read under `guard` from a reachable I-node; main nodes are retired only
            // after being unlinked and freed an epoch later (see `CSTrie::cnode`).
            let node = unsafe { m.deref() };
            if !node.prev.load(Acquire, guard).is_null() {
                return Err(format!("{at}: a GCAS left pending or failed"));
            }
            let cn: &CNode = match &node.main {
                Main::C(cn) => cn,
                Main::T if depth == 0 => return Err("the root is entombed".into()),
                Main::T if quiescence == Quiescence::Sequential => {
                    return Err(format!("{at}: a tomb left after sequential writes"));
                }
                Main::T => continue,
            };
            if depth > 0 && !cn.here.is_empty() {
                return Err(format!(
                    "{at}: subscribers of the empty pattern below the root"
                ));
            }
            if !cn.here.is_empty() && self.dialect != crate::Dialect::Amqp {
                return Err("subscribers of the empty pattern outside AMQP".into());
            }
            if depth > 0 && cn.is_empty() && quiescence == Quiescence::Sequential {
                return Err(format!("{at}: an empty C-node below the root"));
            }
            cn.here
                .check()
                .map_err(|e| format!("{at}: empty-pattern set: {e}"))?;
            if cn.solo.is_some() && !cn.words.is_empty() {
                return Err(format!("{at}: a solo word beside a word map"));
            }
            cn.words
                .check()
                .map_err(|e| format!("{at}: word map: {e}"))?;
            pairs += cn.here.len();
            let mut broken = None;
            cn.for_each_branch(&mut |key, branch| {
                let word = self.key_text(key);
                let here = if path.is_empty() {
                    word
                } else {
                    format!("{path}{}{word}", self.dialect.separator() as char)
                };
                if broken.is_some() {
                    return;
                }
                if branch.is_empty() {
                    broken = Some(format!("{here}: an empty branch"));
                } else if let Err(e) = branch.subs.check() {
                    broken = Some(format!("{here}: subscriber set: {e}"));
                }
                pairs += branch.subs.len();
                if let Some(next) = branch.next.as_deref() {
                    stack.push((next, depth + 1, here));
                }
            });
            if let Some(e) = broken {
                return Err(e);
            }
        }
        let len = self.len();
        if pairs != len {
            return Err(format!("{pairs} pairs in the trie but len() says {len}"));
        }
        Ok(())
    }
}
