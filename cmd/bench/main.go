// Command bench measures lockcore's strategies, the two published designs they improve
// on, and AWS's Java lock client (a peer process, see internal/bench/awspeer.go) against
// a local DynamoDB engine: directly and through a loopback proxy that adds a realistic
// round-trip time. See bench/RESULTS.md for what it reports and `make bench` for the
// usual invocation.
//
// It starts (and afterwards stops) DynamoDB Local unless DYNAMODB_ENDPOINT names a running
// engine, in which case the tables it created are deleted again.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/turnstile-locks/turnstile/internal/bench"
	"github.com/turnstile-locks/turnstile/internal/ddblocal"
	"github.com/turnstile-locks/turnstile/internal/template"
)

type config struct {
	duration       time.Duration
	uncontended    time.Duration
	workers        []int
	rtts           []time.Duration
	strategies     []bench.Strategy
	scenarios      map[string]bool
	quick          bool
	out            string
	burstWorkers   int
	burstRounds    int
	takeoverLease  time.Duration
	takeoverTrials int
	targetRTT      time.Duration
	command        string
	renderOnly     bool
	buildPeer      bool
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if cfg.renderOnly {
		if err := render(cfg.out); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if cfg.buildPeer {
		err = buildPeer(ctx)
	} else {
		err = run(ctx, cfg)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (*config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	duration := fs.Duration("duration", 0, "length of each hot-key run (default 20s, 2s with -quick)")
	unc := fs.Duration("uncontended", 0, "length of each uncontended run (default 4s, 500ms with -quick)")
	workers := fs.String("workers", "4,16,64", "comma-separated worker counts of the hot-key and multi-key runs")
	rtts := fs.String("rtt", "0,5ms", "comma-separated round-trip times the delay proxy adds (0: direct to the engine)")
	strategies := fs.String("strategies", "all", "comma-separated strategies, or all: "+strategyNames())
	scenarios := fs.String("scenarios", "uncontended,hotkey,multikey,takeover,burst", "comma-separated scenarios to run (multikey runs at the target RTT only, for the strategies with a multi-key acquisition: multi)")
	quick := fs.Bool("quick", false, "short runs (the whole bench in under 3 minutes)")
	out := fs.String("out", "bench", "directory for results.json, RESULTS.md and the chart (empty: print only)")
	burstWorkers := fs.Int("burst-workers", 16, "workers released at once in the burst scenario")
	burstRounds := fs.Int("burst-rounds", 0, "rounds of the burst scenario (default 20, 6 with -quick)")
	lease := fs.Duration("takeover-lease", 3*time.Second, "lease of the takeover scenario")
	trials := fs.Int("takeover-trials", 0, "crashes per strategy, mode and RTT (default 8, 4 with -quick)")
	targetRTT := fs.Duration("target-rtt", 5*time.Millisecond, "RTT at which the issue's targets are checked")
	command := fs.String("command", "", "the command line to record in RESULTS.md (default: this one)")
	renderOnly := fs.Bool("render-only", false, "measure nothing: draw the chart again from -out's results.json (after a change to the chart)")
	buildPeer := fs.Bool("build-awspeer", false, "only build the AWS lock client peer into .cache/awspeer (make awspeer) and exit")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	cfg := &config{
		duration: *duration, uncontended: *unc, quick: *quick, out: *out,
		burstWorkers: *burstWorkers, burstRounds: *burstRounds, takeoverLease: *lease,
		takeoverTrials: *trials, targetRTT: *targetRTT, command: *command, renderOnly: *renderOnly, buildPeer: *buildPeer,
	}
	if cfg.renderOnly && cfg.out == "" {
		return nil, errors.New("-render-only needs -out (the directory holding results.json)")
	}
	if cfg.duration == 0 {
		cfg.duration = pick(*quick, 2*time.Second, 20*time.Second)
	}
	if cfg.uncontended == 0 {
		cfg.uncontended = pick(*quick, 500*time.Millisecond, 4*time.Second)
	}
	if cfg.burstRounds == 0 {
		cfg.burstRounds = pick(*quick, 6, 20)
	}
	if cfg.takeoverTrials == 0 {
		cfg.takeoverTrials = pick(*quick, 4, 8)
	}
	if cfg.command == "" {
		cfg.command = "go run ./cmd/bench " + strings.Join(args, " ")
	}
	for _, w := range strings.Split(*workers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-workers: bad count %q", w)
		}
		cfg.workers = append(cfg.workers, n)
	}
	for _, r := range strings.Split(*rtts, ",") {
		r = strings.TrimSpace(r)
		if r == "0" {
			cfg.rtts = append(cfg.rtts, 0)
			continue
		}
		d, err := time.ParseDuration(r)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("-rtt: bad duration %q", r)
		}
		cfg.rtts = append(cfg.rtts, d)
	}
	var err error
	if cfg.strategies, err = bench.SelectStrategies(*strategies); err != nil {
		return nil, err
	}
	cfg.scenarios = map[string]bool{}
	for _, s := range strings.Split(*scenarios, ",") {
		s = strings.TrimSpace(s)
		switch s {
		case bench.ScenarioUncontended, bench.ScenarioHotKey, bench.ScenarioMultiKey, bench.ScenarioTakeover, bench.ScenarioBurst:
			cfg.scenarios[s] = true
		default:
			return nil, fmt.Errorf("-scenarios: unknown scenario %q", s)
		}
	}
	if cfg.burstWorkers < 2 || cfg.burstRounds < 1 || cfg.takeoverTrials < 1 || cfg.takeoverLease <= 0 {
		return nil, errors.New("burst workers ≥ 2, rounds ≥ 1, takeover trials ≥ 1 and lease > 0 please")
	}
	return cfg, nil
}

func pick[T any](quick bool, q, full T) T {
	if quick {
		return q
	}
	return full
}

func strategyNames() string {
	var n []string
	for _, s := range bench.Strategies() {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}

// warmUp is the uncontended time per strategy and path that warms a fresh engine up when
// the uncontended scenario does not run.
const warmUp = time.Second

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s bench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// buildPeer builds the AWS lock client peer (make awspeer).
func buildPeer(ctx context.Context) error {
	t0 := time.Now()
	if _, err := bench.EnsureAWSPeer(ctx); err != nil {
		return err
	}
	logf("awspeer: built (%s)", time.Since(t0).Round(100*time.Millisecond))
	return nil
}

// ensurePeers builds the AWS lock client peer if a selected strategy needs it. A peer
// that cannot be built is left out of the run, loudly: the log says why, and so do the
// report's text, RESULTS.md and results.json.
func ensurePeers(ctx context.Context, cfg *config, r *bench.Runner, res *bench.Results) {
	i := slices.IndexFunc(cfg.strategies, func(s bench.Strategy) bool { return s.Peer != nil })
	if i < 0 {
		return
	}
	logf("awspeer: building the AWS lock client peer if needed (the first build fetches it with Maven) ...")
	t0 := time.Now()
	peer, err := bench.EnsureAWSPeer(ctx)
	if err == nil {
		logf("awspeer: ready (%s)", time.Since(t0).Round(100*time.Millisecond))
		r.AWSPeer = peer
		return
	}
	var kept []bench.Strategy
	for _, s := range cfg.strategies {
		if s.Peer == nil {
			kept = append(kept, s)
			continue
		}
		res.Skipped = append(res.Skipped, bench.Skipped{Strategy: s.Name, Reason: err.Error()})
	}
	cfg.strategies = kept
	logf("################################################################################")
	logf("awspeer: THE AWS LOCK CLIENT PEER COULD NOT BE BUILT; the run goes on without %s:", bench.AWSLockClient)
	for _, l := range strings.Split(err.Error(), "\n") {
		logf("awspeer:   %s", l)
	}
	logf("################################################################################")
}

func run(ctx context.Context, cfg *config) (err error) {
	began := time.Now()
	res := &bench.Results{Generated: began.UTC().Truncate(time.Second), Command: cfg.command, Machine: bench.Describe(),
		Revision: revision()}
	r := &bench.Runner{RunID: randomHex(3)}
	ensurePeers(ctx, cfg, r, res)

	endpoint := os.Getenv(ddblocal.EnvEndpoint)
	external := endpoint != ""
	if external {
		logf("engine: %s (from %s)", endpoint, ddblocal.EnvEndpoint)
	} else {
		logf("engine: starting DynamoDB Local ...")
		engine, err := ddblocal.Start(ctx, ddblocal.Options{})
		if err != nil {
			return err
		}
		defer func() {
			if stopErr := engine.Stop(); stopErr != nil && err == nil {
				err = fmt.Errorf("stop engine: %w", stopErr)
			}
		}()
		endpoint = engine.Endpoint()
		logf("engine: %s (pid %d)", endpoint, engine.PID())
	}
	direct, err := ddblocal.NewClient(ctx, endpoint)
	if err != nil {
		return err
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return fmt.Errorf("engine endpoint %q: %w", endpoint, err)
	}

	var paths []bench.Path
	for _, rtt := range cfg.rtts {
		if rtt == 0 {
			paths = append(paths, bench.Path{DB: direct, Endpoint: endpoint})
			continue
		}
		proxy, err := bench.NewDelayProxy(u.Host, rtt)
		if err != nil {
			return err
		}
		defer proxy.Close()
		c, err := ddblocal.NewClient(ctx, u.Scheme+"://"+proxy.Addr())
		if err != nil {
			return err
		}
		paths = append(paths, bench.Path{RTT: rtt, DB: c, Endpoint: u.Scheme + "://" + proxy.Addr()})
	}

	tables, err := createTables(ctx, direct, external)
	if err != nil {
		return err
	}
	defer tables.cleanup()
	r.LockTable, r.DataTable = tables.lock, tables.data

	for _, p := range paths {
		rtt, err := r.MeasureRTT(ctx, p, 30)
		if err != nil {
			return err
		}
		logf("path +%s: measured round trip %s", p.RTT, rtt.Round(10*time.Microsecond))
	}

	add := func(rec bench.Record) { res.Records = append(res.Records, rec) }
	// Uncontended first: it also warms the engine's JIT up before the timing-sensitive runs.
	// Without it, a warm-up of each strategy's calls (a short hot-key run on the engine
	// directly), not recorded: on a fresh DynamoDB Local the first strategy measured ran
	// at about half its rate (2 s hot-key runs, 16 workers, +5 ms: efficiency 0.27–0.47
	// first, 0.57–0.84 second or third, whichever strategy came first), which the
	// service, always warm, never shows. The runs that follow still start cold for the
	// lock: new clients, a new key.
	if !cfg.scenarios[bench.ScenarioUncontended] {
		for _, s := range cfg.strategies {
			if s.Peer != nil {
				continue
			}
			if _, err := r.HotKey(ctx, s, bench.Path{DB: direct, Endpoint: endpoint}, 16, warmUp); err != nil {
				return err
			}
		}
		logf("engine: warmed up (%s hot-key run of 16 workers per strategy, direct, not recorded)", warmUp)
	}
	if cfg.scenarios[bench.ScenarioUncontended] {
		for _, p := range paths {
			for _, s := range cfg.strategies {
				if s.Peer != nil {
					continue // hot key only
				}
				rec, err := r.Uncontended(ctx, s, p, cfg.uncontended)
				if err != nil {
					return err
				}
				logf("uncontended %-22s +%-4s p50 %.1f ms, %.2f calls/cycle", s.Name, p.RTT, *rec.P50ms, *rec.CallsPerCS)
				add(rec)
			}
		}
	}
	if cfg.scenarios[bench.ScenarioTakeover] {
		recs, err := takeovers(ctx, r, cfg, paths)
		if err != nil {
			return err
		}
		res.Records = append(res.Records, recs...)
	}
	if cfg.scenarios[bench.ScenarioBurst] {
		recs, err := bursts(ctx, r, cfg, res, paths)
		if err != nil {
			return err
		}
		res.Records = append(res.Records, recs...)
	}
	if cfg.scenarios[bench.ScenarioHotKey] {
		for _, p := range paths {
			for _, n := range cfg.workers {
				for _, s := range cfg.strategies {
					rec, err := r.HotKey(ctx, s, p, n, cfg.duration)
					if err != nil && s.Peer != nil && ctx.Err() == nil {
						// A peer is a process of its own: its failure is reported, not fatal.
						reason := fmt.Sprintf("hot key +%s N=%d failed: %v", p.RTT, n, err)
						res.Skipped = append(res.Skipped, bench.Skipped{Strategy: s.Name, Reason: reason})
						logf("hot key %-22s NOT MEASURED: %s", s.Name, reason)
						continue
					}
					if err != nil {
						return err
					}
					logf("hot key %-22s +%-4s N=%-2d %6.1f CS/s eff %.2f Jain %.3f lockCU/CS %s starved %d",
						s.Name, p.RTT, n, *rec.CSPerSec, *rec.Efficiency, *rec.Jain, fmtp(rec.LockCUPerCS), *rec.Starved)
					add(rec)
				}
			}
		}
	}

	if cfg.scenarios[bench.ScenarioMultiKey] {
		for _, p := range paths {
			if p.RTT != cfg.targetRTT {
				continue
			}
			for _, n := range cfg.workers {
				for _, s := range cfg.strategies {
					if !s.MultiKey {
						continue
					}
					rec, err := r.MultiKey(ctx, s, p, n, cfg.duration)
					if err != nil {
						return err
					}
					logf("multi-key %-20s +%-4s N=%-2d %6.1f CS/s eff %.2f Jain %.3f lockCU/CS %s starved %d double %s",
						s.Name, p.RTT, n, *rec.CSPerSec, *rec.Efficiency, *rec.Jain, fmtp(rec.LockCUPerCS), *rec.Starved, fmtI(rec.DoubleHolders))
					add(rec)
				}
			}
		}
	}

	res.Machine.LoadAvg1 = bench.LoadAvg()
	res.Elapsed = time.Since(began).Round(time.Second).String()
	res.Params = bench.Params{
		Duration: cfg.duration.String(), Uncontended: cfg.uncontended.String(), Workers: cfg.workers,
		Quick: cfg.quick, BurstWorkers: cfg.burstWorkers, BurstRounds: cfg.burstRounds,
		TakeoverLease: cfg.takeoverLease.String(), TakeoverTrials: cfg.takeoverTrials,
		WallClockSkew: bench.WallClockSkew.String(), TargetRTTms: float64(cfg.targetRTT) / float64(time.Millisecond),
	}
	for _, p := range paths {
		res.Params.RTTs = append(res.Params.RTTs, float64(p.RTT)/float64(time.Millisecond))
	}
	for _, s := range cfg.strategies {
		res.Params.Strategies = append(res.Params.Strategies, s.Name)
	}
	res.Evaluate(res.Params.TargetRTTms, cfg.takeoverLease)
	res.PrintText(os.Stdout)

	if cfg.out != "" {
		if err := os.MkdirAll(cfg.out, 0o755); err != nil {
			return err
		}
		if err := res.WriteJSON(filepath.Join(cfg.out, "results.json")); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(cfg.out, bench.ChartFile), []byte(res.Chart()), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(cfg.out, "RESULTS.md"), []byte(res.Markdown(cfg.strategies)), 0o644); err != nil {
			return err
		}
		logf("wrote %s/results.json, %s/RESULTS.md, %s/%s (%s)", cfg.out, cfg.out, cfg.out, bench.ChartFile, res.Elapsed)
	}
	return nil
}

// render draws dir/chart.svg again from dir/results.json, measuring nothing: the figures,
// targets and RESULTS.md of that run stay as they are.
func render(dir string) error {
	res, err := bench.ReadResults(filepath.Join(dir, "results.json"))
	if err != nil {
		return err
	}
	path := filepath.Join(dir, bench.ChartFile)
	if err := os.WriteFile(path, []byte(res.Chart()), 0o644); err != nil {
		return err
	}
	logf("wrote %s from %s", path, filepath.Join(dir, "results.json"))
	return nil
}

// revision names the commit measured and any uncommitted change to lockcore (best effort:
// empty outside a git work tree).
func revision() string {
	out, err := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return ""
	}
	rev := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "status", "--porcelain", "--", "lockcore").Output(); err == nil {
		var dirty []string
		for _, l := range strings.Split(strings.TrimSpace(string(st)), "\n") {
			if f := strings.Fields(l); len(f) == 2 && strings.HasSuffix(f[1], ".go") && !strings.HasSuffix(f[1], "_test.go") {
				dirty = append(dirty, f[1])
			}
		}
		if len(dirty) > 0 {
			rev += " + uncommitted changes to " + strings.Join(dirty, ", ")
		}
	}
	return rev
}

func fmtp(p *float64) string {
	if p == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f", *p)
}

// takeovers runs every strategy × mode of a path at once (the runs mostly wait); paths
// run one after the other.
func takeovers(ctx context.Context, r *bench.Runner, cfg *config, paths []bench.Path) ([]bench.Record, error) {
	type job struct {
		s  bench.Strategy
		tc bench.TakeoverCase
	}
	var jobs []job
	for _, s := range cfg.strategies {
		for _, tc := range s.Modes {
			jobs = append(jobs, job{s, tc})
		}
	}
	var all []bench.Record
	for _, p := range paths {
		logf("takeover +%s: lease %s, %d crashes per strategy and mode (all in parallel) ...", p.RTT, cfg.takeoverLease, cfg.takeoverTrials)
		recs := make([]bench.Record, len(jobs))
		errs := make([]error, len(jobs))
		var wg sync.WaitGroup
		for i, j := range jobs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				recs[i], errs[i] = r.Takeover(ctx, j.s, j.tc, p, cfg.takeoverLease, cfg.takeoverTrials)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		for _, rec := range recs {
			logf("takeover %-22s %-22s +%gms max %s ms, failed trials %d %s", rec.Strategy, rec.TakeoverMode, rec.RTTms,
				fmtp(rec.TakeoverMs), rec.Errors, rec.ErrorSample)
		}
		all = append(all, recs...)
	}
	return all, nil
}

// bursts runs every strategy of a path at once: they measure safety, not speed, and the
// extra load only widens the race windows they probe. Paths run one after the other (with
// -quick only the path of the target RTT runs).
func bursts(ctx context.Context, r *bench.Runner, cfg *config, res *bench.Results, paths []bench.Path) ([]bench.Record, error) {
	if cfg.quick {
		var keep []bench.Path
		for _, p := range paths {
			if p.RTT == cfg.targetRTT {
				keep = append(keep, p)
			}
		}
		if len(keep) > 0 {
			paths = keep
		}
	}
	var strategies, peers []bench.Strategy
	for _, s := range cfg.strategies {
		if s.Peer == nil {
			strategies = append(strategies, s)
		} else {
			peers = append(peers, s)
		}
	}
	var all []bench.Record
	for _, p := range paths {
		logf("burst +%s: %d workers × %d rounds on fresh keys (all lockcore strategies in parallel) ...", p.RTT, cfg.burstWorkers, cfg.burstRounds)
		recs := make([]bench.Record, len(strategies))
		errs := make([]error, len(strategies))
		var wg sync.WaitGroup
		for i, s := range strategies {
			wg.Add(1)
			go func() {
				defer wg.Done()
				recs[i], errs[i] = r.Burst(ctx, s, p, cfg.burstWorkers, cfg.burstRounds)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
		// A peer runs alone, after them (its rounds take seconds each: its waiters poll
		// once a second), and so, for the comparison of round times, do the fair
		// strategies it is held to.
		for _, s := range strategies {
			if len(peers) == 0 || !slices.Contains(bench.AWSClientFair, s.Name) {
				continue
			}
			rec, err := r.Burst(ctx, s, p, cfg.burstWorkers, cfg.burstRounds)
			if err != nil {
				return nil, err
			}
			rec.Alone = true
			recs = append(recs, rec)
		}
		for _, s := range peers {
			logf("burst +%s: %s, %d workers × %d rounds ...", p.RTT, s.Name, cfg.burstWorkers, min(cfg.burstRounds, bench.AWSPeerBurstRounds))
			rec, err := r.Burst(ctx, s, p, cfg.burstWorkers, cfg.burstRounds)
			if err != nil && ctx.Err() == nil {
				reason := fmt.Sprintf("burst +%s failed: %v", p.RTT, err)
				res.Skipped = append(res.Skipped, bench.Skipped{Strategy: s.Name, Reason: reason})
				logf("burst %-22s NOT MEASURED: %s", s.Name, reason)
				continue
			}
			if err != nil {
				return nil, err
			}
			recs = append(recs, rec)
		}
		for _, rec := range recs {
			if rec.Alone {
				rec.Strategy += " (alone)"
			}
			logf("burst %-22s +%gms double holders %s, lost %s, round %s ms (%.1fs)", rec.Strategy, rec.RTTms,
				fmtI(rec.DoubleHolders), fmtI(rec.LostUpdates), fmtp(rec.RoundMs), rec.DurationS)
		}
		all = append(all, recs...)
	}
	return all, nil
}

func fmtI(p *int64) string {
	if p == nil {
		return "–"
	}
	return strconv.FormatInt(*p, 10)
}

type benchTables struct {
	lock, data string
	cleanup    func()
}

// createTables creates LockTable and InventoryTable of template.yaml under unique names,
// without streams.
// On an external engine they are deleted again afterwards; a private one just stops.
func createTables(ctx context.Context, c *dynamodb.Client, external bool) (*benchTables, error) {
	tpl, err := template.LoadDefault()
	if err != nil {
		return nil, err
	}
	suffix := randomHex(4)
	t := &benchTables{cleanup: func() {}}
	var created []string
	for _, id := range []string{"LockTable", "InventoryTable"} {
		spec, err := tpl.Table(id)
		if err != nil {
			return nil, err
		}
		n := "bench-" + id + "-" + suffix
		in := spec.CreateTableInput(n)
		// The lock table's stream feeds the janitor, not the locks. DynamoDB Local keeps
		// stream records in its database, which makes every write to a stream-enabled
		// table several times slower, and slower still as the stream grows (15 ms
		// against 2 ms per call after a few minutes here); the service has no such cost.
		// Left on, it would penalise the strategies that use the lock table.
		in.StreamSpecification = nil
		if err := ddblocal.CreateTable(ctx, c, in, spec.TTLInput(n)); err != nil {
			return nil, err
		}
		created = append(created, n)
	}
	t.lock, t.data = created[0], created[1]
	if external {
		t.cleanup = func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for _, n := range created {
				if _, err := c.DeleteTable(dctx, &dynamodb.DeleteTableInput{TableName: aws.String(n)}); err != nil {
					logf("delete table %s: %v", n, err)
				}
			}
		}
	}
	return t, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
