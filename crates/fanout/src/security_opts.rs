//! Security flags shared by `send`, `recv`, `stream` and `relay`, and the
//! key files `fanout keygen` writes (`docs/security.md`).
//!
//! A key file is text: one line of 64 hexadecimal digits (32 bytes), lines
//! starting with `#` ignored. A pre-shared key and a private key look the
//! same; a `.pub` file and each line of an allow-list hold a public key.

use anyhow::{bail, ensure, Context, Result};
use clap::Args;
use fanout_transport::protection::noise::{public_key, KEY_LEN};
use fanout_transport::protection::{Credentials, Protection, PublicKey};
use std::net::SocketAddr;
use std::path::Path;

/// Who uses the flags: the two ends of a handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Answers handshakes (`send`, `stream send`).
    Sender,
    /// Starts them (`recv`, `stream recv`).
    Receiver,
    /// A relay's sending side: answers its downstream receivers'
    /// handshakes (checked against `--allow-keys`; its `--sender-key` is
    /// for the upstream side).
    RelayOut,
    /// A relay's receiving side: joins its upstream sender (pinned by
    /// `--sender-key`; its `--allow-keys` is for the downstream side).
    RelayIn,
    /// An ACK merger: joins its parent (pinned by `--sender-key`) and
    /// answers its children's handshakes (checked against `--allow-keys`).
    Merger,
}

/// Flags that protect a session. Without any, the session is unprotected
/// (and says so on stderr).
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "Security (docs/security.md)")]
pub struct SecurityOpts {
    /// A pre-shared key file (`fanout keygen --psk FILE`): only hosts
    /// holding it can join or send, and every datagram is encrypted and
    /// authenticated.
    #[arg(long, value_name = "FILE", value_parser = read_secret)]
    pub psk_file: Option<Secret>,
    /// This host's private key (`fanout keygen FILE`): with
    /// --sender-key (recv) or --allow-keys (send), peers are admitted by
    /// their public keys.
    #[arg(long, value_name = "FILE", value_parser = read_secret)]
    pub key: Option<Secret>,
    /// recv: the sender's public key (64 hex digits, or its `.pub` file);
    /// a sender without the matching private key cannot complete the
    /// handshake. merge: the key of its --parent.
    #[arg(long, value_name = "KEY|FILE", value_parser = parse_public)]
    pub sender_key: Option<PublicKey>,
    /// send: a file of the receivers' public keys allowed to join, one
    /// per line. merge: its children's keys.
    #[arg(long, value_name = "FILE", value_parser = read_allow_list)]
    pub allow_keys: Option<AllowList>,
}

/// 32 secret bytes from a key file.
#[derive(Clone)]
pub struct Secret(pub [u8; KEY_LEN]);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

/// Receivers' public keys.
#[derive(Debug, Clone)]
pub struct AllowList(pub Vec<PublicKey>);

/// The one hex key of a key file's text (comments and blank lines
/// skipped).
fn parse_hex_key(line: &str) -> Result<[u8; KEY_LEN]> {
    let line = line.trim();
    ensure!(
        line.len() == 2 * KEY_LEN && line.bytes().all(|b| b.is_ascii_hexdigit()),
        "expected {} hexadecimal digits, found `{}`",
        2 * KEY_LEN,
        line.chars().take(80).collect::<String>()
    );
    let mut k = [0u8; KEY_LEN];
    for (i, byte) in k.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&line[2 * i..2 * i + 2], 16).expect("hex digits checked");
    }
    Ok(k)
}

fn key_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
}

fn read_text(path: &str) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("cannot read key file {path}"))
}

pub(crate) fn read_secret(path: &str) -> Result<Secret> {
    let text = read_text(path)?;
    let mut lines = key_lines(&text);
    let key = parse_hex_key(
        lines
            .next()
            .with_context(|| format!("{path} holds no key"))?,
    )
    .with_context(|| format!("{path} is not a fanout key file"))?;
    ensure!(lines.next().is_none(), "{path} holds more than one key");
    Ok(Secret(key))
}

/// A public key: 64 hex digits, or a `.pub` file holding them.
pub fn parse_public(arg: &str) -> Result<PublicKey> {
    if let Ok(k) = parse_hex_key(arg) {
        return Ok(k);
    }
    let text = read_text(arg).context("expected 64 hexadecimal digits or a .pub file")?;
    let line = key_lines(&text)
        .next()
        .with_context(|| format!("{arg} holds no key"))?;
    parse_hex_key(line).with_context(|| format!("{arg} is not a public key file"))
}

fn read_allow_list(path: &str) -> Result<AllowList> {
    let text = read_text(path)?;
    let keys = key_lines(&text)
        .enumerate()
        .map(|(i, l)| parse_hex_key(l).with_context(|| format!("{path}: key {}", i + 1)))
        .collect::<Result<Vec<_>>>()?;
    ensure!(!keys.is_empty(), "{path} allows no key");
    Ok(AllowList(keys))
}

/// An address to join, with the public key to pin for it if given
/// (`HOST:PORT` or `HOST:PORT=KEY`, KEY as 64 hex digits or a `.pub`
/// file): a merger, or an ancestor taking over from one.
#[derive(Debug, Clone)]
pub struct PeerArg {
    /// `HOST:PORT` (resolved later).
    pub addr: String,
    /// The key to pin when joining it.
    pub key: Option<PublicKey>,
}

/// Parses a [`PeerArg`].
pub fn parse_peer(arg: &str) -> Result<PeerArg> {
    Ok(match arg.split_once('=') {
        Some((addr, key)) => PeerArg {
            addr: addr.to_string(),
            key: Some(parse_public(key).with_context(|| format!("the key of {addr}"))?),
        },
        None => PeerArg {
            addr: arg.to_string(),
            key: None,
        },
    })
}

/// `protection` pinning `key` for the peer at `addr` (a merger or an
/// ancestor of one) instead of the sender's key.
pub fn pin_at(protection: &mut Option<Protection>, addr: SocketAddr, key: Option<PublicKey>) {
    if let (Some(p), Some(k)) = (protection.as_mut(), key) {
        p.credentials = std::sync::Arc::new(p.credentials.as_ref().clone().pin_at(addr, k));
    }
}

/// Hexadecimal digits of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl SecurityOpts {
    /// The protection these flags give, as reports name it: "none",
    /// "psk", "keys" or "keys+psk".
    pub fn mode(&self) -> &'static str {
        match (self.psk_file.is_some(), self.key.is_some()) {
            (false, false) => "none",
            (true, false) => "psk",
            (false, true) => "keys",
            (true, true) => "keys+psk",
        }
    }

    /// Whether any security flag was given.
    pub fn is_protected(&self) -> bool {
        self.psk_file.is_some() || self.key.is_some()
    }

    /// The credentials these flags give `side`, checked: `None` for an
    /// unprotected session.
    pub fn credentials(&self, side: Side) -> Result<Option<Credentials>> {
        if !self.is_protected() {
            if self.sender_key.is_some() || self.allow_keys.is_some() {
                bail!("--sender-key and --allow-keys need --key FILE (this host's private key)");
            }
            return Ok(None);
        }
        let mut c = Credentials::default();
        if let Some(psk) = &self.psk_file {
            c = c.psk(psk.0);
        }
        if let Some(key) = &self.key {
            c = c.identity(key.0);
        }
        match side {
            Side::Merger => {
                if let Some(k) = self.sender_key {
                    c = c.sender_key(k);
                }
                for k in self.allow_keys.iter().flat_map(|a| &a.0) {
                    c = c.allow(*k);
                }
                c.check_joiner().map_err(|why| {
                    anyhow::anyhow!("{why}: add --sender-key KEY (the parent's public key)")
                })?;
                c.check_sender().map_err(|why| {
                    anyhow::anyhow!("{why}: add --allow-keys FILE (the children's keys)")
                })?;
            }
            Side::Sender | Side::RelayOut => {
                ensure!(
                    side == Side::RelayOut || self.sender_key.is_none(),
                    "--sender-key is for receivers (a sender proves its key with --key)"
                );
                for k in self.allow_keys.iter().flat_map(|a| &a.0) {
                    c = c.allow(*k);
                }
                c.check_sender().map_err(|why| {
                    anyhow::anyhow!("{why}: add --allow-keys FILE or --psk-file FILE")
                })?;
            }
            Side::Receiver | Side::RelayIn => {
                ensure!(
                    side == Side::RelayIn || self.allow_keys.is_none(),
                    "--allow-keys is for senders (a receiver pins its sender with --sender-key)"
                );
                if let Some(k) = self.sender_key {
                    c = c.sender_key(k);
                }
                c.check_joiner()
                    .map_err(|why| anyhow::anyhow!("{why}: add --sender-key KEY"))?;
            }
        }
        Ok(Some(c))
    }

    /// Protection for one engine of `side` (fresh randomness each call).
    pub fn protection(&self, side: Side) -> Result<Option<Protection>> {
        Ok(self
            .credentials(side)?
            .map(|c| Protection::new(c, fanout_io::random_seed())))
    }

    /// Tells the user, on stderr, that the session is unprotected.
    pub fn warn_if_unprotected(&self, quiet: bool) {
        if !self.is_protected() && !quiet {
            eprintln!(
                "fanout: warning: unprotected session: anyone on the network can read, \
                 forge or disturb it (see --psk-file and --key)"
            );
        }
    }
}

/// `fanout keygen`: writes a key file.
#[derive(Debug, Clone, Args)]
#[command(after_help = "Examples:
  fanout keygen sender.key          # writes sender.key and sender.key.pub
  fanout keygen --psk session.psk   # a pre-shared key for every host

Give the private key to `send --key`, its .pub to each receiver's
`recv --sender-key`; collect the receivers' .pub lines into the
sender's `--allow-keys` file. Or copy one --psk file to every host.")]
pub struct KeygenArgs {
    /// Where to write the key (never over an existing file).
    #[arg(value_name = "FILE")]
    pub file: std::path::PathBuf,
    /// A pre-shared key instead of a key pair.
    #[arg(long)]
    pub psk: bool,
    /// Print a JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

fn write_new(path: &Path, text: &str, secret: bool) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if secret { 0o600 } else { 0o644 })
        .open(path)
        .with_context(|| format!("cannot create {} (it must not exist)", path.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Runs `fanout keygen`.
pub fn keygen(args: KeygenArgs) -> Result<()> {
    let secret = fanout_io::random_seed();
    if args.psk {
        write_new(
            &args.file,
            &format!(
                "# fanout pre-shared key: keep it secret\n{}\n",
                hex(&secret)
            ),
            true,
        )?;
        if args.json {
            println!("{}", serde_json::json!({ "psk_file": args.file }));
        } else {
            println!("wrote pre-shared key {}", args.file.display());
        }
        return Ok(());
    }
    let public = hex(&public_key(&secret));
    let pub_path = {
        let mut p = args.file.clone().into_os_string();
        p.push(".pub");
        std::path::PathBuf::from(p)
    };
    ensure!(!pub_path.exists(), "{} exists already", pub_path.display());
    write_new(
        &args.file,
        &format!("# fanout private key: keep it secret\n{}\n", hex(&secret)),
        true,
    )?;
    write_new(&pub_path, &format!("{public}\n"), false)?;
    if args.json {
        println!(
            "{}",
            serde_json::json!({ "key_file": args.file, "public_key_file": pub_path, "public_key": public })
        );
    } else {
        println!("wrote {} and {}", args.file.display(), pub_path.display());
        println!("public key: {public}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_parse_and_bad_ones_say_why() {
        let k = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        assert_eq!(parse_hex_key(k).unwrap()[1], 0x11);
        assert!(parse_hex_key(&k[2..]).is_err());
        assert!(parse_hex_key(&k.replace('0', "g")).is_err());
        let text = format!("# comment\n\n{k}\n");
        assert_eq!(key_lines(&text).collect::<Vec<_>>(), [k]);
    }

    #[test]
    fn each_side_gets_only_its_flags() {
        let secret = Some(Secret([3; 32]));
        let receiver_without_pin = SecurityOpts {
            key: secret.clone(),
            ..Default::default()
        };
        assert!(receiver_without_pin.credentials(Side::Receiver).is_err());
        assert!(receiver_without_pin.credentials(Side::Sender).is_err());
        let psk = SecurityOpts {
            psk_file: secret,
            ..Default::default()
        };
        assert!(psk.credentials(Side::Sender).unwrap().is_some());
        assert!(psk.credentials(Side::Receiver).unwrap().is_some());
        assert!(SecurityOpts::default()
            .credentials(Side::Sender)
            .unwrap()
            .is_none());
        let pin_only = SecurityOpts {
            sender_key: Some([1; 32]),
            ..Default::default()
        };
        assert!(pin_only.credentials(Side::Receiver).is_err());
        // A relay takes both: the pin for upstream, the list for downstream.
        let relay = SecurityOpts {
            key: Some(Secret([4; 32])),
            sender_key: Some([1; 32]),
            allow_keys: Some(AllowList(vec![[2; 32]])),
            ..Default::default()
        };
        assert!(relay.credentials(Side::Sender).is_err());
        assert!(relay.credentials(Side::Receiver).is_err());
        assert!(relay.credentials(Side::RelayOut).unwrap().is_some());
        assert!(relay.credentials(Side::RelayIn).unwrap().is_some());
        // A merger takes both as well, and needs both with keys.
        assert!(relay.credentials(Side::Merger).unwrap().is_some());
        let merger_without_children = SecurityOpts {
            allow_keys: None,
            ..relay
        };
        assert!(merger_without_children.credentials(Side::Merger).is_err());
    }

    #[test]
    fn a_peer_may_carry_the_key_to_pin() {
        let k = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
        let p = parse_peer(&format!("10.0.0.1:7000={k}")).unwrap();
        assert_eq!(p.addr, "10.0.0.1:7000");
        assert_eq!(p.key.unwrap()[0], 0x00);
        assert!(parse_peer("[2001:db8::1]:7000").unwrap().key.is_none());
        assert!(parse_peer("10.0.0.1:7000=nonsense").is_err());
    }
}
