//! A connection's prepared statements or portals, by name: bounded in
//! number and in text bytes, forgetting the least recently used.

use std::collections::HashMap;
use std::sync::Arc;

/// A prepared statement as the decoder knows it: the Parse's name and text.
#[derive(Debug)]
pub(super) struct Prepared {
    /// The statement's name; empty for the unnamed statement.
    pub key: Box<[u8]>,
    /// The Parse's text (a captured prefix); `None` when the Parse was
    /// never seen (the statement was prepared before the capture began, or
    /// forgotten).
    pub text: Option<Box<[u8]>>,
    /// Bytes of the text were not captured.
    pub truncated: bool,
}

impl Prepared {
    /// The name a row carries: `None` for the unnamed statement.
    pub fn name(&self) -> Option<String> {
        (!self.key.is_empty()).then(|| String::from_utf8_lossy(&self.key).into_owned())
    }

    /// Bytes it holds.
    fn size(&self) -> usize {
        self.key.len() + self.text.as_ref().map_or(0, |t| t.len())
    }
}

#[derive(Debug)]
struct Entry {
    value: Arc<Prepared>,
    used: u64,
}

/// Name → statement (the prepared statements), or portal name → the
/// statement it was bound to (the portals).
#[derive(Debug)]
pub(super) struct Table {
    map: HashMap<Box<[u8]>, Entry>,
    tick: u64,
    bytes: usize,
    max_len: usize,
    max_bytes: usize,
}

impl Table {
    /// An empty table of at most `max_len` entries and `max_bytes` bytes
    /// of names and texts.
    pub fn new(max_len: usize, max_bytes: usize) -> Self {
        Table {
            map: HashMap::new(),
            tick: 0,
            bytes: 0,
            max_len,
            max_bytes,
        }
    }

    /// The entry of that name (now the most recently used).
    pub fn get(&mut self, key: &[u8]) -> Option<Arc<Prepared>> {
        self.tick += 1;
        let e = self.map.get_mut(key)?;
        e.used = self.tick;
        Some(Arc::clone(&e.value))
    }

    /// Sets the entry of that name; forgets the least recently used eighth
    /// of the entries when over a bound. Returns how many were forgotten.
    pub fn insert(&mut self, key: &[u8], value: Arc<Prepared>) -> usize {
        self.tick += 1;
        let size = key.len() + value.size();
        let entry = Entry {
            value,
            used: self.tick,
        };
        match self.map.get_mut(key) {
            Some(old) => {
                self.bytes -= key.len() + old.value.size();
                *old = entry;
            }
            None => {
                self.map.insert(key.into(), entry);
            }
        }
        self.bytes += size;
        let mut forgotten = 0;
        while self.map.len() > self.max_len || self.bytes > self.max_bytes {
            forgotten += self.evict();
        }
        forgotten
    }

    /// Forgets the least recently used eighth (at least one).
    fn evict(&mut self) -> usize {
        let mut ticks: Vec<u64> = self.map.values().map(|e| e.used).collect();
        let n = (ticks.len() / 8).max(1).min(ticks.len());
        if n == 0 {
            return 0;
        }
        let (_, &mut cut, _) = ticks.select_nth_unstable(n - 1);
        let before = self.map.len();
        let mut bytes = 0;
        self.map.retain(|k, e| {
            let keep = e.used > cut;
            if !keep {
                bytes += k.len() + e.value.size();
            }
            keep
        });
        self.bytes -= bytes;
        before - self.map.len()
    }

    /// Removes the entry of that name.
    pub fn remove(&mut self, key: &[u8]) {
        if let Some(e) = self.map.remove(key) {
            self.bytes -= key.len() + e.value.size();
        }
    }

    /// Forgets every entry.
    pub fn clear(&mut self) {
        self.map.clear();
        self.bytes = 0;
    }

    /// Entries held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stmt(key: &str, text: &str) -> Arc<Prepared> {
        Arc::new(Prepared {
            key: key.as_bytes().into(),
            text: Some(text.as_bytes().into()),
            truncated: false,
        })
    }

    #[test]
    fn bounded_by_count_forgetting_least_recently_used() {
        let mut t = Table::new(16, usize::MAX);
        for i in 0..16 {
            assert_eq!(t.insert(format!("s{i}").as_bytes(), stmt("", "x")), 0);
        }
        // s0 is used again: s1, s2 are the two oldest.
        assert!(t.get(b"s0").is_some());
        assert_eq!(t.insert(b"s16", stmt("", "x")), 2);
        assert_eq!(t.len(), 15);
        assert!(t.get(b"s0").is_some());
        assert!(t.get(b"s1").is_none());
        assert!(t.get(b"s2").is_none());
        assert!(t.get(b"s3").is_some());
    }

    #[test]
    fn bounded_by_bytes_and_replacing_keeps_the_count() {
        let mut t = Table::new(100, 10);
        t.insert(b"a", stmt("a", "1234"));
        t.insert(b"a", stmt("a", "5678"));
        assert_eq!(t.len(), 1);
        assert_eq!(t.get(b"a").unwrap().text.as_deref(), Some(&b"5678"[..]));
        t.insert(b"b", stmt("b", "1234"));
        // 6 + 6 bytes > 10: the older goes.
        assert!(t.get(b"a").is_none());
        assert!(t.get(b"b").is_some());
        t.remove(b"b");
        assert_eq!(t.len(), 0);
        t.insert(b"c", stmt("c", "12345678901"));
        assert_eq!(t.len(), 0, "an entry over the budget alone is not kept");
    }
}
