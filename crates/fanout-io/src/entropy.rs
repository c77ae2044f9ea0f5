//! Randomness from the operating system, for the engines that take it as
//! input (`docs/architecture.md`: engines are pure).

use fanout_transport::session::TokenKey;

/// A fresh secret for a session's member tokens (`docs/wire.md` §4.10). If
/// the OS random source fails (it practically never does), one from the
/// clock, the process id and the address-space layout: weaker, but the
/// session still starts.
pub fn random_token_key() -> TokenKey {
    TokenKey::from_bytes(random_seed())
}

/// 32 bytes from the OS random source (with the same fallback as
/// [`random_token_key`]): the seed of an engine's keys and handshakes.
pub fn random_seed() -> [u8; 32] {
    let mut k = [0u8; 32];
    if getrandom::fill(&mut k).is_err() {
        let local = 0u8;
        #[expect(
            clippy::disallowed_methods,
            reason = "fallback entropy when the OS random source fails, not timing"
        )]
        let now = std::time::SystemTime::now();
        let seed = format!("{now:?} {} {:p}", std::process::id(), &local);
        k = *blake3::hash(seed.as_bytes()).as_bytes();
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differ_between_sessions() {
        assert_ne!(random_token_key(), random_token_key());
    }
}
