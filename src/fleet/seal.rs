//! Sealing of the fleet's private values (ACME account keys, certificate
//! private keys, ticket keys) before they go to etcd, so that etcd, its
//! snapshots and its backups never hold them in the clear. This module owns
//! the fleet key files, the sealed format and key rotation; it knows
//! nothing of etcd beyond the key a value is stored under.
//!
//! # Key files
//!
//! A fleet key file is exactly 32 raw bytes (`openssl rand 32 > FILE`, the
//! habit of session ticket key files), the same file on every node. From its
//! bytes come an AES-256-GCM key, by HKDF-SHA256 with the info
//! `"tlsfront fleet seal v1"`, and a key id, the first 8 bytes of
//! HMAC-SHA256(file bytes, `"tlsfront fleet key id"`). The two derivations
//! are separate, so the id, which travels in clear, says nothing about the
//! AEAD key.
//!
//! # Format
//!
//! `"TFS1" || key id (8) || nonce (12) || ciphertext || tag (16)`.
//!
//! The nonce is random for each seal. The fleet seals values only when a
//! key, a certificate or a ticket key changes, many orders of magnitude
//! fewer messages per key than the point at which random 96-bit nonces
//! risk repeating, and a random nonce needs no counter shared between
//! nodes or kept across restarts.
//!
//! The associated data is the full etcd key the value is stored under, so
//! a value copied (by mistake or by someone with write access to etcd) to
//! another key, say one site's certificate key to another site's, does not
//! open there.
//!
//! # Rotation
//!
//! `key_files = [new, old]`: the first file seals, every file opens, and a
//! sealed value names its key by id. A value under an id no file has is an
//! error naming that id; [`sealed_key_id`] tells which key a value is under
//! without opening it, for rewrapping what is not yet under the first key.

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use aws_lc_rs::{hkdf, hmac, rand};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use zeroize::Zeroizing;

/// Bytes of a fleet key file.
pub const KEY_LEN: usize = 32;

/// Bytes of a key id.
pub const KEY_ID_LEN: usize = 8;

const MAGIC: &[u8; 4] = b"TFS1";
const NONCE_LEN: usize = aead::NONCE_LEN;
const TAG_LEN: usize = 16;
const HEADER_LEN: usize = MAGIC.len() + KEY_ID_LEN + NONCE_LEN;

/// Bytes a sealed value adds to its plaintext (so also the length of a
/// sealed empty value, the shortest there is).
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;

const SEAL_INFO: &[u8] = b"tlsfront fleet seal v1";
const KEY_ID_MSG: &[u8] = b"tlsfront fleet key id";

/// Which key sealed a value: derived from the key file, public (it is in
/// clear at the start of every sealed value). Shown as 16 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId([u8; KEY_ID_LEN]);

impl KeyId {
    pub fn as_bytes(&self) -> &[u8; KEY_ID_LEN] {
        &self.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// A fleet key file that cannot be used, or a list of them.
#[derive(Debug, thiserror::Error)]
pub enum FleetKeyError {
    #[error("[fleet] key_files is empty: give at least one fleet key file, 32 random bytes made once with `openssl rand 32 > FILE` and copied to every node")]
    NoFiles,
    #[error("cannot read fleet key file {path}: {source} (check the path and that tlsfront can read it; a fleet key file is 32 random bytes, made once with `openssl rand 32 > FILE` and copied to every node)", path = path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("fleet key file {path} is not a regular file (give the path of a file of 32 random bytes, made once with `openssl rand 32 > FILE` and copied to every node)", path = path.display())]
    NotAFile { path: PathBuf },
    #[error("fleet key file {path} has {size} bytes, expected exactly 32 raw bytes (not hex or base64, no newline): if it held the key the fleet already seals with, put those 32 bytes back; for a new key run `openssl rand 32 > {path}` once and copy that file to every node", path = path.display())]
    Size { path: PathBuf, size: u64 },
    #[error("fleet key files {first} and {second} hold the same key (key id {id}): list each key once in [fleet] key_files (remove one of them)", first = first.display(), second = second.display())]
    Duplicate {
        first: PathBuf,
        second: PathBuf,
        id: KeyId,
    },
    #[error("fleet key file {path}: the cipher refused the key derived from it (make a new key with `openssl rand 32 > FILE` and copy it to every node)", path = path.display())]
    Crypto { path: PathBuf },
}

/// Why a value could not be sealed. Nothing is written in either case.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SealError {
    #[error("the random number generator failed while making a nonce for a fleet value; nothing was sealed")]
    Random,
    #[error(
        "a fleet value of {len} bytes is too large to seal (no memory for it); nothing was sealed"
    )]
    TooLarge { len: usize },
    #[error("AES-256-GCM refused to seal a fleet value of {len} bytes under key id {id}; nothing was sealed")]
    Cipher { id: KeyId, len: usize },
}

/// Why a sealed value did not open.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OpenError {
    #[error("not a sealed fleet value (a sealed value starts with \"TFS1\" and has at least {OVERHEAD} bytes): it was written by something other than tlsfront's fleet sealing, or cut short")]
    NotSealed,
    #[error("sealed with key id {id}, which no [fleet] key_files entry has: add that key file to key_files")]
    UnknownKey { id: KeyId },
    #[error("a value sealed with key id {id} failed authentication: its bytes were changed after sealing, or it was sealed for another etcd key and copied here; it cannot be used")]
    Authentication { id: KeyId },
}

/// The key id a sealed value names, read from its header without opening
/// it (for finding the values not yet under [`FleetKeys::sealing_key_id`]).
pub fn sealed_key_id(sealed: &[u8]) -> Result<KeyId, OpenError> {
    if sealed.len() < OVERHEAD || !sealed.starts_with(MAGIC) {
        return Err(OpenError::NotSealed);
    }
    sealed
        .get(MAGIC.len()..MAGIC.len() + KEY_ID_LEN)
        .and_then(|id| id.try_into().ok())
        .map(KeyId)
        .ok_or(OpenError::NotSealed)
}

/// One fleet key. Only the AEAD key object is kept, never the file's
/// bytes: those live in zeroizing buffers until the key is derived, and
/// aws-lc erases its copy of the AES key when the object is dropped.
struct FleetKey {
    id: KeyId,
    path: PathBuf,
    aead: LessSafeKey,
}

impl FleetKey {
    /// `None` only if aws-lc refuses a 32-byte AES key, which it does not.
    fn derive(material: &[u8; KEY_LEN], path: PathBuf) -> Option<FleetKey> {
        let tag = hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, material), KEY_ID_MSG);
        let id = KeyId(tag.as_ref().get(..KEY_ID_LEN)?.try_into().ok()?);
        // No salt (RFC 5869: the same as a hash-length string of zeros).
        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, &[]).extract(material);
        let okm = prk.expand(&[SEAL_INFO], &AES_256_GCM).ok()?;
        let mut key = Zeroizing::new([0u8; KEY_LEN]);
        okm.fill(&mut key[..]).ok()?;
        let aead = LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key[..]).ok()?);
        Some(FleetKey { id, path, aead })
    }
}

impl fmt::Debug for FleetKey {
    /// The id and the file only: never key material.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FleetKey")
            .field("id", &self.id)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// The fleet keys of `[fleet] key_files`: the first seals, all open.
#[derive(Debug)]
pub struct FleetKeys {
    /// The first file's key.
    sealing: FleetKey,
    /// The other files' keys, in the order given.
    older: Vec<FleetKey>,
}

impl FleetKeys {
    /// Read and check every file: 32 bytes each, no key twice.
    pub fn read(paths: &[PathBuf]) -> Result<FleetKeys, FleetKeyError> {
        let files = paths
            .iter()
            .map(|path| Ok((path.clone(), read_key_file(path)?)))
            .collect::<Result<Vec<_>, FleetKeyError>>()?;
        FleetKeys::from_files(files)
    }

    /// Keys from files already read (by the privileged parent, which hands
    /// the bytes to the server process), each with the path it came from,
    /// in `key_files` order: the same checks as [`FleetKeys::read`].
    pub fn from_files(
        files: Vec<(PathBuf, Zeroizing<Vec<u8>>)>,
    ) -> Result<FleetKeys, FleetKeyError> {
        let mut keys: Vec<FleetKey> = Vec::with_capacity(files.len());
        for (path, bytes) in files {
            let Ok(material) = <&[u8; KEY_LEN]>::try_from(&bytes[..]) else {
                return Err(FleetKeyError::Size {
                    path,
                    size: bytes.len() as u64,
                });
            };
            let Some(key) = FleetKey::derive(material, path.clone()) else {
                return Err(FleetKeyError::Crypto { path });
            };
            // Refused rather than ignored: the same key twice is a copy
            // made by mistake, most likely a rotation that meant to add a
            // new key and did not.
            if let Some(first) = keys.iter().find(|k| k.id == key.id) {
                return Err(FleetKeyError::Duplicate {
                    first: first.path.clone(),
                    second: path,
                    id: key.id,
                });
            }
            keys.push(key);
        }
        let mut keys = keys.into_iter();
        let sealing = keys.next().ok_or(FleetKeyError::NoFiles)?;
        Ok(FleetKeys {
            sealing,
            older: keys.collect(),
        })
    }

    /// Every key, the sealing one first.
    fn all(&self) -> impl Iterator<Item = &FleetKey> {
        std::iter::once(&self.sealing).chain(&self.older)
    }

    /// The id of the key that seals (the first file's).
    pub fn sealing_key_id(&self) -> KeyId {
        self.sealing.id
    }

    /// Every key's id and file, in `key_files` order (the sealing key
    /// first).
    pub fn key_ids(&self) -> impl Iterator<Item = (KeyId, &Path)> {
        self.all().map(|k| (k.id, k.path.as_path()))
    }

    /// Seal `plain` under the first key, bound to `aad` (the full etcd
    /// key the value goes to).
    pub fn seal(&self, aad: &[u8], plain: &[u8]) -> Result<Vec<u8>, SealError> {
        let key = &self.sealing;
        let mut nonce = [0u8; NONCE_LEN];
        rand::fill(&mut nonce).map_err(|_| SealError::Random)?;
        // One buffer, sized for the result from the start: the plaintext
        // is encrypted in place and never reallocated, and the buffer is
        // erased if sealing fails, so no copy of it is left in memory.
        let mut out = Zeroizing::new(Vec::new());
        plain
            .len()
            .checked_add(OVERHEAD)
            .and_then(|n| out.try_reserve_exact(n).ok())
            .ok_or(SealError::TooLarge { len: plain.len() })?;
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(key.id.as_bytes());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let body = out.get_mut(HEADER_LEN..).unwrap_or_default();
        let tag = key
            .aead
            .seal_in_place_separate_tag(Nonce::assume_unique_for_key(nonce), Aad::from(aad), body)
            .map_err(|_| SealError::Cipher {
                id: key.id,
                len: plain.len(),
            })?;
        out.extend_from_slice(tag.as_ref());
        Ok(std::mem::take(&mut *out))
    }

    /// Open a value sealed under any of the keys, bound to `aad`.
    pub fn open(&self, aad: &[u8], sealed: &[u8]) -> Result<Zeroizing<Vec<u8>>, OpenError> {
        let id = sealed_key_id(sealed)?;
        // Key ids are public: a plain comparison is fine; the tag check
        // is the constant-time one.
        let key = self
            .all()
            .find(|k| k.id == id)
            .ok_or(OpenError::UnknownKey { id })?;
        let nonce = sealed
            .get(MAGIC.len() + KEY_ID_LEN..HEADER_LEN)
            .and_then(|n| Nonce::try_assume_unique_for_key(n).ok())
            .ok_or(OpenError::NotSealed)?;
        let mut buf = Zeroizing::new(sealed.get(HEADER_LEN..).unwrap_or_default().to_vec());
        let len = key
            .aead
            .open_in_place(nonce, Aad::from(aad), &mut buf[..])
            .map_err(|_| OpenError::Authentication { id })?
            .len();
        // The tag after the plaintext is dropped; the zeroizing buffer
        // erases its whole capacity when it goes.
        buf.truncate(len);
        Ok(buf)
    }
}

/// A key file's bytes, in a buffer zeroized when dropped; checked as
/// session ticket key files are (`tls::tickets`).
fn read_key_file(path: &Path) -> Result<Zeroizing<Vec<u8>>, FleetKeyError> {
    let read_err = |source| FleetKeyError::Read {
        path: path.to_path_buf(),
        source,
    };
    let size_err = |size| FleetKeyError::Size {
        path: path.to_path_buf(),
        size,
    };
    // The size comes from the metadata, not from reading: a device or a
    // huge file given by mistake is refused without being read. A path
    // this process cannot look at (the server process, whose parent reads
    // for it) is left to the read to judge.
    let meta = std::fs::metadata(path).ok();
    if let Some(meta) = &meta {
        if !meta.is_file() {
            return Err(FleetKeyError::NotAFile {
                path: path.to_path_buf(),
            });
        }
        if meta.len() != KEY_LEN as u64 {
            return Err(size_err(meta.len()));
        }
    }
    let buf = Zeroizing::new(crate::safe_open::read(path).map_err(read_err)?);
    let size = buf.len() as u64;
    // A file cut short or grown since the stat is being rewritten in place:
    // an error, never a partial key.
    if meta.as_ref().is_some_and(|m| m.len() != size) {
        return Err(read_err(io::Error::other(
            "the file changed size while being read",
        )));
    }
    if size != KEY_LEN as u64 {
        return Err(size_err(size));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_key() -> Zeroizing<Vec<u8>> {
        let mut b = Zeroizing::new(vec![0u8; KEY_LEN]);
        rand::fill(&mut b[..]).unwrap();
        b
    }

    fn keys(files: &[(&str, &Zeroizing<Vec<u8>>)]) -> FleetKeys {
        FleetKeys::from_files(
            files
                .iter()
                .map(|(p, b)| (PathBuf::from(p), (*b).clone()))
                .collect(),
        )
        .unwrap()
    }

    const AAD: &[u8] = b"/tlsfront/certs/example.com/key";

    #[test]
    fn round_trip() {
        let a = random_key();
        let k = keys(&[("/a", &a)]);
        for n in [0, 1, 15, 16, 17, 1000, 70_000] {
            let plain: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let sealed = k.seal(AAD, &plain).unwrap();
            assert_eq!(sealed.len(), plain.len() + OVERHEAD);
            assert_eq!(&sealed[..4], b"TFS1");
            assert_eq!(sealed_key_id(&sealed), Ok(k.sealing_key_id()));
            // No 16 bytes of the plaintext in the clear (shorter runs
            // turn up in random bytes by chance).
            if n >= 16 {
                assert!(
                    !sealed.windows(16).any(|w| w == &plain[..16]),
                    "plaintext in the clear"
                );
            }
            assert_eq!(&k.open(AAD, &sealed).unwrap()[..], &plain[..], "{n} bytes");
        }
    }

    /// The format and both derivations, checked against aws-lc-rs used
    /// directly: what makes a value sealed here open anywhere else that
    /// follows the design (a test helper, another version).
    #[test]
    fn layout_and_derivations() {
        let a = random_key();
        let k = keys(&[("/a", &a)]);
        let sealed = k.seal(AAD, b"account key").unwrap();

        let id = hmac::sign(
            &hmac::Key::new(hmac::HMAC_SHA256, &a),
            b"tlsfront fleet key id",
        );
        assert_eq!(&sealed[4..12], &id.as_ref()[..8]);
        assert_eq!(k.sealing_key_id().to_string(), hex(&id.as_ref()[..8]));

        let prk = hkdf::Salt::new(hkdf::HKDF_SHA256, &[]).extract(&a);
        let okm = prk
            .expand(&[b"tlsfront fleet seal v1"], &AES_256_GCM)
            .unwrap();
        let aead = LessSafeKey::new(UnboundKey::from(okm));
        let nonce = Nonce::try_assume_unique_for_key(&sealed[12..24]).unwrap();
        let mut body = sealed[24..].to_vec();
        let plain = aead
            .open_in_place(nonce, Aad::from(AAD), &mut body)
            .unwrap();
        assert_eq!(plain, b"account key");
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn key_id_is_16_hex_digits() {
        let id = KeyId([0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
        assert_eq!(id.to_string(), "0123456789abcdef");
        assert_eq!(format!("{id:?}"), "KeyId(0123456789abcdef)");
    }

    #[test]
    fn any_flipped_byte_is_refused() {
        let a = random_key();
        let k = keys(&[("/a", &a)]);
        let sealed = k.seal(AAD, b"a certificate's private key").unwrap();
        let id = k.sealing_key_id();
        for i in 0..sealed.len() {
            for bit in [0x01, 0x80] {
                let mut s = sealed.clone();
                s[i] ^= bit;
                let want = match i {
                    0..4 => OpenError::NotSealed,
                    4..12 => OpenError::UnknownKey {
                        id: KeyId(s[4..12].try_into().unwrap()),
                    },
                    _ => OpenError::Authentication { id },
                };
                assert_eq!(k.open(AAD, &s), Err(want), "byte {i} bit {bit:#x}");
            }
        }
        // Cut short, or a byte added.
        assert_eq!(
            k.open(AAD, &sealed[..sealed.len() - 1]),
            Err(OpenError::Authentication { id })
        );
        let mut longer = sealed.clone();
        longer.push(0);
        assert_eq!(k.open(AAD, &longer), Err(OpenError::Authentication { id }));
        assert!(k.open(AAD, &sealed).is_ok());
    }

    #[test]
    fn not_sealed_values() {
        let a = random_key();
        let k = keys(&[("/a", &a)]);
        let sealed = k.seal(AAD, b"").unwrap();
        assert_eq!(sealed.len(), OVERHEAD);
        assert_eq!(&k.open(AAD, &sealed).unwrap()[..], b"");
        for bad in [
            &b""[..],
            b"TFS1",
            &sealed[..OVERHEAD - 1],
            b"-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg\n",
        ] {
            assert_eq!(k.open(AAD, bad), Err(OpenError::NotSealed), "{bad:?}");
            assert_eq!(sealed_key_id(bad), Err(OpenError::NotSealed));
        }
        assert!(OpenError::NotSealed.to_string().contains("TFS1"));
    }

    #[test]
    fn wrong_associated_data_is_refused() {
        let a = random_key();
        let k = keys(&[("/a", &a)]);
        let sealed = k.seal(AAD, b"secret").unwrap();
        let id = k.sealing_key_id();
        for other in [
            &b""[..],
            b"/tlsfront/certs/example.org/key",
            b"/tlsfront/certs/example.com/key ",
            &AAD[..AAD.len() - 1],
        ] {
            assert_eq!(
                k.open(other, &sealed),
                Err(OpenError::Authentication { id })
            );
        }
        let e = k.open(b"", &sealed).unwrap_err().to_string();
        assert!(e.contains(&id.to_string()), "{e}");
    }

    #[test]
    fn rotation_first_seals_all_open() {
        let (a, b) = (random_key(), random_key());
        let only_b = keys(&[("/b", &b)]);
        let from_b = only_b.seal(AAD, b"under b").unwrap();

        let both = keys(&[("/a", &a), ("/b", &b)]);
        assert_eq!(&both.open(AAD, &from_b).unwrap()[..], b"under b");
        let from_both = both.seal(AAD, b"under a").unwrap();
        assert_eq!(sealed_key_id(&from_both), Ok(both.sealing_key_id()));
        assert_ne!(both.sealing_key_id(), only_b.sealing_key_id());
        // The rewrap sweep's question: is it under the first key?
        assert_ne!(sealed_key_id(&from_b), Ok(both.sealing_key_id()));
        let ids: Vec<KeyId> = both.key_ids().map(|(id, _)| id).collect();
        assert_eq!(ids, [both.sealing_key_id(), only_b.sealing_key_id()]);

        let only_a = keys(&[("/a", &a)]);
        let b_id = only_b.sealing_key_id();
        assert_eq!(
            only_a.open(AAD, &from_b),
            Err(OpenError::UnknownKey { id: b_id })
        );
        let e = only_a.open(AAD, &from_b).unwrap_err().to_string();
        assert!(e.contains(&b_id.to_string()), "{e}");
        assert!(e.contains("key_files"), "{e}");
        assert_eq!(&only_a.open(AAD, &from_both).unwrap()[..], b"under a");
    }

    #[test]
    fn sealing_twice_differs() {
        let a = random_key();
        let k = keys(&[("/a", &a)]);
        let (x, y) = (k.seal(AAD, b"same").unwrap(), k.seal(AAD, b"same").unwrap());
        assert_ne!(x, y);
        assert_ne!(x[12..24], y[12..24], "a fresh nonce each time");
        assert_eq!(k.open(AAD, &x).unwrap(), k.open(AAD, &y).unwrap());
    }

    #[test]
    fn same_key_twice_is_refused_naming_both() {
        let a = random_key();
        let e = FleetKeys::from_files(vec![
            (PathBuf::from("/etc/tlsfront/fleet-new.key"), a.clone()),
            (PathBuf::from("/etc/tlsfront/fleet-old.key"), a.clone()),
        ])
        .unwrap_err();
        assert!(matches!(e, FleetKeyError::Duplicate { .. }), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("/etc/tlsfront/fleet-new.key"), "{e}");
        assert!(e.contains("/etc/tlsfront/fleet-old.key"), "{e}");
        assert!(e.contains("key_files"), "{e}");
    }

    #[test]
    fn bad_files_are_named_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.key");
        std::fs::write(&good, random_key()).unwrap();
        assert!(FleetKeys::read(std::slice::from_ref(&good)).is_ok());

        // `openssl rand -hex 32` and `-base64 32` instead of raw bytes, an
        // empty file, a longer one.
        for (name, len) in [("hex", 65), ("base64", 45), ("empty", 0), ("long", 80)] {
            let path = dir.path().join(name);
            std::fs::write(&path, vec![b'a'; len]).unwrap();
            let e = FleetKeys::read(&[good.clone(), path.clone()]).unwrap_err();
            assert!(
                matches!(e, FleetKeyError::Size { size, .. } if size == len as u64),
                "{e:?}"
            );
            let e = e.to_string();
            assert!(e.contains(&path.display().to_string()), "{e}");
            assert!(e.contains("openssl rand 32 >"), "{e}");
            assert!(e.contains(&format!("has {len} bytes")), "{e}");
        }

        let missing = dir.path().join("missing");
        let e = FleetKeys::read(std::slice::from_ref(&missing)).unwrap_err();
        assert!(matches!(e, FleetKeyError::Read { .. }), "{e:?}");
        let e = e.to_string();
        assert!(e.contains(&missing.display().to_string()), "{e}");
        assert!(e.contains("openssl rand 32 >"), "{e}");

        let e = FleetKeys::read(&[dir.path().to_path_buf()]).unwrap_err();
        assert!(matches!(e, FleetKeyError::NotAFile { .. }), "{e:?}");

        let e = FleetKeys::read(&[]).unwrap_err();
        assert!(matches!(e, FleetKeyError::NoFiles), "{e:?}");
        assert!(e.to_string().contains("key_files"), "{e}");

        // The same checks on bytes the parent read.
        let e = FleetKeys::from_files(vec![(good, Zeroizing::new(vec![1; 31]))]).unwrap_err();
        assert!(e.to_string().contains("has 31 bytes"), "{e}");
    }

    #[test]
    fn read_and_from_files_agree() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fleet.key");
        let a = random_key();
        std::fs::write(&path, &a).unwrap();
        let read = FleetKeys::read(std::slice::from_ref(&path)).unwrap();
        let given = FleetKeys::from_files(vec![(path.clone(), a)]).unwrap();
        assert_eq!(read.sealing_key_id(), given.sealing_key_id());
        let sealed = read.seal(AAD, b"x").unwrap();
        assert_eq!(&given.open(AAD, &sealed).unwrap()[..], b"x");
        assert_eq!(
            read.key_ids().collect::<Vec<_>>(),
            [(read.sealing_key_id(), path.as_path())]
        );
    }

    #[test]
    fn debug_shows_no_key_material() {
        let a = Zeroizing::new(vec![0x5a; KEY_LEN]);
        let k = keys(&[("/etc/tlsfront/fleet.key", &a)]);
        let d = format!("{k:?}");
        assert!(d.contains("/etc/tlsfront/fleet.key"), "{d}");
        assert!(d.contains(&k.sealing_key_id().to_string()), "{d}");
        assert!(!d.contains("5a5a"), "{d}");
        assert!(!d.contains("90, 90"), "{d}");
    }

    #[test]
    fn garbage_never_panics() {
        let a = random_key();
        let k = keys(&[("/a", &a)]);
        let id = k.sealing_key_id();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for len in 0..200 {
            let mut v: Vec<u8> = (0..len)
                .map(|_| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state as u8
                })
                .collect();
            assert!(k.open(AAD, &v).is_err());
            // With a valid header, so the tag check runs.
            if len >= OVERHEAD {
                v[..4].copy_from_slice(b"TFS1");
                v[4..12].copy_from_slice(id.as_bytes());
                assert_eq!(k.open(AAD, &v), Err(OpenError::Authentication { id }));
            }
        }
    }
}
