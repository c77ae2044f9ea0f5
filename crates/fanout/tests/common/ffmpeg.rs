//! ffmpeg and ffprobe in tests: whether they are there, and how many video
//! frames a file decodes to.

#![allow(dead_code)] // each test crate uses its own subset

use std::path::Path;
use std::process::{Command, Stdio};

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether ffmpeg and ffprobe are installed; without them a test says so
/// and passes, unless `FANOUT_FFMPEG_REQUIRED` is set (CI sets it).
pub fn ffmpeg_installed() -> bool {
    if have("ffmpeg") && have("ffprobe") {
        return true;
    }
    assert!(
        std::env::var_os("FANOUT_FFMPEG_REQUIRED").is_none(),
        "FANOUT_FFMPEG_REQUIRED is set but ffmpeg or ffprobe is missing"
    );
    eprintln!("skipped: ffmpeg and ffprobe are not installed");
    false
}

/// Video frames ffprobe decodes in `file`.
pub fn video_frames(file: &Path) -> u64 {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-count_frames", "-select_streams", "v:0"])
        .args(["-show_entries", "stream=nb_read_frames", "-of", "csv=p=0"])
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "ffprobe {}", file.display());
    // MPEG-TS repeats the stream under its program: the first count.
    let text = String::from_utf8_lossy(&out.stdout);
    text.split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("ffprobe output {text:?}"))
}

/// Writes `seconds` of a 25 fps test picture of `size` (`"320x240"`) as
/// MPEG-2 video at `video_rate` (an I-frame every second, `video_extra`
/// added to its options) and, with `audio_rate`, a 440 Hz tone as MP2, in
/// MPEG-TS, to `path`.
pub fn make_test_stream(
    path: &Path,
    seconds: u32,
    size: &str,
    video_rate: &str,
    video_extra: &[&str],
    audio_rate: Option<&str>,
) {
    let mut cmd = Command::new("ffmpeg");
    cmd.args(["-hide_banner", "-v", "error", "-y"]).args([
        "-f",
        "lavfi",
        "-i",
        &format!("testsrc=size={size}:rate=25"),
    ]);
    if audio_rate.is_some() {
        cmd.args(["-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000"]);
    }
    cmd.args(["-t", &seconds.to_string()])
        .args(["-c:v", "mpeg2video", "-b:v", video_rate, "-g", "25"])
        .args(video_extra);
    if let Some(rate) = audio_rate {
        cmd.args(["-c:a", "mp2", "-b:a", rate]);
    }
    let made = cmd.args(["-f", "mpegts"]).arg(path).status().unwrap();
    assert!(made.success(), "ffmpeg made {}", path.display());
}
