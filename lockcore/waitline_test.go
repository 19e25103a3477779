package lockcore

import (
	"context"
	"testing"
	"time"
)

// stepLine is a lineLayout for driving lineState without an engine: the row is a
// ticketRow, our ticket is gone when the row says so (exists = false), and the served
// ticket may be skipped when skippable says.
type stepLine struct {
	canSkip bool
	stalled bool
	lease   time.Duration
}

func (stepLine) gone(r ticketRow) bool { return !r.exists }
func (l stepLine) skippable(ticketRow, observer, time.Time) (bool, bool) {
	return l.canSkip, l.stalled
}
func (stepLine) skip(context.Context, ticketRow, bool) bool { return false }
func (l stepLine) skipAt(_ ticketRow, obs observer) time.Time {
	return obs.since.Add(l.lease)
}
func (stepLine) read(context.Context, bool) (ticketRow, error) { panic("step test: no I/O") }
func (stepLine) withdraw(context.Context)                      {}

// The wait line's decisions, from the row as read, what the waiter knows and the clock
// alone (issue: "decisions without I/O"): what waitTurn sends next for each.
func TestLineStepDecisions(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	lease := 3 * time.Second
	row := func(serving int64) ticketRow {
		return ticketRow{exists: true, life: "a", serving: serving, leaseMs: lease.Milliseconds()}
	}
	cases := []struct {
		name        string
		row         ticketRow
		eventual    bool // the row came from an eventually consistent read
		confirmTurn bool
		skippable   bool
		policy      WaitPolicy
		at          time.Duration // since the wait began
		want        lineAction
		consistent  bool // of the read that follows (lineRead, lineSkip)
		sleeps      bool // lineRead: sleeps first
	}{
		{name: "served", row: row(5), want: lineEnter},
		{name: "served, on an eventual view, lock row", row: row(5), eventual: true, want: lineEnter},
		{name: "served, on an eventual view, confirmTurn", row: row(5), eventual: true, confirmTurn: true, want: lineRead, consistent: true},
		{name: "passed", row: row(6), want: lineSkipped},
		{name: "gone", row: ticketRow{life: "a"}, want: lineSkipped},
		{name: "gone, on an eventual view: confirmed first", row: ticketRow{life: "a"}, eventual: true, want: lineRead, consistent: true},
		{name: "next in line waits, reads strongly", row: row(4), policy: WaitForever(), want: lineRead, consistent: true, sleeps: true},
		{name: "far back waits, reads eventually", row: row(1), policy: WaitForever(), want: lineRead, consistent: false, sleeps: true},
		{name: "served ticket skippable", row: row(4), skippable: true, want: lineSkip, consistent: true},
		{name: "time out", row: row(3), policy: WaitUpTo(time.Second), at: time.Second, want: lineTimedOut},
		{name: "time out on an eventual view: confirmed first", row: row(3), eventual: true, policy: WaitUpTo(time.Second), at: time.Second, want: lineRead, consistent: true},
		{name: "no wait", row: row(3), policy: NoWait(), want: lineTimedOut},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var p pacing
			var obs observer
			w := lineWait{pacing: &p, pk: "k", ticket: 5, ac: &acquireConfig{wait: c.policy}, start: t0, obs: &obs,
				confirmTurn: c.confirmTurn, eventual: c.eventual}
			s := newLineState(w, c.row, t0, t0.Add(7*time.Millisecond))
			st := s.step(stepLine{canSkip: c.skippable, lease: lease}, t0.Add(c.at))
			if st.do != c.want {
				t.Fatalf("step = %d, want %d", st.do, c.want)
			}
			if (c.want == lineRead || c.want == lineSkip) && st.consistent != c.consistent {
				t.Errorf("the next read strongly consistent: %v, want %v", st.consistent, c.consistent)
			}
			if c.want == lineRead && (st.sleep > 0) != c.sleeps {
				t.Errorf("sleeps %s first; want a sleep: %v", st.sleep, c.sleeps)
			}
			if c.sleeps && st.sleep > watchEvery(lease) {
				t.Errorf("sleeps %s, past the watch cap %s", st.sleep, watchEvery(lease))
			}
		})
	}
}

// A read's answer moves lastBefore (the start of a lease's validity) only when it was
// strongly consistent and showed an earlier ticket served.
func TestLineSawMovesLastBeforeOnStrongReadsOnly(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	var p pacing
	var obs observer
	w := lineWait{pacing: &p, pk: "k", ticket: 5, ac: &acquireConfig{wait: WaitForever()}, start: t0, obs: &obs}
	r := ticketRow{exists: true, life: "a", serving: 3, leaseMs: 3000}
	s := newLineState(w, r, t0, t0.Add(7*time.Millisecond))
	s.saw(ticketRow{exists: true, life: "a", serving: 4, leaseMs: 3000}, false, t0.Add(time.Second), t0.Add(time.Second+7*time.Millisecond))
	if !s.lastBefore.Equal(t0) {
		t.Fatalf("an eventually consistent read moved lastBefore to %s", s.lastBefore.Sub(t0))
	}
	s.saw(ticketRow{exists: true, life: "a", serving: 4, leaseMs: 3000}, true, t0.Add(2*time.Second), t0.Add(2*time.Second+7*time.Millisecond))
	if !s.lastBefore.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("a strong read showing ticket 4 served left lastBefore at %s", s.lastBefore.Sub(t0))
	}
	s.saw(ticketRow{exists: true, life: "a", serving: 5, leaseMs: 3000}, true, t0.Add(3*time.Second), t0.Add(3*time.Second+7*time.Millisecond))
	if !s.lastBefore.Equal(t0.Add(2 * time.Second)) {
		t.Fatalf("the read showing our own turn moved lastBefore to %s", s.lastBefore.Sub(t0))
	}
	if st := s.step(stepLine{lease: 3 * time.Second}, t0.Add(3*time.Second)); st.do != lineEnter {
		t.Fatalf("our ticket served on a strong read: step %d, want lineEnter", st.do)
	}
}
