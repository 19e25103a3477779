package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
)

// The AWS lock client baseline (issue #30): AWS's Java DynamoDB lock client
// (com.amazonaws:dynamodb-lock-client on the AWS SDK for Java 2.x) runs the hot-key loop
// in a JVM of its own, the peer in bench/awspeer, through the same delay proxy as the Go
// strategies. An SDK execution interceptor counts its calls by the rules of CountingDB;
// the peer prints the raw figures and summarize turns them into the same Record.

// AWSLockClient is the strategy name of the AWS lock client peer.
const AWSLockClient = "awslockclient"

// PeerSettings are the lock settings of the AWS lock client peer.
type PeerSettings struct {
	Lease     time.Duration // leaseDuration
	Heartbeat time.Duration // heartbeatPeriod (a background thread per lock client)
	// Refresh is how long a blocked acquireLock sleeps between polls (refreshPeriod);
	// 0 is the library's default, 1 s.
	Refresh time.Duration
}

// AWSPeerSettings are the settings the bench runs the AWS lock client with: the
// reference measurement's lease and heartbeat, the library's default polling.
var AWSPeerSettings = PeerSettings{Lease: 3 * time.Second, Heartbeat: time.Second}

// AWSLockClientDefaultRefresh is the lock client's refreshPeriod when none is given.
const AWSLockClientDefaultRefresh = time.Second

func (s PeerSettings) refresh() time.Duration {
	if s.Refresh > 0 {
		return s.Refresh
	}
	return AWSLockClientDefaultRefresh
}

func (s PeerSettings) String() string {
	return fmt.Sprintf("lease %s, heartbeat %s, blocking acquireLock polling every %s (refreshPeriod)",
		s.Lease, s.Heartbeat, s.refresh())
}

// AWSPeer is the built AWS lock client peer.
type AWSPeer struct {
	classpath string
}

// AWSPeerMainClass is the peer's main class.
const AWSPeerMainClass = "dev.turnstile.awspeer.Peer"

const (
	awsPeerBuildDir = "build"         // under the cache dir: lib/ (jars), classes/, the stamp
	awsPeerStamp    = ".complete"     // holds the sources' hash after a complete build
	awsPeerLock     = ".build.lock"   // serialises builds (test binaries, bench runs)
	awsPeerSources  = "bench/awspeer" // under the project root: pom.xml and src/
)

// EnsureAWSPeer builds the AWS lock client peer into <project root>/.cache/awspeer unless
// it is built from the current sources, and returns it. The build is Maven's
// dependency:copy-dependencies (as for DynamoDB Local: the lock client, the SDK and their
// dependencies) and javac; it happens once per change of bench/awspeer, serialised across
// processes by a file lock. The error names what is missing (java, javac, mvn) or the
// build's last lines.
func EnsureAWSPeer(ctx context.Context) (*AWSPeer, error) {
	root, err := ddblocal.FindRoot()
	if err != nil {
		return nil, err
	}
	return ensureAWSPeer(ctx, filepath.Join(root, awsPeerSources), filepath.Join(root, ".cache", "awspeer"))
}

func ensureAWSPeer(ctx context.Context, src, cache string) (*AWSPeer, error) {
	stamp, sources, err := peerSources(src)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cache, awsPeerBuildDir)
	peer := &AWSPeer{classpath: filepath.Join(dir, "classes") + string(os.PathListSeparator) + filepath.Join(dir, "lib", "*")}
	if built(dir, stamp) {
		return peer, peerTools(false)
	}
	if err := peerTools(true); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, fmt.Errorf("awspeer: %w", err)
	}
	unlock, err := flock(filepath.Join(cache, awsPeerLock))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if built(dir, stamp) { // another process built it while we waited
		return peer, nil
	}
	tmp, err := os.MkdirTemp(cache, "build-*")
	if err != nil {
		return nil, fmt.Errorf("awspeer: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return nil, fmt.Errorf("awspeer: %w", err)
	}
	run := func(what string, name string, args ...string) error {
		var out bytes.Buffer
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = src
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("awspeer: %s (%s) failed: %w\n%s", what, name, err, tailLines(out.Bytes(), 30))
		}
		return nil
	}
	if err := run("fetch the lock client and the AWS SDK from Maven Central", "mvn", "-q", "-B",
		"-f", filepath.Join(src, "pom.xml"), "dependency:copy-dependencies",
		"-DincludeScope=runtime", "-DoutputDirectory="+filepath.Join(tmp, "lib")); err != nil {
		return nil, err
	}
	args := []string{"--release", "17", "-encoding", "UTF-8",
		"-cp", filepath.Join(tmp, "lib", "*"), "-d", filepath.Join(tmp, "classes")}
	if err := run("compile", "javac", append(args, sources...)...); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, awsPeerStamp), []byte(stamp+"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("awspeer: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("awspeer: remove the old build: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("awspeer: install the build: %w", err)
	}
	return peer, nil
}

// peerSources hashes the peer's pom.xml and sources (the build's stamp) and lists the
// Java files.
func peerSources(src string) (stamp string, javaFiles []string, err error) {
	var files []string
	files = append(files, filepath.Join(src, "pom.xml"))
	err = filepath.WalkDir(filepath.Join(src, "src"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			files = append(files, p)
			if strings.HasSuffix(p, ".java") {
				javaFiles = append(javaFiles, p)
			}
		}
		return nil
	})
	if err != nil {
		return "", nil, fmt.Errorf("awspeer: sources: %w", err)
	}
	slices.Sort(files)
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return "", nil, fmt.Errorf("awspeer: sources: %w", err)
		}
		rel, _ := filepath.Rel(src, f)
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(b))
		h.Write(b)
	}
	if len(javaFiles) == 0 {
		return "", nil, fmt.Errorf("awspeer: no Java sources under %s", src)
	}
	return hex.EncodeToString(h.Sum(nil)), javaFiles, nil
}

func built(dir, stamp string) bool {
	b, err := os.ReadFile(filepath.Join(dir, awsPeerStamp))
	return err == nil && strings.TrimSpace(string(b)) == stamp
}

// peerTools reports the missing tools in one error.
func peerTools(build bool) error {
	need := []struct{ name, hint string }{{"java", "a Java 17+ runtime"}}
	if build {
		need = append(need,
			struct{ name, hint string }{"javac", "a JDK 17+, e.g. apt-get install openjdk-17-jdk-headless"},
			struct{ name, hint string }{"mvn", "Maven 3, e.g. apt-get install maven"})
	}
	var missing []string
	for _, t := range need {
		if _, err := exec.LookPath(t.name); err != nil {
			missing = append(missing, fmt.Sprintf("%s (%s)", t.name, t.hint))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("awspeer: the AWS lock client peer needs %s on PATH", strings.Join(missing, " and "))
}

func flock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("awspeer: build lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("awspeer: lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

func tailLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// PeerRun is one run of the peer: hot key (Duration after Warmup), or a burst (Rounds).
type PeerRun struct {
	Endpoint  string // the engine's or the delay proxy's URL
	LockTable string
	DataTable string
	Key       string // the hot key: lock row pk, counter CTR#<key>
	Owner     string // prefix of the lock clients' owner names
	Workers   int
	Warmup    time.Duration // unmeasured start of the run
	Duration  time.Duration // the measured window
	Settings  PeerSettings
	// Burst runs the burst scenario instead: Rounds fresh keys (<Key>-<round>), on each
	// the Workers released at once, one critical section each.
	Burst  bool
	Rounds int
}

// PeerUsage is a snapshot of the peer's interceptor counters (as Usage and ByOp).
type PeerUsage struct {
	Calls     int64            `json:"calls"`
	CondFails int64            `json:"cond_fails"`
	WCU       float64          `json:"wcu"`
	RCU       float64          `json:"rcu"`
	Ops       map[string]int64 `json:"ops"`
}

func (u PeerUsage) usage() Usage {
	return Usage{Calls: u.Calls, CondFails: u.CondFails, WCU: u.WCU, RCU: u.RCU}
}

// PeerWorker is what one of the peer's workers collected (as workerStats).
type PeerWorker struct {
	InWindow  int        `json:"in_window"`
	Total     int        `json:"total"`
	Errors    int        `json:"errors"`
	MaxWaitNs int64      `json:"max_wait_ns"`
	CSNs      []int64    `json:"cs_ns"`
	ReadNs    []int64    `json:"read_ns"`
	Intervals [][2]int64 `json:"intervals"` // critical sections in the window: start, end (ns from the run's start)
}

// PeerResult is the JSON line the peer prints.
type PeerResult struct {
	LockClientVersion string       `json:"lock_client_version"`
	SDKVersion        string       `json:"sdk_version"`
	JavaVersion       string       `json:"java_version"`
	LeaseMs           int64        `json:"lease_ms"`
	HeartbeatMs       int64        `json:"heartbeat_ms"`
	RefreshMs         int64        `json:"refresh_ms"`
	WarmupNs          int64        `json:"warmup_ns"`
	DurationNs        int64        `json:"duration_ns"`
	DoubleHolders     int64        `json:"double_holders"`
	LockStart         PeerUsage    `json:"lock_start"`
	LockEnd           PeerUsage    `json:"lock_end"`
	DataStart         PeerUsage    `json:"data_start"`
	DataEnd           PeerUsage    `json:"data_end"`
	SlowestCallNs     int64        `json:"slowest_call_ns"`
	SlowCalls         int64        `json:"slow_calls"`
	Workers           []PeerWorker `json:"workers"`
	Rounds            []PeerRound  `json:"rounds"` // burst
	ErrorSample       string       `json:"error_sample"`
}

// PeerRound is one round of a burst.
type PeerRound struct {
	Ns     int64   `json:"ns"`      // the workers' release to the last one done
	Done   int64   `json:"done"`    // critical sections completed
	Errors int64   `json:"errors"`  // failed acquireLock, critical sections or releaseLock
	WaitNs []int64 `json:"wait_ns"` // each worker's acquireLock (0: failed)
}

// Implementation describes what ran, for the report.
func (r *PeerResult) Implementation() string {
	return fmt.Sprintf("dynamodb-lock-client %s on AWS SDK for Java %s (Apache 5 HTTP client), Java %s; "+
		"lease %s, heartbeat %s, blocking acquireLock polling every %s; one lock client per worker, lock row deleted on release",
		r.LockClientVersion, r.SDKVersion, r.JavaVersion, time.Duration(r.LeaseMs)*time.Millisecond,
		time.Duration(r.HeartbeatMs)*time.Millisecond, time.Duration(r.RefreshMs)*time.Millisecond)
}

// PeerRoundDeadline bounds one round of a peer's burst (the peer's own deadline).
const PeerRoundDeadline = 5 * time.Minute

// PeerStartSlack bounds the peer's start (JVM, SDK, warm-up cycles) and stop beyond the
// run itself.
const PeerStartSlack = 2 * time.Minute

// Run runs the peer once and returns its result. stderr (the JVM's and the libraries'
// logs) is kept only for the error.
func (p *AWSPeer) Run(ctx context.Context, pr PeerRun) (*PeerResult, error) {
	limit := pr.Warmup + pr.Duration + PeerStartSlack
	if pr.Burst {
		limit = time.Duration(pr.Rounds)*PeerRoundDeadline + PeerStartSlack
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	args := []string{"-cp", p.classpath, AWSPeerMainClass,
		"--endpoint=" + pr.Endpoint, "--lock-table=" + pr.LockTable, "--data-table=" + pr.DataTable,
		"--key=" + pr.Key, "--owner=" + pr.Owner, "--workers=" + strconv.Itoa(pr.Workers),
		"--warmup-ms=" + ms(pr.Warmup), "--duration-ms=" + ms(pr.Duration),
		"--lease-ms=" + ms(pr.Settings.Lease), "--heartbeat-ms=" + ms(pr.Settings.Heartbeat),
		"--refresh-ms=" + ms(pr.Settings.Refresh)}
	if pr.Burst {
		args = append(args, "--mode=burst", "--rounds="+strconv.Itoa(pr.Rounds))
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "java", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("awspeer: java %s: %w\n%s", AWSPeerMainClass, err, tailLines(stderr.Bytes(), 30))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var res PeerResult
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &res); err != nil {
		return nil, fmt.Errorf("awspeer: result line: %w\nstdout: %s\nstderr: %s", err,
			tailLines(stdout.Bytes(), 5), tailLines(stderr.Bytes(), 30))
	}
	switch {
	case pr.Burst && len(res.Rounds) != pr.Rounds:
		return nil, fmt.Errorf("awspeer: result has %d rounds, want %d", len(res.Rounds), pr.Rounds)
	case !pr.Burst && len(res.Workers) != pr.Workers:
		return nil, fmt.Errorf("awspeer: result has %d workers, want %d", len(res.Workers), pr.Workers)
	}
	return &res, nil
}

// peerReady says why the peer strategy s cannot run along p, if it cannot.
func (r *Runner) peerReady(s Strategy, p Path) error {
	if r.AWSPeer == nil {
		return errors.New(s.Name + ": the AWS lock client peer is not built (EnsureAWSPeer)")
	}
	if p.Endpoint == "" {
		return errors.New(s.Name + ": the path has no endpoint for the peer")
	}
	return nil
}

// peerHotKey is HotKey for a peer strategy: the same counter, the same measured window
// after the same warm-up, the same figures.
func (r *Runner) peerHotKey(ctx context.Context, s Strategy, p Path, n int, d time.Duration) (Record, error) {
	warm := min(2*time.Second, d/4)
	rec := Record{Strategy: s.Name, Scenario: ScenarioHotKey, RTTms: ms(p.RTT), Workers: n, Baseline: s.Baseline,
		DurationS: d.Seconds(), WarmupS: warm.Seconds()}
	if err := r.peerReady(s, p); err != nil {
		return rec, err
	}
	env := r.env(p)
	key := r.key("hot")
	if err := WriteCounter(ctx, env.Data, r.DataTable, key, 0); err != nil {
		return rec, err
	}
	idle, err := r.MeasureRTT(ctx, p, 15)
	if err != nil {
		return rec, err
	}
	res, err := r.AWSPeer.Run(ctx, PeerRun{
		Endpoint: p.Endpoint, LockTable: r.LockTable, DataTable: r.DataTable, Key: key,
		Owner: "awspeer-" + r.RunID, Workers: n, Warmup: warm, Duration: d, Settings: *s.Peer,
	})
	if err != nil {
		return rec, fmt.Errorf("%s: %w", s.Name, err)
	}
	counter, err := ReadCounter(context.WithoutCancel(ctx), env.Data.Next, r.DataTable, key)
	if err != nil {
		return rec, err
	}
	stats := make([]workerStats, n)
	var intervals []Interval
	base := time.Unix(0, 0)
	for i, w := range res.Workers {
		st := workerStats{inWindow: w.InWindow, total: w.Total, errors: w.Errors, maxWait: time.Duration(w.MaxWaitNs)}
		for _, v := range w.CSNs {
			st.csTimes = append(st.csTimes, time.Duration(v))
		}
		for _, v := range w.ReadNs {
			st.reads = append(st.reads, time.Duration(v))
		}
		stats[i] = st
		for _, iv := range w.Intervals {
			intervals = append(intervals, Interval{Worker: i, Start: base.Add(time.Duration(iv[0])), End: base.Add(time.Duration(iv[1]))})
		}
	}
	slices.SortFunc(intervals, func(a, b Interval) int { return a.Start.Compare(b.Start) })
	ops := map[string]int64{}
	for k, v := range res.LockEnd.Ops {
		if n := v - res.LockStart.Ops[k]; n > 0 {
			ops[k] = n
		}
	}
	summarize(&rec, loopResult{
		stats: stats, intervals: intervals, doubleHolders: res.DoubleHolders,
		lockUse: res.LockEnd.usage().Sub(res.LockStart.usage()), dataUse: res.DataEnd.usage().Sub(res.DataStart.usage()),
		ops: ops, counter: counter, idle: idle, d: d, per: 1,
		slowest: time.Duration(res.SlowestCallNs), slowCalls: res.SlowCalls,
	})
	rec.ErrorSample = res.ErrorSample
	rec.Implementation = res.Implementation()
	return rec, nil
}

// AWSPeerBurstRounds is how many burst rounds the peer runs at most: a round of the AWS
// client takes seconds (its waiters poll once a second), so the lockcore strategies' 20
// rounds would take minutes per path.
const AWSPeerBurstRounds = 3

// peerBurst is Burst for a peer strategy: the same rounds on fresh keys (at most
// AWSPeerBurstRounds), the same counter check and figures.
func (r *Runner) peerBurst(ctx context.Context, s Strategy, p Path, n, rounds int) (Record, error) {
	rounds = min(rounds, AWSPeerBurstRounds)
	rec := Record{Strategy: s.Name, Scenario: ScenarioBurst, RTTms: ms(p.RTT), Workers: n, Baseline: s.Baseline, Rounds: rounds, Alone: true}
	if err := r.peerReady(s, p); err != nil {
		return rec, err
	}
	env := r.env(p)
	key := r.key("burst")
	t0 := time.Now()
	res, err := r.AWSPeer.Run(ctx, PeerRun{
		Endpoint: p.Endpoint, LockTable: r.LockTable, DataTable: r.DataTable, Key: key,
		Owner: "awspeer-" + r.RunID, Workers: n, Duration: time.Millisecond, Settings: *s.Peer,
		Burst: true, Rounds: rounds,
	})
	if err != nil {
		return rec, fmt.Errorf("%s: %w", s.Name, err)
	}
	var done, errs, lost int64
	var maxWait time.Duration
	var times []time.Duration
	for i, rd := range res.Rounds {
		got, err := ReadCounter(context.WithoutCancel(ctx), env.Data.Next, r.DataTable, fmt.Sprintf("%s-%d", key, i))
		if err != nil {
			return rec, err
		}
		done += rd.Done
		errs += rd.Errors
		lost += rd.Done - got
		times = append(times, time.Duration(rd.Ns))
		for _, w := range rd.WaitNs {
			maxWait = max(maxWait, time.Duration(w))
		}
	}
	if done > 0 {
		rec.lockPerCS(res.LockEnd.usage().Sub(res.LockStart.usage()), float64(done))
	}
	rec.DoubleHolders = i64p(res.DoubleHolders)
	rec.MaxWaitMs = fp(ms(maxWait))
	rec.LostUpdates = i64p(lost)
	rec.Completions = done
	rec.Errors = errs
	rec.ErrorSample = res.ErrorSample
	rec.DurationS = time.Since(t0).Seconds()
	rec.SlowestCallMs = ms(time.Duration(res.SlowestCallNs))
	rec.SlowCalls = res.SlowCalls
	rec.Implementation = res.Implementation()
	roundStats(&rec, times)
	return rec, nil
}
