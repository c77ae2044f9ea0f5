//! Throughput probes between overlay hosts, the measurements ROMA §VI-C
//! builds its tree from (a matrix of hop throughputs): a prober asks a
//! host to send it bytes over one TCP connection for a while and measures
//! the rate it gets, which is the rate that host would get as its parent.
//!
//! A probe port streams only to holders of the overlay's key: the prober
//! sends a request (hello and the milliseconds wanted), the host answers
//! with a fresh nonce, and the prober returns a keyed BLAKE3 tag over the
//! nonce and the request. Then the host streams zeros for at most
//! [`MAX_PROBE_MS`] and closes.

use crate::symbol::SymbolKey;

/// A probe request's first bytes (not an overlay child's hello).
pub const PROBE_HELLO: [u8; 8] = *b"FOVP\x01\0\0\0";
/// A request: the hello and the milliseconds wanted (u32, big-endian).
pub const REQUEST_LEN: usize = 12;
/// The host's nonce.
pub const NONCE_LEN: usize = 32;
/// The prober's proof.
pub const ANSWER_LEN: usize = 32;
/// The longest probe a host streams, ms.
pub const MAX_PROBE_MS: u32 = 10_000;

/// Why a probe request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// Not a probe request.
    #[error("not an overlay probe request")]
    Hello,
    /// The answer is not the key holder's.
    #[error("the prober does not hold the overlay's key")]
    Answer,
}

/// The request for `ms` milliseconds of stream.
pub fn request(ms: u32) -> [u8; REQUEST_LEN] {
    let mut r = [0; REQUEST_LEN];
    r[..8].copy_from_slice(&PROBE_HELLO);
    r[8..].copy_from_slice(&ms.to_be_bytes());
    r
}

/// The milliseconds a request asks for, no more than [`MAX_PROBE_MS`].
pub fn parse_request(r: &[u8; REQUEST_LEN]) -> Result<u32, ProbeError> {
    if r[..8] != PROBE_HELLO {
        return Err(ProbeError::Hello);
    }
    let ms = u32::from_be_bytes(r[8..].try_into().expect("4 bytes"));
    Ok(ms.min(MAX_PROBE_MS))
}

/// The prober's proof that it holds `key`: a tag over the nonce and the
/// request (so neither can be swapped).
pub fn answer(
    key: &SymbolKey,
    nonce: &[u8; NONCE_LEN],
    request: &[u8; REQUEST_LEN],
) -> [u8; ANSWER_LEN] {
    let mut bytes = Vec::with_capacity(20 + NONCE_LEN + REQUEST_LEN);
    bytes.extend_from_slice(b"fanout overlay probe");
    bytes.extend_from_slice(nonce);
    bytes.extend_from_slice(request);
    *key.tag(&bytes).as_bytes()
}

/// Checks a prober's answer (in constant time).
pub fn check_answer(
    key: &SymbolKey,
    nonce: &[u8; NONCE_LEN],
    request: &[u8; REQUEST_LEN],
    got: &[u8; ANSWER_LEN],
) -> Result<(), ProbeError> {
    let want = blake3::Hash::from(answer(key, nonce, request));
    if want == blake3::Hash::from(*got) {
        Ok(())
    } else {
        Err(ProbeError::Answer)
    }
}

/// A probe's rate, bit/s: the bytes that came after the first `skip` of
/// the stream (TCP's slow start), over the time they took. `arrivals` are
/// (seconds since the request, bytes so far), in order.
pub fn steady_rate_bps(arrivals: &[(f64, u64)], skip: f64) -> Option<f64> {
    let start = arrivals.iter().find(|(t, _)| *t >= skip)?;
    let end = arrivals.last()?;
    let secs = end.0 - start.0;
    (secs > 0.0).then(|| (end.1 - start.1) as f64 * 8.0 / secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_key_holders_answer_to_this_nonce_and_request_passes() {
        let key = SymbolKey::derive(&[3; 32]);
        let other = SymbolKey::derive(&[4; 32]);
        let nonce = [9; NONCE_LEN];
        let req = request(3000);
        assert_eq!(parse_request(&req), Ok(3000));
        assert_eq!(parse_request(&request(u32::MAX)), Ok(MAX_PROBE_MS));
        let mut bad = req;
        bad[0] ^= 1;
        assert_eq!(parse_request(&bad), Err(ProbeError::Hello));
        let a = answer(&key, &nonce, &req);
        assert!(check_answer(&key, &nonce, &req, &a).is_ok());
        assert!(check_answer(&key, &[8; NONCE_LEN], &req, &a).is_err());
        assert!(check_answer(&key, &nonce, &request(10_000), &a).is_err());
        assert!(check_answer(&other, &nonce, &req, &a).is_err());
    }

    #[test]
    fn the_rate_leaves_out_the_start() {
        // 1 MB in the first second (slow start), then 10 MB a second.
        let arrivals: Vec<(f64, u64)> = (0..=30)
            .map(|i| {
                let t = f64::from(i) * 0.1;
                let bytes = if t <= 1.0 {
                    (t * 1e6) as u64
                } else {
                    1_000_000 + ((t - 1.0) * 1e7) as u64
                };
                (t, bytes)
            })
            .collect();
        let r = steady_rate_bps(&arrivals, 1.0).unwrap();
        assert!((r - 8e7).abs() < 1e6, "{r}");
        assert_eq!(steady_rate_bps(&arrivals[..3], 1.0), None);
    }
}
