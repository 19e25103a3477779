package chaos

import (
	"context"
	"encoding/json"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/turnstile-locks/turnstile/internal/faultproxy"
	"github.com/turnstile-locks/turnstile/internal/testenv"
)

func TestMain(m *testing.M) {
	if IsHolder() { // a crash or pause holder started by a chaos run of this test binary
		HolderMain()
	}
	testenv.Main(m)
}

// incr and read build synthetic histories for the checker.
func incr(id string, call, ret int64, st opStatus, n int64, last string) op {
	if st == stUnknown {
		ret = math.MaxInt64
	}
	return op{ID: id, Part: "p", Strategy: "s", Kind: opIncr, Call: call, Return: ret, Status: st, ObsN: n, ObsLast: last}
}

func read(call, ret int64, n int64, last string, final bool) op {
	o := op{Part: "p", Strategy: "s", Kind: opRead, Call: call, Return: ret, Status: stOK, ObsN: n, ObsLast: last}
	if final {
		o.Note = noteFinal
	}
	return o
}

func TestCheckerOnSyntheticHistories(t *testing.T) {
	cases := []struct {
		name        string
		ops         []op
		result      porcupine.CheckResult
		lost, dup   int
		misreported int
		applied     int
	}{
		{"sequential", []op{
			incr("a", 0, 10, stOK, 0, ""),
			incr("b", 20, 30, stOK, 1, "a"),
			read(40, 50, 2, "b", true),
		}, porcupine.Ok, 0, 0, 0, 2},
		{"lost update: two increments read the same value", []op{
			incr("a", 0, 10, stOK, 0, ""),
			incr("b", 5, 15, stOK, 0, ""),
			read(40, 50, 1, "b", true),
		}, porcupine.Illegal, 1, 0, 0, 2},
		{"unknown increment seen by a later one took effect", []op{
			incr("a", 0, 0, stUnknown, 0, ""),
			incr("b", 20, 30, stOK, 1, "a"),
			read(40, 50, 2, "b", true),
		}, porcupine.Ok, 0, 0, 0, 2},
		{"unknown increment nobody saw did not", []op{
			incr("a", 0, 0, stUnknown, 0, ""),
			incr("b", 20, 30, stOK, 0, ""),
			read(40, 50, 1, "b", true),
		}, porcupine.Ok, 0, 0, 0, 1},
		{"chain of unknown increments seen by the final read", []op{
			incr("a", 0, 0, stUnknown, 0, ""),
			incr("b", 5, 0, stUnknown, 1, "a"),
			read(40, 50, 2, "b", true),
		}, porcupine.Ok, 0, 0, 0, 2},
		{"refused write that took effect is a misreport", []op{
			incr("a", 0, 10, stFailed, 0, ""),
			read(40, 50, 1, "a", true),
		}, porcupine.Illegal, 0, 0, 1, 1},
		{"stale read after a newer value", []op{
			incr("a", 0, 10, stOK, 0, ""),
			read(20, 30, 0, "", false),
			read(40, 50, 1, "a", true),
		}, porcupine.Illegal, 0, 0, 0, 1},
		{"increment applied twice", []op{
			incr("a", 0, 10, stOK, 1, "a"),
			read(40, 50, 2, "a", true),
		}, porcupine.Illegal, 0, 1, 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := checkPartition(c.ops, 10*time.Second)
			if r.Result != c.result || r.LostUpdates != c.lost || r.DuplicateIncrements != c.dup ||
				r.Misreported != c.misreported || r.Applied != c.applied {
				t.Fatalf("got result %s lost %d dup %d misreported %d applied %d; want %s %d %d %d %d",
					r.Result, r.LostUpdates, r.DuplicateIncrements, r.Misreported, r.Applied,
					c.result, c.lost, c.dup, c.misreported, c.applied)
			}
		})
	}
}

func TestMonitor(t *testing.T) {
	m := newMonitor()
	valid := func() time.Duration { return time.Second }
	expired := func() time.Duration { return 0 }
	a := m.enter("k", "a", 1, valid)
	if m.enter("k", "late", 2, expired) != nil {
		t.Fatal("entered with an expired lease")
	}
	b := m.enter("k", "b", 2, valid) // a still valid: violation
	m.exit("k", a)
	m.exit("k", b)
	m.enter("k", "c", 2, valid) // token did not rise: regression
	v, g := m.results()
	if len(v) != 1 || len(g) != 1 {
		t.Fatalf("violations %v, regressions %v", v, g)
	}
}

func runConfig(t *testing.T, d time.Duration) Config {
	return Config{
		Endpoint: testenv.Endpoint(),
		Duration: d,
		Seed:     uint64(time.Now().UnixNano()),
		Log:      slog.New(slog.NewTextHandler(testWriter{t}, nil)),
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(string(b))
	return len(b), nil
}

func logReport(t *testing.T, rep *Report) {
	b, _ := json.MarshalIndent(rep, "", "  ")
	t.Logf("report:\n%s", b)
}

// The checker can fail: the unlocked read-modify-write, run through the same runner and
// proxy, is caught as non-linearizable with lost updates.
func TestNaiveReadModifyWriteFails(t *testing.T) {
	t.Parallel()
	cfg := runConfig(t, 5*time.Second)
	cfg.Strategies = []string{StratNaive}
	cfg.Workers = 4
	cfg.Keys = 1
	cfg.Faults = faultproxy.AllFaults()
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	logReport(t, rep)
	if rep.Linearizable || rep.LostUpdates == 0 || rep.OK {
		t.Fatalf("unlocked read-modify-write passed the checks: linearizable=%v lost_updates=%d ok=%v",
			rep.Linearizable, rep.LostUpdates, rep.OK)
	}
	if rep.Increments < 10 { // it ran (the engine is shared: few is not a failure)
		t.Fatalf("only %d increments", rep.Increments)
	}
}

// The chaos smoke run: every strategy, every fault kind, crashed, paused and skewed
// holders, think time and bursts (the defaults of cmd/chaos), for 20 seconds
// (CHAOS_SMOKE_DURATION overrides); the report must be clean.
func TestChaosSmoke(t *testing.T) {
	t.Parallel()
	d := 20 * time.Second
	if s := os.Getenv("CHAOS_SMOKE_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatal(err)
		}
	}
	cfg := runConfig(t, d)
	cfg.Workers = 2
	cfg.Faults = faultproxy.AllFaults()
	cfg.Disrupt = true
	cfg.DisruptEvery = 2 * time.Second
	cfg.Skew = true
	cfg.Shop = true
	cfg.Think = DefaultThink
	cfg.BurstEvery = DefaultBurstEvery
	cfg.Hold = DefaultHold
	cfg.VisualizeDir = t.TempDir()
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	logReport(t, rep)
	if !rep.OK {
		t.Fatalf("chaos smoke run not ok (seed %d): %v", rep.Seed, rep.Findings)
	}
	if rep.MessagesLost == nil || rep.Shop.Deliveries == 0 {
		t.Fatal("the handler workload did not run")
	}
	if rep.Crashes == 0 || rep.Pauses == 0 || rep.FaultsInjectedTotal == 0 || rep.SkewedClients == 0 || rep.Bursts == 0 {
		t.Fatalf("smoke run did not exercise everything: crashes %d pauses %d faults %d skewed %d bursts %d",
			rep.Crashes, rep.Pauses, rep.FaultsInjectedTotal, rep.SkewedClients, rep.Bursts)
	}
}

// Think time: often none, sometimes much longer than the mean, never beyond 8 means.
func TestThinkTime(t *testing.T) {
	rng := mrand.New(mrand.NewPCG(1, 2))
	mean := 100 * time.Millisecond
	zero, long := 0, 0
	for range 10000 {
		d := thinkTime(rng, mean)
		switch {
		case d < 0 || d > 8*mean:
			t.Fatalf("think time %v out of [0, 8×%v]", d, mean)
		case d == 0:
			zero++
		case d > 2*mean:
			long++
		}
	}
	if zero < 4000 || zero > 6000 || long < 300 {
		t.Errorf("of 10000 gaps %d zero (want about half), %d longer than two means (want some)", zero, long)
	}
	if thinkTime(rng, 0) != 0 {
		t.Error("think time without a mean")
	}
}

// A burst parks every worker, then lets them all go together with the same keys; a
// worker outside a burst passes the gate at once.
func TestBurstGathersAndReleasesTogether(t *testing.T) {
	const workers = 3
	b := newBurst(workers)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	got := make([][][]int, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if keys := b.gate(ctx); keys != nil {
					got[w] = append(got[w], keys)
				}
				time.Sleep(time.Millisecond) // a section
			}
		}()
	}
	n := 0
	released := make(chan int)
	go func() {
		rng := mrand.New(mrand.NewPCG(3, 4))
		released <- b.run(ctx, rng, 50*time.Millisecond, 0, func() []int { n++; return []int{n} })
	}()
	rounds := <-released
	wg.Wait()
	if rounds < 3 {
		t.Fatalf("%d bursts in 2 s, want several", rounds)
	}
	for w := range workers {
		// The last burst may have been cut short by the end of ctx.
		if len(got[w]) < rounds-1 {
			t.Fatalf("worker %d went through %d of %d bursts", w, len(got[w]), rounds)
		}
		for i, keys := range got[w][:rounds-1] {
			if len(keys) != 1 || keys[0] != i+1 {
				t.Fatalf("worker %d, burst %d: keys %v, want [%d]", w, i+1, keys, i+1)
			}
		}
	}
}
