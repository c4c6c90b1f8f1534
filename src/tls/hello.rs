//! What tlsfront needs from a ClientHello before rustls sees it: the server
//! name (SNI; rustls 0.23's unbuffered server connection has no accessor for
//! it, and the PROXY v2 authority TLV needs it) and whether the client offers
//! a ticket to resume with (which picks the configuration, see
//! [`super::ServerConfigs`]). Read from the first handshake record,
//! bounds-checked at every step; anything unexpected (a ClientHello split
//! across records, a malformed message, which rustls rejects itself) gives
//! the defaults: no name, no offer.

const HANDSHAKE: u8 = 22;
const CLIENT_HELLO: u8 = 1;
const EXT_SERVER_NAME: u16 = 0;
const EXT_PRE_SHARED_KEY: u16 = 41;
const HOST_NAME: u8 = 0;

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()? as usize;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()? as usize;
        self.take(n)
    }
}

/// The parts of a ClientHello tlsfront looks at.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Hello {
    /// The host name asked for, lower-cased.
    pub sni: Option<String>,
    /// A `pre_shared_key` extension: the client tries to resume.
    pub offers_psk: bool,
}

/// Read a ClientHello from the first handshake record.
pub fn from_record(record: &[u8]) -> Hello {
    let mut hello = Hello::default();
    let _ = parse(record, &mut hello);
    hello
}

fn parse(record: &[u8], hello: &mut Hello) -> Option<()> {
    let mut r = Reader(record);
    if r.u8()? != HANDSHAKE {
        return None;
    }
    r.take(2)?; // legacy record version
    let mut body = Reader(r.vec16()?);
    if body.u8()? != CLIENT_HELLO {
        return None;
    }
    body.take(3)?; // handshake length (the record may hold only part)
    body.take(2 + 32)?; // legacy version, random
    body.vec8()?; // session id
    body.vec16()?; // cipher suites
    body.vec8()?; // compression methods
    let mut exts = Reader(body.vec16()?);
    while !exts.0.is_empty() {
        let typ = exts.u16()?;
        let data = exts.vec16()?;
        match typ {
            EXT_SERVER_NAME => hello.sni = host_name(data),
            EXT_PRE_SHARED_KEY => hello.offers_psk = true,
            _ => {}
        }
    }
    Some(())
}

fn host_name(ext: &[u8]) -> Option<String> {
    let mut list = Reader(Reader(ext).vec16()?);
    while !list.0.is_empty() {
        let kind = list.u8()?;
        let name = list.vec16()?;
        if kind == HOST_NAME {
            let name = std::str::from_utf8(name).ok()?;
            if !name.is_empty() && name.len() <= 253 && name.bytes().all(|b| b.is_ascii_graphic()) {
                return Some(name.to_ascii_lowercase());
            }
            return None;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client_hello(sni: Option<&str>) -> Vec<u8> {
        client_hello_with(sni, false)
    }

    fn client_hello_with(sni: Option<&str>, psk: bool) -> Vec<u8> {
        let mut exts = Vec::new();
        // An unrelated extension first.
        exts.extend_from_slice(&[0x00, 0x0b, 0x00, 0x02, 0x01, 0x00]);
        if let Some(name) = sni {
            let mut entry = vec![HOST_NAME];
            entry.extend_from_slice(&(name.len() as u16).to_be_bytes());
            entry.extend_from_slice(name.as_bytes());
            let mut list = (entry.len() as u16).to_be_bytes().to_vec();
            list.extend_from_slice(&entry);
            exts.extend_from_slice(&EXT_SERVER_NAME.to_be_bytes());
            exts.extend_from_slice(&(list.len() as u16).to_be_bytes());
            exts.extend_from_slice(&list);
        }
        if psk {
            // One identity (4 bytes, age 0), one 32-byte binder.
            let mut ext = vec![0, 10, 0, 4, 1, 2, 3, 4, 0, 0, 0, 0];
            ext.extend_from_slice(&[0, 33, 32]);
            ext.extend_from_slice(&[9; 32]);
            exts.extend_from_slice(&EXT_PRE_SHARED_KEY.to_be_bytes());
            exts.extend_from_slice(&(ext.len() as u16).to_be_bytes());
            exts.extend_from_slice(&ext);
        }
        let mut body = vec![0x03, 0x03];
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[0]); // session id
        body.extend_from_slice(&[0, 2, 0x13, 0x01]); // one suite
        body.extend_from_slice(&[1, 0]); // null compression
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut hs = vec![CLIENT_HELLO];
        hs.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend_from_slice(&body);
        let mut rec = vec![HANDSHAKE, 3, 1];
        rec.extend_from_slice(&(hs.len() as u16).to_be_bytes());
        rec.extend_from_slice(&hs);
        rec
    }

    #[test]
    fn finds_the_host_name() {
        assert_eq!(
            from_record(&client_hello(Some("Example.COM")))
                .sni
                .as_deref(),
            Some("example.com")
        );
        assert_eq!(from_record(&client_hello(None)), Hello::default());
    }

    #[test]
    fn sees_a_resumption_offer() {
        let h = from_record(&client_hello_with(Some("a.test"), true));
        assert_eq!(h.sni.as_deref(), Some("a.test"));
        assert!(h.offers_psk);
        assert!(!from_record(&client_hello_with(Some("a.test"), false)).offers_psk);
        // A truncated record gives the defaults.
        let full = client_hello_with(None, true);
        assert!(!from_record(&full[..full.len() - 10]).offers_psk);
    }

    #[test]
    fn never_reads_out_of_bounds() {
        let full = client_hello(Some("example.com"));
        for cut in 0..full.len() {
            let _ = from_record(&full[..cut]);
        }
        let mut bad = full.clone();
        for i in 5..bad.len() {
            bad[i] = 0xff;
            let _ = from_record(&bad);
        }
    }
}
