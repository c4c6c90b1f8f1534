//! A byte queue for encrypted output whose storage is zeroed once and then
//! reused: rustls writes records into `&mut [u8]`, and growing a `Vec` with
//! `resize` before every record (then truncating) would zero-fill every byte
//! sent a second time.

use rustls::server::ServerConnectionData;
use rustls::unbuffered::{EncodeError, EncodeTlsData};

#[derive(Default)]
pub struct OutBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl OutBuf {
    /// Bytes queued.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }

    /// At least `n` writable bytes after the queued ones (compacting or
    /// growing as needed).
    pub fn spare(&mut self, n: usize) -> &mut [u8] {
        if self.buf.len() - self.end < n {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() - self.end < n {
                self.buf.resize(self.end + n, 0);
            }
        }
        &mut self.buf[self.end..]
    }

    /// `n` bytes of the spare space now hold data.
    pub fn commit(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }

    /// `n` queued bytes were sent.
    pub fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Keep only the storage the queued bytes need (a client that stopped
    /// reading should not hold a whole chunk's worth of spare room).
    pub fn shrink(&mut self) {
        if self.buf.len() > 2 * self.len() {
            self.buf = self.data().to_vec();
            self.end -= self.start;
            self.start = 0;
        }
    }

    /// Drop the storage if nothing is queued.
    pub fn release(&mut self) {
        if self.is_empty() {
            *self = OutBuf::default();
        }
    }

    /// Encode one handshake/alert record from rustls.
    pub fn encode(&mut self, enc: &mut EncodeTlsData<'_, ServerConnectionData>) {
        let n = match enc.encode(self.spare(1024)) {
            Ok(n) => n,
            Err(EncodeError::InsufficientSize(e)) => {
                enc.encode(self.spare(e.required_size)).unwrap_or(0)
            }
            Err(EncodeError::AlreadyEncoded) => 0,
        };
        self.commit(n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_reuses_its_storage() {
        let mut q = OutBuf::default();
        q.spare(10)[..3].copy_from_slice(b"abc");
        q.commit(3);
        q.spare(2)[..2].copy_from_slice(b"de");
        q.commit(2);
        assert_eq!(q.data(), b"abcde");
        q.consume(2);
        assert_eq!(q.data(), b"cde");
        let cap = q.buf.len();
        // Compacts instead of growing when the front is free.
        q.spare(cap - 3);
        assert_eq!(q.data(), b"cde");
        assert_eq!(q.buf.len(), cap);
        q.spare(cap)[..4].copy_from_slice(b"fghi");
        q.commit(4);
        q.consume(2);
        // Shrinks to what is queued, which stays as it was.
        q.shrink();
        assert_eq!(q.data(), b"efghi");
        assert_eq!(q.buf.len(), 5);
        q.consume(5);
        assert!(q.is_empty());
        q.release();
        assert_eq!(q.buf.len(), 0);
    }
}
