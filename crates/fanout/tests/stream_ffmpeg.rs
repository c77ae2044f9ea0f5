//! A real MPEG-TS stream from ffmpeg through `fanout stream --latency` on
//! loopback (127.0.0.1 only; every child killed by PID on drop, every wait
//! bounded), with 2% of the datagrams dropped at the receiver: 30 s of
//! video and audio written at its own rate in 1316-byte messages (seven TS
//! packets each, as UDP carriers of MPEG-TS send them); the output decodes
//! with ffmpeg and loses no larger share of frames than the messages the
//! receiver reports lost.
//!
//! Needs `ffmpeg` and `ffprobe`; without them the test says so and passes,
//! unless `FANOUT_FFMPEG_REQUIRED=1` (CI installs ffmpeg and sets it).

#![expect(
    clippy::disallowed_methods,
    reason = "the media is written in real time, by the wall clock"
)]

#[path = "common/ffmpeg.rs"]
mod ffmpeg;
#[path = "common/loopback.rs"]
mod loopback;
use ffmpeg::{ffmpeg_installed, video_frames};
use loopback::{free_addr, json_in, read_all, stream_sender, Proc, StreamSender};

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_fanout");
/// Seven 188-byte TS packets.
const MESSAGE: usize = 1316;
/// Seconds of media.
const SECONDS: u64 = 30;

#[test]
fn an_mpeg_ts_stream_through_two_percent_loss_decodes() {
    if !ffmpeg_installed() {
        return;
    }
    let bind = free_addr();
    let dir = std::env::temp_dir().join(format!(
        "fanout-ffmpeg-{}-{}",
        std::process::id(),
        bind.replace([':', '.'], "-")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let input = dir.join("in.ts");
    let output = dir.join("out.ts");
    // 30 s of a test picture (MPEG-2, 25 frames/s, an I-frame every
    // second) and a tone (MP2), about 1.2 Mbit/s.
    ffmpeg::make_test_stream(&input, SECONDS as u32, "320x240", "1M", &[], Some("128k"));
    let ts = std::fs::read(&input).unwrap();
    let frames_in = video_frames(&input);
    assert_eq!(frames_in, 25 * SECONDS);

    let mut rx = Command::new(BIN)
        .args(["stream", "recv", "--from", &bind, "--listen", "127.0.0.1:0"])
        .args(["--json", "--quiet", "--idle-timeout", "20"])
        .args(["--latency", "300", "--inject-loss", "0.02"])
        .stdout(std::fs::File::create(&output).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rx_err = read_all(rx.stderr.take().unwrap());
    let mut rx = Proc(rx);
    let message = MESSAGE.to_string();
    let StreamSender {
        proc: mut tx,
        mut stdin,
        out: tx_out,
        err: tx_err,
    } = stream_sender(
        BIN,
        &bind,
        &["--latency", "300", "--message-size", &message],
    );
    // Let the receiver join, then write the stream at its own rate.
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    let per_message = Duration::from_secs(SECONDS).as_secs_f64() / (ts.len() / MESSAGE) as f64;
    for (i, m) in ts.chunks(MESSAGE).enumerate() {
        if stdin.write_all(m).and_then(|()| stdin.flush()).is_err() {
            break;
        }
        let due = start + Duration::from_secs_f64(per_message * (i + 1) as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    drop(stdin);
    let sender_ok = tx.wait_ok();
    let receiver_ok = rx.wait_ok();
    let rx_err = rx_err.join().unwrap();
    assert!(
        sender_ok && receiver_ok,
        "sender: {}\nreceiver: {}",
        String::from_utf8_lossy(&tx_err.join().unwrap()),
        String::from_utf8_lossy(&rx_err)
    );
    let sent = json_in(&tx_out.join().unwrap());
    let received = json_in(&rx_err);
    let t = &received["transport"];
    let read = t["messages_read"].as_u64().unwrap();
    let dropped = t["messages_dropped"].as_u64().unwrap();
    let messages = ts.len().div_ceil(MESSAGE) as u64;
    assert_eq!(sent["transport"]["messages_written"], messages);
    // The loss was real and was repaired.
    assert!(
        sent["transport"]["repair_bytes"].as_u64().unwrap() > 0,
        "{sent}"
    );
    let app_loss = 1.0 - read as f64 / messages as f64;

    // The output decodes, and loses no larger share of frames.
    let decode = Command::new("ffmpeg")
        .args(["-hide_banner", "-v", "error", "-i"])
        .arg(&output)
        .args(["-f", "null", "-"])
        .output()
        .unwrap();
    assert!(
        decode.status.success(),
        "ffmpeg could not decode the output"
    );
    let frames_out = video_frames(&output);
    let frame_loss = 1.0 - frames_out as f64 / frames_in as f64;
    eprintln!(
        "{messages} messages, {read} read, {dropped} dropped ({:.3}% application loss); \
         {frames_out} of {frames_in} frames decoded ({:.3}% frame loss)",
        100.0 * app_loss,
        100.0 * frame_loss
    );
    assert!(
        frame_loss <= app_loss + 1e-9,
        "frame loss {frame_loss} above the application loss {app_loss}"
    );
    if dropped == 0 {
        // Nothing lost: the decoder reports no damage at all.
        assert!(
            decode.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&decode.stderr)
        );
        assert_eq!(std::fs::read(&output).unwrap(), ts, "the stream verbatim");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
