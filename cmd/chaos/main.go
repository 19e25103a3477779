// Command chaos runs lockcore's strategies against DynamoDB Local through a
// fault-injecting proxy, with crashed, paused and clock-skewed holders, checks the
// recorded history (linearizability with porcupine, mutual exclusion, fencing tokens,
// lost updates) and writes chaos-report.json. See internal/chaos. Workers think between
// sections (-think) and are gathered into bursts (-burst-every) that leave the locks
// idle, then arrive together; -think 0 -burst-every 0 is the closed loop. -hold gives
// sections work time under the lock.
//
//	go run ./cmd/chaos -duration 10m -workers 3 -seed 42 -faults all
//
// It starts a DynamoDB Local engine unless DYNAMODB_ENDPOINT names a running one. The
// exit status is 0 when the report says ok, 1 when it does not, 2 when the run failed.
// An interrupt (Ctrl-C) ends the run early; the history so far is still checked.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/turnstile-locks/turnstile/internal/chaos"
	"github.com/turnstile-locks/turnstile/internal/ddblocal"
	"github.com/turnstile-locks/turnstile/internal/faultproxy"
)

func main() {
	if chaos.IsHolder() { // a crash or pause holder started by a run of this binary
		chaos.HolderMain()
	}
	os.Exit(run())
}

func run() int {
	var (
		duration   = flag.Duration("duration", 10*time.Minute, "how long to run the workload")
		workers    = flag.Int("workers", 3, "concurrent workers per strategy")
		seed       = flag.Uint64("seed", 0, "seed of the workload and fault decisions (0: pick one and report it)")
		faults     = flag.String("faults", "all", "fault mix: 'all', 'none' or e.g. 'none,throttling=0.05,latency=10ms' (kinds: "+strings.Join(faultproxy.Kinds, ", ")+")")
		strategies = flag.String("strategies", strings.Join(chaos.DefaultStrategies, ","), "strategies to run (also: naive, the unlocked read-modify-write the checks must catch)")
		lease      = flag.Duration("lease", 3*time.Second, "lease of every lock")
		keys       = flag.Int("keys", 2, "counter items per strategy (multi-key uses at least 3)")
		disrupt    = flag.Bool("disrupt", true, "crash (SIGKILL) and pause (SIGSTOP) holder processes")
		every      = flag.Duration("disrupt-every", 3*time.Second, "mean time between disruptions per lock strategy")
		skew       = flag.Bool("skew", true, "give some clients clocks off by seconds to minutes")
		think      = flag.Duration("think", chaos.DefaultThink, "mean think time of a worker between sections: half the gaps are zero, the others exponential with this mean (0: closed loop)")
		burstEvery = flag.Duration("burst-every", chaos.DefaultBurstEvery, "mean time between bursts per strategy: the workers park, the locks stay idle, then all arrive together on the same keys (0: none)")
		hold       = flag.Duration("hold", chaos.DefaultHold, "mean work time under a lock, between acquire and write: half the sections none, the others exponential with this mean (0: none)")
		shopFlag   = flag.Bool("handlers", true, "also run the order/inventory handlers (internal/shop) with at-least-once delivery")
		out        = flag.String("out", "chaos-report.json", "report file")
		visualize  = flag.String("visualize", "chaos-visualization", "directory for porcupine visualizations of non-linearizable keys")
		verbose    = flag.Bool("v", false, "log progress")
	)
	flag.Parse()
	level := slog.LevelWarn
	if *verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))

	f, err := faultproxy.ParseFaults(*faults)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	endpoint := os.Getenv(ddblocal.EnvEndpoint)
	if endpoint == "" {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		engine, err := ddblocal.Start(sctx, ddblocal.Options{})
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "chaos: start DynamoDB Local: %v (or set %s)\n", err, ddblocal.EnvEndpoint)
			return 2
		}
		defer engine.Stop()
		endpoint = engine.Endpoint()
	}

	rep, err := chaos.Run(ctx, chaos.Config{
		Endpoint:     endpoint,
		Duration:     *duration,
		Workers:      *workers,
		Seed:         *seed,
		Faults:       f,
		Strategies:   strings.Split(*strategies, ","),
		Lease:        *lease,
		Keys:         *keys,
		Disrupt:      *disrupt,
		DisruptEvery: *every,
		Skew:         *skew,
		Think:        *think,
		BurstEvery:   *burstEvery,
		Hold:         *hold,
		Shop:         *shopFlag,
		VisualizeDir: *visualize,
		Log:          log,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	if err := rep.WriteFile(*out); err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		return 2
	}
	fmt.Printf("chaos: seed %d, %.0fs, %d operations (%d increments), %d faults injected, %d crashes, %d pauses, %d skewed clients, %d bursts\n",
		rep.Seed, rep.DurationS, rep.Operations, rep.Increments, rep.FaultsInjectedTotal, rep.Crashes, rep.Pauses, rep.SkewedClients, rep.Bursts)
	fmt.Printf("chaos: linearizable %v, mutual exclusion violations %d, fence regressions %d, lost updates %d, duplicate increments %d, misreported outcomes %d\n",
		rep.Linearizable, rep.MutualExclusionViolations, rep.FenceRegressions, rep.LostUpdates, rep.DuplicateIncrements, rep.MisreportedOutcomes)
	if rep.Shop != nil {
		fmt.Printf("chaos: handlers: %d messages, %d deliveries, %d lost, %d double applied\n",
			rep.Shop.Messages, rep.Shop.Deliveries, rep.Shop.Lost, rep.Shop.DoubleApplied)
	}
	for _, f := range rep.Findings {
		fmt.Println("chaos: finding:", f)
	}
	fmt.Printf("chaos: ok=%v; report in %s\n", rep.OK, *out)
	if !rep.OK {
		return 1
	}
	return 0
}
