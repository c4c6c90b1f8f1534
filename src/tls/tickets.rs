//! Session-ticket keys: the one [`ProducesTickets`] every rustls
//! `ServerConfig` of the process shares. This module owns the key material
//! (read from nginx-format key files, or made at random and rotated in
//! memory), the ticket format, and the swap of keys when a config reload
//! changes the files.
//!
//! # Key files
//!
//! The files are nginx's `ssl_session_ticket_key` files, so that a fleet's
//! existing rotation tooling (`openssl rand 80 > FILE`) works unchanged and
//! the same file means the same keys to nginx and to tlsfront. nginx reads
//! them in `ngx_ssl_session_ticket_keys()` and uses them in
//! `ngx_ssl_ticket_key_callback()` (`src/event/ngx_event_openssl.c`):
//!
//! | size | bytes 0..16 | next             | last             | cipher      |
//! |------|-------------|------------------|------------------|-------------|
//! | 80   | key name    | HMAC key (32)    | AES-256 key (32) | AES-256-CBC |
//! | 48   | key name    | AES-128 key (16) | HMAC key (16)    | AES-128-CBC |
//!
//! The two sizes put the keys in opposite orders; the MAC is HMAC-SHA256 in
//! both (keyed with 16 bytes in the short form). As in nginx, the first
//! file's key encrypts and every file's key decrypts, so a rotation adds
//! the new key as the first file and keeps the old one after it until the
//! tickets it made have expired.
//!
//! # Tickets
//!
//! OpenSSL's layout, which nginx gets from OpenSSL:
//! `key_name(16) || IV(16) || AES-CBC-PKCS#7(state) || HMAC-SHA256(32)`,
//! the HMAC over everything before it. (rustls' own `Ticketer` follows
//! RFC 5077 section 4 and also MACs a 2-byte length; OpenSSL does not.) The
//! sealed state is rustls', so nginx and tlsfront cannot resume each
//! other's sessions: only the key usage is shared.
//!
//! # Without files
//!
//! Keys are rotated in memory; see [`DEFAULT_ROTATION`] for the policy.
//! Each is derived (HKDF-SHA256) from a random [`Seed`] and the number of
//! its period on the wall clock, so processes that share the seed share the
//! keys: a server process its parent starts again, and the new process of
//! an upgrade, which are handed the seed, resume the tickets their
//! predecessors issued (nginx and HAProxy lose them at every restart or
//! reload without key files).
//!
//! # Fleet
//!
//! Nodes of a fleet share keys handed in from outside ([`FleetKey`]: 80
//! bytes of random material in the key-file layout, tagged with the number
//! of the period it encrypts in; see [`TicketKeys::fleet`] and
//! [`TicketKeys::install_fleet`]). Key `n` encrypts during period `n` by
//! this node's clock and decrypts during periods `n - 1` to `n + 1`, so
//! two nodes whose clocks differ by less than a period always open each
//! other's tickets. Random keys rather than one seed shared by the fleet:
//! a leaked seed would open every past and future ticket, an erased random
//! key opens nothing. Until a key for the current period arrives (the
//! fleet not reached yet, or late with the next key) the node encrypts
//! with its own in-memory keys, so it still resumes its own sessions; those
//! keep decrypting for their usual window, so tickets issued just before
//! the fleet's key arrived still resume.
//!
//! # Config reloads
//!
//! Hold one `Arc<TicketKeys>` for the life of the process and put a clone
//! of it in every `ServerConfig`, including those a reload builds. On a
//! reload call [`TicketKeys::reload`] (or [`KeyFiles::read`] while
//! validating, then [`TicketKeys::install`] once the whole new config is
//! good): the object swaps its keys in place only when the files' contents
//! changed, so tickets issued before a reload keep resuming after it. A
//! new `TicketKeys` per reload would instead drop every outstanding ticket
//! whenever keys are rotating in memory. No `arc-swap` is needed: the
//! swap happens inside, under a lock that ticket operations take only to
//! read (and to write once per rotation).

use aws_lc_rs::cipher::{
    DecryptionContext, PaddedBlockDecryptingKey, PaddedBlockEncryptingKey, UnboundCipherKey,
    AES_128, AES_256, AES_CBC_IV_LEN,
};
use aws_lc_rs::iv::FixedLength;
use aws_lc_rs::{digest, hmac, rand};
use rustls::server::ProducesTickets;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use zeroize::Zeroizing;

/// The rotation period of in-memory keys, and the ticket lifetime hint.
///
/// Each random key encrypts for one period and then decrypts for one more,
/// so a ticket is accepted for at least one period and at most two. The
/// hint is the one period: clients drop a ticket when its hint runs out,
/// so they never offer one whose key may already be erased. Six hours is
/// the period of rustls' own `Ticketer` (what `tls::server_config` uses
/// without this module), so a single server's resumption and its exposure
/// to a stolen key (at most 12 hours of sessions) stay as they were. Caddy's
/// 12 hours with 4 keys kept means up to 48 hours of sessions under one
/// key; nginx's automatic keys follow `ssl_session_timeout` (5 minutes by
/// default), too short for most clients to come back within.
pub const DEFAULT_ROTATION: Duration = Duration::from_secs(6 * 60 * 60);

/// RFC 8446 4.6.1: a ticket lifetime hint may not exceed seven days.
const MAX_HINT_SECS: u64 = 7 * 24 * 60 * 60;

const NAME_LEN: usize = 16;
const BLOCK_LEN: usize = 16;
const TAG_LEN: usize = 32;

/// The shortest possible ticket: PKCS#7 pads even an empty state to one
/// block.
const MIN_TICKET_LEN: usize = NAME_LEN + AES_CBC_IV_LEN + BLOCK_LEN + TAG_LEN;

#[derive(Debug, thiserror::Error)]
pub enum TicketKeyError {
    #[error("no session ticket key files given (give at least one, made with `openssl rand 80 > FILE`, or none at all for keys rotated in memory)")]
    NoFiles,
    #[error("cannot read session ticket key file {path}: {source} (check the path and that tlsfront can read it; make a key with `openssl rand 80 > {path}`)", path = path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("session ticket key file {path} is not a regular file (make a key with `openssl rand 80 > FILE` and give that file)", path = path.display())]
    NotAFile { path: PathBuf },
    #[error("session ticket key file {path} has {size} bytes, expected 48 or 80 bytes as nginx's ssl_session_ticket_key (make a new key with `openssl rand 80 > {path}`)", path = path.display())]
    Size { path: PathBuf, size: u64 },
    #[error("session ticket key files {first} and {second} have the same key name (their first 16 bytes), so tickets could not tell them apart (make a new key with `openssl rand 80 > {second}`)", first = first.display(), second = second.display())]
    DuplicateName { first: PathBuf, second: PathBuf },
    #[error("session ticket key file {path}: the cipher refused the key (make a new key with `openssl rand 80 > {path}`)", path = path.display())]
    Crypto { path: PathBuf },
}

/// One ticket key. The aws-lc-rs key objects erase their copies of the
/// material when dropped (the AES key schedules are zeroized, the HMAC
/// context is cleansed), and the raw bytes are only ever held in
/// zeroizing buffers, so no key material outlives its `Key`.
struct Key {
    name: [u8; NAME_LEN],
    encrypt: PaddedBlockEncryptingKey,
    decrypt: PaddedBlockDecryptingKey,
    hmac: hmac::Key,
    /// SHA-256 of the file's bytes: tells a reload whether the key
    /// changed without keeping the bytes themselves.
    digest: [u8; 32],
}

impl Key {
    /// A key from a key file's bytes, in nginx's layout (see the module
    /// documentation); `None` for any other length.
    fn from_material(m: &[u8]) -> Option<Key> {
        let (cipher, hmac_key, aes_key) = match m.len() {
            80 => (&AES_256, &m[16..48], &m[48..80]),
            48 => (&AES_128, &m[32..48], &m[16..32]),
            _ => return None,
        };
        let unbound = || UnboundCipherKey::new(cipher, aes_key).ok();
        Some(Key {
            name: m[..NAME_LEN].try_into().ok()?,
            encrypt: PaddedBlockEncryptingKey::cbc_pkcs7(unbound()?).ok()?,
            decrypt: PaddedBlockDecryptingKey::cbc_pkcs7(unbound()?).ok()?,
            hmac: hmac::Key::new(hmac::HMAC_SHA256, hmac_key),
            digest: digest::digest(&digest::SHA256, m)
                .as_ref()
                .try_into()
                .ok()?,
        })
    }

    /// The key of period `n` under `seed`, in the 80-byte form.
    fn derive(seed: &Seed, n: u64) -> Option<Key> {
        use aws_lc_rs::hkdf;
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, b"tlsfront ticket keys").extract(&seed.0[..]);
        let n = n.to_be_bytes();
        let info = [&b"period"[..], &n[..]];
        let okm = prk.expand(&info, KeyLen).ok()?;
        let mut m = Zeroizing::new([0u8; 80]);
        okm.fill(&mut m[..]).ok()?;
        Key::from_material(&m[..])
    }

    fn seal(&self, plain: &[u8]) -> Option<Vec<u8>> {
        // Room for the padding from the start: the buffer is encrypted in
        // place and never reallocated, so no copy of the plaintext is left
        // in freed memory. `encrypt` draws the IV from aws-lc's RNG.
        let mut body = Vec::with_capacity(plain.len() + BLOCK_LEN);
        body.extend_from_slice(plain);
        let ctx = self.encrypt.encrypt(&mut body).ok()?;
        let iv: &[u8] = (&ctx).try_into().ok()?;
        let mut ticket = Vec::with_capacity(NAME_LEN + iv.len() + body.len() + TAG_LEN);
        ticket.extend_from_slice(&self.name);
        ticket.extend_from_slice(iv);
        ticket.extend_from_slice(&body);
        let tag = hmac::sign(&self.hmac, &ticket);
        ticket.extend_from_slice(tag.as_ref());
        Some(ticket)
    }

    /// Open a ticket whose name is this key's. The MAC is checked (in
    /// constant time) before anything is decrypted, so the CBC padding
    /// check never sees forged input.
    fn open(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() < MIN_TICKET_LEN {
            return None;
        }
        let (signed, tag) = ticket.split_at(ticket.len() - TAG_LEN);
        hmac::verify(&self.hmac, signed, tag).ok()?;
        let (iv, body) = signed.get(NAME_LEN..)?.split_at(AES_CBC_IV_LEN);
        if body.is_empty() || body.len() % BLOCK_LEN != 0 {
            return None;
        }
        let iv: [u8; AES_CBC_IV_LEN] = iv.try_into().ok()?;
        let mut buf = body.to_vec();
        let ctx = DecryptionContext::Iv128(FixedLength::from(iv));
        let plain_len = self.decrypt.decrypt(&mut buf, ctx).ok()?.len();
        // The plaintext is the front of the buffer, the padding after it.
        buf.truncate(plain_len);
        Some(buf)
    }
}

impl fmt::Debug for Key {
    /// The name only: it travels in clear in every ticket anyway.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name: String = self.name.iter().map(|b| format!("{b:02x}")).collect();
        f.debug_struct("Key").field("name", &name).finish()
    }
}

/// Key files read and checked, ready for [`TicketKeys::install`].
#[derive(Debug)]
pub struct KeyFiles {
    /// In the order given: the first encrypts.
    keys: Vec<Key>,
    /// When the first (encrypting) file was last written.
    modified: Option<SystemTime>,
}

impl KeyFiles {
    /// Read and check every file: 48 or 80 bytes each, no key name twice.
    pub fn read(paths: &[PathBuf]) -> Result<KeyFiles, TicketKeyError> {
        if paths.is_empty() {
            return Err(TicketKeyError::NoFiles);
        }
        let mut keys: Vec<Key> = Vec::with_capacity(paths.len());
        let mut modified = None;
        for (i, path) in paths.iter().enumerate() {
            let (material, mtime) = read_key_file(path)?;
            let key = Key::from_material(&material)
                .ok_or_else(|| TicketKeyError::Crypto { path: path.clone() })?;
            if let Some(j) = keys.iter().position(|k| k.name == key.name) {
                return Err(TicketKeyError::DuplicateName {
                    first: paths[j].clone(),
                    second: path.clone(),
                });
            }
            if i == 0 {
                modified = mtime;
            }
            keys.push(key);
        }
        Ok(KeyFiles { keys, modified })
    }

    fn same_keys(&self, other: &KeyFiles) -> bool {
        self.keys.len() == other.keys.len()
            && self
                .keys
                .iter()
                .zip(&other.keys)
                .all(|(a, b)| a.digest == b.digest)
    }
}

/// A key file's bytes (in a buffer zeroized when dropped) and its mtime.
fn read_key_file(path: &Path) -> Result<(Zeroizing<Vec<u8>>, Option<SystemTime>), TicketKeyError> {
    let read_err = |source| TicketKeyError::Read {
        path: path.to_path_buf(),
        source,
    };
    // The size comes from the metadata, not from reading: a device or a
    // huge file given by mistake is refused without being read. A path
    // this process cannot look at is left to the read to judge.
    let meta = std::fs::metadata(path).ok();
    if let Some(meta) = &meta {
        if !meta.is_file() {
            return Err(TicketKeyError::NotAFile {
                path: path.to_path_buf(),
            });
        }
        let size = meta.len();
        if size != 48 && size != 80 {
            return Err(TicketKeyError::Size {
                path: path.to_path_buf(),
                size,
            });
        }
    }
    let buf = Zeroizing::new(crate::safe_open::read(path).map_err(read_err)?);
    let size = buf.len() as u64;
    // A file cut short or grown since the stat is being rewritten in place
    // (a rotation script without rename): an error, never a partial key.
    if meta.as_ref().is_some_and(|m| m.len() != size) {
        return Err(read_err(io::Error::other(
            "the file changed size while being read",
        )));
    }
    if size != 48 && size != 80 {
        return Err(TicketKeyError::Size {
            path: path.to_path_buf(),
            size,
        });
    }
    Ok((buf, meta.and_then(|m| m.modified().ok())))
}

/// HKDF output length of one derived key (the 80-byte form).
struct KeyLen;

impl aws_lc_rs::hkdf::KeyType for KeyLen {
    fn len(&self) -> usize {
        80
    }
}

/// The secret in-memory ticket keys are derived from. Made at random by
/// the first process; handed on to the processes that follow it (see the
/// module documentation).
pub struct Seed(Zeroizing<[u8; SEED_LEN]>);

/// Bytes of a [`Seed`].
pub const SEED_LEN: usize = 32;

impl Seed {
    /// A new random seed; `None` if the RNG fails.
    pub fn random() -> Option<Seed> {
        let mut b = Zeroizing::new([0u8; SEED_LEN]);
        rand::fill(&mut b[..]).ok()?;
        Some(Seed(b))
    }

    /// A seed handed over by another process: exactly [`SEED_LEN`] bytes.
    pub fn from_bytes(b: &[u8]) -> Option<Seed> {
        Some(Seed(Zeroizing::new(b.try_into().ok()?)))
    }

    pub fn bytes(&self) -> &[u8; SEED_LEN] {
        &self.0
    }

    fn copy(&self) -> Seed {
        Seed(self.0.clone())
    }
}

impl fmt::Debug for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Seed(..)")
    }
}

/// Period `n` of the wall clock is [n·P, (n+1)·P) since the Unix epoch,
/// P in whole seconds (at least one). Public for the fleet's leader, which
/// must number the keys it makes as every node's [`TicketKeys`] does.
pub fn period_number(now: SystemTime, period: Duration) -> u64 {
    now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() / period.as_secs().max(1)
}

/// When period `n` starts (the inverse of [`period_number`]); `None` past
/// what `SystemTime` holds.
fn period_start(n: u64, period: Duration) -> Option<SystemTime> {
    UNIX_EPOCH.checked_add(Duration::from_secs(n.checked_mul(period.as_secs().max(1))?))
}

/// Is a key of period `key` inside the window `current - before ..=
/// current + after`? Written without arithmetic on `current` so that the
/// ends of the `u64` range cannot overflow.
fn in_window(key: u64, current: u64, before: u64, after: u64) -> bool {
    if key <= current {
        current - key <= before
    } else {
        key - current <= after
    }
}

/// Keys derived from the seed: key `n` encrypts during period `n` and
/// decrypts during periods `n` and `n + 1`, so a ticket is accepted for at
/// least one period and at most two. The keys of the current and the last
/// period are kept, newest first.
#[derive(Debug)]
struct Rotation {
    seed: Seed,
    keys: Vec<(Key, u64)>,
}

impl Rotation {
    fn new(seed: Seed) -> Rotation {
        Rotation {
            seed,
            keys: Vec::new(),
        }
    }

    fn encrypting(&self, now: SystemTime, period: Duration) -> Option<&(Key, u64)> {
        let n = period_number(now, period);
        self.keys.first().filter(|(_, k)| *k == n)
    }

    fn decrypting(&self, now: SystemTime, period: Duration) -> impl Iterator<Item = &Key> {
        let n = period_number(now, period);
        self.keys
            .iter()
            .filter(move |(_, k)| *k == n || k.checked_add(1) == Some(n))
            .map(|(k, _)| k)
    }

    fn due(&self, now: SystemTime, period: Duration) -> bool {
        self.encrypting(now, period).is_none()
            || self.decrypting(now, period).count() < self.keys.len()
    }

    /// Derive the keys of the current and the last period if missing, and
    /// erase the others.
    fn rotate(&mut self, now: SystemTime, period: Duration) {
        let n = period_number(now, period);
        self.keys
            .retain(|(_, k)| *k == n || k.checked_add(1) == Some(n));
        for m in [n.checked_sub(1), Some(n)].into_iter().flatten() {
            if !self.keys.iter().any(|(_, k)| *k == m) {
                // A failure issues no ticket (rustls sends none and the
                // handshake goes on); the next operation tries again.
                if let Some(key) = Key::derive(&self.seed, m) {
                    self.keys.push((key, m));
                }
            }
        }
        self.keys.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
    }
}

/// Bytes of a [`FleetKey`]'s material: the 80-byte key-file layout
/// (name, HMAC key, AES-256 key; see the module documentation).
pub const FLEET_KEY_LEN: usize = 80;

/// A fleet's ticket key for one period, as the leader makes it and every
/// node installs it (see the module documentation). The material is only
/// ever held in a zeroizing buffer, so it is erased when the last copy is
/// dropped.
#[derive(Clone)]
pub struct FleetKey {
    period: u64,
    material: Zeroizing<[u8; FLEET_KEY_LEN]>,
}

impl FleetKey {
    /// A new key for period `period` (see [`period_number`]), from
    /// aws-lc-rs' RNG; `None` if the RNG fails.
    pub fn random(period: u64) -> Option<FleetKey> {
        let mut material = Zeroizing::new([0u8; FLEET_KEY_LEN]);
        rand::fill(&mut material[..]).ok()?;
        Some(FleetKey { period, material })
    }

    /// A key read back (from etcd or a local copy): exactly
    /// [`FLEET_KEY_LEN`] bytes, `None` for any other length, so a
    /// truncated or padded value never becomes a key.
    pub fn from_bytes(period: u64, material: &[u8]) -> Option<FleetKey> {
        Some(FleetKey {
            period,
            material: Zeroizing::new(material.try_into().ok()?),
        })
    }

    /// The period this key encrypts in.
    pub fn period(&self) -> u64 {
        self.period
    }

    /// The material, for sealing into etcd. Borrowed so that no copy
    /// outside a zeroizing buffer is made here.
    pub fn bytes(&self) -> &[u8; FLEET_KEY_LEN] {
        &self.material
    }
}

impl fmt::Debug for FleetKey {
    /// The period and the key name only (the name is in clear in every
    /// ticket anyway).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name: String = self.material[..NAME_LEN]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        f.debug_struct("FleetKey")
            .field("period", &self.period)
            .field("name", &name)
            .finish()
    }
}

/// Keys from the fleet, and this node's own rotating keys for the time no
/// fleet key covers (see the module documentation).
#[derive(Debug)]
struct Fleet {
    /// Each with its period, ordered by period then name, no name twice:
    /// nodes given the same keys in any order pick the same one to
    /// encrypt. Keys of periods before the last one are erased.
    keys: Vec<(Key, u64)>,
    /// Always rotated, also while a fleet key encrypts: a local key that
    /// sealed tickets before the fleet's key arrived must keep opening
    /// them for its usual window, and is ready when the fleet's next key
    /// is late.
    local: Rotation,
}

impl Fleet {
    fn new(seed: Seed, keys: Vec<(Key, u64)>, now: SystemTime, period: Duration) -> Fleet {
        let mut local = Rotation::new(seed);
        local.rotate(now, period);
        Fleet { keys, local }
    }

    /// Turn handed-in keys into ticket keys: those already expired are
    /// dropped (erased) at once, the rest ordered as [`Fleet::keys`] says.
    /// Keys for
    /// periods further ahead than the next are kept: a node whose clock is
    /// behind the leader's gets the key after next while still in the
    /// period before, and needs it when its clock gets there.
    fn prepare(given: Vec<FleetKey>, now: SystemTime, period: Duration) -> Vec<(Key, u64)> {
        let current = period_number(now, period);
        let mut keys: Vec<(Key, u64)> = given
            .into_iter()
            .filter(|k| !Fleet::expired(k.period, current))
            // Fails only if aws-lc refuses a 32-byte AES key: such a key is
            // left out rather than a panic.
            .filter_map(|k| Some((Key::from_material(&k.material[..])?, k.period)))
            .collect();
        keys.sort_by(|(a, m), (b, n)| m.cmp(n).then(a.name.cmp(&b.name)));
        let mut seen: Vec<[u8; NAME_LEN]> = Vec::with_capacity(keys.len());
        keys.retain(|(k, _)| {
            // The same key given twice (under one period or two): the
            // first in the order above stays, so every node keeps the same.
            let new = !seen.contains(&k.name);
            seen.push(k.name);
            new
        });
        keys
    }

    fn same_keys(&self, other: &[(Key, u64)]) -> bool {
        self.keys.len() == other.len()
            && self
                .keys
                .iter()
                .zip(other)
                .all(|((a, m), (b, n))| m == n && a.digest == b.digest)
    }

    /// The fleet's key of the current period if there is one, else the
    /// local one; with its period number.
    fn encrypting(&self, now: SystemTime, period: Duration) -> Option<(&Key, u64)> {
        let n = period_number(now, period);
        self.fleet_encrypting(n)
            .or_else(|| self.local.encrypting(now, period).map(|(k, n)| (k, *n)))
    }

    fn fleet_encrypting(&self, current: u64) -> Option<(&Key, u64)> {
        self.keys
            .iter()
            .find(|(_, n)| *n == current)
            .map(|(k, n)| (k, *n))
    }

    fn decrypting(&self, now: SystemTime, period: Duration) -> impl Iterator<Item = &Key> {
        let current = period_number(now, period);
        self.keys
            .iter()
            .filter(move |(_, n)| in_window(*n, current, 1, 1))
            .map(|(k, _)| k)
            .chain(self.local.decrypting(now, period))
    }

    fn due(&self, now: SystemTime, period: Duration) -> bool {
        let current = period_number(now, period);
        self.local.due(now, period) || self.keys.iter().any(|(_, n)| Self::expired(*n, current))
    }

    /// Erase the fleet's keys no node should still accept, and rotate the
    /// local ones.
    fn rotate(&mut self, now: SystemTime, period: Duration) {
        let current = period_number(now, period);
        self.keys.retain(|(_, n)| !Self::expired(*n, current));
        self.local.rotate(now, period);
    }

    /// Before the last period: no clock within a period of this one
    /// encrypts with it any more.
    fn expired(key: u64, current: u64) -> bool {
        key < current && !in_window(key, current, 1, 0)
    }
}

#[derive(Debug)]
enum Keys {
    Files(KeyFiles),
    Rotating(Rotation),
    Fleet(Fleet),
}

impl Keys {
    fn due(&self, now: SystemTime, period: Duration) -> bool {
        match self {
            Keys::Files(_) => false,
            Keys::Rotating(r) => r.due(now, period),
            Keys::Fleet(f) => f.due(now, period),
        }
    }

    fn rotate(&mut self, now: SystemTime, period: Duration) {
        match self {
            Keys::Files(_) => {}
            Keys::Rotating(r) => r.rotate(now, period),
            Keys::Fleet(f) => f.rotate(now, period),
        }
    }

    fn encrypting(&self, now: SystemTime, period: Duration) -> Option<&Key> {
        match self {
            Keys::Files(f) => f.keys.first(),
            Keys::Rotating(r) => r.encrypting(now, period).map(|(k, _)| k),
            Keys::Fleet(f) => f.encrypting(now, period).map(|(k, _)| k),
        }
    }

    /// The period of the key that encrypts now; `None` for file keys.
    fn encrypting_period(&self, now: SystemTime, period: Duration) -> Option<u64> {
        match self {
            Keys::Files(_) => None,
            Keys::Rotating(r) => r.encrypting(now, period).map(|(_, n)| *n),
            Keys::Fleet(f) => f.encrypting(now, period).map(|(_, n)| n),
        }
    }

    fn find(&self, name: &[u8], now: SystemTime, period: Duration) -> Option<&Key> {
        // Key names are public (in clear in every ticket): a plain
        // comparison is fine here; the MAC check is the constant-time one.
        match self {
            Keys::Files(f) => f.keys.iter().find(|k| k.name == name),
            Keys::Rotating(r) => r.decrypting(now, period).find(|k| k.name == name),
            Keys::Fleet(f) => f.decrypting(now, period).find(|k| k.name == name),
        }
    }
}

/// Reads the time; tests inject their own.
type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// What [`TicketKeys::reload`] and [`TicketKeys::install`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// The same keys as before (file contents unchanged, still rotating
    /// in memory, or the same fleet keys): every outstanding ticket still
    /// resumes.
    Unchanged,
    /// Different keys: tickets resume only under keys still present.
    Replaced,
}

/// The session-ticket keys shared by all `ServerConfig`s (see the module
/// documentation).
pub struct TicketKeys {
    keys: RwLock<Keys>,
    /// What in-memory keys are derived from (also after a reload drops
    /// the key files).
    seed: Seed,
    /// The lifetime hint sent with tickets, the rotation period of
    /// in-memory keys, and the fleet's period.
    period: Duration,
    clock: Clock,
}

impl TicketKeys {
    /// Keys from nginx-format key files: the first encrypts, all decrypt.
    /// The lifetime hint is [`DEFAULT_ROTATION`]; see
    /// [`with_lifetime`](Self::with_lifetime).
    /// `seed`: for the in-memory keys a reload without files turns to.
    pub fn from_files(paths: &[PathBuf], seed: Seed) -> Result<Self, TicketKeyError> {
        let files = KeyFiles::read(paths)?;
        Ok(TicketKeys {
            keys: RwLock::new(Keys::Files(files)),
            seed,
            period: DEFAULT_ROTATION,
            clock: Arc::new(SystemTime::now),
        })
    }

    /// Keys derived from `seed`, rotated in memory every `period` (see
    /// [`DEFAULT_ROTATION`] for the policy); the lifetime hint is `period`.
    pub fn rotating(period: Duration, seed: Seed) -> Self {
        Self::rotating_with_clock(period, seed, Arc::new(SystemTime::now))
    }

    fn rotating_with_clock(period: Duration, seed: Seed, clock: Clock) -> Self {
        // A zero period would make a key per ticket, each dead on arrival.
        let period = Duration::from_secs(period.as_secs().max(1));
        let mut rotation = Rotation::new(seed.copy());
        rotation.rotate(clock(), period);
        TicketKeys {
            keys: RwLock::new(Keys::Rotating(rotation)),
            seed,
            period,
            clock,
        }
    }

    /// Keys for a fleet node: the fleet's keys once
    /// [`install_fleet`](Self::install_fleet) hands them in, keys derived
    /// from `seed` until then and whenever no fleet key covers the current
    /// period (see the module documentation). `period` is the fleet's; it
    /// is also the lifetime hint, as a fleet key is accepted for at least
    /// the period after the one it encrypts in.
    pub fn fleet(period: Duration, seed: Seed) -> Self {
        Self::fleet_with_clock(period, seed, Arc::new(SystemTime::now))
    }

    fn fleet_with_clock(period: Duration, seed: Seed, clock: Clock) -> Self {
        let period = Duration::from_secs(period.as_secs().max(1));
        let fleet = Fleet::new(seed.copy(), Vec::new(), clock(), period);
        TicketKeys {
            keys: RwLock::new(Keys::Fleet(fleet)),
            seed,
            period,
            clock,
        }
    }

    /// The seed of the in-memory keys, to hand to a process that follows.
    pub fn seed(&self) -> &Seed {
        &self.seed
    }

    /// Set the lifetime hint (for file keys: match it to how often the
    /// files rotate, as nginx ties it to `ssl_session_timeout`). For
    /// in-memory keys it is also the rotation period.
    pub fn with_lifetime(mut self, lifetime: Duration) -> Self {
        self.period = Duration::from_secs(lifetime.as_secs().max(1));
        self
    }

    /// Age of the key that encrypts now: since its file was last written
    /// for file keys, since the start of its period for in-memory and
    /// fleet keys (when it began to encrypt, wherever it was made).
    pub fn key_age(&self) -> Duration {
        self.with_keys(|keys, now| match keys {
            Keys::Files(f) => f
                .modified
                .and_then(|m| SystemTime::now().duration_since(m).ok())
                .unwrap_or_default(),
            Keys::Rotating(_) | Keys::Fleet(_) => keys
                .encrypting_period(now, self.period)
                .and_then(|n| now.duration_since(period_start(n, self.period)?).ok())
                .unwrap_or_default(),
        })
    }

    /// How many keys decrypt now (the encrypting one included): for a
    /// fleet node the fleet's keys of this period and the two around it
    /// that are present, and the node's own in-memory keys.
    pub fn key_count(&self) -> usize {
        self.with_keys(|keys, now| match keys {
            Keys::Files(f) => f.keys.len(),
            Keys::Rotating(r) => r.decrypting(now, self.period).count(),
            Keys::Fleet(f) => f.decrypting(now, self.period).count(),
        })
    }

    /// The period of the fleet key that encrypts now; `None` when none
    /// does (no fleet key for this period yet, so the node's own keys
    /// encrypt, or not a fleet node): for the fleet's status and log.
    pub fn fleet_encrypting(&self) -> Option<u64> {
        self.with_keys(|keys, now| match keys {
            Keys::Fleet(f) => f
                .fleet_encrypting(period_number(now, self.period))
                .map(|(_, n)| n),
            Keys::Files(_) | Keys::Rotating(_) => None,
        })
    }

    /// Replace the fleet's keys with `keys`: every key the fleet has, in
    /// any order; those of periods before the last are left out (and
    /// erased), those ahead are kept until their period comes. The node's
    /// own in-memory keys stay, so tickets it sealed before still resume.
    /// On a `TicketKeys` not made by [`fleet`](Self::fleet) it turns the
    /// node into a fleet node (key files, if any, are dropped; keys that
    /// were rotating in memory stay as the node's own). `Unchanged` when
    /// the fleet's keys are the ones already in place.
    pub fn install_fleet(&self, keys: Vec<FleetKey>) -> Reload {
        let now = (self.clock)();
        // The key schedules are made before the lock is taken, so ticket
        // operations wait only for the swap.
        let new = Fleet::prepare(keys, now, self.period);
        let mut keys = self.keys.write().unwrap_or_else(PoisonError::into_inner);
        match &mut *keys {
            Keys::Fleet(f) if f.same_keys(&new) => Reload::Unchanged,
            Keys::Fleet(f) => {
                f.keys = new;
                Reload::Replaced
            }
            // In-memory keys are derived from the same seed, so the fleet
            // node's own keys are the ones that were rotating.
            Keys::Files(_) | Keys::Rotating(_) => {
                *keys = Keys::Fleet(Fleet::new(self.seed.copy(), new, now, self.period));
                Reload::Replaced
            }
        }
    }

    /// For a config reload: read `paths` (none: keys rotated in memory)
    /// and put them in place unless they are the keys already in use. On
    /// an error the keys in use stay.
    pub fn reload(&self, paths: &[PathBuf]) -> Result<Reload, TicketKeyError> {
        let files = if paths.is_empty() {
            None
        } else {
            Some(KeyFiles::read(paths)?)
        };
        Ok(self.install(files))
    }

    /// Put `files` in place (`None`: keys rotated in memory), unless they
    /// are the keys already in use. Keys already rotating in memory are
    /// kept, so a reload without files drops no ticket; so are a fleet
    /// node's keys, which come from the fleet and not from the config.
    pub fn install(&self, files: Option<KeyFiles>) -> Reload {
        let now = (self.clock)();
        let mut keys = self.keys.write().unwrap_or_else(PoisonError::into_inner);
        match (&mut *keys, files) {
            (Keys::Rotating(_) | Keys::Fleet(_), None) => Reload::Unchanged,
            (Keys::Files(old), Some(new)) if old.same_keys(&new) => {
                // Rewritten with the same bytes: only the age changes.
                old.modified = new.modified;
                Reload::Unchanged
            }
            (_, Some(new)) => {
                *keys = Keys::Files(new);
                Reload::Replaced
            }
            (Keys::Files(_), None) => {
                let mut rotation = Rotation::new(self.seed.copy());
                rotation.rotate(now, self.period);
                *keys = Keys::Rotating(rotation);
                Reload::Replaced
            }
        }
    }

    /// Run `f` on the keys as of now, rotating first if it is time.
    fn with_keys<R>(&self, f: impl FnOnce(&Keys, SystemTime) -> R) -> R {
        let now = (self.clock)();
        {
            let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
            if !keys.due(now, self.period) {
                return f(&keys, now);
            }
        }
        let mut keys = self.keys.write().unwrap_or_else(PoisonError::into_inner);
        keys.rotate(now, self.period);
        f(&keys, now)
    }
}

impl ProducesTickets for TicketKeys {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        // Whole seconds, at most RFC 8446's seven days.
        self.period.as_secs().min(MAX_HINT_SECS) as u32
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.with_keys(|keys, now| keys.encrypting(now, self.period)?.seal(plain))
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        let name = ticket.get(..NAME_LEN)?;
        self.with_keys(|keys, now| keys.find(name, now, self.period)?.open(ticket))
    }
}

impl fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let keys = self.keys.read().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("TicketKeys")
            .field("keys", &*keys)
            .field("period", &self.period)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::sync::Mutex;

    fn random<const N: usize>() -> [u8; N] {
        let mut b = [0u8; N];
        rand::fill(&mut b).unwrap();
        b
    }

    /// A key file with random material of `len` bytes.
    fn key_file(dir: &Path, name: &str, len: usize) -> (PathBuf, Vec<u8>) {
        let bytes: Vec<u8> = random::<80>()[..len.min(80)]
            .iter()
            .copied()
            .chain(std::iter::repeat_n(7, len.saturating_sub(80)))
            .collect();
        let path = dir.join(name);
        std::fs::write(&path, &bytes).unwrap();
        (path, bytes)
    }

    fn keys_from(paths: &[&PathBuf]) -> TicketKeys {
        let paths: Vec<PathBuf> = paths.iter().map(|p| (*p).clone()).collect();
        TicketKeys::from_files(&paths, seed()).unwrap()
    }

    #[test]
    fn round_trip_80_and_48_byte_keys() {
        let dir = tempfile::tempdir().unwrap();
        for len in [80, 48] {
            let (path, _) = key_file(dir.path(), &format!("k{len}"), len);
            let keys = keys_from(&[&path]);
            for n in [0, 1, 15, 16, 17, 31, 32, 33, 100, 1000] {
                let plain: Vec<u8> = (0..n).map(|i| i as u8).collect();
                let ticket = keys.encrypt(&plain).unwrap();
                // Name, IV, whole blocks of padded state, tag.
                assert_eq!(ticket.len(), 16 + 16 + (n / 16 + 1) * 16 + 32);
                assert_eq!(keys.decrypt(&ticket).unwrap(), plain, "{len}-byte key, {n}");
            }
            // A fresh IV every time.
            assert_ne!(
                keys.encrypt(b"same").unwrap(),
                keys.encrypt(b"same").unwrap()
            );
        }
    }

    #[test]
    fn any_tampered_byte_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = key_file(dir.path(), "k", 80);
        let keys = keys_from(&[&path]);
        let ticket = keys.encrypt(b"resumption state of some length").unwrap();
        for i in 0..ticket.len() {
            for bit in [0x01, 0x80] {
                let mut t = ticket.clone();
                t[i] ^= bit;
                assert_eq!(keys.decrypt(&t), None, "byte {i} bit {bit:#x}");
            }
        }
        // Cut short or extended.
        assert_eq!(keys.decrypt(&ticket[..ticket.len() - 1]), None);
        let mut longer = ticket.clone();
        longer.push(0);
        assert_eq!(keys.decrypt(&longer), None);
        assert!(keys.decrypt(&ticket).is_some());
    }

    /// The ticket layout and the use of each part of the key file, checked
    /// with aws-lc-rs directly: this is what makes a key file mean the same
    /// thing here as in nginx.
    #[test]
    fn layout_matches_nginx_for_both_sizes() {
        let dir = tempfile::tempdir().unwrap();
        for (len, cipher, hmac_at, aes_at) in [
            (80, &AES_256, 16..48, 48..80),
            (48, &AES_128, 32..48, 16..32),
        ] {
            let (path, bytes) = key_file(dir.path(), &format!("k{len}"), len);
            let ticket = keys_from(&[&path]).encrypt(b"hello, nginx").unwrap();
            assert_eq!(ticket[..16], bytes[..16], "key name first");
            let (signed, tag) = ticket.split_at(ticket.len() - 32);
            let mac = hmac::Key::new(hmac::HMAC_SHA256, &bytes[hmac_at]);
            hmac::verify(&mac, signed, tag).expect("HMAC-SHA256 over name, IV and ciphertext");
            let aes = UnboundCipherKey::new(cipher, &bytes[aes_at]).unwrap();
            let dec = PaddedBlockDecryptingKey::cbc_pkcs7(aes).unwrap();
            let iv: [u8; 16] = signed[16..32].try_into().unwrap();
            let mut body = signed[32..].to_vec();
            let plain = dec
                .decrypt(&mut body, DecryptionContext::Iv128(FixedLength::from(iv)))
                .unwrap();
            assert_eq!(plain, b"hello, nginx");
        }
    }

    #[test]
    fn first_key_encrypts_and_all_decrypt() {
        let dir = tempfile::tempdir().unwrap();
        let (a, a_bytes) = key_file(dir.path(), "a", 80);
        let (b, b_bytes) = key_file(dir.path(), "b", 48);
        let (c, _) = key_file(dir.path(), "c", 80);
        let ab = keys_from(&[&a, &b]);
        assert_eq!(ab.encrypt(b"x").unwrap()[..16], a_bytes[..16]);
        assert_eq!(ab.key_count(), 2);

        let from_b = keys_from(&[&b]).encrypt(b"made under b").unwrap();
        assert_eq!(from_b[..16], b_bytes[..16]);
        assert_eq!(ab.decrypt(&from_b).unwrap(), b"made under b");
        // The order of the decrypting keys does not matter.
        assert!(keys_from(&[&c, &a, &b]).decrypt(&from_b).is_some());
        // Without b: refused.
        assert_eq!(keys_from(&[&a]).decrypt(&from_b), None);
        assert_eq!(keys_from(&[&a, &c]).decrypt(&from_b), None);
    }

    #[test]
    fn bad_files_are_named_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        for len in [0, 1, 47, 49, 64, 79, 81, 96, 160] {
            let (path, _) = key_file(dir.path(), &format!("bad{len}"), len);
            let err = TicketKeys::from_files(std::slice::from_ref(&path), seed()).unwrap_err();
            assert!(
                matches!(&err, TicketKeyError::Size { path: p, size } if *p == path && *size == len as u64),
                "{err:?}"
            );
            let msg = err.to_string();
            assert!(msg.contains(&path.display().to_string()), "{msg}");
            assert!(
                msg.contains(&format!("has {len} bytes, expected 48 or 80")),
                "{msg}"
            );
            assert!(msg.contains("openssl rand 80 >"), "{msg}");
        }

        let missing = dir.path().join("missing");
        let err = TicketKeys::from_files(std::slice::from_ref(&missing), seed()).unwrap_err();
        assert!(matches!(&err, TicketKeyError::Read { path, .. } if *path == missing));
        assert!(err.to_string().contains("missing"));
        assert!(err.to_string().contains("openssl rand 80 >"));

        let err = TicketKeys::from_files(&[dir.path().to_path_buf()], seed()).unwrap_err();
        assert!(matches!(err, TicketKeyError::NotAFile { .. }), "{err:?}");

        assert!(matches!(
            TicketKeys::from_files(&[], seed()),
            Err(TicketKeyError::NoFiles)
        ));

        // A good file, then a copy of it under another name, then a third.
        let (a, a_bytes) = key_file(dir.path(), "a", 80);
        let (b, _) = key_file(dir.path(), "b", 80);
        let copy = dir.path().join("copy");
        std::fs::write(&copy, &a_bytes).unwrap();
        let err = TicketKeys::from_files(&[a.clone(), b, copy.clone()], seed()).unwrap_err();
        assert!(
            matches!(&err, TicketKeyError::DuplicateName { first, second } if *first == a && *second == copy),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains("/a ") && msg.contains("/copy "), "{msg}");
        assert!(msg.contains("openssl rand 80 >"), "{msg}");
        // The same name with other keys behind it is a duplicate too.
        let mut renamed = random::<48>().to_vec();
        renamed[..16].copy_from_slice(&a_bytes[..16]);
        std::fs::write(&copy, &renamed).unwrap();
        assert!(matches!(
            TicketKeys::from_files(&[a, copy], seed()),
            Err(TicketKeyError::DuplicateName { .. })
        ));
    }

    /// A clock the test moves by hand, at the start of a period.
    fn test_clock(period: Duration) -> (Clock, Arc<Mutex<SystemTime>>) {
        let now = Arc::new(Mutex::new(UNIX_EPOCH + period * 500_000));
        let reader = now.clone();
        (Arc::new(move || *reader.lock().unwrap()), now)
    }

    fn seed() -> Seed {
        Seed::random().unwrap()
    }

    #[test]
    fn rotation_keeps_a_key_one_period_after_it_stops_encrypting() {
        let period = Duration::from_secs(3600);
        let (clock, now) = test_clock(period);
        let advance = |d: Duration| *now.lock().unwrap() += d;
        let keys = TicketKeys::rotating_with_clock(period, seed(), clock);
        assert_eq!(keys.lifetime(), 3600);
        // This period's key and the last one's (which a process with the
        // same seed may have issued tickets under).
        assert_eq!(keys.key_count(), 2);

        let first = keys.encrypt(b"first").unwrap();
        advance(period - Duration::from_secs(1));
        assert_eq!(keys.key_age(), period - Duration::from_secs(1));
        let also_first = keys.encrypt(b"also first").unwrap();
        assert_eq!(first[..16], also_first[..16], "same key within the period");
        assert_eq!(keys.key_count(), 2);

        // One period on: a new key encrypts, the old one still decrypts.
        advance(Duration::from_secs(1));
        let second = keys.encrypt(b"second").unwrap();
        assert_ne!(first[..16], second[..16]);
        assert_eq!(keys.key_age(), Duration::ZERO);
        assert_eq!(keys.key_count(), 2);
        assert_eq!(keys.decrypt(&first).unwrap(), b"first");

        // Just inside two periods of the first key: still accepted.
        advance(period - Duration::from_secs(1));
        assert_eq!(keys.decrypt(&first).unwrap(), b"first");
        assert_eq!(keys.decrypt(&also_first).unwrap(), b"also first");

        // Two periods: the first key is erased, the second still works.
        advance(Duration::from_secs(1));
        assert_eq!(keys.decrypt(&first), None);
        assert_eq!(keys.decrypt(&also_first), None);
        assert_eq!(keys.decrypt(&second).unwrap(), b"second");

        // Idle for a long time: nothing old is accepted.
        advance(period * 10);
        assert_eq!(keys.decrypt(&second), None);
        assert_eq!(keys.key_count(), 2);
        let third = keys.encrypt(b"third").unwrap();
        assert_eq!(keys.decrypt(&third).unwrap(), b"third");
    }

    #[test]
    fn processes_with_the_same_seed_resume_each_others_tickets() {
        let period = Duration::from_secs(3600);
        let (clock, now) = test_clock(period);
        let shared = seed();
        let before = TicketKeys::rotating_with_clock(period, shared.copy(), clock.clone());
        let ticket = before.encrypt(b"state").unwrap();
        // A process that follows, half a period on, with the seed handed
        // over: it opens the ticket and seals under the same key.
        *now.lock().unwrap() += period / 2;
        let after = TicketKeys::rotating_with_clock(period, shared.copy(), clock.clone());
        assert_eq!(after.decrypt(&ticket).unwrap(), b"state");
        assert_eq!(after.encrypt(b"x").unwrap()[..16], ticket[..16]);
        // ... and in the next period still (the key's second one).
        *now.lock().unwrap() += period;
        let later = TicketKeys::rotating_with_clock(period, shared, clock.clone());
        assert_eq!(later.decrypt(&ticket).unwrap(), b"state");
        // Another seed: another key, nothing resumes.
        let other = TicketKeys::rotating_with_clock(period, seed(), clock);
        assert_eq!(other.decrypt(&ticket), None);
        assert_ne!(other.encrypt(b"x").unwrap()[..16], ticket[..16]);
    }

    #[test]
    fn lifetime_hint_is_the_period_capped_at_seven_days() {
        assert_eq!(
            TicketKeys::rotating(DEFAULT_ROTATION, seed()).lifetime(),
            6 * 3600
        );
        let long = TicketKeys::rotating(Duration::from_secs(30 * 24 * 3600), seed());
        assert_eq!(long.lifetime(), 7 * 24 * 3600);
        assert_eq!(TicketKeys::rotating(Duration::ZERO, seed()).lifetime(), 1);
        // A fleet key opens at least through the period after its own.
        let fleet = TicketKeys::fleet(Duration::from_secs(30 * 24 * 3600), seed());
        assert_eq!(fleet.lifetime(), 7 * 24 * 3600);
        assert_eq!(
            TicketKeys::fleet(DEFAULT_ROTATION, seed()).lifetime(),
            6 * 3600
        );
        assert_eq!(TicketKeys::fleet(Duration::ZERO, seed()).lifetime(), 1);
        assert!(TicketKeys::rotating(DEFAULT_ROTATION, seed()).enabled());
        let dir = tempfile::tempdir().unwrap();
        let (a, _) = key_file(dir.path(), "a", 80);
        let keys = keys_from(&[&a]);
        assert_eq!(keys.lifetime(), 6 * 3600);
        assert_eq!(keys.with_lifetime(Duration::from_secs(300)).lifetime(), 300);
    }

    #[test]
    fn file_key_age_is_the_first_files_age() {
        let dir = tempfile::tempdir().unwrap();
        let (a, _) = key_file(dir.path(), "a", 80);
        let (b, _) = key_file(dir.path(), "b", 80);
        let day_ago = SystemTime::now() - Duration::from_secs(86_400);
        File::options()
            .write(true)
            .open(&a)
            .unwrap()
            .set_modified(day_ago)
            .unwrap();
        let age = keys_from(&[&a, &b]).key_age();
        assert!(age >= Duration::from_secs(86_400) && age < Duration::from_secs(86_500));
        assert!(keys_from(&[&b, &a]).key_age() < Duration::from_secs(100));
    }

    #[test]
    fn reload_swaps_only_changed_keys() {
        let dir = tempfile::tempdir().unwrap();
        let (a, _) = key_file(dir.path(), "a", 80);
        let (b, _) = key_file(dir.path(), "b", 80);
        let keys = keys_from(&[&a]);
        let old = keys.encrypt(b"before").unwrap();

        assert_eq!(
            keys.reload(std::slice::from_ref(&a)).unwrap(),
            Reload::Unchanged
        );
        // Rotation as operators do it: the new key first, the old after.
        assert_eq!(
            keys.reload(&[b.clone(), a.clone()]).unwrap(),
            Reload::Replaced
        );
        assert_eq!(keys.decrypt(&old).unwrap(), b"before");
        let new = keys.encrypt(b"after").unwrap();
        assert_ne!(new[..16], old[..16]);

        // A bad file: an error, and the keys in use stay.
        std::fs::write(&a, b"short").unwrap();
        assert!(matches!(
            keys.reload(&[b.clone(), a.clone()]),
            Err(TicketKeyError::Size { size: 5, .. })
        ));
        assert_eq!(keys.key_count(), 2);
        assert_eq!(keys.decrypt(&old).unwrap(), b"before");

        // Old key dropped from the list: its tickets stop resuming.
        assert_eq!(
            keys.reload(std::slice::from_ref(&b)).unwrap(),
            Reload::Replaced
        );
        assert_eq!(keys.decrypt(&old), None);
        assert!(keys.decrypt(&new).is_some());

        // No files: keys rotating in memory; a second reload keeps them.
        assert_eq!(keys.reload(&[]).unwrap(), Reload::Replaced);
        assert_eq!(keys.decrypt(&new), None);
        let mem = keys.encrypt(b"in memory").unwrap();
        assert_eq!(keys.reload(&[]).unwrap(), Reload::Unchanged);
        assert_eq!(keys.decrypt(&mem).unwrap(), b"in memory");
    }

    #[test]
    fn garbage_never_panics() {
        let dir = tempfile::tempdir().unwrap();
        let (a, a_bytes) = key_file(dir.path(), "a", 80);
        let (b, _) = key_file(dir.path(), "b", 48);
        let files = keys_from(&[&a, &b]);
        let rotating = TicketKeys::rotating(DEFAULT_ROTATION, seed());
        let fleet = TicketKeys::fleet(DEFAULT_ROTATION, seed());
        let n = period_number(SystemTime::now(), DEFAULT_ROTATION);
        // Key a as the fleet's current key, so its name reaches the MAC.
        let a_fleet = FleetKey::from_bytes(n, &a_bytes).unwrap();
        fleet.install_fleet(vec![a_fleet, FleetKey::random(n + 1).unwrap()]);
        let valid = files.encrypt(b"some state").unwrap();
        for keys in [&files, &rotating, &fleet] {
            for len in 0..200 {
                for _ in 0..20 {
                    let mut t = vec![0u8; len];
                    rand::fill(&mut t).unwrap();
                    assert_eq!(keys.decrypt(&t), None);
                    // With a known key name, so the MAC check is reached.
                    let n = len.min(16);
                    t[..n].copy_from_slice(&a_bytes[..n]);
                    assert_eq!(keys.decrypt(&t), None);
                }
            }
            for cut in 0..valid.len() {
                assert_eq!(keys.decrypt(&valid[..cut]), None);
            }
        }
    }

    /// Random keys for each period of `periods`, by period.
    fn fleet_keys(periods: std::ops::RangeInclusive<u64>) -> Vec<FleetKey> {
        periods.map(|n| FleetKey::random(n).unwrap()).collect()
    }

    /// The keys of `periods` from `all` (as the leader keeps them in etcd).
    fn pick(all: &[FleetKey], periods: std::ops::RangeInclusive<u64>) -> Vec<FleetKey> {
        all.iter()
            .filter(|k| periods.contains(&k.period()))
            .cloned()
            .collect()
    }

    fn name(k: &FleetKey) -> &[u8] {
        &k.bytes()[..16]
    }

    #[test]
    fn fleet_nodes_with_different_seeds_resume_each_others_tickets() {
        let period = Duration::from_secs(3600);
        let (clock, _) = test_clock(period);
        let n = period_number(clock(), period);
        let keys = fleet_keys(n - 1..=n + 1);
        let a = TicketKeys::fleet_with_clock(period, seed(), clock.clone());
        let b = TicketKeys::fleet_with_clock(period, seed(), clock.clone());
        assert_eq!(a.install_fleet(keys.clone()), Reload::Replaced);
        // The watch hands them over in its own order: the same keys.
        let mut reversed = keys.clone();
        reversed.reverse();
        assert_eq!(b.install_fleet(reversed), Reload::Replaced);
        assert_eq!(a.install_fleet(keys.clone()), Reload::Unchanged);
        assert_eq!(a.fleet_encrypting(), Some(n));

        let from_a = a.encrypt(b"from a").unwrap();
        assert_eq!(&from_a[..16], name(&keys[1]), "key n encrypts in period n");
        assert_eq!(b.decrypt(&from_a).unwrap(), b"from a");
        let from_b = b.encrypt(b"from b").unwrap();
        assert_eq!(a.decrypt(&from_b).unwrap(), b"from b");

        // Another fleet's keys open neither.
        let c = TicketKeys::fleet_with_clock(period, seed(), clock);
        c.install_fleet(fleet_keys(n - 1..=n + 1));
        assert_eq!(c.decrypt(&from_a), None);
        assert_eq!(a.decrypt(&c.encrypt(b"from c").unwrap()), None);
    }

    #[test]
    fn a_fleet_ticket_opens_until_the_period_after_its_own_ends() {
        let period = Duration::from_secs(3600);
        let (clock, now) = test_clock(period);
        let advance = |d: Duration| *now.lock().unwrap() += d;
        let n = period_number(clock(), period);
        let all = fleet_keys(n - 1..=n + 4);
        let a = TicketKeys::fleet_with_clock(period, seed(), clock.clone());
        let b = TicketKeys::fleet_with_clock(period, seed(), clock.clone());
        // What the leader keeps during period `m`.
        let leader = |m: u64| pick(&all, m - 1..=m + 1);
        for node in [&a, &b] {
            node.install_fleet(leader(n));
        }
        let ticket = a.encrypt(b"period n").unwrap();

        // Period n + 1, to its last second: still accepted.
        advance(period);
        for node in [&a, &b] {
            node.install_fleet(leader(n + 1));
        }
        assert_eq!(b.decrypt(&ticket).unwrap(), b"period n");
        let next = b.encrypt(b"period n + 1").unwrap();
        assert_eq!(&next[..16], name(&all[2]));
        advance(period - Duration::from_secs(1));
        assert_eq!(b.decrypt(&ticket).unwrap(), b"period n");

        // Period n + 2: key n is erased, even while still handed in.
        advance(Duration::from_secs(1));
        assert_eq!(b.decrypt(&ticket), None);
        assert_eq!(b.install_fleet(pick(&all, n..=n + 3)), Reload::Replaced);
        assert_eq!(b.decrypt(&ticket), None);
        assert_eq!(b.decrypt(&next).unwrap(), b"period n + 1");

        // Period n + 3, with the newer keys: neither is accepted.
        advance(period);
        for node in [&a, &b] {
            node.install_fleet(leader(n + 3));
        }
        assert_eq!(a.decrypt(&ticket), None);
        assert_eq!(b.decrypt(&ticket), None);
        assert_eq!(b.decrypt(&next), None);
        let latest = a.encrypt(b"period n + 3").unwrap();
        assert_eq!(&latest[..16], name(&all[4]));
        assert_eq!(b.decrypt(&latest).unwrap(), b"period n + 3");
    }

    #[test]
    fn without_a_fleet_key_tickets_work_on_this_node_only() {
        let period = Duration::from_secs(3600);
        let (clock, now) = test_clock(period);
        let n = period_number(clock(), period);
        let a = TicketKeys::fleet_with_clock(period, seed(), clock.clone());
        let b = TicketKeys::fleet_with_clock(period, seed(), clock.clone());
        assert_eq!(a.fleet_encrypting(), None);
        let local = a.encrypt(b"local").unwrap();
        assert_eq!(a.decrypt(&local).unwrap(), b"local");
        assert_eq!(b.decrypt(&local), None);

        // Only the next period's key: not for encrypting yet.
        let keys = fleet_keys(n + 1..=n + 1);
        a.install_fleet(keys.clone());
        b.install_fleet(keys.clone());
        assert_eq!(a.fleet_encrypting(), None);
        let still_local = a.encrypt(b"still local").unwrap();
        assert_ne!(&still_local[..16], name(&keys[0]));
        assert_eq!(b.decrypt(&still_local), None);

        // Its period: it encrypts, on both nodes.
        *now.lock().unwrap() += period;
        assert_eq!(a.fleet_encrypting(), Some(n + 1));
        let shared = a.encrypt(b"shared").unwrap();
        assert_eq!(b.decrypt(&shared).unwrap(), b"shared");

        // The leader is late with key n + 2: back to local keys, and
        // the fleet's key again once it comes.
        *now.lock().unwrap() += period;
        assert_eq!(a.fleet_encrypting(), None);
        let late = a.encrypt(b"late").unwrap();
        assert_eq!(a.decrypt(&late).unwrap(), b"late");
        assert_eq!(b.decrypt(&late), None);
        let keys = fleet_keys(n + 2..=n + 3);
        a.install_fleet(keys.clone());
        b.install_fleet(keys);
        assert_eq!(a.fleet_encrypting(), Some(n + 2));
        assert_eq!(b.decrypt(&a.encrypt(b"x").unwrap()).unwrap(), b"x");
    }

    #[test]
    fn a_local_ticket_still_opens_after_the_fleet_key_arrives() {
        let period = Duration::from_secs(3600);
        let (clock, now) = test_clock(period);
        let advance = |d: Duration| *now.lock().unwrap() += d;
        let n = period_number(clock(), period);
        let all = fleet_keys(n - 1..=n + 3);
        let keys = TicketKeys::fleet_with_clock(period, seed(), clock);
        let local = keys.encrypt(b"before the fleet").unwrap();

        advance(period / 2);
        assert_eq!(
            keys.install_fleet(pick(&all, n - 1..=n + 1)),
            Reload::Replaced
        );
        let fleet = keys.encrypt(b"from the fleet").unwrap();
        assert_eq!(&fleet[..16], name(&all[1]));
        assert_ne!(fleet[..16], local[..16]);
        assert_eq!(keys.decrypt(&local).unwrap(), b"before the fleet");

        // The local key's second period: still accepted.
        advance(period);
        keys.install_fleet(pick(&all, n..=n + 2));
        assert_eq!(keys.decrypt(&local).unwrap(), b"before the fleet");
        // Two periods after it was made: erased, as without a fleet.
        advance(period);
        keys.install_fleet(pick(&all, n + 1..=n + 3));
        assert_eq!(keys.decrypt(&local), None);
        assert_eq!(keys.fleet_encrypting(), Some(n + 2));
    }

    #[test]
    fn clocks_apart_by_less_than_a_period_resume_each_others_tickets() {
        let period = Duration::from_secs(3600);
        let almost = period - Duration::from_secs(1);
        let (clock, now) = test_clock(period);
        let n = period_number(clock(), period);
        let all = fleet_keys(n - 2..=n + 6);
        let key_of = |m: u64| all.iter().find(|k| k.period() == m).unwrap();
        let origin = clock();
        // Node a ahead of the leader's clock, then behind it.
        for ahead in [true, false] {
            *now.lock().unwrap() = origin;
            let skewed: Clock = {
                let now = now.clone();
                Arc::new(move || {
                    let t = *now.lock().unwrap();
                    if ahead {
                        t + almost
                    } else {
                        t - almost
                    }
                })
            };
            let a = TicketKeys::fleet_with_clock(period, seed(), skewed.clone());
            let b = TicketKeys::fleet_with_clock(period, seed(), clock.clone());
            // Through four periods in uneven steps, the leader (on b's
            // clock) keeping its three keys in both.
            let mut step = 0;
            while clock() < origin + period * 4 {
                let m = period_number(clock(), period);
                for node in [&a, &b] {
                    node.install_fleet(pick(&all, m - 1..=m + 1));
                }
                let (pa, pb) = (
                    period_number(skewed(), period),
                    period_number(clock(), period),
                );
                let from_a = a.encrypt(b"a").unwrap();
                let from_b = b.encrypt(b"b").unwrap();
                // Each encrypts with the fleet's key of its own period.
                assert_eq!(&from_a[..16], name(key_of(pa)), "{ahead} {step}");
                assert_eq!(&from_b[..16], name(key_of(pb)), "{ahead} {step}");
                assert_eq!(b.decrypt(&from_a).unwrap(), b"a", "{ahead} {step}");
                assert_eq!(a.decrypt(&from_b).unwrap(), b"b", "{ahead} {step}");
                *now.lock().unwrap() += Duration::from_secs(1237);
                step += 1;
            }
        }
    }

    #[test]
    fn a_key_for_a_later_period_waits_for_it() {
        // A node behind the leader gets the key after next while still in
        // the period before; dropping it would leave the node without a
        // key when its clock gets there, if no other key came meanwhile.
        let period = Duration::from_secs(3600);
        let (clock, now) = test_clock(period);
        let n = period_number(clock(), period);
        let keys = TicketKeys::fleet_with_clock(period, seed(), clock);
        let later = fleet_keys(n + 2..=n + 2);
        keys.install_fleet(later.clone());
        assert_eq!(keys.key_count(), 2, "the local keys only");
        assert_eq!(keys.fleet_encrypting(), None);
        *now.lock().unwrap() += period * 2;
        assert_eq!(keys.fleet_encrypting(), Some(n + 2));
        assert_eq!(&keys.encrypt(b"x").unwrap()[..16], name(&later[0]));
    }

    #[test]
    fn fleet_key_count_and_age() {
        let period = Duration::from_secs(3600);
        let (clock, now) = test_clock(period);
        let n = period_number(clock(), period);
        let keys = TicketKeys::fleet_with_clock(period, seed(), clock);
        // This period's local key and the last one's.
        assert_eq!(keys.key_count(), 2);
        assert_eq!(keys.key_age(), Duration::ZERO);
        let all = fleet_keys(n - 1..=n + 1);
        keys.install_fleet(all.clone());
        assert_eq!(keys.key_count(), 5);
        *now.lock().unwrap() += Duration::from_secs(600);
        assert_eq!(keys.key_age(), Duration::from_secs(600));
        // The same keys given twice count once; an expired one not at all.
        let mut twice = all.clone();
        twice.extend(all.clone());
        twice.extend(fleet_keys(n - 3..=n - 2));
        assert_eq!(keys.install_fleet(twice), Reload::Unchanged);
        assert_eq!(keys.key_count(), 5);
        // Two periods on, with no new key: key n + 1 still decrypts (its
        // period just ended) beside the local keys, which encrypt.
        *now.lock().unwrap() += period * 2;
        assert_eq!(keys.key_count(), 3);
        assert_eq!(keys.fleet_encrypting(), None);
        assert_eq!(keys.key_age(), Duration::from_secs(600));
        *now.lock().unwrap() += period;
        assert_eq!(keys.key_count(), 2);
        assert_eq!(keys.lifetime(), 3600);
    }

    #[test]
    fn nodes_given_two_keys_for_one_period_pick_the_same() {
        let period = Duration::from_secs(3600);
        let (clock, _) = test_clock(period);
        let n = period_number(clock(), period);
        let both = fleet_keys(n..=n + 1)
            .into_iter()
            .map(|k| FleetKey::from_bytes(n, k.bytes()).unwrap())
            .collect::<Vec<_>>();
        let a = TicketKeys::fleet_with_clock(period, seed(), clock.clone());
        let b = TicketKeys::fleet_with_clock(period, seed(), clock);
        a.install_fleet(both.clone());
        b.install_fleet(both.iter().rev().cloned().collect());
        let from_a = a.encrypt(b"a").unwrap();
        assert_eq!(from_a[..16], b.encrypt(b"b").unwrap()[..16]);
        assert_eq!(b.decrypt(&from_a).unwrap(), b"a");
        assert_eq!(a.key_count(), 4);
    }

    #[test]
    fn fleet_key_material_has_one_size() {
        let material = random::<120>();
        for len in 0..=120 {
            let key = FleetKey::from_bytes(7, &material[..len]);
            assert_eq!(key.is_some(), len == FLEET_KEY_LEN, "{len}");
        }
        let key = FleetKey::from_bytes(7, &material[..80]).unwrap();
        assert_eq!(key.period(), 7);
        assert_eq!(key.bytes()[..], material[..80]);
        let (r1, r2) = (FleetKey::random(1).unwrap(), FleetKey::random(1).unwrap());
        assert_ne!(r1.bytes(), r2.bytes());
        // Sealed and read back, it is the same key.
        let period = Duration::from_secs(3600);
        let (clock, _) = test_clock(period);
        let n = period_number(clock(), period);
        let made = FleetKey::random(n).unwrap();
        let copy = FleetKey::from_bytes(n, &made.bytes()[..]).unwrap();
        let a = TicketKeys::fleet_with_clock(period, seed(), clock.clone());
        let b = TicketKeys::fleet_with_clock(period, seed(), clock);
        a.install_fleet(vec![made]);
        b.install_fleet(vec![copy]);
        assert_eq!(b.decrypt(&a.encrypt(b"x").unwrap()).unwrap(), b"x");
    }

    #[test]
    fn a_config_reload_keeps_the_fleet_keys() {
        let period = Duration::from_secs(3600);
        let (clock, _) = test_clock(period);
        let n = period_number(clock(), period);
        let keys = TicketKeys::fleet_with_clock(period, seed(), clock);
        let all = fleet_keys(n - 1..=n + 1);
        keys.install_fleet(all.clone());
        let ticket = keys.encrypt(b"fleet").unwrap();
        assert_eq!(keys.reload(&[]).unwrap(), Reload::Unchanged);
        assert_eq!(keys.install(None), Reload::Unchanged);
        assert_eq!(keys.fleet_encrypting(), Some(n));
        assert_eq!(keys.decrypt(&ticket).unwrap(), b"fleet");
        assert_eq!(keys.key_count(), 5);

        // Key files replace them, as they replace keys rotating in memory.
        let dir = tempfile::tempdir().unwrap();
        let (f, f_bytes) = key_file(dir.path(), "f", 80);
        assert_eq!(
            keys.reload(std::slice::from_ref(&f)).unwrap(),
            Reload::Replaced
        );
        assert_eq!(keys.decrypt(&ticket), None);
        assert_eq!(keys.encrypt(b"x").unwrap()[..16], f_bytes[..16]);
        assert_eq!(keys.fleet_encrypting(), None);
        // And the fleet's keys replace files.
        assert_eq!(keys.install_fleet(all), Reload::Replaced);
        assert_eq!(keys.decrypt(&ticket).unwrap(), b"fleet");
        assert_eq!(keys.fleet_encrypting(), Some(n));
    }

    #[test]
    fn a_rotating_node_joining_a_fleet_keeps_its_tickets() {
        let period = Duration::from_secs(3600);
        let (clock, _) = test_clock(period);
        let n = period_number(clock(), period);
        let keys = TicketKeys::rotating_with_clock(period, seed(), clock);
        let before = keys.encrypt(b"before").unwrap();
        assert_eq!(keys.install_fleet(fleet_keys(n..=n)), Reload::Replaced);
        assert_eq!(keys.fleet_encrypting(), Some(n));
        assert_eq!(keys.decrypt(&before).unwrap(), b"before");
    }

    #[test]
    fn debug_shows_no_secret() {
        let dir = tempfile::tempdir().unwrap();
        let (a, a_bytes) = key_file(dir.path(), "a", 80);
        let shown = format!("{:?}", keys_from(&[&a]));
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert!(shown.contains(&hex(&a_bytes[..16])), "{shown}");
        assert!(!shown.contains(&hex(&a_bytes[16..24])), "{shown}");
        assert!(!shown.contains(&hex(&a_bytes[48..56])), "{shown}");
        assert!(
            format!("{:?}", TicketKeys::rotating(DEFAULT_ROTATION, seed())).contains("Rotating")
        );
        let key = FleetKey::random(9).unwrap();
        let fleet = TicketKeys::fleet(DEFAULT_ROTATION, seed());
        fleet.install_fleet(vec![
            key.clone(),
            FleetKey::random(period_number(SystemTime::now(), DEFAULT_ROTATION)).unwrap(),
        ]);
        for shown in [format!("{key:?}"), format!("{fleet:?}")] {
            assert!(shown.contains("Fleet"), "{shown}");
            assert!(!shown.contains(&hex(&key.bytes()[16..24])), "{shown}");
            assert!(!shown.contains(&hex(&key.bytes()[48..56])), "{shown}");
        }
        assert!(format!("{key:?}").contains(&hex(&key.bytes()[..16])));
    }

    /// Resumption across two rustls servers, driven in memory.
    mod rustls_e2e {
        use super::*;
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        use rustls::{
            ClientConfig, ClientConnection, Connection, HandshakeKind, ServerConfig,
            ServerConnection, SupportedProtocolVersion,
        };

        struct Identity {
            chain: Vec<CertificateDer<'static>>,
            key: PrivateKeyDer<'static>,
        }

        fn identity() -> Identity {
            let (cert, key) = crate::config::cert::self_signed().unwrap();
            Identity {
                chain: vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                key: PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            }
        }

        fn server(id: &Identity, keys: &Arc<TicketKeys>) -> Arc<ServerConfig> {
            let mut cfg = ServerConfig::builder_with_provider(Arc::new(crate::tls::provider()))
                .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(id.chain.clone(), id.key.clone_key())
                .unwrap();
            cfg.ticketer = keys.clone();
            Arc::new(cfg)
        }

        fn client(id: &Identity, version: &'static SupportedProtocolVersion) -> Arc<ClientConfig> {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(id.chain[0].clone()).unwrap();
            Arc::new(
                ClientConfig::builder_with_provider(Arc::new(crate::tls::provider()))
                    .with_protocol_versions(&[version])
                    .unwrap()
                    .with_root_certificates(roots)
                    .with_no_client_auth(),
            )
        }

        /// Move everything `from` has to send into `to`; false if nothing.
        fn transfer(from: &mut Connection, to: &mut Connection) -> bool {
            let mut buf = Vec::new();
            while from.wants_write() {
                from.write_tls(&mut buf).unwrap();
            }
            let mut rest = &buf[..];
            while !rest.is_empty() {
                to.read_tls(&mut rest).unwrap();
                to.process_new_packets().unwrap();
            }
            !buf.is_empty()
        }

        /// A whole handshake, the TLS 1.3 tickets after it included; how
        /// the server saw it.
        fn connect(client: &Arc<ClientConfig>, server: &Arc<ServerConfig>) -> HandshakeKind {
            let name = "localhost".try_into().unwrap();
            let mut c = Connection::Client(ClientConnection::new(client.clone(), name).unwrap());
            let mut s = Connection::Server(ServerConnection::new(server.clone()).unwrap());
            for _ in 0..10 {
                let sent = transfer(&mut c, &mut s);
                let answered = transfer(&mut s, &mut c);
                if !sent && !answered {
                    break;
                }
            }
            assert!(!c.is_handshaking() && !s.is_handshaking());
            s.handshake_kind().unwrap()
        }

        #[test]
        fn a_session_from_one_server_resumes_on_another_with_the_same_key_files() {
            let dir = tempfile::tempdir().unwrap();
            let (new, _) = key_file(dir.path(), "new", 80);
            let (old, _) = key_file(dir.path(), "old", 48);
            let (other, _) = key_file(dir.path(), "other", 80);
            let id = identity();
            let paths = [new.clone(), old.clone()];
            // Two processes, each reading the same files.
            let a = server(
                &id,
                &Arc::new(TicketKeys::from_files(&paths, seed()).unwrap()),
            );
            let b = server(
                &id,
                &Arc::new(TicketKeys::from_files(&paths, seed()).unwrap()),
            );
            let c = server(&id, &Arc::new(keys_from(&[&other])));
            // A server that still encrypts with the old key (not yet
            // rotated) is also resumed from by B, which lists it second.
            let behind = server(&id, &Arc::new(keys_from(&[&old])));

            for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
                let cl = client(&id, version);
                assert_eq!(connect(&cl, &a), HandshakeKind::Full, "{version:?}");
                assert_eq!(connect(&cl, &b), HandshakeKind::Resumed, "{version:?}");

                let cl = client(&id, version);
                assert_eq!(connect(&cl, &behind), HandshakeKind::Full, "{version:?}");
                assert_eq!(connect(&cl, &b), HandshakeKind::Resumed, "{version:?}");

                let cl = client(&id, version);
                assert_eq!(connect(&cl, &a), HandshakeKind::Full, "{version:?}");
                assert_eq!(connect(&cl, &c), HandshakeKind::Full, "{version:?}");
            }
        }

        #[test]
        fn a_session_from_one_fleet_node_resumes_on_another() {
            let id = identity();
            let period = DEFAULT_ROTATION;
            let n = period_number(SystemTime::now(), period);
            let node = || Arc::new(TicketKeys::fleet(period, seed()));
            let (ka, kb, kc) = (node(), node(), node());
            let (a, b, c) = (server(&id, &ka), server(&id, &kb), server(&id, &kc));
            for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
                // No fleet key yet: each node resumes only its own.
                let cl = client(&id, version);
                assert_eq!(connect(&cl, &a), HandshakeKind::Full, "{version:?}");
                assert_eq!(connect(&cl, &b), HandshakeKind::Full, "{version:?}");
                assert_eq!(connect(&cl, &b), HandshakeKind::Resumed, "{version:?}");
            }
            // A and B get the fleet's keys, C another fleet's.
            let keys = fleet_keys(n - 1..=n + 1);
            ka.install_fleet(keys.clone());
            kb.install_fleet(keys);
            kc.install_fleet(fleet_keys(n - 1..=n + 1));
            for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
                let cl = client(&id, version);
                assert_eq!(connect(&cl, &a), HandshakeKind::Full, "{version:?}");
                assert_eq!(connect(&cl, &b), HandshakeKind::Resumed, "{version:?}");
                let cl = client(&id, version);
                assert_eq!(connect(&cl, &b), HandshakeKind::Full, "{version:?}");
                assert_eq!(connect(&cl, &a), HandshakeKind::Resumed, "{version:?}");
                let cl = client(&id, version);
                assert_eq!(connect(&cl, &a), HandshakeKind::Full, "{version:?}");
                assert_eq!(connect(&cl, &c), HandshakeKind::Full, "{version:?}");
            }
        }

        #[test]
        fn rotating_keys_resume_across_configs_sharing_the_ticketer() {
            // What a config reload does: a new ServerConfig, the same
            // ticketer object.
            let id = identity();
            let keys = Arc::new(TicketKeys::rotating(DEFAULT_ROTATION, seed()));
            let before = server(&id, &keys);
            let after = server(&id, &keys);
            let elsewhere = server(
                &id,
                &Arc::new(TicketKeys::rotating(DEFAULT_ROTATION, seed())),
            );
            for version in [&rustls::version::TLS13, &rustls::version::TLS12] {
                let cl = client(&id, version);
                assert_eq!(connect(&cl, &before), HandshakeKind::Full);
                assert_eq!(keys.reload(&[]).unwrap(), Reload::Unchanged);
                assert_eq!(connect(&cl, &after), HandshakeKind::Resumed, "{version:?}");
                let cl = client(&id, version);
                assert_eq!(connect(&cl, &before), HandshakeKind::Full);
                assert_eq!(connect(&cl, &elsewhere), HandshakeKind::Full, "{version:?}");
            }
        }
    }
}
