//! Names to ids for the GraphDef decoder's build (`direct`).
//!
//! - [`NameTable`]: an open-addressing table of 8-byte slots (32 bits of
//!   the name's hash and the id) that keeps no copy of the names; a probe
//!   compares the name with the caller's name of the candidate id. The
//!   [`Interner`] of ops and devices (ids in order of appearance) uses one.
//! - [`Names`]: the node names, concatenated in one buffer (which becomes
//!   the graph's), a small cache of the last names seen (most inputs name a
//!   node a few positions back), and the resolution of all other inputs at
//!   once, by groups of names small enough for the cache (a partitioned
//!   hash join): one table of 10^6 names would miss the cache and the TLB
//!   on nearly every probe.
//!
//! Lookups are deterministic (no table is iterated) and every match is
//! checked against the full name, so hash collisions cost time, never a
//! wrong answer.
//!
//! # Complexity
//! O(1) expected per insert and lookup (linear probing at a load of at most
//! 1/2). [`Names::resolve`]: O(N + Q) expected for N names and Q queries,
//! in two counting sorts and one pass over the groups; memory 8 bytes a
//! name and a query in the groups, plus the table of one group (about 2,048 names, 32
//! bytes each at most).

use std::hash::Hasher;

use rustc_hash::FxHasher;

use crate::graph::{big_vec, NONE};

/// The hash of a name, as the table uses it.
#[inline]
pub(crate) fn hash(name: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(name);
    h.finish()
}

/// Entries of an [`Interner`]'s cache.
const INTERN_CACHE: usize = 64;

/// Name -> id, for ids below `u32::MAX`.
pub(crate) struct NameTable {
    /// 0: empty; else the high 32 bits of the hash, then id + 1.
    slots: Vec<u64>,
    len: usize,
}

impl NameTable {
    /// A table that holds `n` names without growing.
    pub(crate) fn with_capacity(n: usize) -> NameTable {
        NameTable {
            slots: vec![0; (n.max(4) * 2).next_power_of_two()],
            len: 0,
        }
    }

    #[inline]
    fn start(&self, h: u64) -> usize {
        h as usize & (self.slots.len() - 1)
    }

    /// The id of `name` (with hash `h`), where `name_of(id)` gives the name
    /// of an id already inserted.
    #[inline]
    pub(crate) fn get<'n>(
        &self,
        name: &[u8],
        h: u64,
        name_of: impl Fn(u32) -> &'n [u8],
    ) -> Option<u32> {
        let tag = h >> 32;
        let mask = self.slots.len() - 1;
        let mut i = self.start(h);
        loop {
            let s = self.slots[i];
            if s == 0 {
                return None;
            }
            if s >> 32 == tag {
                let id = (s as u32).wrapping_sub(1);
                if name_of(id) == name {
                    return Some(id);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Inserts `id` for `name` (hash `h`) unless the name is there; returns
    /// the id already there, if any. `id` must be below `u32::MAX`.
    #[inline]
    pub(crate) fn insert<'n>(
        &mut self,
        name: &[u8],
        h: u64,
        id: u32,
        name_of: impl Fn(u32) -> &'n [u8],
    ) -> Option<u32> {
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow(&name_of);
        }
        let tag = h >> 32;
        let mask = self.slots.len() - 1;
        let mut i = self.start(h);
        loop {
            let s = self.slots[i];
            if s == 0 {
                self.slots[i] = tag << 32 | u64::from(id + 1);
                self.len += 1;
                return None;
            }
            if s >> 32 == tag {
                let old = (s as u32).wrapping_sub(1);
                if name_of(old) == name {
                    return Some(old);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Doubles the slots, rehashing every name once. Amortised O(1) per insert.
    #[cold]
    fn grow<'n>(&mut self, name_of: impl Fn(u32) -> &'n [u8]) {
        let bigger = vec![0; self.slots.len() * 2];
        let old = std::mem::replace(&mut self.slots, bigger);
        let mask = self.slots.len() - 1;
        for s in old.into_iter().filter(|&s| s != 0) {
            let id = (s as u32).wrapping_sub(1);
            let mut i = self.start(hash(name_of(id)));
            while self.slots[i] != 0 {
                i = (i + 1) & mask;
            }
            self.slots[i] = s;
        }
    }
}

/// Node names, concatenated, with their hashes, a cache of the last ones
/// and, once [`Names::resolve`] has run, their groups.
pub(crate) struct Names {
    /// Checked as UTF-8 once, when complete.
    text: Vec<u8>,
    /// Name i ends at `ends[i]` in `text`.
    ends: Vec<u32>,
    hashes: Vec<u64>,
    /// The last nodes named, by their hash (a direct-mapped cache of
    /// (hash, id)): most inputs name a node a few positions back.
    recent: Vec<(u64, u32)>,
    groups: Groups,
}

/// Entries of [`Names::recent`] (a power of two).
const RECENT: usize = 1024;

impl Names {
    /// Room for about `n` names of `text` bytes in all.
    pub(crate) fn with_capacity(n: usize, text: usize) -> Names {
        Names {
            text: big_vec(text),
            ends: big_vec(n),
            hashes: big_vec(n),
            recent: vec![(0, NONE); RECENT],
            groups: Groups::default(),
        }
    }

    /// The name of node `i`.
    #[inline]
    pub(crate) fn get(&self, i: u32) -> &[u8] {
        name_at(&self.text, &self.ends, i)
    }

    /// Appends the name of the next node; false if the names outgrow 4 GiB.
    #[inline]
    pub(crate) fn push(&mut self, name: &[u8]) -> bool {
        let h = hash(name);
        self.recent[h as usize % RECENT] = (h, self.ends.len() as u32);
        self.text.extend_from_slice(name);
        let Ok(end) = u32::try_from(self.text.len()) else {
            return false;
        };
        self.ends.push(end);
        self.hashes.push(h);
        true
    }

    /// The node named `name` (hash `h`) if it is among the last few.
    #[inline]
    pub(crate) fn recent(&self, name: &[u8], h: u64) -> Option<u32> {
        let (rh, id) = self.recent[h as usize % RECENT];
        (rh == h && id != NONE && self.get(id) == name).then_some(id)
    }

    /// The names, concatenated (taken out: [`Names::find`] is the lookup
    /// from then on), and where each ends.
    pub(crate) fn take_text(&mut self) -> (Vec<u8>, &[u32]) {
        (std::mem::take(&mut self.text), &self.ends)
    }

    /// Whether some name has the byte `b`.
    pub(crate) fn any_has(&self, b: u8) -> bool {
        // A branch-free fold over blocks, which the compiler turns into
        // vector compares (`contains` goes a word at a time).
        self.text
            .chunks(4096)
            .any(|c| c.iter().fold(0u8, |acc, &x| acc | u8::from(x == b)) != 0)
    }

    /// Puts back the text [`Names::take_text`] took.
    pub(crate) fn restore_text(&mut self, text: Vec<u8>) {
        self.text = text;
    }

    /// Checks that no two names are equal and finds the node of each name
    /// `query(i) = (hash, name)`, `i` in `0..n` ([`NONE`] where no node has
    /// the name); `None` if two names are equal.
    ///
    /// Names and queries are grouped by the top bits of their hashes (a
    /// counting sort each), and each group's names go into a small table,
    /// in the cache, that the group's queries probe: a table of all 10^6
    /// names would be far larger than the caches and the TLB, and taking
    /// its slots in hash order would miss both on nearly every name. The
    /// likely ids are then checked against the names in the queries' order.
    pub(crate) fn resolve<'q>(
        &mut self,
        n: usize,
        query: impl Fn(usize) -> (u64, &'q [u8]),
    ) -> Option<Vec<u32>> {
        let bits = group_bits(self.ends.len());
        self.groups = Groups::new(bits, &self.hashes);
        self.hashes = Vec::new();
        let queries = Groups::new(bits, &(0..n).map(|i| query(i).0).collect::<Vec<_>>());
        let mut ids = vec![NONE; n];
        let mut slots = Vec::new();
        for g in 0..self.groups.count() {
            if !self.groups.index(g, &mut slots, |i| self.get(i)) {
                return None;
            }
            for k in queries.range(g) {
                let (h, i) = (queries.hash_of(k), queries.id_of(k));
                ids[i as usize] = self.groups.probe(&slots, h).unwrap_or(NONE);
            }
        }
        for (b, batch) in ids.chunks_mut(VERIFY_BATCH).enumerate() {
            self.touch(batch);
            for (k, id) in batch.iter_mut().enumerate() {
                let (h, name) = query(b * VERIFY_BATCH + k);
                if *id == NONE || self.get(*id) != name {
                    // Another name with the same 32 bits of hash, or none.
                    *id = self.groups.find(name, h, |i| self.get(i)).unwrap_or(NONE);
                }
            }
        }
        Some(ids)
    }

    /// Reads the first byte of the names of `ids` (where they lie, then
    /// the bytes), each read independent of the others: the names lie
    /// anywhere in the text, and the comparisons that follow, one after
    /// the other, would otherwise wait for them one at a time.
    fn touch(&self, ids: &[u32]) {
        let mut starts = [0usize; VERIFY_BATCH];
        for (s, &id) in starts.iter_mut().zip(ids) {
            if id != NONE && id > 0 {
                *s = self.ends.get(id as usize - 1).map_or(0, |&e| e as usize);
            }
        }
        let mut x = 0u8;
        for &s in &starts[..ids.len()] {
            x ^= self.text.get(s).copied().unwrap_or(0);
        }
        std::hint::black_box(x);
    }

    /// The node named `name`, once [`Names::resolve`] has run, where
    /// `name_of(id)` gives the name of a node (a scan of one group).
    pub(crate) fn find<'n>(&self, name: &[u8], name_of: impl Fn(u32) -> &'n [u8]) -> Option<u32> {
        self.groups.find(name, hash(name), name_of)
    }
}

/// Queries whose likely names [`Names::resolve`] reads at once.
const VERIFY_BATCH: usize = 16;

/// Bits of hash that choose a group: about 2,048 names to a group.
fn group_bits(n: usize) -> u32 {
    (usize::BITS - (n / 2048).leading_zeros()).min(12)
}

/// Items grouped by the top bits of their hashes, each group in item
/// order: the items of group g are `items[k]` for `k` in
/// `start[g]..start[g + 1]`, each the low 32 bits of its hash (which,
/// with the group's bits, tell names apart before they are compared) and
/// its id, in one word: one stream per group to write, 8 bytes an item.
#[derive(Default)]
struct Groups {
    bits: u32,
    start: Vec<u32>,
    items: Vec<u64>,
}

impl Groups {
    /// Groups items `0..hashes.len()` (a counting sort: a count, then one
    /// pass that writes to as many places as there are groups).
    fn new(bits: u32, hashes: &[u64]) -> Groups {
        let group = |h: u64| {
            if bits == 0 {
                0
            } else {
                (h >> (64 - bits)) as usize
            }
        };
        let count = 1usize << bits;
        let mut start = vec![0u32; count + 1];
        for &h in hashes {
            start[group(h) + 1] += 1;
        }
        for g in 0..count {
            start[g + 1] += start[g];
        }
        let mut next = start.clone();
        let mut items = vec![0; hashes.len()];
        for (i, &h) in hashes.iter().enumerate() {
            let at = &mut next[group(h)];
            items[*at as usize] = h << 32 | i as u64;
            *at += 1;
        }
        Groups { bits, start, items }
    }

    /// The low 32 bits of the hash of item `k`.
    #[inline]
    fn hash_of(&self, k: usize) -> u32 {
        (self.items[k] >> 32) as u32
    }

    /// The id of item `k`.
    #[inline]
    fn id_of(&self, k: usize) -> u32 {
        self.items[k] as u32
    }

    fn count(&self) -> usize {
        self.start.len().saturating_sub(1)
    }

    fn range(&self, g: usize) -> std::ops::Range<usize> {
        self.start[g] as usize..self.start[g + 1] as usize
    }

    /// Puts group `g` in `slots` (open addressing, load at most 1/2; 0:
    /// empty, else the low 32 bits of the hash and 1 + the position in the
    /// group's arrays); false if two of its names are equal.
    fn index<'n>(&self, g: usize, slots: &mut Vec<u64>, name_of: impl Fn(u32) -> &'n [u8]) -> bool {
        let range = self.range(g);
        slots.clear();
        slots.resize((range.len() * 2).max(4).next_power_of_two(), 0);
        let mask = slots.len() - 1;
        for k in range {
            let h = self.hash_of(k);
            let mut at = h as usize & mask;
            while slots[at] != 0 {
                let j = (slots[at] as u32 - 1) as usize;
                if slots[at] >> 32 == u64::from(h)
                    && name_of(self.id_of(j)) == name_of(self.id_of(k))
                {
                    return false;
                }
                at = (at + 1) & mask;
            }
            slots[at] = u64::from(h) << 32 | (k as u64 + 1);
        }
        true
    }

    /// The first item of the indexed group with hash `h` (a likely id).
    #[inline]
    fn probe(&self, slots: &[u64], h: u32) -> Option<u32> {
        let mask = slots.len() - 1;
        let mut at = h as usize & mask;
        while slots[at] != 0 {
            let j = (slots[at] as u32 - 1) as usize;
            if slots[at] >> 32 == u64::from(h) {
                return Some(self.id_of(j));
            }
            at = (at + 1) & mask;
        }
        None
    }

    /// The item named `name` (hash `h`): a scan of its group.
    fn find<'n>(&self, name: &[u8], h: u64, name_of: impl Fn(u32) -> &'n [u8]) -> Option<u32> {
        let g = if self.bits == 0 {
            0
        } else {
            (h >> (64 - self.bits)) as usize
        };
        if g >= self.count() {
            return None;
        }
        self.range(g)
            .find(|&k| self.hash_of(k) == h as u32 && name_of(self.id_of(k)) == name)
            .map(|k| self.id_of(k))
    }
}

#[inline]
fn name_at<'s>(text: &'s [u8], ends: &[u32], i: u32) -> &'s [u8] {
    let i = i as usize;
    let start = if i == 0 { 0 } else { ends[i - 1] as usize };
    text.get(start..ends[i] as usize).unwrap_or_default()
}

/// Distinct strings (ops, devices) numbered in order of appearance.
pub(crate) struct Interner<'a> {
    table: NameTable,
    /// A small cache in front of the table, by [`Interner::quick_key`]:
    /// (key, id + 1; 0 when empty). An op type repeats from node to node,
    /// and this costs a few loads and one compare, against a hash of the
    /// whole string and a probe.
    cache: [(u32, u32); INTERN_CACHE],
    seen: Vec<&'a [u8]>,
    /// The strings, checked as UTF-8.
    pub(crate) strings: Vec<Box<str>>,
}

impl<'a> Interner<'a> {
    pub(crate) fn new() -> Interner<'a> {
        Interner {
            table: NameTable::with_capacity(64),
            cache: [(0, 0); INTERN_CACHE],
            seen: Vec::new(),
            strings: Vec::new(),
        }
    }

    /// The id of `s`, added when new; `None` if `s` is new and not UTF-8.
    #[inline]
    pub(crate) fn id(&mut self, s: &'a [u8]) -> Option<u32> {
        let key = Self::quick_key(s);
        let at = (key.wrapping_mul(0x9E37_79B9) >> 26) as usize % INTERN_CACHE;
        let (k, id) = self.cache[at];
        if k == key && id != 0 && self.seen[id as usize - 1] == s {
            return Some(id - 1);
        }
        let id = self.id_in_table(s)?;
        self.cache[at] = (key, id + 1);
        Some(id)
    }

    /// Length, first, middle and last byte of `s`: a key for the cache,
    /// equal for equal strings.
    #[inline]
    fn quick_key(s: &[u8]) -> u32 {
        let (Some(&first), Some(&last)) = (s.first(), s.last()) else {
            return 0;
        };
        let mid = s[s.len() / 2];
        (s.len() as u32 & 0xff)
            | u32::from(first) << 8
            | u32::from(mid) << 16
            | u32::from(last) << 24
    }

    /// [`Interner::id`] by the table.
    #[inline(never)]
    fn id_in_table(&mut self, s: &'a [u8]) -> Option<u32> {
        let h = hash(s);
        let seen = &self.seen;
        if let Some(id) = self.table.get(s, h, |i| seen[i as usize]) {
            return Some(id);
        }
        let text = std::str::from_utf8(s).ok()?;
        let id = self.seen.len() as u32;
        self.seen.push(s);
        self.strings.push(text.into());
        let seen = &self.seen;
        self.table.insert(s, h, id, |i| seen[i as usize]);
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_what_was_inserted_and_nothing_else() {
        let names: Vec<String> = (0..1000).map(|i| format!("n{i}")).collect();
        let name_of = |i: u32| names[i as usize].as_bytes();
        let mut t = NameTable::with_capacity(3); // grows
        for (i, n) in names.iter().enumerate() {
            let n = n.as_bytes();
            assert_eq!(t.insert(n, hash(n), i as u32, name_of), None);
        }
        assert_eq!(t.insert(b"n7", hash(b"n7"), 5000, name_of), Some(7));
        for (i, n) in names.iter().enumerate() {
            let n = n.as_bytes();
            assert_eq!(t.get(n, hash(n), name_of), Some(i as u32));
        }
        assert_eq!(t.get(b"n1000", hash(b"n1000"), name_of), None);
        // A colliding hash still compares names.
        assert_eq!(t.get(b"x", hash(b"n3"), name_of), None);
    }

    fn names(list: &[String]) -> Names {
        let mut n = Names::with_capacity(0, 0);
        for s in list {
            assert!(n.push(s.as_bytes()));
        }
        n
    }

    #[test]
    fn names_in_many_groups_resolve_and_duplicates_are_refused() {
        let list: Vec<String> = (0..20_000)
            .map(|i| format!("layer{}/op{}", i % 97, i))
            .collect();
        assert!(group_bits(list.len()) > 2, "several groups");
        let mut n = names(&list);
        let last = list[19_999].as_bytes();
        assert_eq!(n.recent(last, hash(last)), Some(19_999));
        let queries: Vec<&[u8]> = list.iter().rev().map(|s| s.as_bytes()).collect();
        let ids = n
            .resolve(queries.len(), |i| (hash(queries[i]), queries[i]))
            .unwrap();
        assert!(ids.iter().rev().enumerate().all(|(i, &id)| id == i as u32));
        let (text, ends) = n.take_text();
        let ends = ends.to_vec();
        let name_of = |i: u32| {
            let start = if i == 0 {
                0
            } else {
                ends[i as usize - 1] as usize
            };
            &text[start..ends[i as usize] as usize]
        };
        assert_eq!(n.find(b"layer5/op5", name_of), Some(5));
        assert_eq!(n.find(b"layer5/op6", name_of), None);
        // A query naming no node, and two equal names.
        let mut n = names(&list);
        let nope = n.resolve(1, |_| (hash(b"nope"), &b"nope"[..]));
        assert_eq!(nope, Some(vec![NONE]));
        let mut dup = list.clone();
        dup.push("layer3/op3".into());
        assert_eq!(names(&dup).resolve(0, |_| (0, &b""[..])), None);
    }
}
