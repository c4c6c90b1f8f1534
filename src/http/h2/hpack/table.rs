//! HPACK's tables (RFC 7541 §2.3, §4, Appendix A): the static table and the
//! decoder's dynamic table with its size accounting and eviction.

use std::collections::VecDeque;
use std::sync::Arc;

/// RFC 7541 Appendix A: index 1 is `STATIC[0]`.
pub(super) const STATIC: [(&[u8], &[u8]); 61] = [
    (b":authority", b""),
    (b":method", b"GET"),
    (b":method", b"POST"),
    (b":path", b"/"),
    (b":path", b"/index.html"),
    (b":scheme", b"http"),
    (b":scheme", b"https"),
    (b":status", b"200"),
    (b":status", b"204"),
    (b":status", b"206"),
    (b":status", b"304"),
    (b":status", b"400"),
    (b":status", b"404"),
    (b":status", b"500"),
    (b"accept-charset", b""),
    (b"accept-encoding", b"gzip, deflate"),
    (b"accept-language", b""),
    (b"accept-ranges", b""),
    (b"accept", b""),
    (b"access-control-allow-origin", b""),
    (b"age", b""),
    (b"allow", b""),
    (b"authorization", b""),
    (b"cache-control", b""),
    (b"content-disposition", b""),
    (b"content-encoding", b""),
    (b"content-language", b""),
    (b"content-length", b""),
    (b"content-location", b""),
    (b"content-range", b""),
    (b"content-type", b""),
    (b"cookie", b""),
    (b"date", b""),
    (b"etag", b""),
    (b"expect", b""),
    (b"expires", b""),
    (b"from", b""),
    (b"host", b""),
    (b"if-match", b""),
    (b"if-modified-since", b""),
    (b"if-none-match", b""),
    (b"if-range", b""),
    (b"if-unmodified-since", b""),
    (b"last-modified", b""),
    (b"link", b""),
    (b"location", b""),
    (b"max-forwards", b""),
    (b"proxy-authenticate", b""),
    (b"proxy-authorization", b""),
    (b"range", b""),
    (b"referer", b""),
    (b"refresh", b""),
    (b"retry-after", b""),
    (b"server", b""),
    (b"set-cookie", b""),
    (b"strict-transport-security", b""),
    (b"transfer-encoding", b""),
    (b"user-agent", b""),
    (b"vary", b""),
    (b"via", b""),
    (b"www-authenticate", b""),
];

/// What an entry counts for in the table size (§4.1): its name and value
/// plus 32 for the bookkeeping the RFC assumes.
pub(super) fn entry_size(name: &[u8], value: &[u8]) -> usize {
    32 + name.len() + value.len()
}

/// One dynamic table entry. The name is shared: an entry added with the
/// name of a dynamic table entry points at the same bytes instead of
/// copying them, so a block of two-byte representations that each re-add a
/// large entry's name costs no copy of that name; what is copied is only
/// what the block itself carries (and static table names, which are short).
/// Each entry still counts its name in full, so the bytes held are at most
/// the size accounted.
struct Entry {
    name: Arc<[u8]>,
    value: Box<[u8]>,
}

impl Entry {
    fn size(&self) -> usize {
        entry_size(&self.name, &self.value)
    }
}

/// The dynamic table (§2.3.2, §4): newest entry first. Its size never
/// exceeds `max_size`, and each entry counts at least 32, so it holds at
/// most `max_size / 32` entries and `max_size` bytes of names and values.
pub(super) struct DynamicTable {
    entries: VecDeque<Entry>,
    size: usize,
    max_size: usize,
}

impl DynamicTable {
    pub(super) fn new(max_size: usize) -> DynamicTable {
        DynamicTable {
            entries: VecDeque::new(),
            size: 0,
            max_size,
        }
    }

    pub(super) fn size(&self) -> usize {
        self.size
    }

    /// Entry `i`, 0 being the newest (HPACK index 62).
    pub(super) fn get(&self, i: usize) -> Option<(&[u8], &[u8])> {
        self.entries.get(i).map(|e| (&e.name[..], &e.value[..]))
    }

    /// Entry `i`'s name, shared, for a new entry that names it.
    pub(super) fn name(&self, i: usize) -> Option<Arc<[u8]>> {
        self.entries.get(i).map(|e| Arc::clone(&e.name))
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    /// A dynamic table size update (§4.3): evicts down to the new size.
    pub(super) fn set_max_size(&mut self, max_size: usize) {
        self.max_size = max_size;
        self.evict_to(max_size);
    }

    /// Whether an entry of this size can be added at all; one that cannot
    /// empties the table (§4.4), see `clear`.
    pub(super) fn fits(&self, size: usize) -> bool {
        size <= self.max_size
    }

    pub(super) fn clear(&mut self) {
        self.entries.clear();
        self.size = 0;
    }

    /// Adds an entry as the newest, evicting the oldest ones to make room
    /// (§4.4). The caller checked `fits`.
    pub(super) fn insert(&mut self, name: Arc<[u8]>, value: Box<[u8]>) {
        let entry = Entry { name, value };
        let size = entry.size();
        debug_assert!(size <= self.max_size);
        self.evict_to(self.max_size.saturating_sub(size));
        self.size += size;
        self.entries.push_front(entry);
    }

    fn evict_to(&mut self, limit: usize) {
        while self.size > limit {
            match self.entries.pop_back() {
                Some(e) => self.size -= e.size(),
                None => break,
            }
        }
    }
}
