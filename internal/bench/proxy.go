package bench

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// DelayProxy is a loopback TCP proxy that delays the bytes of each direction by half a
// round-trip time, so that a call through it takes RTT longer than a direct one. It
// stands in for the network between a Lambda and a regional DynamoDB endpoint.
//
// It is Shopify's Toxiproxy, used as a Go library (the project already depends on it for
// its chaos tests), with its stock "latency" toxic on the upstream (requests) and the
// downstream (responses) stream. The toxic delays every chunk relative to when it
// arrived, so the delay adds to latency but not to throughput. Toxiproxy counts latency
// in whole milliseconds: an odd RTT in ms is split with the extra millisecond upstream.
type DelayProxy struct {
	tox  *toxiproxy.Proxy
	once sync.Once
}

var proxySeq struct {
	sync.Mutex
	n int
}

// NewDelayProxy listens on a free loopback port and forwards every connection to
// upstream (host:port), adding rtt (rounded to whole milliseconds) to each round trip.
func NewDelayProxy(upstream string, rtt time.Duration) (*DelayProxy, error) {
	if rtt < 0 {
		return nil, errors.New("delay proxy: negative RTT")
	}
	proxySeq.Lock()
	proxySeq.n++
	name := fmt.Sprintf("bench-delay-%d", proxySeq.n)
	proxySeq.Unlock()

	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	tox := toxiproxy.NewProxy(server, name, "127.0.0.1:0", upstream)
	if err := tox.Start(); err != nil {
		return nil, fmt.Errorf("delay proxy: start toxiproxy: %w", err)
	}
	total := rtt.Round(time.Millisecond).Milliseconds()
	up := (total + 1) / 2
	for _, t := range []struct {
		stream string
		ms     int64
	}{{"upstream", up}, {"downstream", total - up}} {
		if t.ms == 0 {
			continue
		}
		j := fmt.Sprintf(`{"name":"delay-%s","type":"latency","stream":%q,"toxicity":1,"attributes":{"latency":%d,"jitter":0}}`,
			t.stream, t.stream, t.ms)
		if _, err := tox.Toxics.AddToxicJson(strings.NewReader(j)); err != nil {
			tox.Stop()
			return nil, fmt.Errorf("delay proxy: add latency toxic: %w", err)
		}
	}
	return &DelayProxy{tox: tox}, nil
}

// Addr returns the proxy's host:port.
func (p *DelayProxy) Addr() string { return p.tox.Listen }

// Close stops accepting and closes every open connection.
func (p *DelayProxy) Close() error {
	p.once.Do(p.tox.Stop)
	return nil
}
