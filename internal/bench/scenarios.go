package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// Path is one way to the engine: direct, or through a delay proxy.
type Path struct {
	RTT time.Duration     // round-trip time the proxy adds (0: direct)
	DB  lockcore.DynamoDB // a client along this path
	// Endpoint is the URL DB talks to (the engine's, or the delay proxy's): a peer in a
	// process of its own (the AWS lock client) takes the same path through it.
	Endpoint string
}

// Runner runs the scenarios on one pair of tables.
type Runner struct {
	LockTable string
	DataTable string
	RunID     string   // makes keys unique per bench run
	AWSPeer   *AWSPeer // the built AWS lock client peer (nil: not built; see EnsureAWSPeer)
	seq       atomic.Int64
}

func (r *Runner) key(prefix string) string {
	return fmt.Sprintf("%s-%s-%d", prefix, r.RunID, r.seq.Add(1))
}

func (r *Runner) env(p Path) *Env {
	return &Env{
		Lock:      &CountingDB{Next: p.DB, C: &Counters{}},
		Data:      &CountingDB{Next: p.DB, C: &Counters{}},
		LockTable: r.LockTable,
		DataTable: r.DataTable,
	}
}

// stalls copies the slowest-call figures of env's counters into rec.
func stalls(rec *Record, env *Env) {
	a, na := env.Lock.C.Slowest()
	b, nb := env.Data.C.Slowest()
	rec.SlowestCallMs = ms(max(a, b))
	rec.SlowCalls = na + nb
}

func newWorkers(s Strategy, env *Env, prefix string, n int, t Tuning) ([]Worker, error) {
	if s.New == nil {
		return nil, fmt.Errorf("%s runs in a peer process of its own, hot-key runs only", s.Name)
	}
	ws := make([]Worker, n)
	for i := range ws {
		w, err := s.New(env, fmt.Sprintf("%s-%02d", prefix, i), t)
		if err != nil {
			return nil, fmt.Errorf("%s: new worker: %w", s.Name, err)
		}
		ws[i] = w
	}
	return ws, nil
}

// MeasureRTT returns the median round trip of n strongly consistent GetItem calls along
// p (a missing item: the smallest request there is).
func (r *Runner) MeasureRTT(ctx context.Context, p Path, n int) (time.Duration, error) {
	var ds []time.Duration
	for range n {
		t0 := time.Now()
		_, err := p.DB.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(r.DataTable), Key: CounterKey("rtt-probe"), ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			return 0, fmt.Errorf("measure RTT: %w", err)
		}
		ds = append(ds, time.Since(t0))
	}
	return Percentile(ds, 50), nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func fp(v float64) *float64 { return &v }
func ip(v int) *int         { return &v }
func i64p(v int64) *int64   { return &v }

// cycle is one uncontended critical section of worker w on key, with an empty body.
func cycle(ctx context.Context, w Worker, key string) error {
	if o, ok := w.(Optimist); ok {
		return o.Increment(ctx, CounterKey(key))
	}
	h, err := w.Acquire(ctx, key)
	if err != nil {
		return err
	}
	return h.Release(ctx)
}

// Uncontended measures one client acquiring and releasing a key nobody else wants, for
// at least d and at least 20 cycles (after 3 warm-up cycles that create the lock rows).
func (r *Runner) Uncontended(ctx context.Context, s Strategy, p Path, d time.Duration) (Record, error) {
	rec := Record{Strategy: s.Name, Scenario: ScenarioUncontended, RTTms: ms(p.RTT), Workers: 1, Baseline: s.Baseline}
	env := r.env(p)
	ws, err := newWorkers(s, env, "solo", 1, Tuning{})
	if err != nil {
		return rec, err
	}
	key := r.key("unc")
	for range 3 {
		if err := cycle(ctx, ws[0], key); err != nil {
			return rec, fmt.Errorf("%s: uncontended warm-up: %w", s.Name, err)
		}
	}
	rtt, err := r.MeasureRTT(ctx, p, 15)
	if err != nil {
		return rec, err
	}
	before := env.Lock.C.Snapshot()
	var lat []time.Duration
	end := time.Now().Add(d)
	for time.Now().Before(end) || len(lat) < 10 {
		t0 := time.Now()
		if err := cycle(ctx, ws[0], key); err != nil {
			return rec, fmt.Errorf("%s: uncontended cycle: %w", s.Name, err)
		}
		lat = append(lat, time.Since(t0))
	}
	u := env.Lock.C.Snapshot().Sub(before)
	c := float64(len(lat))
	rec.MeasuredRTTms = ms(rtt)
	rec.Completions = int64(len(lat))
	rec.P50ms = fp(ms(Percentile(lat, 50)))
	rec.P99ms = fp(ms(Percentile(lat, 99)))
	rec.lockPerCS(u, c)
	stalls(&rec, env)
	return rec, nil
}

type workerStats struct {
	inWindow int           // critical sections that ended within the measured window
	total    int           // every completed critical section (for the counter check)
	maxWait  time.Duration // longest Acquire, including one cut off by the end of the run
	errors   int
	csTimes  []time.Duration
	reads    []time.Duration // the critical section's consistent GetItem: a round trip under load
}

// HotKey runs n workers in a closed loop on one key: acquire, critical section
// (consistent read + write of a separate counter item), release. It measures d after a
// warm-up of a quarter of d (at most 2 s).
func (r *Runner) HotKey(ctx context.Context, s Strategy, p Path, n int, d time.Duration) (Record, error) {
	if s.Peer != nil {
		return r.peerHotKey(ctx, s, p, n, d)
	}
	return r.closedLoop(ctx, s, p, n, d, ScenarioHotKey, 1, 1)
}

// Multi-key scenario: a pool of MultiKeyPool hot keys, MultiKeyPerCS of them per critical
// section.
const (
	MultiKeyPool  = 4
	MultiKeyPerCS = 3
)

// MultiKey runs n workers in a closed loop on a pool of MultiKeyPool hot keys. Every
// critical section needs MultiKeyPerCS of them (worker i's j-th section leaves out key
// (i+j) mod MultiKeyPool), taken in canonical order with the strategy's own multi-key
// acquisition (Mutex.AcquireAll for multi), and increments each key's counter (a
// consistent read and a write per key). Any two sections share a key, so sections run
// one at a time, as on one hot key: the shape of orders that share SKUs. Lost updates
// and double holders are counted per key.
//
// The run lasts MultiKeyPerCS times d: a section increments that many counters, so
// sections are about that many times longer than on one hot key, and each worker should
// complete as many of them as in a hot-key run of d. With 2–3 sections per worker (64
// workers, 20 s) the Jain index measures where the window cut the rounds rather than
// fairness: 0.937 at 20 s, 0.997 at 60 s, same code and machine (7–9 sections each).
func (r *Runner) MultiKey(ctx context.Context, s Strategy, p Path, n int, d time.Duration) (Record, error) {
	return r.closedLoop(ctx, s, p, n, MultiKeyPerCS*d, ScenarioMultiKey, MultiKeyPool, MultiKeyPerCS)
}

// sectionKeys returns the keys of worker i's j-th critical section: per of the pool,
// sorted (the canonical order).
func sectionKeys(pool []string, per, i, j int) []string {
	if per >= len(pool) {
		return pool
	}
	out := make([]string, 0, per)
	skip := (i + j) % len(pool)
	for k := 0; len(out) < per; k++ {
		if idx := (skip + 1 + k) % len(pool); idx != skip {
			out = append(out, pool[idx])
		}
	}
	slices.Sort(out)
	return out
}

// acquireSet takes every key of a section: one key with Acquire, several with the
// worker's own multi-key acquisition.
func acquireSet(ctx context.Context, w Worker, keys []string) (*Held, error) {
	if len(keys) == 1 {
		return w.Acquire(ctx, keys[0])
	}
	sw, ok := w.(SetWorker)
	if !ok {
		return nil, fmt.Errorf("%T has no multi-key acquisition", w)
	}
	return sw.AcquireSet(ctx, keys)
}

// closedLoop runs n workers in a closed loop on a pool of nkeys keys, per keys per
// critical section (see HotKey and MultiKey).
func (r *Runner) closedLoop(ctx context.Context, s Strategy, p Path, n int, d time.Duration, scenario string, nkeys, per int) (Record, error) {
	rec := Record{Strategy: s.Name, Scenario: scenario, RTTms: ms(p.RTT), Workers: n, Baseline: s.Baseline,
		DurationS: d.Seconds(), WarmupS: min(2*time.Second, d/4).Seconds()}
	env := r.env(p)
	ws, err := newWorkers(s, env, "w", n, Tuning{})
	if err != nil {
		return rec, err
	}
	pool := make([]string, nkeys)
	for k := range pool {
		pool[k] = r.key("hot")
	}
	slices.Sort(pool)
	key := pool[0]
	_, optimistic := ws[0].(Optimist)
	if optimistic && nkeys > 1 {
		return rec, fmt.Errorf("%s: %s needs a lock", s.Name, scenario)
	}
	if !optimistic {
		for _, k := range pool {
			if err := WriteCounter(ctx, env.Data, r.DataTable, k, 0); err != nil {
				return rec, err
			}
			if err := cycle(ctx, ws[0], k); err != nil { // creates the lock rows
				return rec, fmt.Errorf("%s: warm-up: %w", s.Name, err)
			}
		}
	}
	rtt, err := r.MeasureRTT(ctx, p, 15)
	if err != nil {
		return rec, err
	}
	idle := rtt

	ov := make(map[string]*Overlap, nkeys)
	for _, k := range pool {
		ov[k] = &Overlap{}
	}
	var tl Timeline
	stats := make([]workerStats, n)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	csBase := context.WithoutCancel(ctx)
	type snapshot struct {
		lock, data Usage
		ops        map[string]int64
	}
	take := func() snapshot {
		return snapshot{lock: env.Lock.C.Snapshot(), data: env.Data.C.Snapshot(), ops: env.Lock.C.ByOp()}
	}
	// The workers start together; the first part of the run (the thundering herd of
	// first acquisitions) is warm-up and not measured.
	warm := min(2*time.Second, d/4)
	atStart, atEnd := make(chan snapshot, 1), make(chan snapshot, 1)
	start := time.Now()
	winStart, deadline := start.Add(warm), start.Add(warm+d)
	within := func(t time.Time) bool { return t.After(winStart) && !t.After(deadline) }
	t1 := time.AfterFunc(warm, func() { atStart <- take() })
	defer t1.Stop()
	t2 := time.AfterFunc(warm+d, func() {
		atEnd <- take()
		stop()
	})
	defer t2.Stop()

	var wg sync.WaitGroup
	for i := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st := &stats[i]
			for runCtx.Err() == nil {
				t0 := time.Now()
				if o, ok := ws[i].(Optimist); ok {
					// Like a critical section, an update once begun runs to its end: cut
					// off, its write could land unseen.
					cctx, cancel := context.WithTimeout(csBase, 30*time.Second)
					err := o.Increment(cctx, CounterKey(key))
					cancel()
					t1 := time.Now()
					if t1.After(winStart) {
						st.maxWait = max(st.maxWait, t1.Sub(t0))
					}
					if err != nil {
						st.errors++ // e.g. ErrConflict after MaxAttempts: try again
						continue
					}
					st.total++
					if within(t1) {
						st.inWindow++
						tl.Add(Interval{Worker: i, Start: t0, End: t1})
					}
					continue
				}
				keys := sectionKeys(pool, per, i, st.total+st.errors)
				h, err := acquireSet(runCtx, ws[i], keys)
				t1 := time.Now()
				if t1.After(winStart) {
					st.maxWait = max(st.maxWait, t1.Sub(t0))
				}
				if err != nil {
					if runCtx.Err() != nil {
						return
					}
					st.errors++
					_ = sleepCtx(runCtx, 10*time.Millisecond)
					continue
				}
				cctx, cancel := context.WithTimeout(csBase, 30*time.Second)
				cs0 := time.Now()
				for _, k := range keys {
					ov[k].Enter()
				}
				var read time.Duration
				for _, k := range keys {
					r0 := time.Now()
					v, rerr := ReadCounter(cctx, env.Data, r.DataTable, k)
					read += time.Since(r0)
					if err = rerr; err == nil {
						err = WriteCounter(cctx, env.Data, r.DataTable, k, v+1)
					}
					if err != nil {
						break
					}
				}
				cs1 := time.Now()
				for _, k := range keys {
					ov[k].Exit()
				}
				if err == nil {
					st.total++
					if within(cs1) {
						st.inWindow++
						st.csTimes = append(st.csTimes, cs1.Sub(cs0))
						st.reads = append(st.reads, read/time.Duration(len(keys)))
						tl.Add(Interval{Worker: i, Start: cs0, End: cs1})
					}
				} else {
					st.errors++
				}
				if err := h.Release(cctx); err != nil {
					st.errors++
				}
				cancel()
			}
		}()
	}
	wg.Wait()
	first, end := <-atStart, <-atEnd
	ops := map[string]int64{}
	for k, v := range end.ops {
		if n := v - first.ops[k]; n > 0 {
			ops[k] = n
		}
	}

	var counter int64
	for _, k := range pool {
		v, err := ReadCounter(csBase, env.Data.Next, r.DataTable, k)
		if err != nil {
			return rec, err
		}
		counter += v
	}
	var events int64
	for _, o := range ov {
		events += o.Events()
	}
	a, na := env.Lock.C.Slowest()
	b, nb := env.Data.C.Slowest()
	summarize(&rec, loopResult{
		stats: stats, intervals: tl.Intervals(), doubleHolders: events,
		lockUse: end.lock.Sub(first.lock), dataUse: end.data.Sub(first.data), ops: ops,
		counter: counter, idle: idle, d: d, per: per, optimistic: optimistic,
		slowest: max(a, b), slowCalls: na + nb,
	})
	return rec, nil
}

// loopResult is what a closed-loop run collected (in this process, or in a peer's).
type loopResult struct {
	stats            []workerStats
	intervals        []Interval // the measured critical sections, ordered by start
	doubleHolders    int64      // critical-section entries that found another holder inside
	lockUse, dataUse Usage      // the lock's and the critical section's calls in the window
	ops              map[string]int64
	counter          int64         // the counters' final sum
	idle             time.Duration // round trip measured just before the run
	d                time.Duration // the measured window
	per              int           // keys per critical section
	optimistic       bool          // no lock: the update is the critical section
	slowest          time.Duration // the slowest call of the run
	slowCalls        int64         // calls slower than SlowCall
}

// summarize fills rec with a closed-loop run's figures: rate and efficiency, the lock's
// calls and capacity per critical section, handoffs, fairness, and the safety checks
// (lost updates: completed sections × keys − the counters' final sum).
func summarize(rec *Record, lr loopResult) {
	lockUse, dataUse, d, per, optimistic := lr.lockUse, lr.dataUse, lr.d, lr.per, lr.optimistic
	rtt, idle := lr.idle, lr.idle
	var perWorker []int
	var total, inWindow int
	var maxWait time.Duration
	var csTimes, reads []time.Duration
	var errs int
	starved := 0
	for _, st := range lr.stats {
		perWorker = append(perWorker, st.inWindow)
		total += st.total
		inWindow += st.inWindow
		maxWait = max(maxWait, st.maxWait)
		csTimes = append(csTimes, st.csTimes...)
		reads = append(reads, st.reads...)
		errs += st.errors
		if st.inWindow == 0 {
			starved++
		}
	}
	csTime := Mean(csTimes)
	if len(reads) > 0 {
		// The round trip the ideal assumes: the median of the critical sections' own
		// reads, measured during the run under the run's load, rather than before it.
		rtt = Percentile(reads, 50)
	}
	if optimistic {
		// No lock: the critical section is the optimistic update itself, whose ideal
		// time is one read and one write.
		csTime = 2 * rtt
		// Every update needs one read and one write; the rest is the price of optimism.
		c := float64(inWindow)
		lockUse = Usage{
			Calls: lockUse.Calls - 2*int64(inWindow), CondFails: lockUse.CondFails,
			WCU: lockUse.WCU - c, RCU: lockUse.RCU - c,
		}
		dataUse = Usage{Calls: 2 * int64(inWindow), WCU: c, RCU: c}
	}
	rate := float64(inWindow) / d.Seconds()
	ideal := 1 / (2*rtt.Seconds() + csTime.Seconds())
	if optimistic {
		ideal = 1 / csTime.Seconds() // no lock calls: back-to-back read + write
	}
	rec.MeasuredRTTms = ms(rtt)
	rec.CSms = fp(ms(csTime))
	rec.IdealCSPerSec = fp(ideal)
	rec.CSPerSec = fp(rate)
	rec.Efficiency = fp(rate / ideal)
	// The same with the round trip measured before the run: a critical section of 2
	// calls per key (read + write), acquire and release one more each.
	idealIdle := 1 / ((2 + 2*float64(per)) * idle.Seconds())
	if optimistic {
		idealIdle = 1 / (2 * idle.Seconds())
	}
	rec.IdleRTTms = ms(idle)
	rec.EfficiencyIdle = fp(rate / idealIdle)
	rec.Completions = int64(inWindow)
	rec.Errors = int64(errs)
	if inWindow > 0 {
		c := float64(inWindow)
		rec.lockPerCS(lockUse, c)
		rec.CondFailsPerCS = fp(float64(lockUse.CondFails) / c)
		rec.CSCallsPerCS = fp(float64(dataUse.Calls) / c)
		rec.OpsPerCS = map[string]float64{}
		for k, v := range lr.ops {
			rec.OpsPerCS[k] = float64(v) / c
		}
	}
	if !optimistic {
		h := Handoffs(lr.intervals)
		if len(h) > 0 {
			rec.HandoffP50ms = fp(ms(Percentile(h, 50)))
			rec.HandoffP99ms = fp(ms(Percentile(h, 99)))
		}
		rec.DoubleHolders = i64p(lr.doubleHolders)
	}
	rec.Jain = fp(Jain(perWorker))
	rec.MaxWaitMs = fp(ms(maxWait))
	rec.Starved = ip(starved)
	rec.LostUpdates = i64p(int64(total*per) - lr.counter)
	rec.PerWorker = perWorker
	rec.SlowestCallMs = ms(lr.slowest)
	rec.SlowCalls = lr.slowCalls
}

// Burst releases n workers at once on a fresh key, rounds times; each does one critical
// section. It counts critical sections entered while another holder was inside.
func (r *Runner) Burst(ctx context.Context, s Strategy, p Path, n, rounds int) (Record, error) {
	if s.Peer != nil {
		return r.peerBurst(ctx, s, p, n, rounds)
	}
	rec := Record{Strategy: s.Name, Scenario: ScenarioBurst, RTTms: ms(p.RTT), Workers: n, Baseline: s.Baseline, Rounds: rounds}
	env := r.env(p)
	ws, err := newWorkers(s, env, "b", n, Tuning{})
	if err != nil {
		return rec, err
	}
	_, optimistic := ws[0].(Optimist)
	var ov Overlap
	var lost, done, errs atomic.Int64
	var waits, roundTimes []time.Duration
	var mu sync.Mutex
	t0 := time.Now()
	for range rounds {
		key := r.key("burst")
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		gate := make(chan struct{})
		var roundDone atomic.Int64
		var wg sync.WaitGroup
		for i := range ws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-gate
				start := time.Now()
				if o, ok := ws[i].(Optimist); ok {
					if err := o.Increment(rctx, CounterKey(key)); err != nil {
						errs.Add(1)
						return
					}
					roundDone.Add(1)
					return
				}
				h, err := ws[i].Acquire(rctx, key)
				if err != nil {
					errs.Add(1)
					return
				}
				mu.Lock()
				waits = append(waits, time.Since(start))
				mu.Unlock()
				ov.Enter()
				v, err := ReadCounter(rctx, env.Data, r.DataTable, key)
				if err == nil {
					err = WriteCounter(rctx, env.Data, r.DataTable, key, v+1)
				}
				ov.Exit()
				if err == nil {
					roundDone.Add(1)
				} else {
					errs.Add(1)
				}
				if err := h.Release(rctx); err != nil {
					errs.Add(1)
				}
			}()
		}
		r0 := time.Now()
		close(gate)
		wg.Wait()
		roundTimes = append(roundTimes, time.Since(r0))
		cancel()
		got, err := ReadCounter(ctx, env.Data.Next, r.DataTable, key)
		if err != nil {
			return rec, err
		}
		done.Add(roundDone.Load())
		lost.Add(roundDone.Load() - got)
	}
	el := time.Since(t0)
	u := env.Lock.C.Snapshot()
	c := float64(done.Load())
	if c > 0 {
		if optimistic {
			u = Usage{Calls: u.Calls - 2*done.Load(), WCU: u.WCU - c, RCU: u.RCU - c, CondFails: u.CondFails}
		}
		rec.lockPerCS(u, c)
	}
	if !optimistic {
		rec.DoubleHolders = i64p(ov.Events())
		rec.MaxWaitMs = fp(ms(slices.Max(append(waits, 0))))
	}
	rec.LostUpdates = i64p(lost.Load())
	rec.Completions = done.Load()
	rec.Errors = errs.Load()
	rec.DurationS = el.Seconds()
	roundStats(&rec, roundTimes)
	stalls(&rec, env)
	return rec, nil
}

// lockPerCS records the lock's own usage u per critical section, over c sections.
func (rec *Record) lockPerCS(u Usage, c float64) {
	rec.CallsPerCS = fp(float64(u.Calls) / c)
	rec.WCUPerCS = fp(u.WCU / c)
	rec.RCUPerCS = fp(u.RCU / c)
	rec.LockCUPerCS = fp(u.LockCU() / c)
}

// roundStats records the mean and the longest of a burst's round times.
func roundStats(rec *Record, rounds []time.Duration) {
	if len(rounds) == 0 {
		return
	}
	var sum time.Duration
	for _, d := range rounds {
		sum += d
	}
	rec.RoundMs = fp(ms(sum / time.Duration(len(rounds))))
	rec.RoundMaxMs = fp(ms(slices.Max(rounds)))
}

// Takeover measures, trials times in parallel, how long after a holder crashed (stopped
// heartbeating without releasing) a waiter that was already waiting acquires the lock.
// The crash comes at evenly spread offsets within the first lease, so it lands at every
// phase of the heartbeat cycle.
//
// A waiter that gets the lock before the crash is an early takeover, a safety failure,
// when the holder still believed its lease valid (lockcore leases can tell; the published
// designs cannot, so theirs all count). A trial whose holder had lost its own lease
// before the crash (its acquisition took longer than the lease on an overloaded engine)
// measures nothing and is counted apart.
func (r *Runner) Takeover(ctx context.Context, s Strategy, tc TakeoverCase, p Path, lease time.Duration, trials int) (Record, error) {
	rec := Record{Strategy: s.Name, Scenario: ScenarioTakeover, RTTms: ms(p.RTT), Workers: 2, Baseline: s.Baseline,
		TakeoverMode: tc.Name, LeaseMs: fp(ms(lease)), Trials: trials}
	env := r.env(p)
	t := Tuning{Lease: lease, Takeover: tc.Mode}
	type outcome struct {
		took       time.Duration
		early      bool
		holderLost bool
		err        error // the trial failed (on an overloaded machine, e.g. a waiter's own lease ran out)
	}
	results := make([]outcome, trials)
	errc := make(chan error, trials)
	var wg sync.WaitGroup
	for i := range trials {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Spread the trials' starts so that they do not all hit the engine at once.
			if err := sleepCtx(ctx, time.Duration(i)*lease/time.Duration(4*trials)); err != nil {
				errc <- err
				return
			}
			key := r.key("takeover")
			holder, err := s.New(env, fmt.Sprintf("holder-%d", i), t)
			if err != nil {
				errc <- err
				return
			}
			waiter, err := s.New(env, fmt.Sprintf("waiter-%d", i), t)
			if err != nil {
				errc <- err
				return
			}
			hctx, crash := context.WithCancel(ctx)
			defer crash()
			held, err := holder.Acquire(hctx, key)
			if err != nil {
				results[i].err = fmt.Errorf("holder: %w", err)
				return
			}
			valid := func() bool { return held.Valid == nil || held.Valid() }
			offset := time.Duration(float64(lease) * (float64(i) + 0.5) / float64(trials))
			wctx, wcancel := context.WithTimeout(ctx, offset+6*lease)
			defer wcancel()
			type acquired struct {
				at          time.Time
				holderValid bool
			}
			got := make(chan acquired, 1)
			werr := make(chan error, 1)
			go func() {
				h, err := waiter.Acquire(wctx, key)
				at := time.Now()
				if err != nil {
					werr <- err
					return
				}
				got <- acquired{at: at, holderValid: valid()}
				_ = h.Release(context.WithoutCancel(ctx))
			}()
			timer := time.NewTimer(offset)
			var crashAt time.Time
			select {
			case <-timer.C:
				if !valid() {
					results[i].holderLost = true
				}
				crashAt = time.Now()
				crash() // the heartbeat stops; nothing is released
			case a := <-got:
				timer.Stop()
				if a.holderValid {
					results[i].early = true
				} else {
					results[i].holderLost = true
				}
				return
			case err := <-werr:
				timer.Stop()
				results[i].err = fmt.Errorf("waiter before the crash: %w", err)
				return
			}
			select {
			case a := <-got:
				results[i].took = a.at.Sub(crashAt)
			case err := <-werr:
				results[i].err = fmt.Errorf("waiter never took over: %w", err)
			}
		}()
	}
	wg.Wait()
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return rec, errors.Join(errs...)
	}
	var ok []time.Duration
	early, lost := 0, 0
	for _, o := range results {
		switch {
		case o.err != nil:
			rec.Errors++
			rec.ErrorSample = o.err.Error()
		case o.early:
			early++
		case o.holderLost:
			lost++
		default:
			ok = append(ok, o.took)
		}
	}
	rec.EarlyTakeovers = ip(early)
	rec.HolderLost = ip(lost)
	if len(ok) > 0 {
		rec.TakeoverMs = fp(ms(slices.Max(ok)))
		rec.TakeoverP50ms = fp(ms(Percentile(ok, 50)))
		rec.TakeoverMinMs = fp(ms(slices.Min(ok)))
	}
	u := env.Lock.C.Snapshot()
	rec.CallsPerCS = fp(float64(u.Calls) / float64(trials))
	stalls(&rec, env)
	return rec, nil
}
