// Package chaos runs lockcore's strategies against DynamoDB Local through a
// fault-injecting proxy (internal/faultproxy), with crashed, paused and clock-skewed
// holders, records every operation and checks the history: linearizability with
// porcupine against a register model (see check.go), mutual exclusion, fencing tokens
// and lost updates. cmd/chaos is its command line; `make chaos` runs it.
//
// Workload: for each strategy, Workers goroutines increment counter items (Keys per
// strategy) by read-modify-write under the strategy's lock, while a reader per strategy
// reads them. Workers think between sections now and then, and are gathered into
// bursts that leave the locks idle and then arrive together (Config.Think and
// Config.BurstEvery; see idle.go). Every client talks through the proxy. Per lock strategy a disruptor
// starts holder processes (see holder.go) that acquire and are then killed with SIGKILL
// (crashes: at once, a little later, or in the middle of their write) or frozen with
// SIGSTOP for 1.5 to 3 leases and resumed to try their write (pauses). A share of the
// workers and holders run with clocks off by seconds to minutes (skewed clients).
// Optionally (Config.Shop) the order/inventory handlers run too, with at-least-once
// message delivery (see shop.go).
//
// The tables come from template.yaml (found from the working directory, as in the
// tests), created under fresh names and deleted at the end.
package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/ctxtime"
	"github.com/turnstile-locks/turnstile/internal/ddblocal"
	"github.com/turnstile-locks/turnstile/internal/faultproxy"
	"github.com/turnstile-locks/turnstile/internal/template"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// Config configures a run.
type Config struct {
	// Endpoint of the engine (DynamoDB Local). Clients reach it through the proxy; setup,
	// the final read and table deletion go direct.
	Endpoint string
	Duration time.Duration
	// Workers per strategy (default 3).
	Workers int
	Seed    uint64
	Faults  faultproxy.Faults
	// Strategies to run (default DefaultStrategies).
	Strategies []string
	// Lease of every lock (default 3s).
	Lease time.Duration
	// Keys is the number of counter items per strategy (default 2; multi-key uses
	// max(Keys, 3)).
	Keys int
	// Disrupt enables crash and pause holders; DisruptEvery is the mean time between two
	// disruptions per lock strategy (default 3s).
	Disrupt      bool
	DisruptEvery time.Duration
	// Skew gives some workers and holders clocks off by seconds to minutes.
	Skew bool
	// HolderCommand returns the command that starts a holder process; default: this
	// executable, with no arguments (its main or TestMain must call HolderMain first
	// when IsHolder).
	HolderCommand func() (*exec.Cmd, error)
	// CheckTimeout bounds the linearizability check of each key (default 2m).
	CheckTimeout time.Duration
	// VisualizeDir, if set, receives porcupine's HTML visualization of every key whose
	// history is not linearizable.
	VisualizeDir string
	// Log receives progress (default: discarded).
	Log *slog.Logger
	// Shop runs the order/inventory handler workload (internal/shop) too; see shop.go.
	Shop bool
	// Think is the mean of a worker's think time between two sections (half the gaps
	// are zero); 0: none, the closed loop. BurstEvery is the mean time between two bursts
	// per strategy (its workers park, its locks idle, then all arrive together on the
	// same keys); 0: none. Hold is the mean of a lock strategy's work time under the
	// lock, between acquire and write (drawn as think time; 0: none): a holder that a
	// waiter arriving behind it can race. See idle.go; DefaultThink, DefaultBurstEvery
	// and DefaultHold are the command's defaults.
	Think      time.Duration
	BurstEvery time.Duration
	Hold       time.Duration
}

// The idle-period defaults of cmd/chaos (`make chaos`) and of the smoke run.
const (
	DefaultThink      = 200 * time.Millisecond
	DefaultBurstEvery = 4 * time.Second
	DefaultHold       = 50 * time.Millisecond
)

func (c *Config) defaults() error {
	if c.Endpoint == "" {
		return errors.New("chaos: no engine endpoint")
	}
	if c.Duration <= 0 {
		return errors.New("chaos: duration must be positive")
	}
	if c.Workers <= 0 {
		c.Workers = 3
	}
	if len(c.Strategies) == 0 {
		c.Strategies = DefaultStrategies
	}
	for _, s := range c.Strategies {
		if !slices.Contains(append(slices.Clone(DefaultStrategies), StratNaive), s) {
			return fmt.Errorf("chaos: unknown strategy %q", s)
		}
	}
	if c.Lease <= 0 {
		c.Lease = 3 * time.Second
	}
	if c.Keys <= 0 {
		c.Keys = 2
	}
	if c.DisruptEvery <= 0 {
		c.DisruptEvery = 3 * time.Second
	}
	if c.Think < 0 || c.BurstEvery < 0 || c.Hold < 0 {
		return errors.New("chaos: negative think, burst or hold time")
	}
	if c.CheckTimeout <= 0 {
		c.CheckTimeout = 2 * time.Minute
	}
	if c.HolderCommand == nil {
		c.HolderCommand = func() (*exec.Cmd, error) {
			exe, err := os.Executable()
			if err != nil {
				return nil, err
			}
			return exec.Command(exe), nil
		}
	}
	if c.Log == nil {
		c.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Faults.Rates == nil {
		c.Faults = faultproxy.NoFaults()
	}
	return c.Faults.Validate()
}

func (c *Config) keysOf(strategy string) int {
	if strategy == StratMulti {
		return max(c.Keys, 3)
	}
	return c.Keys
}

// skews are the clock offsets given, in turn, to workers and holders when Skew is on
// (worker 0 of each strategy keeps the true time). All lie within lockcore's default TTL
// grace (15m): a clock slower than that would let DynamoDB's TTL delete a live lock row,
// which is outside lockcore's failure model (see docs/failure-model.md).
var skews = []time.Duration{0, 7 * time.Second, -5 * time.Second, 90 * time.Second, -40 * time.Second, 3 * time.Minute, -2 * time.Minute}

// runner is one run's state.
type runner struct {
	cfg      Config
	start    time.Time
	hist     *history
	mon      *monitor
	proxy    *faultproxy.Proxy
	proxyDB  *dynamodb.Client // through the proxy
	directDB *dynamodb.Client // straight to the engine
	locks    string
	data     string
	tables   map[string]string // by template logical id
	clientID atomic.Int64
	stats    *stats
	bursts   atomic.Int64 // bursts released, all strategies
	holders  sync.WaitGroup
}

// stats counts what happened besides the history.
type stats struct {
	mu           sync.Mutex
	crashes      map[string]int
	pauses       map[string]int
	pauseRefused map[string]int
	pauseWrote   map[string]int
	unacquired   map[string]int // holder processes killed before they acquired
	skewed       int
	events       map[string]int // by strategy/event: acquire errors, holder failures, ...
	notes        []string
}

func (s *stats) inc(m map[string]int, k string) {
	s.mu.Lock()
	m[k]++
	s.mu.Unlock()
}

func (s *stats) event(strategy, what string) { s.inc(s.events, strategy+": "+what) }

// Run runs the chaos workload for cfg.Duration and checks it. It returns an error only
// when the run could not be carried out; findings are in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	r := &runner{
		cfg: cfg, start: time.Now(), mon: newMonitor(),
		stats: &stats{crashes: map[string]int{}, pauses: map[string]int{}, pauseRefused: map[string]int{}, unacquired: map[string]int{},
			pauseWrote: map[string]int{}, events: map[string]int{}},
	}
	r.hist = newHistory(r.start)
	var err error
	if r.directDB, err = ddblocal.NewClient(ctx, cfg.Endpoint); err != nil {
		return nil, err
	}
	if err := r.createTables(ctx); err != nil {
		return nil, err
	}
	defer r.deleteTables()
	if r.proxy, err = faultproxy.Start(cfg.Endpoint, cfg.Seed, cfg.Faults); err != nil {
		return nil, err
	}
	defer r.proxy.Close()
	if r.proxyDB, err = ddblocal.NewClient(ctx, r.proxy.Endpoint()); err != nil {
		return nil, err
	}
	cfg.Log.Info("chaos run", "seed", cfg.Seed, "duration", cfg.Duration, "workers", cfg.Workers,
		"strategies", cfg.Strategies, "faults", cfg.Faults.String(), "proxy", r.proxy.Endpoint(), "lease", cfg.Lease)

	var sr *shopRun
	if cfg.Shop {
		sr = r.newShopRun()
		if err := sr.seed(ctx); err != nil {
			return nil, err
		}
	}

	runCtx, stopRun := context.WithTimeout(ctx, cfg.Duration)
	defer stopRun()
	seeds := mrand.New(mrand.NewPCG(cfg.Seed, 0x5eed))
	var wg sync.WaitGroup
	if sr != nil {
		seed := seeds.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			sr.run(runCtx, seed)
		}()
	}
	for _, st := range cfg.Strategies {
		var b *burst
		if cfg.BurstEvery > 0 && cfg.Workers > 1 {
			b = newBurst(cfg.Workers)
			rng := mrand.New(mrand.NewPCG(seeds.Uint64(), 13))
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.bursts.Add(int64(b.run(runCtx, rng, cfg.BurstEvery, cfg.Think, func() []int { return r.pickKeys(rng, st) })))
			}()
		}
		for w := range cfg.Workers {
			offset := time.Duration(0)
			if cfg.Skew {
				offset = skews[w%len(skews)]
			}
			if offset != 0 {
				r.stats.mu.Lock()
				r.stats.skewed++
				r.stats.mu.Unlock()
			}
			seed := seeds.Uint64()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.worker(runCtx, st, w, offset, seed, b)
			}()
		}
		seed := seeds.Uint64()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.reader(runCtx, st, seed)
		}()
		if cfg.Disrupt && isLockStrategy(st) {
			seed := seeds.Uint64()
			wg.Add(1)
			go func() {
				defer wg.Done()
				r.disruptor(runCtx, st, seed)
			}()
		}
	}
	progress := time.NewTicker(30 * time.Second)
	defer progress.Stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-progress.C:
			cfg.Log.Info("progress", "elapsed", time.Since(r.start).Round(time.Second), "ops", r.hist.len(),
				"requests", r.proxy.Requests(), "faults", r.proxy.Counts())
		}
	}
	r.holders.Wait()
	// Nothing may land after the final read: close the proxy (it waits for requests in
	// flight, stalled ones included), then read every counter straight from the engine.
	if err := r.proxy.Close(); err != nil {
		cfg.Log.Warn("closing proxy", "err", err)
	}
	elapsed := time.Since(r.start)
	if err := r.finalReads(ctx); err != nil {
		return nil, err
	}
	orphans, err := r.orphanTickets(ctx)
	if err != nil {
		return nil, err
	}
	var shopRes *ShopResult
	if sr != nil {
		sr.drain(ctx)
		if err := sr.verify(ctx); err != nil {
			return nil, fmt.Errorf("chaos: verify the handler workload: %w", err)
		}
		shopRes = sr.res
	}
	rep := r.report(elapsed, shopRes)
	if rep.OrphanTickets = orphans; orphans > 0 {
		rep.OK = false
		rep.Findings = append(rep.Findings, fmt.Sprintf("ticket: %d orphan tickets left in the queue by waiters that gave up", orphans))
	}
	return rep, nil
}

// orphanTickets counts, after the run, the ticket-lock entries of tickets not yet served
// (waiters that are gone), less those of holder processes killed before they acquired.
func (r *runner) orphanTickets(ctx context.Context) (int, error) {
	if !slices.Contains(r.cfg.Strategies, StratTicket) {
		return 0, nil
	}
	n := 0
	for k := range r.cfg.keysOf(StratTicket) {
		out, err := r.directDB.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(r.locks), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: lockKey(StratTicket, k)},
				"sk": &types.AttributeValueMemberS{Value: "lock#ticket"}}})
		if err != nil {
			return 0, fmt.Errorf("chaos: read ticket row %d: %w", k, err)
		}
		serving, _ := numAttr(out.Item, "serving")
		for name := range out.Item {
			if v, ok := numAttr(out.Item, name); ok && strings.HasPrefix(name, "w#") && v+1 > serving {
				n++
			}
		}
	}
	r.stats.mu.Lock()
	killed := r.stats.unacquired[StratTicket]
	r.stats.mu.Unlock()
	return max(0, n-killed), nil
}

func (r *runner) createTables(ctx context.Context) error {
	tpl, err := template.LoadDefault()
	if err != nil {
		return err
	}
	suffix := randHex(4)
	r.locks, r.data = "chaos-locks-"+suffix, "chaos-data-"+suffix
	r.tables = map[string]string{"LockTable": r.locks, "InventoryTable": r.data}
	if r.cfg.Shop {
		r.tables["OrdersTable"] = "chaos-orders-" + suffix
	}
	for id, name := range r.tables {
		spec, err := tpl.Table(id)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		err = ddblocal.CreateTable(cctx, r.directDB, spec.CreateTableInput(name), spec.TTLInput(name))
		cancel()
		if err != nil {
			return fmt.Errorf("chaos: create table %s: %w", name, err)
		}
	}
	return nil
}

func (r *runner) deleteTables() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range r.tables {
		_, _ = r.directDB.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (r *runner) pickKeys(rng *mrand.Rand, st string) []int {
	n := r.cfg.keysOf(st)
	if st == StratMulti {
		p := rng.Perm(n)
		return p[:2] // both orders occur: AcquireAll must sort
	}
	return []int{rng.IntN(n)}
}

// worker runs read-modify-write increments until ctx ends, with think time between
// them and in bursts b (nil: none).
func (r *runner) worker(ctx context.Context, st string, w int, offset time.Duration, seed uint64, b *burst) {
	rng := mrand.New(mrand.NewPCG(seed, uint64(w)))
	owner := fmt.Sprintf("%s-w%d", st, w)
	s, err := newSession(r.proxyDB, sessionSpec{
		Strategy: st, Owner: owner, Locks: r.locks, Data: r.data, Lease: r.cfg.Lease, Offset: offset, Heartbeat: true,
		Bypass: st == StratMutex && w%2 == 1, // half the Mutex workers: lockcore.WithBypass
	}, seed)
	if err != nil {
		r.stats.event(st, "session: "+err.Error())
		return
	}
	client := int(r.clientID.Add(1)) - 1
	for seq := 0; ctx.Err() == nil; seq++ {
		var keys []int
		if b != nil {
			if keys = slices.Clone(b.gate(ctx)); ctx.Err() != nil {
				return
			}
		}
		if keys == nil {
			keys = r.pickKeys(rng, st)
		} else {
			// Released by a burst: everyone on the same keys (in either order), within a
			// few milliseconds.
			rng.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
			sleepCtx(ctx, time.Duration(rng.Int64N(int64(burstSpread))))
		}
		id := fmt.Sprintf("%s.%d", owner, seq)
		switch st {
		case StratVersioned:
			r.versionedOp(ctx, s, rng, client, id, keys[0])
		case StratNaive:
			r.naiveOp(ctx, s, rng, client, id, keys[0])
		default:
			r.lockedOp(ctx, s, rng, client, id, keys)
		}
		sleepCtx(ctx, thinkTime(rng, r.cfg.Think))
	}
}

func (r *runner) problem(st string) problemFunc {
	return func(kind, msg string) {
		if kind == problemViolation {
			r.mon.violation("%s", msg)
		} else {
			r.mon.regression("%s", msg)
		}
	}
}

// lockedOp is one critical section of a lock strategy.
func (r *runner) lockedOp(ctx context.Context, s *session, rng *mrand.Rand, client int, id string, keys []int) {
	st := s.spec.Strategy
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// Callers give up: one acquisition in ten is cancelled after up to 30 ms, one in five
	// after 200-800 ms, while the waiter waits or while a request is in flight (a stalled
	// ticket request, say, that lands after its caller left).
	acqCtx, cancelAcq := context.WithCancel(actx)
	defer cancelAcq()
	var giveUp time.Duration
	switch r := rng.IntN(10); {
	case r == 0:
		giveUp = time.Duration(rng.Int64N(int64(30*time.Millisecond))) + 1
	case r <= 2:
		giveUp = 200*time.Millisecond + time.Duration(rng.Int64N(int64(600*time.Millisecond)))
	}
	if giveUp > 0 {
		t := time.AfterFunc(giveUp, cancelAcq)
		defer t.Stop()
	}
	h, err := s.acquire(acqCtx, keys, r.problem(st))
	if err == nil && s.spec.Bypass {
		if id := h.leases[0].ID(); id == s.lastLease {
			r.stats.event(st, "lease continued (bypass)")
		} else {
			s.lastLease = id
		}
	}
	if err != nil {
		if ctx.Err() == nil {
			r.stats.event(st, "acquire failed: "+errKind(err))
		}
		return
	}
	var entries []*holderEntry
	exit := func() {
		for i, e := range entries {
			r.mon.exit(partName(st, keys[i]), e)
		}
		entries = nil
	}
	for i, k := range keys {
		e := r.mon.enter(partName(st, k), h.leases[i].ID(), int64(h.tokens[i]), h.leases[i].Remaining)
		if e == nil {
			exit()
			r.stats.event(st, "lease expired before the write")
			_ = s.release(ctx, h, false)
			return
		}
		entries = append(entries, e)
	}
	// Work under the lock (the lease heartbeats meanwhile).
	sleepCtx(actx, thinkTime(rng, r.cfg.Hold))
	ops := make([]*op, len(keys))
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = id
		ops[i] = r.hist.begin(&op{ID: id, Part: partName(st, k), Strategy: st, Kind: opIncr, Client: client,
			ObsN: h.obs[i].N, ObsLast: h.obs[i].Last})
	}
	if st == StratLockingRead {
		exit() // the write releases the lock: leave before it can be taken over
	}
	sts, refusedWhileValid, werr := s.write(actx, h, ids)
	for i, o := range ops {
		o.RefusedWhileValid = refusedWhileValid
		if werr != nil {
			o.Note = truncate(werr.Error(), 300)
		}
		r.hist.end(o, sts[i])
	}
	if werr != nil {
		r.stats.event(st, "write "+sts[0].String()+": "+errKind(werr))
	}
	exit()
	// A write an attempt of which may have landed unseen may still land again, late: a
	// bypass worker ends the tenure (lockcore.Lease.ReleaseTenure), so that the next
	// tenure's token fences that copy out (a continuation would share the token).
	if err := s.release(ctx, h, h.ambig); err != nil && werr == nil {
		r.stats.event(st, "release: "+errKind(err))
	}
}

// versionedOp is one optimistic increment; now and then the worker pauses inside its
// merge (between read and conditional write) for two leases.
func (r *runner) versionedOp(ctx context.Context, s *session, rng *mrand.Rand, client int, id string, k int) {
	st := s.spec.Strategy
	pause := r.cfg.Disrupt && rng.IntN(40) == 0
	var seen obs
	paused := false
	o := r.hist.begin(&op{ID: id, Part: partName(st, k), Strategy: st, Kind: opIncr, Client: client})
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, _, err := s.ver.Update(actx, itemKey(st, k), func(cur map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
		seen = obsOf(cur)
		if pause && !paused {
			paused = true
			r.stats.inc(r.stats.pauses, st)
			t := time.NewTimer(2 * r.cfg.Lease)
			select {
			case <-t.C:
			case <-actx.Done():
			}
			t.Stop()
		}
		return map[string]types.AttributeValue{
			attrN:    &types.AttributeValueMemberN{Value: fmt.Sprint(seen.N + 1)},
			attrLast: &types.AttributeValueMemberS{Value: id},
		}, nil
	})
	o.ObsN, o.ObsLast = seen.N, seen.Last
	switch {
	case err == nil:
		r.hist.end(o, stOK)
	case errors.Is(err, lockcore.ErrConflict):
		r.hist.end(o, stFailed) // documented: lost every attempt, nothing written
		r.stats.event(st, "conflict")
	default:
		o.Note = truncate(err.Error(), 300)
		r.hist.end(o, stUnknown)
		if ctx.Err() == nil {
			r.stats.event(st, "update unknown: "+errKind(err))
		}
	}
}

// naiveOp is the unlocked read-modify-write the checks must catch.
func (r *runner) naiveOp(ctx context.Context, s *session, rng *mrand.Rand, client int, id string, k int) {
	st := s.spec.Strategy
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	seen, err := s.data.read(cctx, itemKey(st, k))
	cancel()
	if err != nil {
		return
	}
	// A little work between read and write, as in any real handler.
	time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
	o := r.hist.begin(&op{ID: id, Part: partName(st, k), Strategy: st, Kind: opIncr, Client: client, ObsN: seen.N, ObsLast: seen.Last})
	res := s.data.plainWrite(ctx, s.rng, itemKey(st, k), seen, id)
	r.hist.end(o, res.Status)
}

// reader reads the counters now and then (through the proxy): more observations for the
// checker.
func (r *runner) reader(ctx context.Context, st string, seed uint64) {
	rng := mrand.New(mrand.NewPCG(seed, 7))
	d := &dataClient{db: r.proxyDB, table: r.data}
	client := int(r.clientID.Add(1)) - 1
	for ctx.Err() == nil {
		k := rng.IntN(r.cfg.keysOf(st))
		call := r.hist.now()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		o, err := d.read(cctx, itemKey(st, k))
		cancel()
		if err == nil {
			r.hist.add(&op{Part: partName(st, k), Strategy: st, Kind: opRead, Client: client, Call: call, Return: r.hist.now(),
				Status: stOK, ObsN: o.N, ObsLast: o.Last})
		}
		sleepCtx(ctx, time.Duration(20+rng.IntN(40))*time.Millisecond)
	}
}

func (r *runner) finalReads(ctx context.Context) error {
	d := &dataClient{db: r.directDB, table: r.data}
	client := int(r.clientID.Add(1)) - 1
	for _, st := range r.cfg.Strategies {
		for k := range r.cfg.keysOf(st) {
			call := r.hist.now()
			o, err := d.read(ctx, itemKey(st, k))
			if err != nil {
				return fmt.Errorf("chaos: final read of %s: %w", partName(st, k), err)
			}
			r.hist.add(&op{Part: partName(st, k), Strategy: st, Kind: opRead, Client: client, Call: call, Return: r.hist.now(),
				Status: stOK, ObsN: o.N, ObsLast: o.Last, ObsAdds: o.Adds, Note: noteFinal})
		}
	}
	return nil
}

// disruptor starts crash and pause holders for one lock strategy until ctx ends.
func (r *runner) disruptor(ctx context.Context, st string, seed uint64) {
	rng := mrand.New(mrand.NewPCG(seed, 11))
	for n := 0; ; n++ {
		wait := time.Duration(rng.ExpFloat64() * float64(r.cfg.DisruptEvery))
		if !sleepCtx(ctx, wait) {
			return
		}
		offset := time.Duration(0)
		if r.cfg.Skew && n%2 == 1 {
			offset = skews[1+rng.IntN(len(skews)-1)]
		}
		spec := holderSpec{
			Session: sessionSpec{Strategy: st, Owner: fmt.Sprintf("%s-h%d", st, n), Locks: r.locks, Data: r.data,
				Lease: r.cfg.Lease, Offset: offset, Heartbeat: false},
			Endpoint: r.proxy.Endpoint(),
			Keys:     r.pickKeys(rng, st),
			Seed:     rng.Uint64(),
		}
		crash := rng.IntN(2) == 0
		if crash {
			spec.Session.Heartbeat = true // a live holder heartbeats until it is killed
		}
		r.holders.Add(1)
		func() {
			defer r.holders.Done()
			if crash {
				r.crashHolder(ctx, spec, rng)
			} else {
				r.pauseHolder(ctx, spec, rng)
			}
		}()
	}
}

// runHolder starts a holder and waits until it holds. It returns nil when it could not.
// The holder is registered with the monitor until exit is called (before it is told to
// write: its write, or the release after it, ends its critical section).
func (r *runner) runHolder(ctx context.Context, spec holderSpec) (p *holderProc, held holderEvent, exit func()) {
	st := spec.Session.Strategy
	p, err := startHolder(r.cfg.HolderCommand, spec)
	if err != nil {
		r.stats.event(st, "holder start: "+err.Error())
		return nil, holderEvent{}, nil
	}
	held, err = p.next(ctx, "held", 45*time.Second, r.holderProblem)
	if err != nil {
		p.kill()
		r.stats.mu.Lock()
		r.stats.unacquired[st]++ // may leave a ticket entry behind
		r.stats.mu.Unlock()
		if ctx.Err() == nil {
			r.stats.event(st, "holder did not acquire: "+truncate(err.Error(), 120))
		}
		return nil, holderEvent{}, nil
	}
	if spec.Session.Offset != 0 {
		r.stats.mu.Lock()
		r.stats.skewed++
		r.stats.mu.Unlock()
	}
	started := time.Unix(0, held.Started)
	var entries []*holderEntry
	for i, k := range spec.Keys {
		// Valid at least until the start of its acquire call plus the lease.
		entries = append(entries, r.mon.enterExternal(partName(st, k), spec.Session.Owner, held.Tokens[i], started.Add(r.cfg.Lease)))
	}
	exit = func() {
		for i, k := range spec.Keys {
			r.mon.exit(partName(st, k), entries[i])
		}
	}
	return p, held, exit
}

func (r *runner) holderProblem(ev holderEvent) {
	if ev.Ev != "problem" {
		return
	}
	if ev.Kind == problemViolation {
		r.mon.violation("holder: %s", ev.Msg)
	} else {
		r.mon.regression("holder: %s", ev.Msg)
	}
}

func (r *runner) holderOps(spec holderSpec, held holderEvent) ([]*op, string) {
	st := spec.Session.Strategy
	client := int(r.clientID.Add(1)) - 1
	id := spec.Session.Owner + ".0"
	ops := make([]*op, len(spec.Keys))
	ids := make([]string, len(spec.Keys))
	for i, k := range spec.Keys {
		ids[i] = id
		ops[i] = r.hist.begin(&op{ID: id, Part: partName(st, k), Strategy: st, Kind: opIncr, Client: client,
			ObsN: held.Obs[i].N, ObsLast: held.Obs[i].Last})
	}
	return ops, "write " + strings.Join(ids, ",")
}

// crashHolder: a holder acquires and is killed with SIGKILL while holding: at once, after
// a while, or in the middle of its write.
func (r *runner) crashHolder(ctx context.Context, spec holderSpec, rng *mrand.Rand) {
	st := spec.Session.Strategy
	p, held, exit := r.runHolder(ctx, spec)
	if p == nil {
		return
	}
	switch rng.IntN(3) {
	case 0:
	case 1:
		sleepCtx(ctx, time.Duration(rng.Int64N(int64(r.cfg.Lease/2))))
	case 2:
		exit() // a dead holder stays registered: its lease runs out on the clock
		ops, cmd := r.holderOps(spec, held)
		if err := p.send(cmd); err == nil {
			time.Sleep(time.Duration(rng.IntN(15)) * time.Millisecond)
		}
		for _, o := range ops {
			o.Note = "crashed during the write"
			r.hist.end(o, stUnknown)
		}
	}
	p.kill()
	r.stats.inc(r.stats.crashes, st)
}

// pauseHolder: a holder acquires and reads, is frozen with SIGSTOP for 1.5 to 3 leases,
// then thawed and told to write. If another client took the lock meanwhile, the write
// must be refused.
func (r *runner) pauseHolder(ctx context.Context, spec holderSpec, rng *mrand.Rand) {
	st := spec.Session.Strategy
	p, held, exit := r.runHolder(ctx, spec)
	if p == nil {
		return
	}
	if err := stop(p.cmd); err != nil {
		r.stats.event(st, "pause: "+err.Error())
		p.kill()
		return
	}
	r.stats.inc(r.stats.pauses, st)
	pause := time.Duration((1.5 + 1.5*rng.Float64()) * float64(r.cfg.Lease))
	t := time.NewTimer(pause)
	select {
	case <-t.C:
	case <-ctx.Done(): // the run ends: the holder still wakes up and writes
	}
	t.Stop()
	if err := resume(p.cmd); err != nil {
		r.stats.event(st, "resume: "+err.Error())
		p.kill()
		return
	}
	exit()
	ops, cmd := r.holderOps(spec, held)
	var wrote holderEvent
	err := p.send(cmd)
	if err == nil {
		wrote, err = p.next(context.WithoutCancel(ctx), "wrote", 60*time.Second, r.holderProblem)
	}
	status := stUnknown
	if err == nil {
		for _, s := range []opStatus{stOK, stUnknown, stFailed} {
			if wrote.Status == s.String() {
				status = s
			}
		}
	} else {
		r.stats.event(st, "paused holder: "+truncate(err.Error(), 120))
	}
	for _, o := range ops {
		o.RefusedWhileValid = wrote.RefusedWhileValid
		o.Note = "paused holder: " + truncate(wrote.Msg, 200)
		r.hist.end(o, status)
	}
	switch status {
	case stFailed:
		r.stats.inc(r.stats.pauseRefused, st)
	case stOK:
		r.stats.inc(r.stats.pauseWrote, st)
	}
	p.wait(15 * time.Second)
}

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool { return ctxtime.Sleep(ctx, d) == nil }

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// errKind names an error for the event counts.
func errKind(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, lockcore.ErrUnknownOutcome):
		return "unknown outcome"
	case errors.Is(err, lockcore.ErrLeaseLost):
		return "lease lost"
	case errors.Is(err, lockcore.ErrNotOwner):
		return "not owner"
	case errors.Is(err, lockcore.ErrWaitTimeout):
		return "wait timeout"
	case errors.Is(err, lockcore.ErrLockHeld):
		return "lock held"
	case errors.Is(err, context.DeadlineExceeded):
		return "deadline"
	case errors.Is(err, context.Canceled):
		return "canceled"
	}
	switch classify(err) {
	case clsRefused:
		return "condition failed"
	case clsRetryable:
		return "throttled"
	case clsFatal:
		return "client error: " + truncate(err.Error(), 200)
	}
	return "ambiguous"
}

// visualize writes porcupine's visualization of a failed key.
func (r *runner) visualize(res partResult) string {
	if r.cfg.VisualizeDir == "" {
		return ""
	}
	if err := os.MkdirAll(r.cfg.VisualizeDir, 0o755); err != nil {
		return ""
	}
	path := filepath.Join(r.cfg.VisualizeDir, strings.ReplaceAll(res.Part, "/", "-")+".html")
	if err := porcupine.VisualizePath(registerModel, res.info, path); err != nil {
		return ""
	}
	return path
}
