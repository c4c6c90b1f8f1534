//! Content codings for precompressed files: which codings a site offers
//! (`precompressed = ["br", "zstd", "gzip"]`), the sibling file each one
//! names (`app.js.br`), and the choice among them for one request's
//! `Accept-Encoding` (RFC 9110 12.5.3, with q-values).

use std::fmt;

/// A coding a precompressed sibling may carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    Br,
    Zstd,
    Gzip,
}

impl Encoding {
    pub const ALL: [Encoding; 3] = [Encoding::Br, Encoding::Zstd, Encoding::Gzip];

    /// The coding as `precompressed` and `Content-Encoding` spell it.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Br => "br",
            Encoding::Zstd => "zstd",
            Encoding::Gzip => "gzip",
        }
    }

    /// What the sibling's file name adds to the original's (the suffixes
    /// `brotli -k`, `zstd -k` and `gzip -k` write).
    pub fn suffix(self) -> &'static str {
        match self {
            Encoding::Br => ".br",
            Encoding::Zstd => ".zst",
            Encoding::Gzip => ".gz",
        }
    }

    /// A coding by its `precompressed` name.
    pub fn from_name(name: &str) -> Option<Encoding> {
        Encoding::ALL.into_iter().find(|e| e.name() == name)
    }

    /// Whether an `Accept-Encoding` token names this coding (`x-gzip` is
    /// gzip, RFC 9110 8.4.1.3).
    fn is_token(self, token: &str) -> bool {
        token.eq_ignore_ascii_case(self.name())
            || (self == Encoding::Gzip && token.eq_ignore_ascii_case("x-gzip"))
    }
}

impl fmt::Display for Encoding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The coding a client prefers among `offered` (the site's order of
/// preference) for a request's `Accept-Encoding`; `None`: the identity.
/// The first of [`ranked`].
pub fn negotiate(accept: Option<&str>, offered: &[Encoding]) -> Option<Encoding> {
    ranked(accept, offered).next()
}

/// The codings of `offered` a request's `Accept-Encoding` accepts, best
/// first: the sibling of the first one that exists is sent, else the file
/// as it is.
///
/// Each offered coding gets the q-value of its own token, else that of
/// `*`, else 0 (a header that does not name it does not accept it); q=0
/// refuses. Higher q comes first and the site's order breaks ties, so
/// `br;q=1, gzip;q=0.5` ranks br first and `gzip, br` ranks whichever the
/// site lists first. Without the header nothing is accepted (RFC 9110
/// allows any coding, but a client that says nothing may not decode one).
/// A coding is ranked even when `identity` has a higher q: the sibling
/// exists because it is the smaller representation, and a client that
/// lists a coding decodes it.
pub fn ranked(accept: Option<&str>, offered: &[Encoding]) -> impl Iterator<Item = Encoding> {
    let mut list: [(Encoding, u16); 3] = [(Encoding::Br, 0); 3];
    let mut n = 0;
    if let Some(accept) = accept {
        for &enc in offered.iter().take(list.len()) {
            let q = quality(accept, enc);
            if q > 0 {
                list[n] = (enc, q);
                n += 1;
            }
        }
    }
    // Stable: equal q keeps the site's order.
    list[..n].sort_by_key(|&(_, q)| std::cmp::Reverse(q));
    list.into_iter().take(n).map(|(e, _)| e)
}

/// The q-value (thousandths) `accept` gives `enc`.
fn quality(accept: &str, enc: Encoding) -> u16 {
    let mut own = None;
    let mut star = None;
    for item in accept.split(',') {
        let mut parts = item.split(';');
        let token = parts.next().unwrap_or("").trim();
        if token.is_empty() {
            continue;
        }
        let q = parts
            .find_map(|p| {
                let (k, v) = p.split_once('=')?;
                k.trim().eq_ignore_ascii_case("q").then(|| qvalue(v.trim()))
            })
            .unwrap_or(Some(1000));
        // A malformed q-value makes the item mean nothing.
        let Some(q) = q else { continue };
        if enc.is_token(token) {
            // Repeated: the highest counts.
            own = Some(own.map_or(q, |o: u16| o.max(q)));
        } else if token == "*" {
            star = Some(star.map_or(q, |s: u16| s.max(q)));
        }
    }
    own.or(star).unwrap_or(0)
}

/// A q-value (RFC 9110 12.4.2: `0` to `1` with at most three decimals) in
/// thousandths.
fn qvalue(v: &str) -> Option<u16> {
    let (int, frac) = v.split_once('.').unwrap_or((v, ""));
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut thousandths: u16 = 0;
    for i in 0..3 {
        let d = frac.as_bytes().get(i).map_or(0, |b| b - b'0');
        thousandths = thousandths * 10 + u16::from(d);
    }
    match int {
        "0" => Some(thousandths),
        "1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Encoding::*;

    const ALL: &[Encoding] = &[Br, Zstd, Gzip];

    fn n(accept: &str, offered: &[Encoding]) -> Option<Encoding> {
        negotiate(Some(accept), offered)
    }

    #[test]
    fn q_values_choose_and_the_site_breaks_ties() {
        assert_eq!(negotiate(None, ALL), None);
        assert_eq!(n("", ALL), None);
        assert_eq!(n("gzip", ALL), Some(Gzip));
        assert_eq!(n("gzip, br", ALL), Some(Br));
        assert_eq!(n("gzip, br", &[Gzip, Br]), Some(Gzip));
        assert_eq!(n("br;q=1, gzip;q=0.5", &[Gzip, Br]), Some(Br));
        assert_eq!(n("br;q=0.4, gzip;q=0.5", ALL), Some(Gzip));
        assert_eq!(n("deflate, gzip;q=1.0, *;q=0.5", ALL), Some(Gzip));
        assert_eq!(n("GZIP ; Q=0.9", ALL), Some(Gzip));
        assert_eq!(n("x-gzip", ALL), Some(Gzip));
        assert_eq!(n("identity", ALL), None);
        assert_eq!(n("zstd", &[Br, Gzip]), None);
        // curl --compressed
        assert_eq!(n("deflate, gzip, br, zstd", ALL), Some(Br));
    }

    #[test]
    fn zero_refuses_and_star_covers_the_rest() {
        assert_eq!(n("gzip;q=0", ALL), None);
        assert_eq!(n("gzip;q=0.000", ALL), None);
        assert_eq!(n("*", ALL), Some(Br));
        assert_eq!(n("*;q=0", ALL), None);
        assert_eq!(n("*, br;q=0", ALL), Some(Zstd));
        assert_eq!(n("br;q=0, zstd;q=0, *", ALL), Some(Gzip));
        assert_eq!(n("*;q=0, gzip", ALL), Some(Gzip));
        assert_eq!(n("gzip;q=0, gzip;q=0.5", ALL), Some(Gzip));
    }

    #[test]
    fn malformed_q_values_mean_nothing() {
        for bad in [
            "gzip;q=2",
            "gzip;q=1.5",
            "gzip;q=0.1234",
            "gzip;q=x",
            "gzip;q=",
        ] {
            assert_eq!(n(bad, ALL), None, "{bad}");
        }
        assert_eq!(n("gzip;q=1.000", ALL), Some(Gzip));
        assert_eq!(n("gzip;level=9", ALL), Some(Gzip));
        assert_eq!(n(" , ;, gzip", ALL), Some(Gzip));
        assert_eq!(qvalue("0.5"), Some(500));
        assert_eq!(qvalue("0.05"), Some(50));
        assert_eq!(qvalue("1"), Some(1000));
        assert_eq!(qvalue("0"), Some(0));
    }

    #[test]
    fn every_accepted_coding_is_ranked() {
        let r = |a: &str| ranked(Some(a), ALL).collect::<Vec<_>>();
        assert_eq!(r("gzip;q=0.5, br;q=0.2, zstd"), [Zstd, Gzip, Br]);
        assert_eq!(r("deflate, gzip, br, zstd"), [Br, Zstd, Gzip]);
        assert_eq!(r("gzip, *;q=0.1"), [Gzip, Br, Zstd]);
        assert_eq!(r("identity"), []);
        assert_eq!(ranked(None, ALL).count(), 0);
    }

    #[test]
    fn names_and_suffixes() {
        assert_eq!(Encoding::from_name("zstd"), Some(Zstd));
        assert_eq!(Encoding::from_name("deflate"), None);
        assert_eq!(Zstd.suffix(), ".zst");
    }
}
