package lockcore

import (
	"testing"
	"time"
)

const ms = time.Millisecond

// A queue that stands still is read less and less often: at most every quarter of the
// time since it last moved, once that is much longer than a turn or no turn is known.
func TestPacerDelayStandingQueue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name       string
		still      time.Duration // since the head last moved
		turn, want time.Duration
	}{
		{"unknown turn, just started", 0, 0, 5 * ms},
		{"unknown turn, 4 s still", 4 * time.Second, 0, time.Second},
		{"known turn, within two turns", 70 * ms, 40 * ms, 7500 * time.Microsecond}, // paced: a quarter of the overdue 30 ms
		{"known turn, 2 s still", 2 * time.Second, 40 * ms, 500 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := t0.Add(tc.still)
			p := pacer{reach: maxReach, movedAt: t0}
			if tc.turn > 0 {
				p.headAt = t0 // the head got the lock when the queue last moved
			}
			if got := p.delay(now, 1, 10*ms, tc.turn); got != tc.want {
				t.Errorf("delay = %s, want %s", got, tc.want)
			}
		})
	}
	// Reads over a 10 s hold with nothing known: a few dozen, not thousands.
	p := pacer{reach: maxReach, movedAt: t0}
	reads := 0
	for now := t0; now.Before(t0.Add(10 * time.Second)); reads++ {
		now = now.Add(max(p.delay(now, 1, time.Millisecond, 0), time.Millisecond))
	}
	if reads > 60 {
		t.Errorf("%d reads over a 10 s hold, want at most 60", reads)
	}
}

func TestPacerDelay(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name   string
		headAt time.Time // zero: unknown
		now    time.Time
		pos    int64
		rtt    time.Duration
		turn   time.Duration
		want   time.Duration
	}{
		// Nothing learnt: halve the distance (2 RTT per turn).
		{"unknown turn, far", time.Time{}, t0, 9, 10 * ms, 0, 85 * ms},
		{"unknown turn, next", time.Time{}, t0, 1, 10 * ms, 0, 5 * ms},
		// Far: read at 7/8 of the way, or one and a half turns before, whichever is
		// earlier. Head's progress unknown: half its turn is assumed over (15.5 turns).
		{"far, head unknown", time.Time{}, t0, 16, 10 * ms, 40 * ms, 542500 * time.Microsecond},
		{"far, 3 turns", t0, t0, 3, 10 * ms, 40 * ms, 60 * ms},
		// Near: aim the read one round trip before the predicted moment.
		{"next, head just started", t0, t0, 1, 10 * ms, 40 * ms, 30 * ms},
		{"two back, head half done", t0, t0.Add(20 * ms), 2, 10 * ms, 40 * ms, 50 * ms},
		// Overdue.
		{"next, overdue a little", t0, t0.Add(45 * ms), 1, 10 * ms, 40 * ms, 2500 * time.Microsecond},
		{"next, overdue a lot", t0, t0.Add(240 * ms), 1, 10 * ms, 40 * ms, 50 * ms},
		{"three back, overdue", t0, t0.Add(200 * ms), 3, 10 * ms, 40 * ms, 40 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pacer{headAt: tc.headAt, reach: maxReach}
			if got := p.delay(tc.now, tc.pos, tc.rtt, tc.turn); got != tc.want {
				t.Errorf("delay = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestPacerRead(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := newPacer(&pacing{}, "k", t0)
	// No movement: nothing learnt.
	p.read(t0.Add(100*ms), 0, 40*ms, 10*ms)
	if !p.headAt.IsZero() || p.pace != 0 {
		t.Fatalf("after no movement: %+v", p)
	}
	// One ticket served between reads at 100 and 300 ms: the prediction (half a turn
	// after the previous read) lies inside the window. The pace window (from 0) ran
	// longer than 4 turns: one ticket in 300 ms.
	p.read(t0.Add(300*ms), 1, 40*ms, 10*ms)
	if want := t0.Add(120 * ms); !p.headAt.Equal(want) {
		t.Fatalf("headAt = %s, want %s", p.headAt.Sub(t0), want.Sub(t0))
	}
	if p.pace != 300*ms {
		t.Fatalf("pace = %s, want 300ms", p.pace)
	}
	// Three more served in 20 ms: the prediction (120 + 3×40 = 240 ms) lies before the
	// window, so the earliest possible moment is taken.
	p.read(t0.Add(320*ms), 3, 40*ms, 10*ms)
	if want := t0.Add(300 * ms); !p.headAt.Equal(want) {
		t.Fatalf("headAt = %s, want %s", p.headAt.Sub(t0), want.Sub(t0))
	}
	// A late prediction (340 ms) is capped at the read that saw the change; the window
	// now holds 4 tickets in 30 ms (7.5 ms each), averaged in at 3/4.
	p.read(t0.Add(330*ms), 1, 40*ms, 10*ms)
	if want := t0.Add(330 * ms); !p.headAt.Equal(want) {
		t.Fatalf("headAt = %s, want %s", p.headAt.Sub(t0), want.Sub(t0))
	}
	if want := (300*ms + 3*7500*time.Microsecond) / 4; p.pace != want {
		t.Fatalf("pace = %s, want %s", p.pace, want)
	}
	p.restart(t0.Add(400 * ms))
	if !p.headAt.IsZero() || p.winMoved != 0 {
		t.Fatalf("after restart: %+v", p)
	}
}

// A pace slowed down by late waiters never makes the planning turn longer than this
// client's hold time plus two round trips.
func TestPacingTurnIsCapped(t *testing.T) {
	var p pacing
	if got := p.turn("k", 10*ms, 500*ms); got != 0 {
		t.Fatalf("turn without a hold time = %s, want 0", got)
	}
	p.held("k", 20*ms)
	if got := p.turn("k", 10*ms, 500*ms); got != 40*ms {
		t.Fatalf("turn = %s, want 40ms (hold 20ms + 2 RTT)", got)
	}
	if got := p.turn("k", 10*ms, 30*ms); got != 30*ms {
		t.Fatalf("turn = %s, want the faster measured pace 30ms", got)
	}
	if got := p.turn("k", 10*ms, 0); got != 40*ms {
		t.Fatalf("turn without a pace = %s, want 40ms", got)
	}
	p.held("k", 120*ms) // moving average: 0.7×20 + 0.3×120 = 50
	if got := p.turn("k", 10*ms, 0); got != 70*ms {
		t.Fatalf("turn = %s, want 70ms", got)
	}
}

// A client without hold times of its own (a new Lambda environment) plans with the hold
// time the lock's holders published; its own, once it has one, comes first.
func TestPacingTurnShared(t *testing.T) {
	var p pacing
	if got := p.turnShared("k", 10*ms, 500*ms, 0); got != 0 {
		t.Fatalf("turn without any hold time = %s, want 0", got)
	}
	if got := p.turnShared("k", 10*ms, 500*ms, 100*ms); got != 70*ms {
		t.Fatalf("turn = %s, want 70ms (half the published hold 100ms + 2 RTT, below the pace)", got)
	}
	if got := p.turnShared("k", 10*ms, 60*ms, 100*ms); got != 60*ms {
		t.Fatalf("turn = %s, want the faster measured pace 60ms", got)
	}
	p.held("k", 20*ms)
	if got := p.turnShared("k", 10*ms, 500*ms, 100*ms); got != 40*ms {
		t.Fatalf("turn = %s, want 40ms (own hold 20ms + 2 RTT)", got)
	}
}

// A waiter that finds its turn already came right after a far sleep shortens the reach
// of later far sleeps; waits without overshoot lengthen it back, slowly.
func TestPacingReach(t *testing.T) {
	var p pacing
	if r := p.lastReach("k"); r != maxReach {
		t.Fatalf("initial reach %v", r)
	}
	for range 10 {
		p.overshot("k", true)
	}
	if r := p.lastReach("k"); r != minReach {
		t.Fatalf("reach after overshoots %v, want %v", r, minReach)
	}
	p.overshot("k", false)
	if r := p.lastReach("k"); r != minReach+reachUp {
		t.Fatalf("reach after a good wait %v", r)
	}
	pc := pacer{reach: minReach}
	t0 := time.Unix(1000, 0)
	if d := pc.delay(t0, 16, 10*ms, 40*ms); d != 310*ms || !pc.far {
		t.Fatalf("far delay at reach 1/2: %s (far %v), want 310ms", d, pc.far)
	}
}
