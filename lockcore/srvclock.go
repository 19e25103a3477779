package lockcore

import (
	"reflect"
	"sync"
	"time"

	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
)

// TTL and wall clocks. DynamoDB's TTL deletes an item once its TTL attribute lies in the
// past by the *server's* clock. A lock row's TTL is written by its holder, so a holder
// whose clock runs slow would write a time that has already passed, and TTL could
// delete the row of a live lease, letting a waiter in beside it. lockcore therefore
// never derives a TTL from the local clock alone: every write's response carries the
// server's time (the HTTP Date header, to the second), and TTLs count from the later of
// the local time and the server's time as last seen (carried forward on the local
// clock). Until a process has seen one response, TTLs lie at least the retention period
// (24h by default) ahead of the local clock. The bound: a lock row is never removed by
// TTL while its holder renews it, unless the holder's clock runs slow by more than the
// retention period *and* it has never had a response from DynamoDB; and the clock
// must not jump back by more than the TTL grace between a response and a renewal.

// serverClocks shares one estimate per local clock across the clients of a process (a
// Lambda that builds clients per invocation keeps what the warm container learnt).
var serverClocks sync.Map // Clock → *serverClock

func serverClockOf(clk Clock) *serverClock {
	if !reflect.TypeOf(clk).Comparable() {
		return &serverClock{}
	}
	sc, _ := serverClocks.LoadOrStore(clk, &serverClock{})
	return sc.(*serverClock)
}

// serverClock estimates the server's clock from responses.
type serverClock struct {
	mu     sync.Mutex
	offset time.Duration // server time − local time
	known  bool
}

// serverTimeOf reads a response's server time (its Date header). The simulator
// (sim_test.go) replaces it to read the virtual server time its model stamps.
var serverTimeOf = awsmiddleware.GetServerTime

// observe records the server time of a response that just arrived (local time now).
func (sc *serverClock) observe(md middleware.Metadata, now time.Time) {
	srv, ok := serverTimeOf(md)
	if !ok || srv.IsZero() {
		return
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	sc.offset, sc.known = srv.Sub(now), true
}

// now returns the later of the local time and the server's estimated time, and whether
// the server's time is known.
func (sc *serverClock) now(local time.Time) (time.Time, bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.known && sc.offset > 0 {
		return local.Add(sc.offset), true
	}
	return local, sc.known
}

// ttlAt returns the TTL attribute (epoch seconds) for a row that must live d from now.
// Before the client has seen the server's time it counts from the local clock but at
// least the retention period (24h by default): a local clock that is wrong by less than
// that cannot make the row expire while in use, and the first heartbeat writes the
// server-based value.
func (c *config) ttlAt(now time.Time, d time.Duration) int64 {
	base, known := c.server.now(now)
	if !known {
		d = max(d, c.retention)
	}
	return ttlSeconds(base.Add(d))
}

// observeServer records the server time of a response that just arrived.
func (c *config) observeServer(md middleware.Metadata) {
	c.server.observe(md, c.clock.Now())
}

// ttlTooEarly reports whether a TTL attribute ttl, written for a row that must live d,
// lies before the server's time + d by more than a margin (the Date header's one-second
// resolution, and a minute of grace where the grace allows it): the writer's clock runs
// slow, and the row must be rewritten before it is relied on.
func (c *config) ttlTooEarly(ttl int64, d time.Duration) bool {
	margin := min(c.ttlGrace/2, time.Minute) + time.Second
	srv, known := c.server.now(c.clock.Now())
	return known && time.Unix(ttl, 0).Before(srv.Add(d-margin))
}
