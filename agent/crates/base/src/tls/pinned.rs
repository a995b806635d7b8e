//! Server certificate checks that accept what operators make: a
//! self-signed certificate created as Ironic's documentation shows
//! (`openssl req -x509 -newkey … -nodes -subj /CN=…`, which OpenSSL marks
//! `CA:TRUE`) and given to the agent as its CA file. WebPKI refuses such a
//! certificate as a server's (`CaUsedAsEndEntity`); OpenSSL, and so
//! ironic-python-agent, accepts it. Here it is accepted when the server's
//! certificate is byte for byte one of the CA file's, and the name the
//! client asked for and the validity period still check out. Every other
//! certificate goes through WebPKI unchanged.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, SignatureScheme};

/// WebPKI, plus exact matches of the CA file's own certificates.
#[derive(Debug)]
pub struct PinnedOrWebPki {
    webpki: Arc<WebPkiServerVerifier>,
    pinned: Vec<CertificateDer<'static>>,
}

impl PinnedOrWebPki {
    /// `webpki` built from the CA file, whose certificates are `pinned`.
    pub fn new(webpki: Arc<WebPkiServerVerifier>, pinned: Vec<CertificateDer<'static>>) -> Self {
        Self { webpki, pinned }
    }
}

impl ServerCertVerifier for PinnedOrWebPki {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let err =
            match self
                .webpki
                .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
            {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
        if !self
            .pinned
            .iter()
            .any(|p| p.as_ref() == end_entity.as_ref())
        {
            return Err(err);
        }
        check_pinned(end_entity, server_name, now)?;
        tracing::debug!(
            "TLS: {server_name:?} presented a certificate that is itself in the CA file; accepted ({err})"
        );
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// Name and validity of a pinned certificate.
fn check_pinned(
    cert: &CertificateDer<'_>,
    name: &ServerName<'_>,
    now: UnixTime,
) -> Result<(), Error> {
    let ee = webpki::EndEntityCert::try_from(cert)
        .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))?;
    if ee.verify_is_valid_for_subject_name(name).is_err() && !common_name_matches(cert, name) {
        return Err(Error::InvalidCertificate(CertificateError::NotValidForName));
    }
    let (not_before, not_after) =
        validity(cert.as_ref()).ok_or(Error::InvalidCertificate(CertificateError::BadEncoding))?;
    let now = now.as_secs() as i64;
    if now < not_before {
        return Err(Error::InvalidCertificate(CertificateError::NotValidYet));
    }
    if now > not_after {
        return Err(Error::InvalidCertificate(CertificateError::Expired));
    }
    Ok(())
}

/// OpenSSL's fallback, which IPA inherits: a certificate without a
/// subjectAltName extension is valid for the DNS name in its subject's CN.
fn common_name_matches(cert: &CertificateDer<'_>, name: &ServerName<'_>) -> bool {
    let ServerName::DnsName(dns) = name else {
        return false;
    };
    // OID 2.5.29.17 (subjectAltName) anywhere in the certificate.
    const SAN_OID: [u8; 5] = [0x06, 0x03, 0x55, 0x1d, 0x11];
    if cert.as_ref().windows(5).any(|w| w == SAN_OID) {
        return false;
    }
    subject_cn(cert.as_ref()).is_some_and(|cn| cn.eq_ignore_ascii_case(dns.as_ref()))
}

/// The tbsCertificate's fields after the optional version: serial,
/// signature algorithm, issuer, validity, subject, ….
fn tbs_fields(der: &[u8]) -> Option<Vec<(u8, &[u8])>> {
    let (0x30, cert, _) = element(der)? else {
        return None;
    };
    let (0x30, tbs, _) = element(cert)? else {
        return None;
    };
    let mut out = Vec::new();
    let mut rest = tbs;
    while !rest.is_empty() {
        let (tag, content, r) = element(rest)?;
        if tag != 0xa0 {
            out.push((tag, content));
        }
        rest = r;
    }
    Some(out)
}

/// The subject's commonName (OID 2.5.4.3), if any.
fn subject_cn(der: &[u8]) -> Option<String> {
    let fields = tbs_fields(der)?;
    let (0x30, mut rdns) = *fields.get(4)? else {
        return None;
    };
    while !rdns.is_empty() {
        let (_, set, r) = element(rdns)?;
        rdns = r;
        let (_, atv, _) = element(set)?;
        let (0x06, oid, r) = element(atv)? else {
            continue;
        };
        if oid == [0x55, 0x04, 0x03] {
            let (_, value, _) = element(r)?;
            return String::from_utf8(value.to_vec()).ok();
        }
    }
    None
}

/// One DER element at the start of `b`: (tag, content, rest).
fn element(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, b) = b.split_first()?;
    let (&first, mut b) = b.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || b.len() < n {
            return None;
        }
        let len = b[..n]
            .iter()
            .fold(0usize, |a, x| (a << 8) | usize::from(*x));
        b = &b[n..];
        len
    };
    (b.len() >= len).then(|| (tag, &b[..len], &b[len..]))
}

/// `notBefore` and `notAfter` of a certificate, as Unix seconds.
pub fn validity(der: &[u8]) -> Option<(i64, i64)> {
    let fields = tbs_fields(der)?;
    let (0x30, validity) = *fields.get(3)? else {
        return None;
    };
    let (t1, a, r) = element(validity)?;
    let (t2, b, _) = element(r)?;
    Some((time(t1, a)?, time(t2, b)?))
}

/// UTCTime (`YYMMDDHHMMSSZ`) or GeneralizedTime (`YYYYMMDDHHMMSSZ`).
fn time(tag: u8, v: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(v).ok()?.strip_suffix('Z')?;
    let (year, rest) = match tag {
        0x17 if s.len() == 12 => {
            let yy: i64 = s.get(..2)?.parse().ok()?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &s[2..])
        }
        0x18 if s.len() == 14 => (s.get(..4)?.parse().ok()?, &s[4..]),
        _ => return None,
    };
    if !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = |i: usize| rest[i..i + 2].parse::<u8>().ok();
    let month = time::Month::try_from(n(0)?).ok()?;
    let date = time::Date::from_calendar_date(year as i32, month, n(2)?).ok()?;
    let t = time::Time::from_hms(n(4)?, n(6)?, n(8)?).ok()?;
    Some(
        time::PrimitiveDateTime::new(date, t)
            .assume_utc()
            .unix_timestamp(),
    )
}

#[cfg(test)]
mod tests;
