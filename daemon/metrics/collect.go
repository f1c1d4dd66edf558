package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Snapshot is the daemon's state as one scrape reports it. The daemon
// builds it on demand (Metrics.SetSource); each field is bounded as its
// comment says.
type Snapshot struct {
	// Tasks counts this daemon's tasks by state (running, moving out,
	// arriving, and the remembered exited, failed and killed ones).
	Tasks map[string]int
	// MailboxMessages and MailboxBytes sum the undelivered messages of
	// the running tasks; MailboxMaxMessages is the deepest mailbox.
	MailboxMessages, MailboxBytes, MailboxMaxMessages int
	// FrameBytes is the bytes of large frame bodies the connections'
	// readers hold now (the daemon-wide frame budget's use), FramePeakBytes
	// the most they held at once since the daemon started.
	FrameBytes, FramePeakBytes int
	// Load is the host's sampled load: runnable tasks plus External,
	// the other runnable processes. Users is the interactive users
	// logged in; MemFreeBytes the memory available (negative: unknown).
	Load, External float64
	Users          int
	MemFreeBytes   float64
	// Conns are the QUIC connections to peer hosts that report figures,
	// one per peer host.
	Conns []Conn
	// Hosts (the master only) are the hosts of the virtual machine as
	// their reports describe them.
	Hosts []Host
}

// Conn is one QUIC connection's figures, as the transport reports them.
// The byte and packet counts are the connection's own: they start again
// at zero when the connection to a host is replaced.
type Conn struct {
	Peer                         string
	SmoothedRTT, MinRTT          time.Duration
	BytesSent, BytesReceived     uint64
	PacketsSent, PacketsReceived uint64
	PacketsLost                  uint64
	CongestionWindow             uint64
}

// Host is one host of the virtual machine, as its last report described it
// to the master.
type Host struct {
	Name         string
	Load         float64
	Tasks        int
	Users        int
	MemFreeBytes float64
	// Suspected: the master's failure detector suspects the host;
	// SilentSeconds is how long it has been silent then.
	Suspected     bool
	SilentSeconds float64
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", name), help, labels, nil)
}

// The metrics read at scrape time.
var (
	descMsgsSent = desc("messages_sent_total", "Task messages sent to a peer host (payloads handed to its connection, resends included).", "peer")
	descMsgsRecv = desc("messages_received_total", "Task messages received from a peer host (before duplicate suppression).", "peer")
	descByteSent = desc("message_sent_bytes_total", "Payload bytes of the task messages sent to a peer host.", "peer")
	descByteRecv = desc("message_received_bytes_total", "Payload bytes of the task messages received from a peer host.", "peer")

	descTasks      = desc("tasks", "This daemon's tasks by state.", "state")
	descMbMsgs     = desc("mailbox_messages", "Undelivered messages in the mailboxes of this daemon's running tasks.")
	descMbBytes    = desc("mailbox_bytes", "Payload bytes of the undelivered messages in this daemon's mailboxes.")
	descMbMax      = desc("mailbox_max_messages", "Undelivered messages in this daemon's deepest mailbox.")
	descFrames     = desc("frame_bytes", "Bytes of large frame bodies the readers of this daemon's connections hold (the frame budget's use).")
	descFramePeak  = desc("frame_peak_bytes", "The most bytes of large frame bodies this daemon's connection readers held at once since it started.")
	descLoad       = desc("host_load", "The host's sampled load: runnable tasks plus other runnable processes.")
	descExternal   = desc("host_external_load", "Runnable processes on the host that are not this daemon's (sampled, smoothed).")
	descUsers      = desc("host_users", "Interactive users logged in on the host (sampled).")
	descMemFree    = desc("host_memory_free_bytes", "Memory available to new work on the host (sampled; absent when unknown).")
	descRTT        = desc("quic_smoothed_rtt_seconds", "Smoothed round-trip time of the QUIC connection to a peer host.", "peer")
	descMinRTT     = desc("quic_min_rtt_seconds", "Minimum round-trip time seen on the QUIC connection to a peer host.", "peer")
	descQBytesSent = desc("quic_sent_bytes_total", "Bytes sent on the QUIC connection to a peer host, retransmissions included (the current connection's).", "peer")
	descQBytesRecv = desc("quic_received_bytes_total", "Bytes received on the QUIC connection to a peer host (the current connection's).", "peer")
	descQPktSent   = desc("quic_sent_packets_total", "Packets sent on the QUIC connection to a peer host (the current connection's).", "peer")
	descQPktRecv   = desc("quic_received_packets_total", "Packets received on the QUIC connection to a peer host (the current connection's).", "peer")
	descQPktLost   = desc("quic_lost_packets", "Packets declared lost on the QUIC connection to a peer host (may fall when a packet declared lost arrives).", "peer")
	descQCwnd      = desc("quic_congestion_window_bytes", "Congestion window of the QUIC connection to a peer host.", "peer")
	descVMLoad     = desc("vm_host_load", "Master: each host's load as it last reported it.", "host")
	descVMTasks    = desc("vm_host_tasks", "Master: each host's tasks as it last reported them.", "host")
	descVMUsers    = desc("vm_host_users", "Master: each host's interactive users as it last reported them.", "host")
	descVMMem      = desc("vm_host_memory_free_bytes", "Master: each host's free memory as it last reported it (absent when unknown).", "host")
	descVMSuspect  = desc("vm_host_suspected", "Master: 1 while the failure detector suspects the host (silent past its suspicion timeout, not yet deleted), else 0.", "host")
	descVMSilent   = desc("vm_host_silent_seconds", "Master: how long a suspected host has been silent (absent when not suspected).", "host")
)

// stateCollector exports the peers' atomic counters and the daemon's
// snapshot at scrape time.
type stateCollector struct{ m *Metrics }

func (c stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descMsgsSent, descMsgsRecv, descByteSent, descByteRecv,
		descTasks, descMbMsgs, descMbBytes, descMbMax, descFrames, descFramePeak, descLoad, descExternal, descUsers, descMemFree,
		descRTT, descMinRTT, descQBytesSent, descQBytesRecv, descQPktSent, descQPktRecv, descQPktLost, descQCwnd,
		descVMLoad, descVMTasks, descVMUsers, descVMMem, descVMSuspect, descVMSilent} {
		ch <- d
	}
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	counter := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	names, peers := m.sortedPeers()
	for i, p := range peers {
		counter(descMsgsSent, float64(p.sent.Load()), names[i])
		counter(descMsgsRecv, float64(p.received.Load()), names[i])
		counter(descByteSent, float64(p.bytesSent.Load()), names[i])
		counter(descByteRecv, float64(p.bytesRecved.Load()), names[i])
	}
	m.mu.Lock()
	src := m.source
	m.mu.Unlock()
	if src == nil {
		return
	}
	s := src()
	for state, n := range s.Tasks {
		gauge(descTasks, float64(n), state)
	}
	gauge(descMbMsgs, float64(s.MailboxMessages))
	gauge(descMbBytes, float64(s.MailboxBytes))
	gauge(descMbMax, float64(s.MailboxMaxMessages))
	gauge(descFrames, float64(s.FrameBytes))
	gauge(descFramePeak, float64(s.FramePeakBytes))
	gauge(descLoad, s.Load)
	gauge(descExternal, s.External)
	gauge(descUsers, float64(s.Users))
	if s.MemFreeBytes >= 0 {
		gauge(descMemFree, s.MemFreeBytes)
	}
	for _, q := range s.Conns {
		gauge(descRTT, q.SmoothedRTT.Seconds(), q.Peer)
		gauge(descMinRTT, q.MinRTT.Seconds(), q.Peer)
		counter(descQBytesSent, float64(q.BytesSent), q.Peer)
		counter(descQBytesRecv, float64(q.BytesReceived), q.Peer)
		counter(descQPktSent, float64(q.PacketsSent), q.Peer)
		counter(descQPktRecv, float64(q.PacketsReceived), q.Peer)
		gauge(descQPktLost, float64(q.PacketsLost), q.Peer)
		gauge(descQCwnd, float64(q.CongestionWindow), q.Peer)
	}
	for _, h := range s.Hosts {
		gauge(descVMLoad, h.Load, h.Name)
		suspected := 0.0
		if h.Suspected {
			suspected = 1
			gauge(descVMSilent, h.SilentSeconds, h.Name)
		}
		gauge(descVMSuspect, suspected, h.Name)
		gauge(descVMTasks, float64(h.Tasks), h.Name)
		gauge(descVMUsers, float64(h.Users), h.Name)
		if h.MemFreeBytes >= 0 {
			gauge(descVMMem, h.MemFreeBytes, h.Name)
		}
	}
}
