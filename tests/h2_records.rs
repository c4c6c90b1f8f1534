//! HTTP/2 DATA frames and TLS record boundaries (docs/design/http2.md §1.6):
//! a rustls client whose socket reader parses every TLS record header it
//! passes on, speaking minimal hand-written HTTP/2, downloads files and
//! checks that each record carrying a response's body is a full one
//! (16,384 bytes of plaintext) except the response's last. On kTLS that
//! proves the `send(header, MSG_MORE)` + `sendfile()` sequence leaves one
//! record per DATA frame on this kernel; in user space the corked header
//! and the file payload are encrypted together, so the same holds.

mod common;

use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;

/// Ciphertext of a full TLS 1.3 record: 16,384 bytes of plaintext, the
/// inner content type and a 16-byte tag (AES-GCM and ChaCha20-Poly1305).
const FULL: usize = 16_384 + 17;

/// One TLS record as it crossed the socket.
#[derive(Clone, Copy, Debug)]
struct Record {
    content_type: u8,
    /// The length in the record header (ciphertext).
    len: usize,
    /// Where the record's plaintext starts and ends in the application
    /// data stream (equal for records with none: handshake, tickets).
    plain: (usize, usize),
}

/// The socket, read one TLS record at a time at most, so that the test
/// knows which plaintext each record gave.
struct Recording {
    sock: TcpStream,
    head: [u8; 5],
    have: usize,
    /// Bytes of the current record's body still to come.
    left: usize,
    /// Record headers seen whose body has fully arrived, not yet matched
    /// with their plaintext.
    done: Vec<(u8, usize)>,
}

impl Read for Recording {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let want = if self.left > 0 {
            self.left.min(buf.len())
        } else {
            (5 - self.have).min(buf.len())
        };
        let n = self.sock.read(&mut buf[..want])?;
        if self.left > 0 {
            self.left -= n;
            if self.left == 0 {
                self.done.push((
                    self.head[0],
                    u16::from_be_bytes([self.head[3], self.head[4]]) as usize,
                ));
            }
        } else {
            self.head[self.have..self.have + n].copy_from_slice(&buf[..n]);
            self.have += n;
            if self.have == 5 {
                self.have = 0;
                self.left = u16::from_be_bytes([self.head[3], self.head[4]]) as usize;
                if self.left == 0 {
                    self.done.push((self.head[0], 0));
                }
            }
        }
        Ok(n)
    }
}

impl Write for Recording {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.sock.write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.sock.flush()
    }
}

/// A TLS client that keeps every record it received and the plaintext.
struct Client {
    tls: rustls::ClientConnection,
    io: Recording,
    records: Vec<Record>,
    plain: Vec<u8>,
}

impl Client {
    fn connect(server: &Server) -> Client {
        let mut cfg = (*client_config(&server.ca())).clone();
        cfg.alpn_protocols = vec![b"h2".to_vec()];
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let tls = rustls::ClientConnection::new(std::sync::Arc::new(cfg), name).unwrap();
        let sock = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
        sock.set_read_timeout(Some(WAIT)).unwrap();
        let mut c = Client {
            tls,
            io: Recording {
                sock,
                head: [0; 5],
                have: 0,
                left: 0,
                done: Vec::new(),
            },
            records: Vec::new(),
            plain: Vec::new(),
        };
        while c.tls.is_handshaking() {
            c.tls.complete_io(&mut c.io).expect("TLS handshake");
        }
        assert_eq!(
            c.tls.alpn_protocol(),
            Some(&b"h2"[..]),
            "the server did not pick h2"
        );
        c
    }

    fn send(&mut self, data: &[u8]) {
        self.tls.writer().write_all(data).unwrap();
        while self.tls.wants_write() {
            self.tls.write_tls(&mut self.io).unwrap();
        }
    }

    /// Read from the socket until more plaintext arrives; false at EOF.
    fn more(&mut self) -> bool {
        loop {
            let n = self
                .tls
                .read_tls(&mut self.io)
                .expect("read from the server");
            if n == 0 {
                return false;
            }
            self.tls.process_new_packets().expect("a TLS error");
            let at = self.plain.len();
            match self.tls.reader().read_to_end(&mut self.plain) {
                Ok(_) => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => panic!("reading plaintext: {e}"),
            }
            // The read ended at most at a record's end: if one ended, all
            // the plaintext taken now is that record's.
            for (content_type, len) in self.io.done.drain(..) {
                let start = self.records.last().map_or(0, |r| r.plain.1).max(at);
                self.records.push(Record {
                    content_type,
                    len,
                    plain: (start.min(self.plain.len()), self.plain.len()),
                });
            }
            if self.plain.len() > at {
                return true;
            }
        }
    }
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    f.extend_from_slice(&[kind, flags]);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A HEADERS block for GET `path` (HPACK by hand: indexed :method GET and
/// :scheme https, literal :path and :authority with indexed names).
fn get(path: &str, stream: u32) -> Vec<u8> {
    let mut block = vec![0x82, 0x87, 0x04, path.len() as u8];
    block.extend_from_slice(path.as_bytes());
    block.extend_from_slice(&[0x01, 9]);
    block.extend_from_slice(b"localhost");
    frame(1, 0x4 | 0x1, stream, &block)
}

/// One response as it arrived: its body and the plaintext ranges of its
/// DATA payload.
struct Body {
    data: Vec<u8>,
    ranges: Vec<(usize, usize)>,
}

/// Read frames until `stream` ends; answers SETTINGS and PING.
fn response(c: &mut Client, pos: &mut usize, stream: u32) -> Body {
    let mut body = Body {
        data: Vec::new(),
        ranges: Vec::new(),
    };
    let mut status_seen = false;
    loop {
        while c.plain.len() < *pos + 9 || {
            let len = u32::from_be_bytes([0, c.plain[*pos], c.plain[*pos + 1], c.plain[*pos + 2]]);
            c.plain.len() < *pos + 9 + len as usize
        } {
            assert!(c.more(), "the server closed before stream {stream} ended");
        }
        let p = *pos;
        let len = u32::from_be_bytes([0, c.plain[p], c.plain[p + 1], c.plain[p + 2]]) as usize;
        let (kind, flags) = (c.plain[p + 3], c.plain[p + 4]);
        let id = u32::from_be_bytes([
            c.plain[p + 5],
            c.plain[p + 6],
            c.plain[p + 7],
            c.plain[p + 8],
        ]);
        let payload = p + 9..p + 9 + len;
        *pos = payload.end;
        match kind {
            0 if id == stream => {
                assert!(status_seen, "DATA before HEADERS");
                assert_eq!(flags & 0x8, 0, "a padded DATA frame");
                body.data.extend_from_slice(&c.plain[payload.clone()]);
                if len > 0 {
                    body.ranges.push((payload.start, payload.end));
                }
                if flags & 0x1 != 0 {
                    return body;
                }
            }
            1 if id == stream => {
                // :status 200 is static table entry 8.
                assert_eq!(c.plain.get(payload.start), Some(&0x88), "not a 200");
                assert_ne!(flags & 0x4, 0, "a header block in CONTINUATION frames");
                status_seen = true;
                assert_eq!(flags & 0x1, 0, "a 200 without a body");
            }
            4 if flags & 0x1 == 0 => c.send(&frame(4, 0x1, 0, &[])),
            6 if flags & 0x1 == 0 => {
                let opaque = c.plain[payload].to_vec();
                c.send(&frame(6, 0x1, 0, &opaque));
            }
            3 | 7 => panic!(
                "the server sent {} with error {:?}",
                if kind == 3 { "RST_STREAM" } else { "GOAWAY" },
                &c.plain[payload]
            ),
            _ => {}
        }
    }
}

fn histogram(records: &[&Record]) -> String {
    let mut h = std::collections::BTreeMap::new();
    for r in records {
        *h.entry(r.len).or_insert(0) += 1;
    }
    h.iter()
        .map(|(len, n)| format!("{len}×{n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn every_record_of_a_body_but_its_last_is_full() {
    let server = Server::start(&[]);
    let mut c = Client::connect(&server);
    // Flow control must never shape the records: the largest windows.
    let mut settings = vec![0, 4];
    settings.extend_from_slice(&0x7fff_ffffu32.to_be_bytes());
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(4, 0, 0, &settings));
    hello.extend(frame(8, 0, 0, &(0x7fff_ffffu32 - 65_535).to_be_bytes()));
    c.send(&hello);
    let mut pos = 0;
    let mut report = Vec::new();
    for (i, size) in [1usize << 20, 64 << 20].into_iter().enumerate() {
        let stream = 1 + 2 * i as u32;
        c.send(&get(&format!("/f{size}.bin"), stream));
        let body = response(&mut c, &mut pos, stream);
        assert_eq!(body.data.len(), size, "f{size}.bin: body length");
        let want = std::fs::read(file_path(size)).unwrap();
        assert_eq!(
            sha256(&body.data),
            sha256(&want),
            "f{size}.bin: body differs"
        );
        // The records whose plaintext holds any of the body.
        let carrying: Vec<&Record> = c
            .records
            .iter()
            .filter(|r| {
                r.plain.0 < r.plain.1
                    && body
                        .ranges
                        .iter()
                        .any(|&(s, e)| s < r.plain.1 && r.plain.0 < e)
            })
            .collect();
        let all = histogram(&carrying);
        let (last, rest) = carrying.split_last().expect("no record carried the body");
        assert!(
            last.plain.1 >= body.ranges.last().unwrap().1,
            "the body's end is not in the last record counted"
        );
        let short: Vec<&Record> = rest.iter().copied().filter(|r| r.len != FULL).collect();
        let app: Vec<&Record> = c.records.iter().filter(|r| r.content_type == 23).collect();
        assert!(
            short.is_empty(),
            "f{size}.bin over h2 ({}): {} of {} records carrying its body are not full \
             ({FULL} bytes); first ones: {:?}; sizes (ciphertext bytes × count): {all}; \
             every application-data record so far: {}",
            if ktls_expected() {
                "kTLS"
            } else {
                "user space"
            },
            short.len(),
            carrying.len(),
            &short[..short.len().min(5)],
            histogram(&app)
        );
        // No record of only a frame header.
        assert!(
            carrying.iter().all(|r| r.plain.1 - r.plain.0 > 9),
            "a record with only a frame header: {all}"
        );
        report.push(format!("f{size}.bin: {all}"));
    }
    eprintln!("records carrying each body (ciphertext bytes × count): {report:?}");
    c.send(&frame(7, 0, 0, &[0, 0, 0, 3, 0, 0, 0, 0]));
    drop(c);
    server.stop_and_check_path(1);
}
