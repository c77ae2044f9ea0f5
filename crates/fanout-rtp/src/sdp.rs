//! A session description (RFC 8866) of an MPEG-TS stream over RTP (RFC
//! 2250, payload type 33), with which ffmpeg (`ffplay file.sdp`), VLC and
//! GStreamer receive a fanout media stream: the group or unicast address
//! and port, the IPv4 multicast TTL, and the stream's bandwidth (`b=AS`,
//! which also sizes their RTCP at 5% of it). Written with `sdp-types`.

use sdp_types::{Attribute, Bandwidth, BandwidthType, Connection, Media, Origin, Session, Time};
use std::net::SocketAddr;

/// What a receiving application needs to know of a stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamDescription {
    /// Where the RTP goes: a group, or one receiver's address (RTCP on
    /// the next port up).
    pub destination: SocketAddr,
    /// The sender's address (the origin line).
    pub origin: std::net::IpAddr,
    /// IPv4 multicast TTL (none for unicast or IPv6).
    pub ttl: Option<u8>,
    /// A number naming the session (the origin's session id).
    pub session_id: u64,
    /// The session's name.
    pub name: String,
    /// The stream's bandwidth, kbit/s, if known.
    pub bandwidth_kbps: Option<u64>,
}

impl StreamDescription {
    /// The SDP text.
    pub fn to_sdp(&self) -> String {
        let ip = self.destination.ip();
        let ttl = self.ttl.filter(|_| ip.is_ipv4() && ip.is_multicast());
        let session = Session {
            origin: Origin::with_ip_addr(self.session_id, 1, self.origin),
            session_name: self.name.clone(),
            session_description: None,
            uri: None,
            emails: vec![],
            phones: vec![],
            connection: Some(Connection::from_ip_addr_ttl(ip, ttl)),
            bandwidths: vec![],
            times: vec![Time::new(0, 0)],
            time_zones: vec![],
            key: None,
            attributes: vec![
                Attribute::with_value("tool", "fanout"),
                Attribute::with_value("type", "broadcast"),
                Attribute::new("recvonly"),
            ],
            medias: vec![Media {
                media: "video".into(),
                port: self.destination.port(),
                num_ports: None,
                proto: "RTP/AVP".into(),
                fmt: crate::mp2t::PAYLOAD_TYPE.to_string(),
                media_title: None,
                connections: vec![],
                bandwidths: self
                    .bandwidth_kbps
                    .map(|kbps| Bandwidth::new(BandwidthType::As, kbps))
                    .into_iter()
                    .collect(),
                key: None,
                attributes: vec![Attribute::with_value(
                    "rtpmap",
                    format!(
                        "{} MP2T/{}",
                        crate::mp2t::PAYLOAD_TYPE,
                        crate::mp2t::CLOCK_RATE
                    ),
                )],
            }],
        };
        let mut out = Vec::new();
        session
            .write(&mut out)
            .expect("writing into a Vec cannot fail");
        String::from_utf8(out).expect("SDP written from UTF-8 strings")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multicast_stream_is_described_as_players_read_it() {
        let d = StreamDescription {
            destination: "239.1.2.3:5004".parse().unwrap(),
            origin: "10.0.0.1".parse().unwrap(),
            ttl: Some(16),
            session_id: 42,
            name: "camera 1".into(),
            bandwidth_kbps: Some(2000),
        };
        let sdp = d.to_sdp();
        for line in [
            "v=0\r\n",
            "o=- 42 1 IN IP4 10.0.0.1\r\n",
            "s=camera 1\r\n",
            "c=IN IP4 239.1.2.3/16\r\n",
            "t=0 0\r\n",
            "m=video 5004 RTP/AVP 33\r\n",
            "b=AS:2000\r\n",
            "a=rtpmap:33 MP2T/90000\r\n",
        ] {
            assert!(sdp.contains(line), "{line:?} in\n{sdp}");
        }
        assert!(sdp.starts_with("v=0\r\n"));
        // It parses back (sdp-types' parser, as a player's would).
        let back = Session::parse(sdp.as_bytes()).expect("valid SDP");
        assert_eq!(back.medias[0].port, 5004);
    }

    #[test]
    fn unicast_and_ipv6_streams_carry_no_ttl() {
        let mut d = StreamDescription {
            destination: "[ff15::7]:5004".parse().unwrap(),
            origin: "fd00::1".parse().unwrap(),
            ttl: Some(16),
            session_id: 1,
            name: "s".into(),
            bandwidth_kbps: None,
        };
        assert!(d.to_sdp().contains("c=IN IP6 ff15::7\r\n"));
        assert!(!d.to_sdp().contains("b="));
        d.destination = "10.0.0.9:5004".parse().unwrap();
        assert!(d.to_sdp().contains("c=IN IP4 10.0.0.9\r\n"));
    }
}
