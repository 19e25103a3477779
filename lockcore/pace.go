package lockcore

import (
	"math"
	"sync"
	"time"
)

// The FIFO strategies (Mutex, TicketLock, Queue) poll: a waiter learns that its turn came only
// by reading. Reads are the waiting's whole cost, and a read that comes late leaves the
// lock idle, so waiters time their reads by their position in the queue and the pace at
// which it moves.

// pacing is a client's memory, per lock, of its own hold times and of the queue's pace
// (time per ticket served), kept across acquisitions. Forgetting is always safe, so the
// maps are bounded by dropping arbitrary entries.
type pacing struct {
	mu    sync.Mutex
	hold  map[string]time.Duration // moving average of this client's hold time
	pace  map[string]time.Duration // the queue's pace as last measured
	reach map[string]float64       // how far a far-back waiter sleeps (see pacer.delay)
	line  map[string]bool          // the last wait found others ahead (see Queue.wait)
}

// lineAhead says whether this client's last wait on key found others ahead of it.
func (p *pacing) lineAhead(key string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.line[key]
}

// setLine records whether a wait on key found others ahead of it.
func (p *pacing) setLine(key string, ahead bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.line == nil {
		p.line = make(map[string]bool)
	}
	boundedStore(p.line, key, ahead)
}

// Reach of a far-back waiter's sleep, as a fraction of the predicted time to its turn:
// it shrinks fast when a waiter finds its turn already came during such a sleep (the
// queue sped up; the lock sat idle) and grows back slowly.
const (
	maxReach  = 7.0 / 8
	minReach  = 1.0 / 2
	reachDown = 1.0 / 8
	reachUp   = 1.0 / 64
)

// lastReach returns the reach for key.
func (p *pacing) lastReach(key string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r, ok := p.reach[key]; ok {
		return r
	}
	return maxReach
}

// overshot adjusts the reach after a wait: overshoot says whether the waiter found its
// turn already come right after a far sleep.
func (p *pacing) overshot(key string, overshoot bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reach == nil {
		p.reach = make(map[string]float64)
	}
	r, ok := p.reach[key]
	if !ok {
		r = maxReach
	}
	if overshoot {
		r = max(minReach, r-reachDown)
	} else {
		r = min(maxReach, r+reachUp)
	}
	boundedStore(p.reach, key, r)
}

// boundedStore sets m[k] = v, first dropping an arbitrary entry if that would grow m
// beyond maxObservations.
func boundedStore[V any](m map[string]V, k string, v V) {
	if _, ok := m[k]; !ok && len(m) >= maxObservations {
		for k := range m {
			delete(m, k)
			break
		}
	}
	m[k] = v
}

// held records a hold time.
func (p *pacing) held(key string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold == nil {
		p.hold = make(map[string]time.Duration)
	}
	if old, ok := p.hold[key]; ok {
		d = (7*old + 3*d) / 10
	}
	boundedStore(p.hold, key, d)
}

// lastPace returns the pace last measured on key (0: unknown).
func (p *pacing) lastPace(key string) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pace[key]
}

func (p *pacing) setPace(key string, d time.Duration) {
	if d <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pace == nil {
		p.pace = make(map[string]time.Duration)
	}
	boundedStore(p.pace, key, d)
}

// turn is the time per ticket a waiter plans with: the measured pace capped by this
// client's usual hold time plus two round trips (the time a turn takes when every waiter
// reads on time), so that a pace slowed down by late waiters cannot make waiters sleep
// longer and come later still. 0 while this client has no hold time yet.
func (p *pacing) turn(key string, rtt, pace time.Duration) time.Duration {
	return p.turnShared(key, rtt, pace, 0)
}

// turnShared is turn for a lock whose holders publish their hold times (shared: the
// average the lock records, 0 if none): a client without a hold time of its own plans
// with it. Every new Lambda execution environment is such a client, and without a plan
// a waiter reads about every quarter of the time the queue stood still, some fifteen
// reads per turn of a few hundred milliseconds (the demo at 100 invocations). The
// published figure is the holders' own time from entering to releasing, so waiters'
// lateness cannot feed it, as it feeds the measured pace.
func (p *pacing) turnShared(key string, rtt, pace, shared time.Duration) time.Duration {
	p.mu.Lock()
	hold, ok := p.hold[key]
	p.mu.Unlock()
	if !ok && shared > 0 {
		// Planned low: the holds behind an average vary (a holder of several locks
		// holds the first ones while it waits for the others), a read that comes early
		// costs one RCU, one that comes late leaves the lock idle.
		hold, ok = shared/2, true
	}
	switch {
	case !ok:
		return 0
	case pace > 0:
		return min(pace, hold+2*rtt)
	}
	return hold + 2*rtt
}

// pacer follows one wait: when the head of the queue got the lock, and the queue's pace.
type pacer struct {
	reach    float64       // fraction of the way a far sleep goes (see pacing.reach)
	far      bool          // the last delay was a far sleep
	pace     time.Duration // measured time per ticket (0: unknown)
	headAt   time.Time     // when the head got the lock (zero: unknown)
	prevSent time.Time     // send time of the previous read
	winAt    time.Time     // start of the window the pace is measured over
	winMoved int64         // tickets served in the window
	movedAt  time.Time     // send time of the last read that found the head moved (or the wait's start; zero: unknown)

	// Set by began (Mutex and ItemLocker, whose rows say when the served ticket's turn
	// began); see pacer.turnPlan.
	planned bool          // began was called: delay plans turns (turnPlan)
	turnAt  time.Time     // when the served ticket's turn began, as its row says (zero: unknown)
	moved   int64         // tickets served between the last two reads (see read)
	spread  time.Duration // mean deviation of a turn from the pace (0: unknown)
	aimed   bool          // the last delay aimed at our own turn from further back (see turnPlan)
}

func newPacer(p *pacing, key string, sent time.Time) pacer {
	return pacer{reach: p.lastReach(key), pace: p.lastPace(key), prevSent: sent, winAt: sent, movedAt: sent}
}

// done records the outcome of the wait in p.
func (pc *pacer) done(p *pacing, key string, served bool) {
	p.setPace(key, pc.pace)
	if served {
		p.overshot(key, pc.far)
	}
}

// read records a read sent at send that found the head moved by moved tickets since the
// previous read (withdrawn and skipped ones included). turn is the planning turn (see
// pacing.turn; 0: unknown).
func (p *pacer) read(send time.Time, moved int64, turn, rtt time.Duration) {
	defer func() { p.prevSent = send }()
	p.moved = moved
	if moved <= 0 {
		return
	}
	p.movedAt = send
	// The head got the lock when the pace predicts, as far as the two reads allow.
	t := turn
	if t <= 0 {
		t = 2 * rtt
	}
	adv := time.Duration(moved)
	pred := p.prevSent.Add((adv-1)*t + t/2)
	if !p.headAt.IsZero() {
		pred = p.headAt.Add(adv * t)
	}
	switch {
	case pred.Before(p.prevSent):
		pred = p.prevSent
	case pred.After(send):
		pred = send
	}
	p.headAt = pred
	// The pace: time per ticket over a window of several tickets.
	if p.winMoved += moved; p.winMoved >= 4 || send.Sub(p.winAt) > 4*t {
		sample := send.Sub(p.winAt) / time.Duration(p.winMoved)
		if p.pace <= 0 {
			p.pace = sample
		} else {
			p.spread = (3*p.spread + deviation(sample, p.pace, p.winMoved)) / 4
			p.pace = (p.pace + 3*sample) / 4
		}
		p.winAt, p.winMoved = send, 0
	}
}

// restart forgets the head (the queue started over, or its head is not known yet) and
// starts a new pace window at send.
func (p *pacer) restart(send time.Time) {
	p.headAt, p.prevSent, p.winAt, p.winMoved, p.movedAt = time.Time{}, send, send, 0, send
	p.turnAt, p.moved = time.Time{}, 0
}

// delay is how long a waiter at position pos (1 = next in line) sleeps before its next
// read.
//
// Our ticket is predicted to come up pos turns after the head got the lock (half a turn
// of the head's is assumed over when that moment is unknown). Far from that moment, the
// waiter reads again about one and a half turns before it (at most the reach — 7/8 of
// the way, less after overshoots — so errors shrink with every read); near, it aims its
// read to reach the table half a round trip before it, so that lateness shrinks from
// turn to turn instead of feeding on itself. Once the moment passed, the next in line polls every quarter round trip,
// slowing down for a holder that takes much longer than usual, and a waiter further back
// waits for the turns still ahead of it. Turns are planned low (see pacing.turn): a read
// that comes early costs one RCU; one that comes late leaves the lock idle. With nothing
// learnt yet, every read halves the distance.
//
// A queue that has not moved for much longer than a turn (a holder that holds for
// seconds: a batch waiting for other locks, say), or whose turns nothing is known about
// yet, is read at most every quarter of the time it has stood still: a long hold costs a
// few reads (about four per doubling of the wait) instead of one every few milliseconds.
func (p *pacer) delay(now time.Time, pos int64, rtt, turn time.Duration) time.Duration {
	// Planned only with something to plan with: a measured pace or a turn (see began).
	if p.planned && rtt >= planMinRTT && (p.pace > 0 || turn > 0) {
		// The measured pace, which the reads' own lateness is part of, capped by the
		// caller's plan (hold time and round trips: see pacing.turn) so that lateness
		// cannot feed on itself.
		far := turn // waiters further back plan low: early costs a read, late idles the lock
		switch {
		case p.pace > 0 && turn > 0:
			turn = min(p.pace, turn)
		case p.pace > 0:
			turn, far = p.pace, p.pace
		}
		if pos > 1 {
			turn = far
		}
		d := p.turnPlan(now, pos, rtt, turn)
		if still := now.Sub(p.movedAt); !p.movedAt.IsZero() && still > 2*turn+2*p.spread {
			d = max(d, still/4)
		}
		return d
	}
	d := p.paced(now, pos, rtt, turn)
	if !p.movedAt.IsZero() {
		if still := now.Sub(p.movedAt); turn <= 0 || still > 2*turn {
			d = max(d, still/4)
		}
	}
	return d
}

// paced is delay for a queue that moves at its pace.
func (p *pacer) paced(now time.Time, pos int64, rtt, turn time.Duration) time.Duration {
	p.far = false
	if turn <= 0 {
		if d := time.Duration(pos-1)*2*rtt + rtt; d > 2*rtt {
			return d / 2
		}
		return rtt / 2
	}
	var left time.Duration
	if p.headAt.IsZero() {
		left = time.Duration(pos-1)*turn + turn/2
	} else {
		left = p.headAt.Add(time.Duration(pos) * turn).Sub(now)
	}
	switch {
	case left > turn*5/2:
		p.far = true
		return min(time.Duration(float64(left)*max(p.reach, minReach)), left-turn*3/2)
	case left > rtt:
		return left - rtt
	case pos > 1:
		return time.Duration(pos-1) * turn / 2
	}
	return max(rtt/4, -left/4)
}

// planMinRTT is the shortest round trip turns are planned for (see began). Below it a
// turn lasts a few milliseconds, the sleeps' millisecond granularity blurs every plan,
// and the pacer's own approach (paced) cost fewer calls: direct to DynamoDB Local, 16
// workers, Mutex 9.95–12.90 lock calls per section against 16.1–16.7 planned.
const planMinRTT = 3 * time.Millisecond

// began records what a read sent at sent showed of the served ticket's turn: when it
// began (at, from the row: Mutex's hSince, an ItemLocker item's lockTime; zero when the
// row does not say). It makes delay plan by turnPlan, once a pace or a turn is known. A
// turn's start read off the row replaces the estimate read can make from the reads' send
// times (the holder's own clock, ms resolution: a skewed clock only misplaces reads, it
// never changes what a read may conclude); two starts a known number of tickets apart
// measure the pace exactly.
//
// With nothing known yet — a client new to a lock nobody has released yet (every release
// publishes the holders' hold time: a Mutex row's holdMs, an ItemLocker item's HoldMs) —
// the waiter reads by its position, as the TicketLock's waiters do, until it has seen the
// line move or learnt a hold time (see delay). A guessed turn (four round trips) stood
// in before and put far waiters late where it matters most, a burst on a fresh key: every
// taker's round trip is inflated by the others' takes at the same moment, and in a burst
// of 16 (+5 ms and direct, 10 s leases, `go run ./cmd/bench -scenarios burst`) the lock sat
// idle ~120 ms per handoff, 1.39–1.43 s a round for the Mutex against 0.84–0.97 s by
// position.
func (p *pacer) began(sent, at time.Time) {
	p.planned = true
	if at.IsZero() {
		// The row does not say: the estimate from the reads (read) stands in.
		if p.moved != 0 {
			p.turnAt = time.Time{}
		}
		return
	}
	if at.After(sent) {
		at = sent // a clock ahead of ours: the turn began before our read was sent
	}
	if !p.turnAt.IsZero() && p.moved > 0 && at.After(p.turnAt) {
		sample := at.Sub(p.turnAt) / time.Duration(p.moved)
		if p.pace <= 0 {
			p.pace = sample
		} else {
			if dev := deviation(sample, p.pace, p.moved); p.spread <= 0 {
				p.spread = dev
			} else {
				p.spread = (3*p.spread + dev) / 4
			}
			p.pace = (3*p.pace + sample) / 4
		}
		p.winAt, p.winMoved = sent, 0 // the window estimate is not needed meanwhile
	}
	p.turnAt = at
	p.headAt = at
}

// deviation is how far one turn is from pace, judged by a sample averaged over n turns
// (which deviates √n times less than one turn does).
func deviation(sample, pace time.Duration, n int64) time.Duration {
	return time.Duration(math.Abs(float64(sample-pace)) * math.Sqrt(float64(max(n, 1))))
}

// turnPlan is delay for a wait whose pacer knows (or estimates) when the served
// ticket's turn began (turnAt, else headAt), planning turns of length turn.
//
// The next in line (pos 1) reads once a quarter round trip after the holder's release is
// due to be sent (the turn's start plus one turn) — sent at that moment, the read would
// reach the table with the release and find the holder still in about half the time;
// a quarter round trip later it mostly comes after, and the lock waits for it at most
// that long — then, if the holder is still in, every half round trip (lateness at most
// half a round trip, a read each) and, for a holder much slower than a turn, every
// quarter of the time it has stood (delay's standing-queue rule).
//
// A waiter further back whose prediction errs by at most a quarter of a turn or half a
// round trip (the turns' spread × √position: errors add up like a random walk) aims at
// its own turn, and a read on time finds it (one that comes early finds it next in
// line, with the turn's start to plan from; one that comes late leaves the lock idle
// for at most that error). One further back aims at the middle of its predecessor's
// predicted turn, earlier by twice that error, so that it rarely finds its own turn
// already passed (which would leave the lock idle): the usual outcome is a view one or
// two places from the head, and a second, short plan from there. The sleeps stay capped
// at a tenth of the lease (watchEvery), which sets the reads of waits longer than that.
func (p *pacer) turnPlan(now time.Time, pos int64, rtt, turn time.Duration) time.Duration {
	p.far, p.aimed = false, false
	at := p.turnAt
	if at.IsZero() {
		at = p.headAt
	}
	if at.IsZero() {
		// Unknown: assume half the holder's turn is over.
		at = now.Add(-turn / 2)
	}
	if pos <= 1 {
		if due := at.Add(turn + rtt/4); due.After(now) {
			return due.Sub(now)
		}
		return max(rtt/2, time.Millisecond)
	}
	spread := max(p.spread, turn/8)
	if p.spread <= 0 {
		spread = turn / 4
	}
	ahead := time.Duration(pos - 1)
	// Errors add up like a random walk: √n turns' spread for n turns.
	err := time.Duration(float64(spread) * math.Sqrt(float64(pos)))
	if err <= max(rtt/2, turn/4) {
		// Near enough to aim at our own turn: the release is due at the end of the
		// predecessor's turn, and a read sent then finds it (or finds us next in line,
		// with the turn's start to plan from). The caller makes that read a strongly
		// consistent one (aimed), as the next in line's are: a read that finds our turn
		// should count for the lease's validity, and an eventually consistent one would
		// need a second read to do so.
		target := at.Add(time.Duration(pos) * turn)
		if target.After(now) {
			p.aimed = true
			return target.Sub(now)
		}
		return max(rtt/2, time.Millisecond)
	}
	// Far: aim at the middle of the predecessor's turn, earlier by twice the error, so
	// that the read rarely finds our own turn passed (the lock idle).
	margin := min(2*time.Duration(float64(spread)*math.Sqrt(float64(ahead))), ahead*turn/2)
	target := at.Add(ahead*turn + turn/2 - margin)
	if target.After(now) {
		p.far = ahead > 1
		return target.Sub(now)
	}
	// Behind the plan: the line is slower than planned. Look again after half the
	// turns ahead.
	return max(ahead*turn/2, rtt/2)
}

// watchEvery is the longest a waiter sleeps between reads while the queue
// stands, whatever the pacer says: a tenth of a lease, so that the takeover clock starts
// soon after the holder's last heartbeat. Longer caps for waiters further back (a fifth
// of a lease next in line, half a lease behind it) saved reads behind long holds in the
// demo (≈ 10 % of the SKU-lock reads at 100 invocations) but broke the ItemLocker at 64
// workers, whose waiters plan without hold times of their own: efficiency 0.66 → 0.16–0.23,
// Jain 0.99 → 0.67–0.92, up to 21 starved (`go run ./cmd/bench -workers 16,64 -rtt 5ms
// -strategies lockingread -scenarios hotkey -duration 10s`, back to back), and a quarter
// of a lease for Mutex waiters behind the next in line that had a plan broke the Mutex
// at 64 workers (efficiency 0.62–0.71 → 0.17–0.36, up to 9 starved, same bench with
// mutex,multi, back to back): the cap, not the plan, keeps far waiters on time there.
// Kept at a tenth.
func watchEvery(lease time.Duration) time.Duration { return lease / 10 }
