//go:build go1.25

package lockcore

// The deterministic simulator (docs/protocol.md, section 6). Per seed, a synctest bubble
// runs Mutex, TicketLock and ItemLocker clients against ddbmodel, the in-memory model of
// DynamoDB's item semantics whose conformance test holds it to DynamoDB Local. The seed
// drives every choice: the workload, the faults (requests dropped, applied with the
// response lost, applied late, delayed; clients crashed, frozen past their lease, their
// wall clocks skewed; stale eventually consistent reads; TTL deletions; an operator's
// ForceRelease) and, through cryptotest and jitterN, lockcore's own random ids and backoff
// jitter. Time is synctest's virtual time, so a run of minutes takes milliseconds.
// Invariants I1, I2, I3 and I5 are checked after every write to the model and at every
// reported outcome; a violation fails with the seed, the invariant and the run's last
// events, and
//
//	cd lockcore && DYNAMODB_ENDPOINT=unused go test -run 'TestSim$' -sim.seed=N -v .
//
// replays it exactly (TestMain wants DYNAMODB_ENDPOINT set; the simulator uses no engine).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/cryptotest"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/turnstile-locks/turnstile/lockcore/internal/ddbmodel"
)

var (
	simSeed  = flag.Uint64("sim.seed", 0, "simulator: replay this seed alone, with its whole history (0: run -sim.seeds seeds)")
	simSeeds = flag.Int("sim.seeds", simDefaultSeeds, "simulator: how many seeds TestSim runs")
	simFirst = flag.Uint64("sim.first", 1, "simulator: the first seed TestSim runs")
	simAll   = flag.Bool("sim.all", false, "simulator: run every seed, reporting each failing one in a line (default: stop at the first)")
	simDump  = flag.String("sim.dump", "", "simulator: write each seed's history to this directory (comparing replays)")
)

// TestSim runs the seeds -sim.first … -sim.first+-sim.seeds-1, or -sim.seed alone.
func TestSim(t *testing.T) {
	first, count, verbose := *simFirst, uint64(*simSeeds), false
	if *simSeed != 0 {
		first, count, verbose = *simSeed, 1, true
	}
	start := time.Now()
	var steps, writes, failed int
	for seed := first; seed < first+count; seed++ {
		res := runSim(t, seed)
		steps += res.events
		writes += res.writes
		if res.failure != "" {
			if !*simAll || verbose {
				t.Fatalf("%s", res.report(verbose))
			}
			failed++
			t.Errorf("seed %d: %s", seed, res.failure)
		}
		if *simDump != "" {
			if err := os.WriteFile(fmt.Sprintf("%s/%d", *simDump, seed), []byte(strings.Join(res.history, "\n")), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if verbose {
			t.Logf("seed %d: history\n%s", seed, strings.Join(res.history, "\n"))
		}
	}
	t.Logf("simulator: seeds %d..%d (%d), %d failed, %d events, %d model writes, %s",
		first, first+count-1, count, failed, steps, writes, time.Since(start).Round(time.Millisecond))
}

// TestSimReplays runs a few seeds twice and requires identical histories: a failing seed
// must replay exactly.
func TestSimReplays(t *testing.T) {
	for _, seed := range []uint64{1, 7, 42, 1234, 99991} {
		a, b := runSim(t, seed), runSim(t, seed)
		if a.failure != "" {
			t.Fatalf("%s", a.report(false))
		}
		if len(a.history) < 20 {
			t.Fatalf("seed %d: only %d events", seed, len(a.history))
		}
		if !slices.Equal(a.history, b.history) {
			i := 0
			for i < min(len(a.history), len(b.history)) && a.history[i] == b.history[i] {
				i++
			}
			t.Fatalf("seed %d: the two runs differ at event %d of %d/%d:\n  first:  %s\n  second: %s", seed, i,
				len(a.history), len(b.history), at(a.history, i), at(b.history, i))
		}
	}
}

func at(h []string, i int) string {
	if i < len(h) {
		return h[i]
	}
	return "(end)"
}

// simResult is what a run leaves.
type simResult struct {
	seed    uint64
	failure string
	history []string
	events  int
	writes  int
}

func (r simResult) report(all bool) string {
	h := r.history
	if !all && len(h) > 50 {
		h = h[len(h)-50:]
	}
	return fmt.Sprintf("seed %d: %s\nlast %d events:\n%s\nreplay: cd lockcore && DYNAMODB_ENDPOINT=unused go test -run 'TestSim$' -sim.seed=%d -v .",
		r.seed, r.failure, len(h), strings.Join(h, "\n"), r.seed)
}

// simServerTime stamps a model response with the virtual server time (to the second,
// as the Date header has it).
type simServerTime struct{}

var hookOnce sync.Once

// simJitter is the seeded source of lockcore's backoff jitter during a run (nil: none).
var simJitter struct {
	sync.Mutex
	rng *rand.Rand
}

// simRunMu keeps runs apart: jitterN is one package variable.
var simRunMu sync.Mutex

// Errors the simulated network returns.
var (
	errSimTimeout = &net.OpError{Op: "read", Net: "tcp", Err: simTimeoutErr{}}                                      // ambiguous
	errSimDial    = &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}                     // retryable
	errSim5xx     = &smithy.GenericAPIError{Code: "InternalServerError", Message: "sim", Fault: smithy.FaultServer} // ambiguous
	errSimDead    = &smithy.GenericAPIError{Code: "ValidationException", Message: "sim: process crashed", Fault: smithy.FaultClient}
	errWaitBound  = errors.New("sim: the wait bound (I5) ran out")
	errSimCancel  = errors.New("sim: the caller cancelled")
)

type simTimeoutErr struct{}

func (simTimeoutErr) Error() string   { return "i/o timeout" }
func (simTimeoutErr) Timeout() bool   { return true }
func (simTimeoutErr) Temporary() bool { return true }

// simClock is a client's clock: virtual time shifted by the client's wall-clock skew
// (time.Time.Add keeps the monotonic reading, so durations are exact). A pointer, so
// that serverClockOf keeps one estimate per client and run.
type simClock struct{ skew time.Duration }

func (c *simClock) Now() time.Time { return time.Now().Add(c.skew) }

// The scenario's parameters, drawn from the seed.
type simParams struct {
	lease      time.Duration
	maxHold    time.Duration
	pDrop      float64 // a request dropped before it reaches the model
	pLost      float64 // applied, response lost
	pLate      float64 // a write that times out and lands later
	pSlow      float64 // a delayed response
	pStale     float64 // an eventually consistent read served from an older state
	staleness  time.Duration
	ttlEvery   time.Duration
	forceEvery time.Duration // 0: no operator
	// big: ItemLocker holders write data that brings the item to within a few KB of
	// DynamoDB's 400 KB item limit, sometimes past it (every third seed).
	big bool
}

type simClient struct {
	name     string
	kind     string // "mutex", "ticket", "item", "queue"
	rng      *rand.Rand
	clock    *simClock
	crashAt  time.Duration // from the start; 0: never
	freezeAt time.Duration
	freezeD  time.Duration
	crashed  bool
	bypass   bool // WithBypass
	frozenTo time.Time
	done     sync.Once
}

type simHeld struct {
	c     *simClient
	key   string
	lease *Lease
	token Fence
}

type simGrant struct {
	token Fence
	at    time.Time
}

type simRun struct {
	t      *testing.T
	seed   uint64
	p      simParams
	model  *ddbmodel.DB
	locks  string
	data   string
	start  time.Time
	end    chan struct{} // closed after the run: crashed clients' calls return
	stopBg chan struct{}

	mu                      sync.Mutex
	rng                     *rand.Rand // the scheduler's own choices (under mu)
	history                 []string
	writes                  int
	failure                 string
	held                    map[*Lease]*simHeld
	grants                  map[string][]simGrant // key → every lease Acquire returned, in order
	lastToken               map[string]Fence
	lastLease               map[string]string       // the lease id of lastToken (a lease continued by bypass keeps its token)
	forced                  map[simForced]bool      // (lock key, token) a force-release ended
	forcedAt                map[simForced]time.Time // when the force-release was seen written
	ended                   bool
	forceWrites, writesSeen int        // transactions applied; as of the last look for forced* attributes
	writeAt                 []simWrite // model sequence number → virtual time of each write
	freezes                 time.Duration
}

type simForced struct {
	key   string
	token Fence
}

type simWrite struct {
	seq uint64
	at  time.Time
}

var simRunCount int

func runSim(t *testing.T, seed uint64) (res simResult) {
	t.Helper()
	simRunMu.Lock()
	defer simRunMu.Unlock()
	hookOnce.Do(func() {
		// Installed once, not per run: a kept lease's release (WithBypass) may still run
		// in the bubble when the run's deferred calls do, and a per-run write of
		// jitterN raced with its read.
		jitterN = func(n int64) int64 {
			simJitter.Lock()
			defer simJitter.Unlock()
			if simJitter.rng == nil {
				return rand.Int64N(n)
			}
			return simJitter.rng.Int64N(n)
		}
		serverTimeOf = func(md middleware.Metadata) (time.Time, bool) {
			if v, ok := md.Get(simServerTime{}).(time.Time); ok {
				return v, true
			}
			return awsmiddleware.GetServerTime(md)
		}
	})
	simRunCount++
	run := simRunCount
	t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
		cryptotest.SetGlobalRandom(t, seed)
		synctest.Test(t, func(t *testing.T) {
			r := newSimRun(t, seed, run)
			simJitter.Lock()
			simJitter.rng = rand.New(rand.NewPCG(seed, 3))
			simJitter.Unlock()
			defer func() {
				simJitter.Lock()
				simJitter.rng = nil
				simJitter.Unlock()
			}()
			r.play()
			r.mu.Lock() // a late write's goroutine may have run after the end
			defer r.mu.Unlock()
			res = simResult{seed: seed, failure: r.failure, history: r.history, events: len(r.history), writes: r.writes}
		})
	})
	return res
}

func newSimRun(t *testing.T, seed uint64, run int) *simRun {
	rng := rand.New(rand.NewPCG(seed, 1))
	p := simParams{
		lease:     time.Duration(3+rng.IntN(3)) * time.Second,
		pDrop:     []float64{0, 0.01, 0.05}[rng.IntN(3)],
		pLost:     []float64{0, 0.01, 0.05}[rng.IntN(3)],
		pLate:     []float64{0, 0.01, 0.03}[rng.IntN(3)],
		pSlow:     []float64{0, 0.05, 0.2}[rng.IntN(3)],
		pStale:    []float64{0, 0.3, 0.8}[rng.IntN(3)],
		staleness: time.Duration(rng.IntN(1500)+1) * time.Millisecond,
		ttlEvery:  500*time.Millisecond + jitter(rng, 3*time.Second),
	}
	p.maxHold = p.lease * time.Duration(1+rng.IntN(3)) / 3
	p.big = seed%3 == 0 // not drawn from rng: the other seeds' runs stay as they were
	if rng.IntN(2) == 0 {
		p.forceEvery = time.Second + jitter(rng, 5*time.Second)
	}
	r := &simRun{t: t, seed: seed, p: p, rng: rng, start: time.Now(),
		end: make(chan struct{}), stopBg: make(chan struct{}),
		locks: fmt.Sprintf("simlocks%d", run), data: fmt.Sprintf("simdata%d", run),
		held: map[*Lease]*simHeld{}, grants: map[string][]simGrant{}, lastToken: map[string]Fence{}, lastLease: map[string]string{}, forced: map[simForced]bool{}, forcedAt: map[simForced]time.Time{}}
	staleRng := rand.New(rand.NewPCG(seed, 2))
	r.model = ddbmodel.New(ddbmodel.WithStaleness(ddbmodel.StalenessFunc(func(_ ddbmodel.Read, oldest, latest uint64) uint64 {
		// Bounded staleness: a state at most p.staleness old (the model calls this
		// under its own lock, from the reading goroutine; writeAt is appended under
		// r.mu by writers, which hold no model lock then).
		if staleRng.Float64() >= p.pStale {
			return latest
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		horizon := time.Now().Add(-p.staleness)
		lo := oldest
		for i := len(r.writeAt) - 1; i >= 0; i-- {
			if !r.writeAt[i].at.After(horizon) {
				lo = max(lo, r.writeAt[i].seq) // the state then: every state since is allowed
				break
			}
		}
		if lo >= latest {
			return latest
		}
		return lo + staleRng.Uint64N(latest-lo+1)
	})))
	for _, name := range []string{r.locks, r.data} {
		if _, err := r.model.CreateTable(name, ddbmodel.LockSchema); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

// event appends to the history (under r.mu).
func (r *simRun) eventLocked(format string, args ...any) {
	if r.ended {
		return // crashed clients' calls all return at once after the end, in no set order
	}
	r.history = append(r.history, fmt.Sprintf("%9.3fs ", time.Since(r.start).Seconds())+fmt.Sprintf(format, args...))
}

func (r *simRun) event(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.eventLocked(format, args...)
}

func (r *simRun) failLocked(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	r.eventLocked("VIOLATION %s", msg)
	if r.failure == "" {
		r.failure = msg
	}
}

func (r *simRun) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failLocked(format, args...)
}

// play runs the scenario.
func (r *simRun) play() {
	var clients []*simClient
	kinds := []string{"mutex", "ticket", "item", "queue"}
	for _, kind := range kinds {
		n := 2 + r.rng.IntN(4)
		for i := range n {
			c := &simClient{name: fmt.Sprintf("%s%d", kind[:1], i), kind: kind,
				rng: rand.New(rand.NewPCG(r.seed, uint64(100+len(clients)))),
				// Wall clocks differ by up to ±3 s (ObserveTakeover needs equal rates only).
				clock: &simClock{skew: time.Duration(r.rng.IntN(6001)-3000) * time.Millisecond}}
			if r.rng.IntN(8) == 0 {
				c.crashAt = jitter(r.rng, 25*time.Second)
			}
			if r.rng.IntN(6) == 0 {
				c.freezeAt = jitter(r.rng, 25*time.Second)
				c.freezeD = r.p.lease + jitter(r.rng, 2*r.p.lease)
				r.freezes += c.freezeD
			}
			clients = append(clients, c)
		}
	}
	r.event("params %+v clients %d", r.p, len(clients))
	var wg, all sync.WaitGroup // live clients done; every client goroutine returned
	for _, c := range clients {
		wg.Add(1)
		all.Add(1)
		go func() {
			defer all.Done()
			r.client(c, &wg, len(clients))
		}()
		if c.crashAt > 0 {
			time.AfterFunc(c.crashAt, func() {
				r.mu.Lock()
				c.crashed = true
				r.eventLocked("%s CRASH", c.name)
				r.mu.Unlock()
				c.done.Do(wg.Done)
			})
		}
		if c.freezeAt > 0 {
			time.AfterFunc(c.freezeAt, func() {
				r.mu.Lock()
				c.frozenTo = time.Now().Add(c.freezeD)
				r.eventLocked("%s FREEZE for %s", c.name, c.freezeD)
				r.mu.Unlock()
			})
		}
	}
	var bg sync.WaitGroup
	bg.Add(1)
	go r.ttl(&bg)
	if r.p.forceEvery > 0 {
		bg.Add(1)
		go r.operator(&bg)
	}
	wg.Wait()
	close(r.stopBg)
	bg.Wait()
	r.mu.Lock()
	r.eventLocked("END")
	r.checkLocked()
	r.checkOrphansLocked(clients)
	r.ended = true
	r.mu.Unlock()
	close(r.end)
	all.Wait()
	// Let what lockcore runs in the background (heartbeats of crashed clients' leases,
	// which now fail, validity watchers) run out: the bubble ends only when every
	// goroutine in it has returned, and its time stands still once this one returns.
	time.Sleep(10 * time.Minute)
}

// bypassTag marks a client with bypass in its cycles' events.
func bypassTag(c *simClient) string {
	if c.bypass {
		return " (bypass)"
	}
	return ""
}

// simHash draws a client's choice from the seed and its name alone.
func simHash(seed uint64, name string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s", seed, name)
	return h.Sum64()
}

// simDB is one client's view of the model through the simulated network.
type simDB struct {
	r *simRun
	c *simClient
}

func (d simDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := d.call(ctx, "GetItem", keyText(in.Key), false, func(ctx context.Context) (any, error) { return d.r.model.GetItem(ctx, in) })
	o, _ := out.(*dynamodb.GetItemOutput)
	return o, err
}

func (d simDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := d.call(ctx, "PutItem", keyText(item{"pk": in.Item["pk"], "sk": in.Item["sk"]}), true, func(ctx context.Context) (any, error) { return d.r.model.PutItem(ctx, in) })
	o, _ := out.(*dynamodb.PutItemOutput)
	return o, err
}

func (d simDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := d.call(ctx, "UpdateItem", keyText(in.Key)+nameSet(in.ExpressionAttributeNames), true, func(ctx context.Context) (any, error) { return d.r.model.UpdateItem(ctx, in) })
	o, _ := out.(*dynamodb.UpdateItemOutput)
	return o, err
}

func (d simDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	out, err := d.call(ctx, "DeleteItem", keyText(in.Key), true, func(ctx context.Context) (any, error) { return d.r.model.DeleteItem(ctx, in) })
	o, _ := out.(*dynamodb.DeleteItemOutput)
	return o, err
}

func (d simDB) Query(ctx context.Context, in *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := d.call(ctx, "Query", aws.ToString(in.KeyConditionExpression)+keyText(in.ExpressionAttributeValues)+keyText(in.ExclusiveStartKey), false, func(ctx context.Context) (any, error) { return d.r.model.Query(ctx, in) })
	o, _ := out.(*dynamodb.QueryOutput)
	return o, err
}

func (d simDB) Scan(ctx context.Context, in *dynamodb.ScanInput, _ ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	out, err := d.call(ctx, "Scan", "", false, func(ctx context.Context) (any, error) { return d.r.model.Scan(ctx, in) })
	o, _ := out.(*dynamodb.ScanOutput)
	return o, err
}

func (d simDB) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, _ ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := d.call(ctx, "TransactWriteItems", "", true, func(ctx context.Context) (any, error) { return d.r.model.TransactWriteItems(ctx, in) })
	o, _ := out.(*dynamodb.TransactWriteItemsOutput)
	return o, err
}

// nameSet writes the attribute names a request's expressions use, sorted: unlike the
// expressions' text, it does not follow the order in which lockcore built them (some
// from a map's iteration).
func nameSet(names map[string]string) string {
	return strings.Join(slices.Sorted(maps.Values(names)), ",")
}

// keyText writes a key (or any item of strings and numbers) in a fixed order, to tell
// requests apart in call's draws.
func keyText(it item) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(it)) {
		switch v := it[k].(type) {
		case *types.AttributeValueMemberS:
			fmt.Fprintf(&b, "%s=%s;", k, v.Value)
		case *types.AttributeValueMemberN:
			fmt.Fprintf(&b, "%s=%s;", k, v.Value)
		default:
			fmt.Fprintf(&b, "%s;", k)
		}
	}
	return b.String()
}

// gate holds a call of a crashed client until the run ends, and one of a frozen client
// until it thaws. It reports false for a crashed client.
func (d simDB) gate() bool {
	r, c := d.r, d.c
	for {
		r.mu.Lock()
		crashed, thaw := c.crashed, c.frozenTo
		r.mu.Unlock()
		if crashed {
			<-r.end
			return false
		}
		if !time.Now().Before(thaw) {
			return true
		}
		time.Sleep(time.Until(thaw))
	}
}

type simFault int

const (
	faultNone simFault = iota
	faultDial          // never reached the model (retryable)
	faultDrop          // never reached the model, reported as a timeout (ambiguous)
	faultLost          // applied, response lost (timeout or 5xx)
	faultLate          // reported as a timeout at once, applied later
)

// call sends one request (op; what tells requests of one op apart) through the simulated
// network.
//
// Its faults and delays are drawn from the seed, the client, the request (operation, key,
// the attribute names it uses) and the virtual instant it is sent, not from one stream
// per client: two goroutines of a client may send
// at the same instant (a Queue waiter's read and its row's heartbeat did), and the
// scheduler picks which runs first; each still gets its own draws, and a first delay of
// up to a microsecond sets them apart before either acts. Delays are in nanoseconds: two
// clients never act at the same virtual instant, so one goroutine runs at a time and the
// run replays exactly.
func (d simDB) call(ctx context.Context, op, what string, write bool, apply func(context.Context) (any, error)) (any, error) {
	r, c := d.r, d.c
	h := fnv.New64a()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d", c.name, op, what, time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(r.seed, h.Sum64()))
	time.Sleep(time.Duration(1 + rng.IntN(1000)))
	if !d.gate() {
		return nil, errSimDead
	}
	r.mu.Lock()
	fault, reqDelay, respDelay := faultNone, jitter(rng, 20*time.Millisecond), jitter(rng, 20*time.Millisecond)
	switch x := rng.Float64(); {
	case x < r.p.pDrop/2:
		fault = faultDial
	case x < r.p.pDrop:
		fault = faultDrop
	case x < r.p.pDrop+r.p.pLost:
		fault = faultLost
	case write && x < r.p.pDrop+r.p.pLost+r.p.pLate:
		fault = faultLate
	}
	if rng.Float64() < r.p.pSlow {
		respDelay += jitter(rng, 1500*time.Millisecond)
	}
	fiveXX := rng.IntN(2) == 0
	late := respDelay + jitter(rng, 500*time.Millisecond)
	r.mu.Unlock()
	switch fault {
	case faultDial:
		r.event("%s %s: dial failed", c.name, op)
		return nil, errSimDial
	case faultDrop:
		_ = sleep(ctx, reqDelay+respDelay)
		r.event("%s %s: dropped (timeout)", c.name, op)
		return nil, errSimTimeout
	case faultLate:
		_ = sleep(ctx, reqDelay)
		r.event("%s %s: timed out, lands later", c.name, op)
		go func() {
			time.Sleep(late)
			out, err := apply(context.Background())
			r.applied(c, op+" (late)", true, out, err)
		}()
		return nil, errSimTimeout
	}
	if err := sleep(ctx, reqDelay); err != nil {
		return nil, err // the caller gave up before the request was sent in full: not applied
	}
	if !d.gate() {
		return nil, errSimDead
	}
	out, err := apply(context.Background())
	r.applied(c, op, write, out, err)
	if fault == faultLost {
		_ = sleep(ctx, respDelay)
		if fiveXX {
			return nil, errSim5xx
		}
		return nil, errSimTimeout
	}
	if perr := sleep(ctx, respDelay); perr != nil {
		return nil, perr // applied, but the caller stopped waiting: ambiguous
	}
	if !d.gate() {
		return nil, errSimDead
	}
	if err == nil {
		srv := time.Now().Truncate(time.Second)
		switch o := out.(type) {
		case *dynamodb.GetItemOutput:
			o.ResultMetadata.Set(simServerTime{}, srv)
		case *dynamodb.PutItemOutput:
			o.ResultMetadata.Set(simServerTime{}, srv)
		case *dynamodb.UpdateItemOutput:
			o.ResultMetadata.Set(simServerTime{}, srv)
		case *dynamodb.DeleteItemOutput:
			o.ResultMetadata.Set(simServerTime{}, srv)
		case *dynamodb.QueryOutput:
			o.ResultMetadata.Set(simServerTime{}, srv)
		case *dynamodb.TransactWriteItemsOutput:
			o.ResultMetadata.Set(simServerTime{}, srv)
		}
	}
	return out, err
}

// applied records a request the model answered and, after a write, checks the
// invariants.
func (r *simRun) applied(c *simClient, op string, write bool, _ any, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	outcome := "ok"
	if err != nil {
		outcome = errName(err)
	}
	if !write {
		r.eventLocked("%s %s %s", c.name, op, outcome)
		return
	}
	r.writes++
	if strings.HasPrefix(op, "TransactWriteItems") && err == nil {
		r.forceWrites++
	}
	r.writeAt = append(r.writeAt, simWrite{seq: r.model.Seq(), at: time.Now()})
	r.eventLocked("%s %s %s", c.name, op, outcome)
	r.checkLocked()
}

// jitter draws a duration in (0, d], to the nanosecond.
func jitter(rng *rand.Rand, d time.Duration) time.Duration {
	return time.Duration(rng.Int64N(int64(d))) + 1
}

func errName(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return err.Error()
}

// checkLocked checks I1 (at most one valid holder per lock) and collects the tokens
// force-releases ended (whose holders keep their local validity until their next
// heartbeat fails: the documented exception).
func (r *simRun) checkLocked() {
	if r.forceWrites != r.writesSeen {
		// Only force-releases (transactions) write forced* attributes; later writes
		// keep them.
		r.writesSeen = r.forceWrites
		for _, key := range []item{{"pk": s("mutex"), "sk": s(defaultNamespace)}, {"pk": s("ticket"), "sk": s(defaultNamespace + ticketSuffix)}} {
			out, err := r.model.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &r.locks, Key: key, ConsistentRead: aws.Bool(true)})
			if err != nil {
				r.failLocked("model: %v", err)
				return
			}
			if tok, ok := attrN(out.Item, attrForcedToken); ok {
				f := simForced{attrS(out.Item, "pk"), Fence(tok)}
				if !r.forced[f] {
					r.forced[f], r.forcedAt[f] = true, time.Now()
				}
			}
		}
	}
	byKey := map[string][]*simHeld{}
	for _, h := range r.held {
		if h.c.crashed || r.forced[simForced{h.key, h.token}] || h.lease.Remaining() <= 0 {
			continue
		}
		byKey[h.key] = append(byKey[h.key], h)
	}
	for key, hs := range byKey {
		if len(hs) > 1 {
			var who []string
			for _, h := range hs {
				who = append(who, fmt.Sprintf("%s token %d remaining %s", h.c.name, h.token, h.lease.Remaining()))
			}
			slices.Sort(who)
			r.failLocked("I1: %d valid holders of %s: %s", len(hs), key, strings.Join(who, "; "))
		}
	}
}

// checkOrphansLocked checks I6 at the end of a run, once every live client is done: the
// Mutex and TicketLock rows keep no entry of an unserved ticket beyond one per crashed
// client of the lock: a waiter that gave up withdrew its ticket. (The served ticket of a
// holder whose release failed stays until a waiter skips it.)
func (r *simRun) checkOrphansLocked(clients []*simClient) {
	for _, key := range []string{"mutex", "mutex2", "ticket"} {
		kind, sk := strings.TrimSuffix(key, "2"), defaultNamespace
		if kind == "ticket" {
			sk += ticketSuffix
		}
		out, err := r.model.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &r.locks,
			Key: item{"pk": s(key), "sk": s(sk)}, ConsistentRead: aws.Bool(true)})
		if err != nil || out.Item == nil {
			continue
		}
		var row ticketRow
		if kind == "ticket" {
			row = parseTicketRow(out.Item, "")
		} else {
			row = parseMutexRow(out.Item, "").ticketRow
		}
		live := 0
		for t := range row.waiters {
			if t > row.serving {
				live++
			}
		}
		crashed := 0
		for _, c := range clients {
			if c.kind == kind && c.crashed {
				crashed++
			}
		}
		if live > crashed {
			r.failLocked("I6: the %s row keeps %d entries of unserved tickets at the end (serving %d), but only %d clients of it crashed", key, live, row.serving, crashed)
		}
	}
}

// granted registers a lease Acquire returned: I2 (its token is above every earlier
// holder's) and I1.
func (r *simRun) granted(c *simClient, key string, l *Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rem := l.Remaining()
	r.eventLocked("%s acquired %s token %d remaining %s", c.name, key, l.Token(), rem)
	// A lease force-released before its Acquire returned is the documented exception
	// (it keeps its local validity until its first heartbeat fails): I1 and I2 skip it.
	if rem > 0 && !r.forced[simForced{key, l.Token()}] {
		if last := r.lastToken[key]; l.Token() < last || l.Token() == last && l.ID() != r.lastLease[key] {
			r.failLocked("I2: %s acquired %s with token %d, not above the previous holder's %d", c.name, key, l.Token(), last)
		}
		r.lastToken[key], r.lastLease[key] = l.Token(), l.ID()
	}
	r.grants[key] = append(r.grants[key], simGrant{token: l.Token(), at: time.Now()})
	r.held[l] = &simHeld{c: c, key: key, lease: l, token: l.Token()}
	r.checkLocked()
}

// releasing unregisters a lease given to Release (it is no longer a holder) and returns
// the end of its validity as it stood.
func (r *simRun) releasing(l *Lease) (validTo time.Time, at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.held, l)
	return time.Now().Add(l.Remaining()), time.Now()
}

// released checks I3 for a Release (or UpdateAndRelease) outcome: nil means the lease
// was ours until the call (no force-release ended it and no later holder was granted
// before the call began); ErrLeaseLost, when not also ErrUnknownOutcome, means it was
// lost: a force-release ended it, or its validity (as of the call's start) ran out
// before the call returned. (Nobody may take a valid lease over: that would be I1's
// violation.)
func (r *simRun) released(c *simClient, key string, l *Lease, validTo, callAt time.Time, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.eventLocked("%s released %s token %d: %v", c.name, key, l.Token(), outcomeOf(err))
	if c.crashed {
		return
	}
	later := func(before time.Time) bool {
		for _, g := range r.grants[key] {
			if g.token > l.Token() && g.at.Before(before) {
				return true
			}
		}
		return false
	}
	switch {
	case err == nil:
		// A Release with bypass keeps the lease in the table (renewed as it returns):
		// a force-release after its call began may end the kept lease.
		if f := (simForced{key, l.Token()}); r.forced[f] && (!c.bypass || r.forcedAt[f].Before(callAt)) {
			r.failLocked("I3: %s's release of %s token %d reported success, but a force-release had ended the lease", c.name, key, l.Token())
		}
		if later(callAt) {
			r.failLocked("I3: %s's release of %s token %d reported success, but a later holder was granted before the release began", c.name, key, l.Token())
		}
	case errors.Is(err, ErrLeaseLost) && !errors.Is(err, ErrUnknownOutcome):
		if !r.forced[simForced{key, l.Token()}] && time.Now().Before(validTo) {
			r.failLocked("I3: %s's release of %s token %d reported the lease lost while it was valid (to %s) and not force-released: %v",
				c.name, key, l.Token(), validTo.Sub(r.start), err)
		}
	}
}

func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrUnknownOutcome):
		return "unknown outcome"
	case errors.Is(err, ErrLeaseLost):
		return "lease lost"
	case errors.Is(err, errWaitBound):
		return "wait bound"
	case errors.Is(err, errSimCancel), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "cancelled"
	}
	return "error"
}

// waitBound is I5's bound for one Acquire (docs/protocol.md, I5): each other client of
// the lock ahead holds at most maxHold, or is skipped a lease after its last heartbeat
// was seen (≤ L/10 + a round trip late), and each handoff costs at most L/10 plus stale
// reads (≤ 1.5 s) and a round trip; every freeze of the run may add its length; the rest
// is slack for retries (backoff cap 1 s) and delayed responses (≤ 1.5 s each).
func (r *simRun) waitBound(clients int) time.Duration {
	per := r.p.maxHold + 2*r.p.lease + 4*time.Second
	return time.Duration(clients)*per + r.freezes + 15*time.Second
}

// client runs one client's workload.
func (r *simRun) client(c *simClient, wg *sync.WaitGroup, n int) {
	defer c.done.Do(wg.Done)
	db := simDB{r: r, c: c}
	opts := []Option{WithOwner(c.name), WithClock(c.clock), WithLease(r.p.lease),
		// The TTL grace outlasts the longest freeze: a write whose TTL was computed
		// before a pause longer than the grace sets a TTL in the past on a row others
		// use, and TTL deletes it under a live holder (seed 683 with a grace of 3 s:
		// see docs/protocol.md, section 6).
		WithTTLGrace(3*r.p.lease + 3*time.Second), WithRetention(time.Duration(3+c.rng.IntN(10)) * time.Second),
		WithBackoff(10*time.Millisecond, time.Second)}
	var acquire func(ctx context.Context) (*Lease, *ItemLease, error)
	var locker Locker // Mutex, TicketLock and Queue: some cycles run through Do
	var mutex *Mutex  // some Mutex cycles take keys mutex and mutex2 with AcquireAll
	key := c.kind
	var il *ItemLocker
	var err error
	if (c.kind == "mutex" || c.kind == "ticket") && simHash(r.seed, c.name)%3 == 0 {
		// Bounded bypass: a released lease kept for up to a second, the time between a
		// client's cycles, so that its next cycle often continues it (the same token:
		// I2 allows that for the same lease). Drawn from the seed and the name, not
		// from c.rng, so that the other clients' runs stay as they were.
		opts, c.bypass = append(opts, WithBypass(r.p.lease, time.Second)), true
	}
	switch c.kind {
	case "mutex":
		mutex, err = NewMutex(db, r.locks, opts...)
		locker = mutex
	case "ticket":
		locker, err = NewTicketLock(db, r.locks, opts...)
	case "queue":
		locker, err = NewQueue(db, r.locks, opts...)
	case "item":
		// No automatic heartbeat: the ItemLocker's heartbeat holds a sync.Mutex across
		// its call, which synctest does not count as durably blocked, and the run hung;
		// the holder renews explicitly instead.
		il, err = NewItemLocker(db, r.data, append(opts, WithHeartbeat(0))...)
	}
	if err != nil {
		r.fail("a %s client: %v", c.kind, err)
		return
	}
	if il != nil {
		ikey := item{"pk": s("item"), "sk": s("STOCK")}
		acquire = func(ctx context.Context) (*Lease, *ItemLease, error) {
			var opts []AcquireOption
			if c.rng.IntN(3) == 0 {
				// A caller that watched the item before queueing (Seen): a read, strong
				// or eventual (possibly stale), then up to a lease of watching.
				out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &r.data, Key: ikey, ConsistentRead: aws.Bool(c.rng.IntN(2) == 0)})
				if err == nil && out.Item != nil {
					opts = append(opts, Seen(out.Item, c.clock.Now())) // on the locker's clock
					r.event("%s watches the item", c.name)
					_ = sleep(ctx, jitter(c.rng, r.p.lease))
				}
			}
			l, err := il.Acquire(ctx, ikey, opts...)
			if err != nil {
				return nil, nil, err
			}
			return l.Lease, l, nil
		}
	} else {
		acquire = func(ctx context.Context) (*Lease, *ItemLease, error) {
			l, err := locker.Acquire(ctx, key)
			return l, nil, err
		}
	}
	_ = sleep(context.Background(), jitter(c.rng, 2*time.Second))
	cycles := 2 + c.rng.IntN(2)
	for i := range cycles {
		r.mu.Lock()
		crashed := c.crashed
		r.mu.Unlock()
		if crashed {
			<-r.end
			return
		}
		// The Acquire's context lives on until the lease is released: lockcore's
		// heartbeat runs under it. The caller's cancel and the wait bound end it only
		// while Acquire has not returned.
		bound := r.waitBound(n)
		ctx, cancelCtx := context.WithCancelCause(context.Background())
		var returned bool // under r.mu
		stopAt := func(d time.Duration, cause error) *time.Timer {
			return time.AfterFunc(d, func() {
				r.mu.Lock()
				done := returned
				r.mu.Unlock()
				if !done {
					cancelCtx(cause)
				}
			})
		}
		boundTimer := stopAt(bound, errWaitBound)
		cancelAt := time.Duration(0)
		if c.rng.IntN(4) == 0 { // a caller that gives up
			cancelAt = jitter(c.rng, 2*r.p.lease)
			defer stopAt(cancelAt, errSimCancel).Stop()
		}
		hold := jitter(c.rng, r.p.maxHold)
		acquired := func() {
			r.mu.Lock()
			returned = true
			r.mu.Unlock()
			boundTimer.Stop()
		}
		if mutex != nil && c.rng.IntN(3) == 0 {
			r.acquireAll(ctx, c, mutex, i, bound, cancelAt, hold, acquired)
			cancelCtx(nil)
			_ = sleep(context.Background(), jitter(c.rng, time.Second))
			continue
		}
		if locker != nil && c.rng.IntN(3) == 0 {
			r.event("%s%s cycle %d: Do %s (cancel after %s, hold %s)", c.name, bypassTag(c), i, key, cancelAt, hold)
			var held *Lease
			var validTo, callAt time.Time
			err := Do(ctx, locker, key, func(_ context.Context, lease *Lease) error {
				acquired()
				held = lease
				r.granted(c, key, lease)
				time.Sleep(hold)
				validTo, callAt = r.releasing(lease) // Do releases once fn returns
				return nil
			})
			acquired()
			if held == nil {
				r.acquireFailed(ctx, c, key, bound, err)
			} else {
				r.released(c, key, held, validTo, callAt, err)
			}
			cancelCtx(nil)
			_ = sleep(context.Background(), jitter(c.rng, time.Second))
			continue
		}
		r.event("%s%s cycle %d: acquire %s (cancel after %s, hold %s)", c.name, bypassTag(c), i, key, cancelAt, hold)
		l, il, err := acquire(ctx)
		acquired()
		if err != nil {
			r.acquireFailed(ctx, c, key, bound, err)
			cancelCtx(nil)
			continue
		}
		r.granted(c, key, l)
		r.holdFor(c, l, il, hold)
		validTo, callAt := r.releasing(l)
		var rerr error
		if il != nil && c.rng.IntN(2) == 0 {
			_, rerr = il.UpdateAndRelease(context.Background(), expression.Set(name("n"), value(i)), expression.ConditionBuilder{})
		} else {
			rerr = l.Release(context.Background())
		}
		r.released(c, key, l, validTo, callAt, rerr)
		r.checkRoom(c, "release", l, rerr)
		cancelCtx(nil)
		_ = sleep(context.Background(), jitter(c.rng, time.Second))
	}
}

// acquireAll runs a cycle that takes keys mutex and mutex2 (or mutex2 alone) with
// AcquireAll, in the order the caller happens to name them, sometimes one twice; the
// single-key Mutex cycles wait on mutex meanwhile. Each lease is checked as a single
// one is (I1, I2, I3), and the wait bound covers the set (I5: a deadlock would break
// it). The leases are released one after another: MultiLease.Release releases them
// concurrently, and two goroutines started at one instant would make the run's order
// depend on the scheduler.
func (r *simRun) acquireAll(ctx context.Context, c *simClient, m *Mutex, cycle int, bound, cancelAt, hold time.Duration, acquired func()) {
	keys := [][]string{{"mutex", "mutex2"}, {"mutex2", "mutex"}, {"mutex2", "mutex", "mutex2"}, {"mutex2"}}[c.rng.IntN(4)]
	set := strings.Join(keys, "+")
	r.event("%s%s cycle %d: acquire all %s (cancel after %s, hold %s)", c.name, bypassTag(c), cycle, set, cancelAt, hold)
	ml, err := m.AcquireAll(ctx, keys)
	acquired()
	if err != nil {
		r.acquireFailed(ctx, c, set, bound, err)
		return
	}
	for _, l := range ml.Leases() {
		r.granted(c, l.key, l)
	}
	time.Sleep(hold)
	for _, l := range ml.Leases() {
		validTo, callAt := r.releasing(l)
		r.released(c, l.key, l, validTo, callAt, l.Release(context.Background()))
	}
}

// acquireFailed records a failed Acquire (or Do's acquisition): I5 if the wait bound
// ended it.
func (r *simRun) acquireFailed(ctx context.Context, c *simClient, key string, bound time.Duration, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.eventLocked("%s acquire %s: %s (%v)", c.name, key, outcomeOf(err), err)
	if errors.Is(context.Cause(ctx), errWaitBound) && !c.crashed {
		r.failLocked("I5: %s waited for %s longer than the bound %s: %v", c.name, key, bound, err)
	}
}

// holdFor keeps the lease for d: Mutex and TicketLock leases renew themselves; an
// ItemLocker holder renews every third of a lease and writes the item once.
func (r *simRun) holdFor(c *simClient, l *Lease, il *ItemLease, d time.Duration) {
	if il == nil {
		time.Sleep(d)
		return
	}
	end := time.Now().Add(d)
	wrote := false
	for time.Now().Before(end) {
		time.Sleep(min(time.Until(end), r.p.lease/3))
		if !wrote && c.rng.IntN(2) == 0 {
			u := expression.Set(name("n"), value(c.name))
			if r.p.big {
				u = u.Set(name("d"), value(strings.Repeat("d", r.nearLimit(c))))
			}
			_, err := il.Update(context.Background(), u, expression.ConditionBuilder{})
			r.event("%s update item token %d: %s", c.name, l.Token(), outcomeOf(err))
			wrote = true
		}
		if time.Now().Before(end) {
			vt := time.Now().Add(l.Remaining())
			err := l.Renew(context.Background())
			r.event("%s renew token %d: %s", c.name, l.Token(), outcomeOf(err))
			r.checkRoom(c, "renew", l, err)
			if err != nil && errors.Is(err, ErrLeaseLost) && !errors.Is(err, ErrUnknownOutcome) {
				r.mu.Lock()
				if !r.forced[simForced{c.kind, l.Token()}] && time.Now().Before(vt) && !c.crashed {
					r.failLocked("I3: %s's renew of token %d reported the lease lost while it was valid: %v", c.name, l.Token(), err)
				}
				r.mu.Unlock()
			}
			if err != nil {
				return
			}
		}
	}
}

// nearLimit returns the size of a data attribute d that brings the item, as it is now
// and without the lock's Room padding, to between 50 bytes past DynamoDB's item limit
// (the write is refused) and 3,000 bytes below it, half the time to within 8 bytes of
// it: where a holder's write must keep room for the next holder.
func (r *simRun) nearLimit(c *simClient) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out, err := r.model.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: &r.data,
		Key: item{"pk": s("item"), "sk": s("STOCK")}, ConsistentRead: aws.Bool(true)})
	cur := item{}
	if err == nil && out.Item != nil {
		cur = out.Item
	}
	rest := maps.Clone(cur)
	delete(rest, "d")
	delete(rest, DefaultItemAttributes.Room)
	rest["n"] = s(c.name)
	slack := c.rng.IntN(3050) - 50
	if c.rng.IntN(2) == 0 {
		slack = c.rng.IntN(17) - 8
	}
	return max(0, ddbmodel.MaxItemSize-ddbmodel.ItemSize(rest)-len("d")-slack)
}

// checkRoom checks I7 on a holder's renewal or release: it never fails for want of room
// in the item (a holder's write keeps room for the next holder, and a holder handed an
// item without room holds it by its ticket).
func (r *simRun) checkRoom(c *simClient, op string, l *Lease, err error) {
	if tl := (*ItemTooLargeError)(nil); errors.As(err, &tl) {
		r.fail("I7: %s's %s of token %d failed for want of room in the item: %v", c.name, op, l.Token(), err)
	}
}

// ttl is DynamoDB's TTL process on the lock table: it deletes rows whose expiresAt lies
// before the server's (virtual) time.
func (r *simRun) ttl(wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		select {
		case <-r.stopBg:
			return
		case <-time.After(r.p.ttlEvery):
		}
		r.mu.Lock()
		gone := r.model.Table(r.locks).ExpireTTL(time.Now(), attrExpiresAt)
		if len(gone) > 0 {
			var keys []string
			for _, it := range gone {
				exp, _ := attrN(it, attrExpiresAt)
				keys = append(keys, fmt.Sprintf("%s/%s (expiresAt %+ds)", attrS(it, "pk"), attrS(it, "sk"), exp-time.Now().Unix()))
			}
			r.writes++
			r.writeAt = append(r.writeAt, simWrite{seq: r.model.Seq(), at: time.Now()})
			r.eventLocked("TTL deleted %s", strings.Join(keys, ", "))
			r.checkLocked()
		}
		r.mu.Unlock()
	}
}

// operator force-releases the Mutex or TicketLock now and then, through the Inspector,
// over the same faulty network.
func (r *simRun) operator(wg *sync.WaitGroup) {
	defer wg.Done()
	op := &simClient{name: "op", rng: rand.New(rand.NewPCG(r.seed, 99)), clock: &simClock{}}
	in, err := NewInspector(simDB{r: r, c: op}, r.locks, InspectClock(op.clock))
	if err != nil {
		r.fail("NewInspector: %v", err)
		return
	}
	next := jitter(op.rng, 1500*time.Millisecond) // early too: a row life's first holder writes its epoch
	for {
		select {
		case <-r.stopBg:
			return
		case <-time.After(next):
		}
		next = jitter(op.rng, r.p.forceEvery)
		st := []Strategy{StrategyMutex, StrategyTicket}[op.rng.IntN(2)]
		key := string(st)
		rec, err := in.ForceRelease(context.Background(), key, ForceOptions{Strategy: st, Actor: "sim", Reason: "drill"})
		if err != nil {
			r.event("op force-release %s: %s", key, outcomeOf(err))
			continue
		}
		r.mu.Lock()
		r.eventLocked("op force-released %s: lease %s token %d", key, rec.LeaseID, rec.Token.Token)
		r.mu.Unlock()
	}
}
