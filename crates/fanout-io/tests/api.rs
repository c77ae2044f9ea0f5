//! The blocking library API (`fanout_io::api`) end to end over loopback:
//! real sockets, real engines, one process. Unicast fan-out (no group) so
//! no multicast route is needed.

use fanout_core::rng::Rng;
use fanout_io::api::{Outcome, SessionListener, SessionOptions, SubscribeOptions, Subscriber};
use fanout_io::{Clock, ImpairConfig};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::thread::JoinHandle;
use std::time::Duration;

fn v4() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

/// Reads the whole stream from `sender` in `chunk`-byte reads.
fn spawn_reader(sender: SocketAddr, chunk: usize) -> JoinHandle<std::io::Result<Vec<u8>>> {
    std::thread::spawn(move || {
        let mut conn = Subscriber::subscribe(None, v4())?.connect(sender)?;
        let mut got = Vec::new();
        let mut buf = vec![0u8; chunk];
        loop {
            let n = conn.read(&mut buf)?;
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(conn.bytes_read(), got.len() as u64);
        Ok(got)
    })
}

fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut data = vec![0u8; len];
    Rng::new(seed).fill(&mut data);
    data
}

#[test]
fn four_mib_reach_three_receivers_identically() {
    let data = pseudo_random(4 << 20, 7);
    let opts = SessionOptions::unicast()
        .wait_for(3)
        .wait_at_most(Duration::from_secs(10));
    let mut session = SessionListener::bind(v4(), opts).unwrap();
    let sender = session.local_addr();
    // Different read sizes: the stream, not the datagrams, is the contract.
    let readers: Vec<_> = [1000, 64 << 10, 1 << 20]
        .into_iter()
        .map(|chunk| spawn_reader(sender, chunk))
        .collect();
    let mut joined = Vec::new();
    for _ in 0..3 {
        joined.push(session.accept().unwrap());
    }
    joined.sort_by_key(|m| m.id);
    joined.dedup_by_key(|m| m.id);
    assert_eq!(joined.len(), 3, "three distinct members: {joined:?}");
    assert!(joined.iter().all(|m| m.start == 0));

    let clock = Clock::new();
    let t0 = clock.now();
    // Write in uneven pieces through std::io::Write.
    for piece in data.chunks(300_001) {
        session.write_all(piece).unwrap();
    }
    let summary = session.finish().unwrap();
    let secs = (clock.now() - t0).as_secs_f64();
    let late = session.write(b"x").unwrap_err();
    assert_eq!(late.kind(), ErrorKind::BrokenPipe, "{late}");

    assert_eq!(summary.bytes, data.len() as u64);
    assert_eq!(summary.members_joined, 3);
    assert_eq!(summary.completed(), 3, "{summary:?}");
    // Unicast fan-out: every segment went to each member separately.
    assert!(summary.stats.fanout_copies >= 3 * summary.stats.data_segments - 3);
    for r in readers {
        let got = r.join().unwrap().unwrap();
        assert_eq!(got.len(), data.len());
        assert!(got == data, "a receiver got different bytes");
    }
    eprintln!(
        "4 MiB to 3 receivers in {secs:.2} s ({:.1} MB/s each), {} data segments, \
         {} unicast repairs",
        data.len() as f64 / secs / 1e6,
        summary.stats.data_segments,
        summary.stats.unicast_repairs
    );
}

#[test]
fn connecting_where_no_sender_runs_fails_clearly_and_in_time() {
    // A port nobody listens on: bind, learn it, close.
    let port = std::net::UdpSocket::bind(v4())
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nobody: SocketAddr = ([127, 0, 0, 1], port).into();
    let opts = SubscribeOptions::default().connect_timeout(Duration::from_millis(800));
    let sub = Subscriber::with_options(None, v4(), opts).unwrap();
    let clock = Clock::new();
    let t0 = clock.now();
    let err = sub
        .connect(nobody)
        .err()
        .expect("no sender: connect must fail");
    let waited = clock.now() - t0;
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&nobody.to_string()),
        "names the address: {msg}"
    );
    assert!(
        waited >= Duration::from_millis(700) && waited < Duration::from_secs(3),
        "gave up after {waited:?}"
    );
}

#[test]
fn a_sender_without_receivers_gives_up_after_wait_at_most() {
    let opts = SessionOptions::unicast().wait_at_most(Duration::from_millis(300));
    let mut session = SessionListener::bind(v4(), opts).unwrap();
    session.write_all(b"nobody listens").unwrap(); // fits the buffer
    let err = session.finish().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::TimedOut, "{err}");
    assert_eq!(
        session
            .wait_for_members(1, Duration::from_millis(50))
            .unwrap_err()
            .kind(),
        ErrorKind::TimedOut
    );
}

#[test]
fn a_receiver_that_leaves_is_reported_and_the_others_complete() {
    let data = pseudo_random(1 << 20, 9);
    let opts = SessionOptions::unicast().wait_for(2);
    let mut session = SessionListener::bind(v4(), opts).unwrap();
    let sender = session.local_addr();
    let stayer = spawn_reader(sender, 32 << 10);
    let leaver = std::thread::spawn(move || {
        let mut conn = Subscriber::subscribe(None, v4())
            .unwrap()
            .connect(sender)
            .unwrap();
        let mut buf = vec![0u8; 100_000];
        conn.read_exact(&mut buf).unwrap();
        // Dropped mid-stream: the membership is reset.
    });
    session.wait_for_members(2, Duration::from_secs(5)).unwrap();
    session.write_all(&data).unwrap();
    let summary = session.finish().unwrap();
    leaver.join().unwrap();
    assert_eq!(stayer.join().unwrap().unwrap(), data);
    assert_eq!(summary.completed(), 1, "{summary:?}");
    let left: Vec<_> = summary
        .members
        .iter()
        .filter(|m| matches!(m.outcome, Outcome::Failed(_)))
        .collect();
    assert_eq!(left.len(), 1, "{summary:?}");
    // It said so (a RESET on drop), rather than being evicted as stalled.
    assert!(
        matches!(&left[0].outcome, Outcome::Failed(why) if why.contains("dropped the connection")),
        "{:?}",
        left[0]
    );
}

#[test]
fn an_aborted_session_is_an_error_at_the_reader() {
    let mut session = SessionListener::bind(v4(), SessionOptions::unicast()).unwrap();
    let reader = spawn_reader(session.local_addr(), 4096);
    session.accept().unwrap();
    session.write_all(&[1u8; 10_000]).unwrap();
    session.abort("test abort");
    let err = reader.join().unwrap().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
    assert!(err.to_string().contains("test abort"), "{err}");
}

#[test]
fn a_refused_join_is_a_connection_reset_naming_the_reason() {
    let opts = SessionOptions::unicast().max_members(1);
    let mut session = SessionListener::bind(v4(), opts).unwrap();
    let sender = session.local_addr();
    let first = Subscriber::subscribe(None, v4())
        .unwrap()
        .connect(sender)
        .unwrap();
    session.accept().unwrap();
    let err = Subscriber::subscribe(None, v4())
        .unwrap()
        .connect(sender)
        .err()
        .expect("a full session refuses");
    assert_eq!(err.kind(), ErrorKind::ConnectionReset, "{err}");
    assert!(err.to_string().contains("session full"), "{err}");
    drop(first);
}

#[test]
fn losses_at_the_receivers_are_repaired_through_the_api() {
    let data = pseudo_random(1 << 20, 11);
    let mut session = SessionListener::bind(v4(), SessionOptions::unicast().wait_for(2)).unwrap();
    let sender = session.local_addr();
    let readers: Vec<_> = [21u64, 22]
        .into_iter()
        .map(|seed| {
            std::thread::spawn(move || -> std::io::Result<Vec<u8>> {
                let mut opts = SubscribeOptions::default();
                // 3% of arriving datagrams dropped in user space, per receiver.
                opts.driver_mut().rx_impairment = ImpairConfig::loss(0.03, seed);
                let mut conn = Subscriber::with_options(None, v4(), opts)?.connect(sender)?;
                let mut got = Vec::new();
                conn.read_to_end(&mut got)?;
                Ok(got)
            })
        })
        .collect();
    session.wait_for_members(2, Duration::from_secs(5)).unwrap();
    session.write_all(&data).unwrap();
    let summary = session.finish().unwrap();
    for r in readers {
        assert!(r.join().unwrap().unwrap() == data);
    }
    assert_eq!(summary.completed(), 2, "{summary:?}");
    let repairs = summary.stats.unicast_repairs + summary.stats.multicast_repairs;
    assert!(repairs > 0, "3% loss must have needed repairs: {summary:?}");
    eprintln!("1 MiB to 2 receivers at 3% loss: {repairs} repairs");
}

/// Session relay: two receivers each send more than one upstream window;
/// the sender's application gets each member's bytes exactly, in order,
/// with its end, and a receiver's `flush` returns once all was
/// acknowledged.
#[test]
fn upstream_bytes_of_two_receivers_arrive_whole_at_the_sender() {
    use std::collections::BTreeMap;
    let mut session = SessionListener::bind(v4(), SessionOptions::unicast().wait_for(2)).unwrap();
    let sender = session.local_addr();
    let receivers: Vec<_> = (0..2u64)
        .map(|i| {
            std::thread::spawn(move || -> std::io::Result<(u64, Vec<u8>)> {
                let mut conn = Subscriber::subscribe(None, v4())?.connect(sender)?;
                let mine = pseudo_random(150_000 + i as usize, 40 + i);
                let mut up = conn.upstream();
                up.write_all(&mine)?;
                up.flush()?; // every byte acknowledged by the sender
                conn.finish_upstream();
                let mut rest = Vec::new();
                conn.read_to_end(&mut rest)?;
                Ok((conn.member_id(), mine))
            })
        })
        .collect();
    let mut got: BTreeMap<u64, Vec<u8>> = BTreeMap::new();
    let mut ended = 0;
    while ended < 2 {
        let up = session
            .recv_upstream(Duration::from_secs(20))
            .unwrap()
            .expect("upstream within 20 s");
        got.entry(up.member.0).or_default().extend(&up.bytes);
        ended += usize::from(up.finished);
    }
    session.finish().unwrap();
    for r in receivers {
        let (id, mine) = r.join().unwrap().unwrap();
        assert!(got.get(&id) == Some(&mine), "member {id}");
    }
    let st = session.summary();
    assert_eq!(st.close, Some(fanout_transport::CloseReason::Completed));
}
