// two_flow.cc — ns-3 reference run for fanout's two-flow cross-check.
//
// Two bulk TCP flows share one bottleneck of a dumbbell:
//
//   s0 ──access──┐                       ┌──access── d0
//                r0 ════ bottleneck ════ r1
//   s1 ──access──┘                       └──access── d1
//
// Flow i is a BulkSendApplication on s_i feeding a PacketSink on d_i.
// Goodput is what the sinks received during [warmup, duration].
//
// Scenarios (see tools/ns3/README.md for the reasoning behind each choice):
//   droptail: 20 Mbit/s / 23 ms bottleneck, 1 Gbit/s / 1 ms access links,
//             base RTT 50 ms, a FIFO of 83 packets (one BDP) on the
//             bottleneck *device* (DropTailQueue<Packet> MaxSize 83p) and no
//             traffic-control queue disc anywhere.
//   red:      4.5 Mbit/s / 18 ms bottleneck, 100 Mbit/s / 1 ms access links,
//             base RTT 40 ms, RedQueueDisc in byte mode on the bottleneck
//             (MinTh 15000 B, MaxTh 45000 B, limit 60000 B, max_p 0.4,
//             QW 0.002, gentle, MeanPktSize 1500, Wait off), device queue 1p.
//
// Output: one JSON line on stdout.

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <cmath>
#include <cstdint>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

using namespace ns3;

namespace
{

constexpr uint32_t kFlows = 2;
constexpr uint32_t kSegmentSize = 1448; // payload; +32 TCP (w/ timestamps) +20 IP = 1500
constexpr uint32_t kIpPacket = 1500;

// Counters for the measurement window [warmup, duration].
struct Window
{
    double start = 0.0;
    bool open = false;
    uint64_t bottleneckTxBytes = 0;              // PPP frames sent r0 -> r1
    std::map<std::string, uint64_t> drops;       // bottleneck drops by reason
    std::vector<uint64_t> rxAtStart;             // sink totals at window start
};

Window g_win;

void
OpenWindow(std::vector<Ptr<PacketSink>> sinks)
{
    g_win.open = true;
    g_win.rxAtStart.clear();
    for (auto& s : sinks)
    {
        g_win.rxAtStart.push_back(s->GetTotalRx());
    }
}

void
OnBottleneckTx(Ptr<const Packet> p)
{
    if (g_win.open)
    {
        g_win.bottleneckTxBytes += p->GetSize();
    }
}

// DropTail drop counting. The device queue stops its NetDeviceQueue when it
// holds 83 packets; in ns-3.37 the traffic-control layer then discards the
// packet silently (no trace source, and the queue's own "Drop" never fires).
// So drops = packets r0 forwards towards the receivers - packets the
// bottleneck device queue accepts.
std::vector<Ipv4Address> g_receiverAddrs;
uint64_t g_fwdToBottleneck = 0;
uint64_t g_bnEnqueued = 0;

void
OnR0Forward(const Ipv4Header& h, Ptr<const Packet>, uint32_t)
{
    if (!g_win.open)
    {
        return;
    }
    for (auto& a : g_receiverAddrs)
    {
        if (h.GetDestination() == a)
        {
            g_fwdToBottleneck++;
            return;
        }
    }
}

void
OnBottleneckEnqueue(Ptr<const Packet>)
{
    if (g_win.open)
    {
        g_bnEnqueued++;
    }
}

void
OnQueueDiscDrop(Ptr<const QueueDiscItem>, const char* reason)
{
    if (!g_win.open)
    {
        return;
    }
    std::string r(reason);
    if (r == RedQueueDisc::UNFORCED_DROP)
    {
        g_win.drops["red_early"]++;
    }
    else if (r == RedQueueDisc::FORCED_DROP)
    {
        g_win.drops["red_forced"]++;
    }
    else
    {
        g_win.drops["red_overflow"]++; // internal queue full (limit 60000 B)
    }
}

std::string
Num(double v, int prec = 6)
{
    std::ostringstream o;
    o << std::setprecision(prec) << v;
    return o.str();
}

} // namespace

int
main(int argc, char* argv[])
{
    std::string scenario = "droptail";
    std::string tcp = "newreno";
    uint32_t seed = 1;
    double duration = 65.0; // total simulated seconds
    double warmup = 5.0;    // measurement starts here
    double stagger = 0.1;   // flow 1 starts this long after flow 0
    bool pacing = false;
    double minRtoMs = 1000.0; // ns-3 default (RFC 6298 lower bound)
    double delAckMs = 200.0;  // ns-3 default DelAckTimeout

    CommandLine cmd(__FILE__);
    cmd.Usage("Two bulk TCP flows over a dumbbell bottleneck; prints one JSON line.");
    cmd.AddValue("scenario", "droptail (20 Mbit/s, 50 ms, 83p FIFO) | red (4.5 Mbit/s, 40 ms, RED)", scenario);
    cmd.AddValue("tcp", "newreno (ns3::TcpNewReno) | linuxreno (ns3::TcpLinuxReno) | cubic (ns3::TcpCubic)", tcp);
    cmd.AddValue("seed", "ns-3 run number (RngSeedManager::SetRun); seed stays 1", seed);
    cmd.AddValue("duration", "total simulated time in seconds (measurement = duration - warmup)", duration);
    cmd.AddValue("warmup", "seconds excluded from the goodput measurement", warmup);
    cmd.AddValue("stagger", "start offset of flow 1 relative to flow 0, seconds", stagger);
    cmd.AddValue("pacing", "enable ns-3 TCP pacing (TcpSocketState::EnablePacing)", pacing);
    cmd.AddValue("minRtoMs", "TcpSocketBase::MinRto in milliseconds", minRtoMs);
    cmd.AddValue("delAckMs", "TcpSocket::DelAckTimeout in milliseconds", delAckMs);
    cmd.Parse(argc, argv);

    if (scenario != "droptail" && scenario != "red")
    {
        std::cerr << "unknown --scenario=" << scenario << " (droptail|red)\n";
        return 2;
    }
    std::string tcpType;
    if (tcp == "newreno")
    {
        tcpType = "ns3::TcpNewReno";
    }
    else if (tcp == "linuxreno")
    {
        tcpType = "ns3::TcpLinuxReno"; // Reno with Linux's per-segment (ABC-like) counting
    }
    else if (tcp == "cubic")
    {
        tcpType = "ns3::TcpCubic";
    }
    else
    {
        std::cerr << "unknown --tcp=" << tcp << " (newreno|linuxreno|cubic)\n";
        return 2;
    }
    if (!(warmup >= 0.0 && duration > warmup))
    {
        std::cerr << "need 0 <= warmup < duration\n";
        return 2;
    }

    const bool red = scenario == "red";
    const std::string bnRate = red ? "4.5Mbps" : "20Mbps";
    const double bnRateBps = red ? 4.5e6 : 20e6;
    const double bnDelayMs = red ? 18.0 : 23.0;
    const std::string accRate = red ? "100Mbps" : "1Gbps";
    const double accDelayMs = 1.0;
    const double rttMs = 2.0 * (accDelayMs + bnDelayMs + accDelayMs);

    RngSeedManager::SetSeed(1);
    RngSeedManager::SetRun(seed);

    // ---- TCP ------------------------------------------------------------
    Config::SetDefault("ns3::TcpL4Protocol::SocketType", TypeIdValue(TypeId::LookupByName(tcpType)));
    // PRR (RFC 6937) is the ns-3.37 default loss recovery; named explicitly.
    Config::SetDefault("ns3::TcpL4Protocol::RecoveryType",
                       TypeIdValue(TypeId::LookupByName("ns3::TcpPrrRecovery")));
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(kSegmentSize));
    Config::SetDefault("ns3::TcpSocket::InitialCwnd", UintegerValue(10));
    Config::SetDefault("ns3::TcpSocket::DelAckCount", UintegerValue(2));
    Config::SetDefault("ns3::TcpSocket::SndBufSize", UintegerValue(16 << 20));
    Config::SetDefault("ns3::TcpSocket::RcvBufSize", UintegerValue(16 << 20));
    Config::SetDefault("ns3::TcpSocketBase::Sack", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::Timestamp", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocketBase::WindowScaling", BooleanValue(true));
    Config::SetDefault("ns3::TcpSocket::DelAckTimeout", TimeValue(MilliSeconds(delAckMs)));
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(minRtoMs)));
    Config::SetDefault("ns3::TcpSocketState::EnablePacing", BooleanValue(pacing));

    // ---- Topology -------------------------------------------------------
    NodeContainer senders;
    senders.Create(kFlows);
    NodeContainer routers;
    routers.Create(2);
    NodeContainer receivers;
    receivers.Create(kFlows);

    // Access links never congest; their device queues are made large enough
    // that no packet is ever lost there.
    PointToPointHelper access;
    access.SetDeviceAttribute("DataRate", StringValue(accRate));
    access.SetChannelAttribute("Delay", TimeValue(MilliSeconds(accDelayMs)));
    access.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue("10000p"));

    PointToPointHelper bottleneck;
    bottleneck.SetDeviceAttribute("DataRate", StringValue(bnRate));
    bottleneck.SetChannelAttribute("Delay", TimeValue(MilliSeconds(bnDelayMs)));
    // droptail: the device FIFO *is* the bottleneck buffer (83 packets).
    // red: a 1-packet device queue, so the RED queue disc above holds the backlog.
    bottleneck.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue(red ? "1p" : "83p"));

    std::vector<NetDeviceContainer> accessDevs;
    for (uint32_t i = 0; i < kFlows; ++i)
    {
        accessDevs.push_back(access.Install(senders.Get(i), routers.Get(0)));
    }
    for (uint32_t i = 0; i < kFlows; ++i)
    {
        accessDevs.push_back(access.Install(routers.Get(1), receivers.Get(i)));
    }
    NetDeviceContainer bnDevs = bottleneck.Install(routers.Get(0), routers.Get(1));

    InternetStackHelper stack;
    stack.InstallAll();

    // ---- Queueing -------------------------------------------------------
    // Install RED before addresses are assigned so that Ipv4AddressHelper does
    // not install its default FqCoDel there; every other device gets the
    // default and has it removed below.
    QueueDiscContainer bnQdiscs;
    if (red)
    {
        TrafficControlHelper tch;
        tch.SetRootQueueDisc("ns3::RedQueueDisc",
                             "MaxSize", QueueSizeValue(QueueSize("60000B")), // byte mode
                             "MeanPktSize", UintegerValue(kIpPacket),
                             "MinTh", DoubleValue(15000.0), // bytes (= 10 x 1500 B)
                             "MaxTh", DoubleValue(45000.0), // bytes (= 30 x 1500 B)
                             "LInterm", DoubleValue(2.5),   // max_p = 1 / LInterm = 0.4
                             "QW", DoubleValue(0.002),
                             "Gentle", BooleanValue(true),
                             "Wait", BooleanValue(false),   // Floyd & Jacobson 1993 p_a
                             "LinkBandwidth", DataRateValue(DataRate(bnRate)),
                             "LinkDelay", TimeValue(MilliSeconds(bnDelayMs)));
        bnQdiscs = tch.Install(bnDevs);
    }

    Ipv4AddressHelper addr;
    std::vector<Ipv4InterfaceContainer> accessIfs;
    for (uint32_t i = 0; i < accessDevs.size(); ++i)
    {
        std::ostringstream net;
        net << "10.1." << (i + 1) << ".0";
        addr.SetBase(net.str().c_str(), "255.255.255.0");
        accessIfs.push_back(addr.Assign(accessDevs[i]));
    }
    addr.SetBase("10.2.1.0", "255.255.255.0");
    addr.Assign(bnDevs);

    TrafficControlHelper none;
    for (auto& d : accessDevs)
    {
        none.Uninstall(d);
    }
    if (!red)
    {
        none.Uninstall(bnDevs);
    }

    Ipv4GlobalRoutingHelper::PopulateRoutingTables();

    // ---- Instrumentation ------------------------------------------------
    Ptr<PointToPointNetDevice> bnTx = DynamicCast<PointToPointNetDevice>(bnDevs.Get(0));
    NS_ABORT_UNLESS(bnTx->TraceConnectWithoutContext("PhyTxBegin", MakeCallback(&OnBottleneckTx)));
    if (red)
    {
        NS_ABORT_UNLESS(bnQdiscs.Get(0)->TraceConnectWithoutContext(
            "DropBeforeEnqueue", MakeCallback(&OnQueueDiscDrop)));
    }
    else
    {
        for (uint32_t i = 0; i < kFlows; ++i)
        {
            g_receiverAddrs.push_back(accessIfs[kFlows + i].GetAddress(1));
        }
        NS_ABORT_UNLESS(routers.Get(0)->GetObject<Ipv4L3Protocol>()->TraceConnectWithoutContext(
            "UnicastForward", MakeCallback(&OnR0Forward)));
        NS_ABORT_UNLESS(bnTx->GetQueue()->TraceConnectWithoutContext(
            "Enqueue", MakeCallback(&OnBottleneckEnqueue)));
    }

    // ---- Applications ---------------------------------------------------
    std::vector<Ptr<PacketSink>> sinks;
    std::vector<double> starts;
    for (uint32_t i = 0; i < kFlows; ++i)
    {
        uint16_t port = 5000 + i;
        // receivers' access links are accessDevs[kFlows + i]; the receiver is node 1
        Ipv4Address dst = accessIfs[kFlows + i].GetAddress(1);

        PacketSinkHelper sinkHelper("ns3::TcpSocketFactory",
                                    InetSocketAddress(Ipv4Address::GetAny(), port));
        ApplicationContainer sinkApp = sinkHelper.Install(receivers.Get(i));
        sinkApp.Start(Seconds(0.0));
        sinkApp.Stop(Seconds(duration));
        sinks.push_back(DynamicCast<PacketSink>(sinkApp.Get(0)));

        BulkSendHelper src("ns3::TcpSocketFactory", InetSocketAddress(dst, port));
        src.SetAttribute("MaxBytes", UintegerValue(0)); // unlimited
        src.SetAttribute("SendSize", UintegerValue(kSegmentSize));
        ApplicationContainer srcApp = src.Install(senders.Get(i));
        double start = i * stagger;
        starts.push_back(start);
        srcApp.Start(Seconds(start));
        srcApp.Stop(Seconds(duration));
    }

    Simulator::Schedule(Seconds(warmup), &OpenWindow, sinks);
    Simulator::Stop(Seconds(duration));
    Simulator::Run();

    // ---- Results --------------------------------------------------------
    const double measure = duration - warmup;
    if (!red)
    {
        g_win.drops["droptail_overflow"] = g_fwdToBottleneck - g_bnEnqueued;
    }
    std::vector<double> goodput;
    std::vector<uint64_t> rxBytes;
    double sum = 0.0;
    double sumSq = 0.0;
    for (uint32_t i = 0; i < kFlows; ++i)
    {
        uint64_t b = sinks[i]->GetTotalRx() - g_win.rxAtStart[i];
        double g = b * 8.0 / measure;
        rxBytes.push_back(b);
        goodput.push_back(g);
        sum += g;
        sumSq += g * g;
    }
    double jain = sumSq > 0.0 ? (sum * sum) / (kFlows * sumSq) : 0.0;

    std::ostringstream j;
    j << "{\"simulator\":\"ns-3.37\""
      << ",\"scenario\":\"" << scenario << "\""
      << ",\"tcp\":\"" << tcp << "\""
      << ",\"tcp_type\":\"" << tcpType << "\""
      << ",\"seed\":" << seed
      << ",\"duration_s\":" << Num(duration)
      << ",\"warmup_s\":" << Num(warmup)
      << ",\"measure_s\":" << Num(measure)
      << ",\"stagger_s\":" << Num(stagger)
      << ",\"pacing\":" << (pacing ? "true" : "false")
      << ",\"min_rto_ms\":" << Num(minRtoMs)
      << ",\"del_ack_timeout_ms\":" << Num(delAckMs)
      << ",\"bottleneck_bps\":" << Num(bnRateBps, 10)
      << ",\"bottleneck_delay_ms\":" << Num(bnDelayMs)
      << ",\"access\":\"" << accRate << "/" << Num(accDelayMs) << "ms\""
      << ",\"base_rtt_ms\":" << Num(rttMs)
      << ",\"mss\":" << kSegmentSize
      << ",\"queue\":"
      << (red ? "{\"kind\":\"red\",\"placement\":\"RedQueueDisc on bottleneck, device queue 1p\","
                "\"byte_mode\":true,\"min_th_bytes\":15000,\"max_th_bytes\":45000,"
                "\"limit_bytes\":60000,\"max_p\":0.4,\"w_q\":0.002,\"gentle\":true,"
                "\"wait\":false,\"mean_pkt_bytes\":1500}"
              : "{\"kind\":\"droptail\",\"placement\":\"device DropTailQueue, no queue disc\","
                "\"limit_packets\":83}")
      << ",\"flows\":[";
    for (uint32_t i = 0; i < kFlows; ++i)
    {
        j << (i ? "," : "") << "{\"id\":" << i << ",\"start_s\":" << Num(starts[i])
          << ",\"rx_bytes\":" << rxBytes[i] << ",\"goodput_bps\":" << Num(goodput[i], 10) << "}";
    }
    j << "]"
      << ",\"goodput_bps\":[" << Num(goodput[0], 10) << "," << Num(goodput[1], 10) << "]"
      << ",\"total_goodput_bps\":" << Num(sum, 10)
      << ",\"utilisation\":" << Num(sum / bnRateBps)
      << ",\"link_utilisation\":" << Num(g_win.bottleneckTxBytes * 8.0 / measure / bnRateBps)
      << ",\"jain\":" << Num(jain)
      << ",\"bottleneck_drops\":{";
    bool first = true;
    for (auto& kv : g_win.drops)
    {
        j << (first ? "" : ",") << "\"" << kv.first << "\":" << kv.second;
        first = false;
    }
    j << "}}";
    std::cout << j.str() << std::endl;

    Simulator::Destroy();
    return 0;
}
