//! `fanout demo`: one sender and four receivers over real IP multicast (in
//! network namespaces it creates; without them, on loopback by unicast
//! fan-out, labelled so), then a short simulation; no setup.

use crate::cmd_send::SendArgs;
use crate::cmd_sim::simulate_scenario;
use anyhow::{ensure, Context, Result};
use clap::{Args, Parser};
use fanout_sim::Scenario;
use std::io::Write;

/// The embedded scenario: two CUBIC flows sharing a 20 Mbit/s bottleneck.
const DEMO_SCENARIO: &str = include_str!("../../../scenarios/fairness-droptail-cubic.toml");

/// Arguments of `fanout demo`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  fanout demo
  fanout demo --mib 256 --loss 0.02")]
pub struct DemoArgs {
    /// Size of the file sent, in MiB.
    #[arg(long, default_value_t = 64, value_name = "MIB", value_parser = clap::value_parser!(u64).range(1..=4096))]
    pub mib: u64,
    /// Fraction of datagrams receivers 1 and 2 drop on purpose (0–0.5), to
    /// show recovery.
    #[arg(long, default_value_t = 0.01, value_name = "P")]
    pub loss: f64,
}

/// Receivers of the demo's session.
const DEMO_RECEIVERS: usize = 4;

/// The demo's group (administratively scoped, inside its own namespaces).
const DEMO_GROUP: &str = "239.255.77.1:7000";

/// `fanout send ARGS`, parsed as the command line would be.
fn send_args(args: &[&str]) -> Result<SendArgs> {
    #[derive(Parser)]
    struct Wrap {
        #[command(flatten)]
        send: SendArgs,
    }
    Ok(Wrap::try_parse_from([&["send"], args].concat())?.send)
}

/// The receivers' flags: receivers 1 and 2 drop `loss` of what reaches them.
fn receiver_flags(i: usize, loss: f64) -> Vec<String> {
    let mut v: Vec<String> = ["recv", "--json", "--quiet", "--wait", "30"]
        .map(String::from)
        .into();
    if i <= 2 && loss > 0.0 {
        v.extend(["--inject-loss".into(), loss.to_string()]);
        v.extend(["--loss-seed".into(), i.to_string()]);
    }
    v
}

/// Each receiver's JSON report (with `local`, its address), or an error.
fn collect(reports: Vec<(String, std::process::Output)>) -> Result<Vec<serde_json::Value>> {
    reports
        .into_iter()
        .map(|(local, o)| {
            let mut v: serde_json::Value =
                serde_json::from_slice(&o.stdout).with_context(|| {
                    format!(
                        "receiver {local} failed: {}",
                        String::from_utf8_lossy(&o.stderr).trim()
                    )
                })?;
            v["local"] = local.into();
            Ok(v)
        })
        .collect()
}

/// The session over real IP multicast: a LAN of namespaces, the sender in
/// host 0 (this process, its live table on this terminal), receivers
/// told only the group in hosts 1..=N (this binary).
fn multicast_session(
    dir: &std::path::Path,
    src: &std::path::Path,
    args: &DemoArgs,
) -> Result<Vec<serde_json::Value>> {
    let exe = std::env::current_exe().context("cannot find this program")?;
    let lan = fanout_netns::LanTopology::new(DEMO_RECEIVERS + 1)?;
    let mut children = Vec::new();
    for i in 1..=DEMO_RECEIVERS {
        let h = lan.host(i);
        let mut cmd = h.netns().exec(&exe);
        cmd.args(receiver_flags(i, args.loss))
            .args([
                "--group",
                DEMO_GROUP,
                "--interface",
                &h.ipv4().to_string(),
                "-o",
            ])
            .arg(dir.join(format!("got{i}.bin")))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        children.push((h.ipv4().to_string(), h.netns().spawn(cmd)?));
    }
    let group: std::net::SocketAddr = DEMO_GROUP.parse()?;
    lan.wait_for_members(
        group.ip(),
        DEMO_RECEIVERS,
        std::time::Duration::from_secs(5),
    )?;
    let bind = format!("{}:6000", lan.host(0).ipv4());
    let n = DEMO_RECEIVERS.to_string();
    let file = src.to_string_lossy();
    let send = send_args(&[
        &file,
        "--group",
        DEMO_GROUP,
        "--bind",
        &bind,
        "--wait-for",
        &n,
    ])?;
    let sent = lan
        .host(0)
        .netns()
        .run_in(|| crate::cmd_send::send(&send))??;
    sent.print(false);
    let mut reports = Vec::new();
    for (ip, mut child) in children {
        let _ = child.wait_timeout(std::time::Duration::from_secs(30))?;
        let out = child.child_mut();
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        if let Some(o) = out.stdout.as_mut() {
            std::io::Read::read_to_end(o, &mut stdout)?;
        }
        if let Some(e) = out.stderr.as_mut() {
            std::io::Read::read_to_end(e, &mut stderr)?;
        }
        let status = out.try_wait()?.unwrap_or_default();
        reports.push((
            ip,
            std::process::Output {
                status,
                stdout,
                stderr,
            },
        ));
    }
    collect(reports)
}

/// The same session on loopback, without multicast: the sender fans out
/// one unicast copy per receiver.
fn loopback_session(
    dir: &std::path::Path,
    src: &std::path::Path,
    args: &DemoArgs,
) -> Result<Vec<serde_json::Value>> {
    let exe = std::env::current_exe().context("cannot find this program")?;
    let bind = std::net::UdpSocket::bind("127.0.0.1:0")?
        .local_addr()?
        .to_string();
    let mut children = Vec::new();
    for i in 1..=DEMO_RECEIVERS {
        let child = std::process::Command::new(&exe)
            .args(receiver_flags(i, args.loss))
            .args(["--from", &bind, "-o"])
            .arg(dir.join(format!("got{i}.bin")))
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .context("cannot start a receiver")?;
        children.push(child);
    }
    let n = DEMO_RECEIVERS.to_string();
    let file = src.to_string_lossy();
    let send = send_args(&[&file, "--unicast", "--bind", &bind, "--wait-for", &n]);
    let sent = send.and_then(|s| crate::cmd_send::send(&s));
    let mut reports = Vec::new();
    for child in children {
        let o = child.wait_with_output()?;
        reports.push(("127.0.0.1".to_owned(), o));
    }
    sent?.print(false);
    collect(reports)
}

/// Runs `fanout demo`.
pub fn run(args: DemoArgs) -> Result<()> {
    ensure!(
        (0.0..0.5).contains(&args.loss),
        "--loss must be in [0, 0.5)"
    );
    let dir = std::env::temp_dir().join(format!("fanout-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let result = demo_in(&dir, &args);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn demo_in(dir: &std::path::Path, args: &DemoArgs) -> Result<()> {
    println!("fanout demo");
    let src = dir.join("demo.bin");
    let mut f = std::fs::File::create(&src)?;
    let mut rng = fanout_core::Rng::new(0xDE30);
    let mut chunk = vec![0u8; 1 << 20];
    for _ in 0..args.mib {
        rng.fill(&mut chunk);
        f.write_all(&chunk)?;
    }
    drop(f);
    let receivers = match fanout_netns::require_netns() {
        None => {
            println!(
                "1) one sender, {DEMO_RECEIVERS} receivers over real IP multicast: a LAN of network \
                 namespaces, {} MiB, receivers 1 and 2 dropping {:.1}% of datagrams on purpose",
                args.mib,
                args.loss * 100.0
            );
            multicast_session(dir, &src, args)?
        }
        Some(why) => {
            println!(
                "1) one sender, {DEMO_RECEIVERS} receivers on loopback by UNICAST fan-out (one copy \
                 per receiver: no network namespaces here, {}; run as root for multicast), {} MiB, \
                 receivers 1 and 2 dropping {:.1}% of datagrams on purpose",
                why.as_str(),
                args.mib,
                args.loss * 100.0
            );
            loopback_session(dir, &src, args)?
        }
    };
    println!(
        "   {:<3} {:<22} {:>10} {:>9} {:>13}  blake3",
        "rx", "address", "outcome", "Mbit/s", "dropped"
    );
    let mut verified = 0;
    for (i, r) in receivers.iter().enumerate() {
        let ok = r["verified"] == true;
        verified += usize::from(ok);
        println!(
            "   {:<3} {:<22} {:>10} {:>9.1} {:>13}  {}",
            i + 1,
            r["local"].as_str().unwrap_or("?"),
            if ok { "verified" } else { "FAILED" },
            r["goodput_bps"].as_f64().unwrap_or(0.0) / 1e6,
            r["injected_drops"].as_u64().unwrap_or(0),
            r["blake3"].as_str().map_or("-", |h| &h[..h.len().min(16)]),
        );
    }
    ensure!(
        verified == DEMO_RECEIVERS,
        "{verified} of {DEMO_RECEIVERS} receivers verified the file"
    );
    println!(
        "2) simulation: two CUBIC flows through a 20 Mbit/s DropTail bottleneck, 50 ms RTT, 65 s"
    );
    let scenario = Scenario::from_toml(DEMO_SCENARIO, "fairness-droptail-cubic.toml")?;
    let figs = simulate_scenario(scenario, None, None, 5.0)?;
    for fl in &figs.flows {
        println!("   flow {}: {:.2} Mbit/s", fl.label, fl.goodput_bps / 1e6);
    }
    let bottleneck = figs.links.iter().find(|l| l.label == "r1->r2");
    let trace = figs.trace_hash.as_deref().map_or(String::new(), |h| {
        format!(
            "; trace hash {h} (seed {}: rerun gives the same)",
            figs.seed
        )
    });
    println!(
        "   Jain fairness index {:.4}; bottleneck utilisation {:.1}%{trace}",
        figs.jain_index,
        bottleneck.map_or(0.0, |l| l.utilisation * 100.0),
    );
    println!("done: try `fanout send --help`, `fanout recv --help`, `fanout sim scenarios/red-4m5.toml`.");
    Ok(())
}
