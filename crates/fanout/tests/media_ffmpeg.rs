//! `fanout media` with ffmpeg on loopback (127.0.0.1 only; every child
//! killed by PID on drop, every wait bounded): ffmpeg plays what `media
//! send` sends, from the SDP it writes, and decodes every frame — and, a
//! receiver that sends no rate reports, never moves the sender's rate; and
//! `media recv` takes ffmpeg's own RTP output (`-f rtp_mpegts`), reports
//! on it, and writes exactly the TS ffmpeg sent (compared with a plain
//! capture of the same RTP; ffmpeg 5.1's RTP output itself carries one
//! damaged frame, which the comparison shows is not ours).
//!
//! Needs `ffmpeg` and `ffprobe`; without them the test says so and passes,
//! unless `FANOUT_FFMPEG_REQUIRED=1` (CI installs ffmpeg and sets it).

#![expect(
    clippy::disallowed_methods,
    reason = "real processes in real time: waits bounded by the wall clock"
)]

#[path = "common/ffmpeg.rs"]
mod ffmpeg;
#[path = "common/loopback.rs"]
mod loopback;
use ffmpeg::{ffmpeg_installed, video_frames};
use loopback::{json_in, read_all, Proc};

use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fanout");
/// Seconds of media.
const SECONDS: u32 = 6;

/// A loopback port P with P + 1 free as well (RTP and RTCP).
fn free_pair() -> u16 {
    for _ in 0..100 {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let p = a.local_addr().unwrap().port();
        if p < u16::MAX && UdpSocket::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
    panic!("no free pair of ports");
}

/// A scratch directory, removed when dropped.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn scratch(tag: &str) -> Dir {
    let d = std::env::temp_dir().join(format!("fanout-media-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    Dir(d)
}

/// `seconds` of a test picture (MPEG-2, an I-frame every second) and a
/// tone (MP2), about 0.7 Mbit/s, as MPEG-TS.
fn make_input(path: &Path, seconds: u32) {
    ffmpeg::make_test_stream(path, seconds, "320x240", "600k", &[], Some("64k"));
}

/// What ffmpeg says decoding `file` (empty: no errors).
fn decode_errors(file: &Path) -> String {
    let out = Command::new("ffmpeg")
        .args(["-hide_banner", "-v", "error", "-i"])
        .arg(file)
        .args(["-f", "null", "-"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Waits for `child` to end (at most `limit`); true if it did.
fn wait_for(child: &mut Proc, limit: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < limit {
        if child.0.try_wait().unwrap().is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// A scratch directory with SECONDS of input made (`in.ts`), and where
/// the output goes (`out.ts`).
fn case(tag: &str) -> (Dir, PathBuf, PathBuf) {
    case_of(tag, SECONDS)
}

/// [`case`] with `seconds` of input.
fn case_of(tag: &str, seconds: u32) -> (Dir, PathBuf, PathBuf) {
    let dir = scratch(tag);
    let (input, output) = (dir.0.join("in.ts"), dir.0.join("out.ts"));
    make_input(&input, seconds);
    (dir, input, output)
}

/// The `--json` report `child` prints on stdout once it ends (within
/// `limit`), having succeeded; `what` names it in messages.
fn report_of(child: &mut Proc, what: &str, limit: Duration) -> serde_json::Value {
    let out = read_all(child.0.stdout.take().unwrap());
    let errors = read_all(child.0.stderr.take().unwrap());
    assert!(wait_for(child, limit), "the {what} ends");
    let report = json_in(&out.join().unwrap());
    eprintln!("{what}: {report}");
    assert!(
        child.0.wait().unwrap().success(),
        "{what}: {}",
        String::from_utf8_lossy(&errors.join().unwrap())
    );
    report
}

/// ffmpeg writing `input` in real time as MPEG-TS on its stdout.
fn realtime_feed(input: &Path) -> Proc {
    Proc(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-v", "error", "-re", "-i"])
            .arg(input)
            .args(["-c", "copy", "-f", "mpegts", "-"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// `fanout media recv --listen 127.0.0.1:PORT --json --idle-timeout IDLE
/// -o OUTPUT`, its stdout and stderr piped.
fn media_recv(port: u16, idle: u32, output: impl AsRef<std::ffi::OsStr>) -> Proc {
    media_recv_on("127.0.0.1", port, idle, output)
}

/// `media_recv` listening on `host` (an IPv4 address or a bracketed IPv6
/// one).
fn media_recv_on(host: &str, port: u16, idle: u32, output: impl AsRef<std::ffi::OsStr>) -> Proc {
    Proc(
        Command::new(BIN)
            .args(["media", "recv", "--listen", &format!("{host}:{port}")])
            .args(["--json", "--idle-timeout", &idle.to_string(), "-o"])
            .arg(output)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// `fanout media send --to 127.0.0.1:PORT --json --quiet EXTRA...` reading
/// `stdin`, its stdout and stderr piped.
fn media_send(port: u16, extra: &[&str], stdin: Stdio) -> Proc {
    media_send_to("127.0.0.1", port, extra, stdin)
}

/// `media_send` to `host` (an IPv4 address or a bracketed IPv6 one).
fn media_send_to(host: &str, port: u16, extra: &[&str], stdin: Stdio) -> Proc {
    Proc(
        Command::new(BIN)
            .args(["media", "send", "--to", &format!("{host}:{port}")])
            .args(["--json", "--quiet"])
            .args(extra)
            .stdin(stdin)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

#[test]
fn ffmpeg_plays_30_s_of_what_media_send_sends_from_its_sdp() {
    ffmpeg_plays("asmp", 30);
}

#[test]
fn ffmpeg_plays_a_tfmcc_stream_skipping_its_header_extension() {
    ffmpeg_plays("tfmcc", SECONDS);
}

#[test]
fn ffmpeg_plays_a_pgmcc_stream_and_never_becomes_its_acker() {
    ffmpeg_plays("pgmcc", SECONDS);
}

/// ffmpeg, given only the SDP, receives `seconds` of what `media send
/// --cc CC` sends: every frame, no decode error, and the rate never moves
/// (ffmpeg sends no rate reports).
fn ffmpeg_plays(cc: &str, seconds: u32) {
    if !ffmpeg_installed() {
        return;
    }
    let (dir, input, output) = case_of(&format!("send-{cc}"), seconds);
    let sdp = dir.0.join("live.sdp");
    let port = free_pair();
    let sdp_arg = sdp.to_str().unwrap();
    let mut sender = media_send(
        port,
        &["--initial-rate", "2M", "--sdp", sdp_arg, "--cc", cc],
        Stdio::piped(),
    );
    let start = Instant::now();
    while !sdp.exists() {
        assert!(start.elapsed() < Duration::from_secs(10), "no SDP written");
        std::thread::sleep(Duration::from_millis(20));
    }
    let text = std::fs::read_to_string(&sdp).unwrap();
    assert!(
        text.contains("m=video") && text.contains("MP2T/90000"),
        "{text}"
    );
    // The player, from the SDP alone.
    let mut player = Proc(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-v", "error", "-y"])
            .args(["-protocol_whitelist", "file,udp,rtp", "-i"])
            .arg(&sdp)
            .args(["-c", "copy", "-f", "mpegts"])
            .arg(&output)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // Once the player listens (its RTP port is taken), the stream starts.
    let start = Instant::now();
    while UdpSocket::bind(("127.0.0.1", port)).is_ok() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "ffmpeg never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(200));
    let mut feed = realtime_feed(&input);
    let mut from = feed.0.stdout.take().unwrap();
    let mut to = sender.0.stdin.take().unwrap();
    let copy = std::thread::spawn(move || std::io::copy(&mut from, &mut to).map(|_| ()));
    assert!(wait_for(
        &mut feed,
        Duration::from_secs(u64::from(seconds) + 20)
    ));
    copy.join().unwrap().unwrap();
    let report = report_of(&mut sender, "sender", Duration::from_secs(10));
    // Everything went out, at the rate it started with: ffmpeg sends no
    // rate reports, so the rate never moved.
    assert_eq!(report["queue_drops"], 0, "{report}");
    assert_eq!(report["skipped_input_bytes"], 0, "{report}");
    assert_eq!(report["rate_reports"], 0, "{report}");
    assert_eq!(report["allowed_rate_bps"], 2_000_000.0, "{report}");
    // The player stops as a person would (q on its input is not there:
    // SIGINT), and writes its file out.
    std::thread::sleep(Duration::from_millis(500));
    let _ = Command::new("kill")
        .args(["-INT", &player.0.id().to_string()])
        .status();
    assert!(
        wait_for(&mut player, Duration::from_secs(10)),
        "ffmpeg ends"
    );
    let player_errors = read_all(player.0.stderr.take().unwrap()).join().unwrap();
    eprintln!("player: {}", String::from_utf8_lossy(&player_errors));
    let decoded = decode_errors(&output);
    assert!(decoded.is_empty(), "decode errors: {decoded}");
    let (sent, got) = (video_frames(&input), video_frames(&output));
    eprintln!("frames: {got} of {sent}");
    assert!(got >= sent - 1, "{got} of {sent} frames");
}

/// ffmpeg sending `input` in real time as RTP MPEG-TS to `port`.
fn rtp_feed(input: &Path, port: u16) -> Proc {
    Proc(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-v", "error", "-re", "-i"])
            .arg(input)
            .args(["-c", "copy", "-f", "rtp_mpegts"])
            .arg(format!("rtp://127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// The payloads of the RTP packets arriving on `port` until 2 s of
/// silence, in order of arrival, read by a plain socket.
fn capture_rtp_payloads(port: u16) -> std::thread::JoinHandle<Vec<u8>> {
    let socket = UdpSocket::bind(("127.0.0.1", port)).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    std::thread::spawn(move || {
        let mut out = Vec::new();
        let mut buf = [0u8; 65_536];
        while let Ok(n) = socket.recv(&mut buf) {
            // ffmpeg's RTP: a 12-byte header, no CSRC, no extension.
            assert!(n > 12 && buf[0] == 0x80, "plain RTP");
            out.extend_from_slice(&buf[12..n]);
        }
        out
    })
}

#[test]
fn media_recv_takes_ffmpegs_rtp_output() {
    if !ffmpeg_installed() {
        return;
    }
    let (_dir, input, output) = case("recv");
    // What ffmpeg sends, read by a plain socket.
    let port = free_pair();
    let capture = capture_rtp_payloads(port);
    let mut ffmpeg = rtp_feed(&input, port);
    assert!(wait_for(
        &mut ffmpeg,
        Duration::from_secs(u64::from(SECONDS) + 20)
    ));
    let reference = capture.join().unwrap();
    // The same, into `fanout media recv`.
    let port = free_pair();
    let mut receiver = media_recv(port, 2, &output);
    std::thread::sleep(Duration::from_millis(300));
    let mut ffmpeg = rtp_feed(&input, port);
    assert!(wait_for(
        &mut ffmpeg,
        Duration::from_secs(u64::from(SECONDS) + 20)
    ));
    let report = report_of(&mut receiver, "receiver", Duration::from_secs(15));
    assert!(report["packets"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(report["lost"], 0, "{report}");
    assert!(report["reports_sent"].as_u64().unwrap() > 0, "{report}");
    let got = std::fs::read(&output).unwrap();
    assert_eq!(got.len(), reference.len(), "bytes of stream");
    assert!(got == reference, "exactly what ffmpeg sent");
    let (sent, decoded) = (video_frames(&input), video_frames(&output));
    eprintln!(
        "frames: {decoded} of {sent}; ffmpeg decoding it says: {}",
        decode_errors(&output).trim()
    );
    assert!(decoded >= sent - 1, "{decoded} of {sent} frames");
}

#[test]
fn media_recv_reports_reach_a_unicast_media_send() {
    unicast_reports("asmp");
}

#[test]
fn a_tfmcc_receivers_feedback_reaches_a_unicast_media_send() {
    unicast_reports("tfmcc");
}

#[test]
fn a_pgmcc_ackers_acks_reach_a_unicast_media_send() {
    unicast_reports("pgmcc");
}

#[test]
fn media_runs_over_ipv6() {
    // Loopback without IPv6 (some containers): nothing to test.
    if UdpSocket::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback: skipped");
        return;
    }
    unicast_reports_on("[::1]", "asmp");
}

/// fanout at both ends, one receiver by unicast, the sender running `cc`
/// (the receiver follows it): its reports go back to where the sender's
/// SRs come from, and move the sender's rate.
fn unicast_reports(cc: &str) {
    unicast_reports_on("127.0.0.1", cc);
}

/// `unicast_reports` over loopback address `host`.
fn unicast_reports_on(host: &str, cc: &str) {
    if !ffmpeg_installed() {
        return;
    }
    let tag = host.replace(['[', ']', ':', '.'], "");
    let (_dir, input, output) = case(&format!("unicast-{cc}-{tag}"));
    let port = free_pair();
    let mut receiver = media_recv_on(host, port, 3, &output);
    let mut feed = realtime_feed(&input);
    let stdin = Stdio::from(feed.0.stdout.take().unwrap());
    let extra = ["--initial-rate", "300k", "--cc", cc];
    let mut sender = media_send_to(host, port, &extra, stdin);
    let limit = Duration::from_secs(u64::from(SECONDS) + 20);
    let sent = report_of(&mut sender, "sender", limit);
    let got = report_of(&mut receiver, "receiver", Duration::from_secs(15));
    assert!(got["reports_sent"].as_u64().unwrap() > 0, "{got}");
    assert!(sent["rate_reports"].as_u64().unwrap() > 0, "{sent}");
    assert_eq!(sent["receivers"], 1, "{sent}");
    assert_ne!(
        sent["allowed_rate_bps"], 300_000.0,
        "reports moved it: {sent}"
    );
    assert_eq!(got["ended_by_sender"], true, "{got}");
    assert_eq!(got["lost"], 0, "{got}");
    assert_eq!((&sent["cc"], &got["cc"]), (&cc.into(), &cc.into()));
}

#[test]
fn udp_in_and_udp_out_as_encoders_and_players_speak_it() {
    // ffmpeg's MPEG-TS over plain UDP into `media send --input udp://`,
    // through `media recv -o udp://`, read by a plain socket: every frame.
    if !ffmpeg_installed() {
        return;
    }
    let (_dir, input, output) = case("udp");
    let (port, encoder_port, player_port) = (free_pair(), free_pair(), free_pair());
    let player = UdpSocket::bind(("127.0.0.1", player_port)).unwrap();
    player
        .set_read_timeout(Some(Duration::from_secs(4)))
        .unwrap();
    let heard = std::thread::spawn(move || {
        let (mut out, mut buf) = (Vec::new(), [0u8; 65_536]);
        while let Ok(n) = player.recv(&mut buf) {
            assert_eq!(n % 188, 0, "whole TS packets");
            out.extend_from_slice(&buf[..n]);
        }
        out
    });
    let mut receiver = media_recv(port, 3, format!("udp://127.0.0.1:{player_port}"));
    let udp_input = format!("udp://127.0.0.1:{encoder_port}");
    let extra = [
        "--input",
        &udp_input,
        "--input-idle",
        "2",
        "--initial-rate",
        "2M",
    ];
    let mut sender = media_send(port, &extra, Stdio::null());
    std::thread::sleep(Duration::from_millis(300));
    let mut encoder = Proc(
        Command::new("ffmpeg")
            .args(["-hide_banner", "-v", "error", "-re", "-i"])
            .arg(&input)
            .args(["-c", "copy", "-f", "mpegts"])
            .arg(format!("udp://127.0.0.1:{encoder_port}?pkt_size=1316"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    assert!(wait_for(
        &mut encoder,
        Duration::from_secs(u64::from(SECONDS) + 20)
    ));
    let sent = report_of(&mut sender, "sender", Duration::from_secs(15));
    let got = report_of(&mut receiver, "receiver", Duration::from_secs(15));
    assert_eq!(sent["skipped_input_bytes"], 0, "{sent}");
    assert_eq!(sent["queue_drops"], 0, "{sent}");
    assert_eq!(got["lost"], 0, "{got}");
    let stream = heard.join().unwrap();
    assert_eq!(stream.len() as u64, sent["payload_bytes"].as_u64().unwrap());
    std::fs::write(&output, &stream).unwrap();
    let decoded = decode_errors(&output);
    let (frames, got_frames) = (video_frames(&input), video_frames(&output));
    eprintln!(
        "frames: {got_frames} of {frames}; decoding says: {}",
        decoded.trim()
    );
    assert!(got_frames >= frames - 1, "{got_frames} of {frames}");
    assert!(decoded.is_empty(), "{decoded}");
}
