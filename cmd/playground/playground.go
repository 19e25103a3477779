package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
	"github.com/turnstile-locks/turnstile/internal/template"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// The locks the playground leaves, by key.
const (
	keyMutex     = "sku#GPU-4090"
	keyTicket    = "sku#HOT-DEAL"
	keyQueue     = "order#2002"
	keyAbandoned = "order#1042"
	keyReleased  = "sku#PEAR"
	itemSKU      = "SKU#apple"
)

// itemKey is the inventory item an ItemLocker holds (the InventoryTable's key: pk, sk).
var itemKey = map[string]types.AttributeValue{
	"pk": &types.AttributeValueMemberS{Value: itemSKU},
	"sk": &types.AttributeValueMemberS{Value: "STOCK"},
}

// itemKeyArg is itemKey as `turnstile locks show --strategy item` takes it.
const itemKeyArg = "pk=" + itemSKU + ",sk=STOCK"

// roleEnv marks the holder process that start launches (tests re-execute their own binary
// with it, having no main to dispatch "hold").
const roleEnv = "TURNSTILE_PLAYGROUND_ROLE"

// abandonedLease is the lease of the abandoned lock: the shortest lockcore allows, so the
// Inspector calls it abandoned (lease end + its 5 s skew allowance) seconds after start.
const abandonedLease = lockcore.DefaultMinLease

// readyTimeout bounds start's wait for the holders and the abandoned lease to show.
const readyTimeout = 90 * time.Second

func (o *options) resolve() error {
	if o.stateDir == "" {
		root, err := template.FindRoot()
		if err != nil {
			return err
		}
		o.stateDir = filepath.Join(root, ".cache", "playground")
	}
	o.endpoint = os.Getenv(ddblocal.EnvEndpoint)
	return nil
}

func (o options) pidFile() string { return filepath.Join(o.stateDir, "holders.pid") }
func (o options) logFile() string { return filepath.Join(o.stateDir, "holders.log") }

func (o options) client(ctx context.Context) (*dynamodb.Client, error) {
	if o.endpoint == "" {
		return nil, fmt.Errorf("%s is not set: run `make playground` (it starts or reuses a local engine) or set it to a running engine (`make engine`)", ddblocal.EnvEndpoint)
	}
	db, err := ddblocal.NewClient(ctx, o.endpoint)
	if err != nil {
		return nil, err
	}
	if err := ddblocal.PingClient(ctx, db, 5*time.Second); err != nil {
		return nil, fmt.Errorf("the engine at %s does not answer: %w", o.endpoint, err)
	}
	return db, nil
}

// start builds the playground and launches the holder process; see the package comment.
func start(ctx context.Context, o options, stdout, stderr io.Writer) error {
	db, err := o.client(ctx)
	if err != nil {
		return err
	}
	if err := stopHolders(o, io.Discard); err != nil {
		return fmt.Errorf("stopping the previous holders: %w", err)
	}
	if err := createTables(ctx, db, o); err != nil {
		return err
	}
	if err := leaveFinishedLocks(ctx, db, o); err != nil {
		return err
	}
	pid, exited, err := launchHolders(o)
	if err != nil {
		return err
	}
	until := time.Now().Add(o.duration)
	if err := waitReady(ctx, db, o, exited); err != nil {
		_ = stopHolders(o, io.Discard)
		return fmt.Errorf("%w\nholder log %s:\n%s", err, o.logFile(), tail(o.logFile(), 20))
	}
	printReady(stdout, o, pid, until)
	return nil
}

// createTables (re)creates the lock and data tables from template.yaml's LockTable and
// InventoryTable, and stocks the inventory item the ItemLocker holds.
func createTables(ctx context.Context, db *dynamodb.Client, o options) error {
	tpl, err := template.LoadDefault()
	if err != nil {
		return err
	}
	for _, t := range []struct{ logicalID, name string }{{"LockTable", o.lockTable()}, {"InventoryTable", o.itemTable()}} {
		spec, err := tpl.Table(t.logicalID)
		if err != nil {
			return err
		}
		if err := deleteTable(ctx, db, t.name); err != nil {
			return err
		}
		if err := ddblocal.CreateTable(ctx, db, spec.CreateTableInput(t.name), spec.TTLInput(t.name)); err != nil {
			return err
		}
	}
	_, err = db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(o.itemTable()), Item: map[string]types.AttributeValue{
		"pk": itemKey["pk"], "sk": itemKey["sk"], "available": &types.AttributeValueMemberN{Value: "12"},
	}})
	if err != nil {
		return fmt.Errorf("stock %s: %w", itemKeyArg, err)
	}
	return nil
}

func deleteTable(ctx context.Context, db *dynamodb.Client, name string) error {
	_, err := db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	var notFound *types.ResourceNotFoundException
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete table %s: %w", name, err)
	}
	w := dynamodb.NewTableNotExistsWaiter(db, func(o *dynamodb.TableNotExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 50*time.Millisecond, time.Second
	})
	return w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, time.Minute)
}

// leaveFinishedLocks leaves the locks nobody keeps: a released one, and an abandoned one
// whose holder acquired it without heartbeats and is this very process, which exits
// without releasing it, as a crashed Lambda would.
func leaveFinishedLocks(ctx context.Context, db *dynamodb.Client, o options) error {
	done, err := lockcore.NewMutex(db, o.lockTable(), lockcore.WithOwner("orderprocessor-5b0e"))
	if err != nil {
		return err
	}
	l, err := done.Acquire(ctx, keyReleased, lockcore.Data([]byte("order ord-0999")))
	if err != nil {
		return fmt.Errorf("acquire %s: %w", keyReleased, err)
	}
	if err := l.Release(ctx); err != nil {
		return fmt.Errorf("release %s: %w", keyReleased, err)
	}
	crashed, err := lockcore.NewMutex(db, o.lockTable(), lockcore.WithOwner("orderprocessor-dead"),
		lockcore.WithLease(abandonedLease), lockcore.WithHeartbeat(0))
	if err != nil {
		return err
	}
	if _, err := crashed.Acquire(ctx, keyAbandoned, lockcore.Data([]byte("order ord-1042"))); err != nil {
		return fmt.Errorf("acquire %s: %w", keyAbandoned, err)
	}
	return nil // never renewed, never released
}

// launchHolders starts `playground hold` in a session of its own, so it outlives make and
// this process, with its output in the log file. exited is closed when it exits while this
// process still waits for it.
func launchHolders(o options) (pid int, exited <-chan struct{}, err error) {
	self, err := os.Executable()
	if err != nil {
		return 0, nil, err
	}
	if err := os.MkdirAll(o.stateDir, 0o755); err != nil {
		return 0, nil, err
	}
	logf, err := os.Create(o.logFile())
	if err != nil {
		return 0, nil, err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(self, "hold", "-duration", o.duration.String(), "-prefix", o.prefix, "-state-dir", o.stateDir)
	cmd.Env = append(os.Environ(), roleEnv+"=hold", ddblocal.EnvEndpoint+"="+o.endpoint)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return 0, nil, fmt.Errorf("start the holders: %w", err)
	}
	if err := os.WriteFile(o.pidFile(), []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
		_ = cmd.Process.Kill()
		return 0, nil, err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	return cmd.Process.Pid, done, nil
}

// waitReady waits until the Inspector sees every lock of the playground as the package
// comment says: held with their waiters, the abandoned one abandoned.
func waitReady(ctx context.Context, db *dynamodb.Client, o options, exited <-chan struct{}) error {
	in, err := lockcore.NewInspector(db, o.lockTable())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var missing string
	for {
		missing, err = notReady(ctx, in, o)
		if err == nil && missing == "" {
			return nil
		}
		select {
		case <-exited:
			return errors.New("the holder process exited")
		case <-ctx.Done():
			if err != nil {
				return err
			}
			return fmt.Errorf("the playground did not come up within %s: %s", readyTimeout, missing)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// notReady returns what the Inspector does not show yet ("" when all is there).
func notReady(ctx context.Context, in *lockcore.Inspector, o options) (string, error) {
	locks := map[string]lockcore.Lock{}
	err := in.Each(ctx, lockcore.ListOptions{Consistent: true}, func(l lockcore.Lock) error {
		locks[l.Key] = l
		return nil
	})
	if err != nil {
		return "", err
	}
	for _, w := range []struct {
		key     string
		state   lockcore.LockState
		waiters int
	}{
		{keyMutex, lockcore.LockHeld, 2}, {keyTicket, lockcore.LockHeld, 2}, {keyQueue, lockcore.LockHeld, 2},
		{keyAbandoned, lockcore.LockAbandoned, 0}, {keyReleased, lockcore.LockReleased, 0},
	} {
		l, ok := locks[w.key]
		if !ok {
			return w.key + " not there yet", nil
		}
		if l.State != w.state || len(l.Waiters) != w.waiters {
			return fmt.Sprintf("%s is %s with %d waiters, want %s with %d", w.key, l.State, len(l.Waiters), w.state, w.waiters), nil
		}
	}
	il, err := in.ShowItem(ctx, o.itemTable(), itemKey, lockcore.ItemAttributes{})
	if err != nil {
		return "", err
	}
	if il.State != lockcore.LockHeld || len(il.Waiters) != 1 {
		return fmt.Sprintf("item %s is %s with %d waiters, want held with 1", itemKeyArg, il.State, len(il.Waiters)), nil
	}
	return "", nil
}

func printReady(w io.Writer, o options, pid int, until time.Time) {
	fmt.Fprintf(w, `
turnstile playground: live locks on the DynamoDB engine at %s
  lock table %s, data table %s

  %-13s mutex   held (heartbeating), 2 waiters queued behind it
  %-13s ticket  held, 2 waiters
  %-13s queue   held, 2 waiters
  %-13s mutex   abandoned: its holder stopped heartbeating and exited without releasing
  %-13s mutex   released
  %-13s item    inventory item %s locked by an ItemLocker, 1 waiter

The holders run in the background until %s (pid %d, log %s), then release and exit.
Stop them sooner with: make playground-stop

Point the CLI at it:

  export %s=%s TURNSTILE_LOCK_TABLE=%s
  go run ./cmd/turnstile locks ls
  go run ./cmd/turnstile locks show %s
  go run ./cmd/turnstile locks abandoned
  go run ./cmd/turnstile locks watch %s
  go run ./cmd/turnstile locks show --strategy item --item-table %s %s
`, o.endpoint, o.lockTable(), o.itemTable(),
		keyMutex, keyTicket, keyQueue, keyAbandoned, keyReleased, itemSKU, itemKeyArg,
		until.Format("15:04:05"), pid, o.logFile(),
		ddblocal.EnvEndpoint, o.endpoint, o.lockTable(),
		keyMutex, keyQueue, o.itemTable(), itemKeyArg)
}

// releaser is a held lease of any strategy.
type releaser interface{ Release(context.Context) error }

// acquirer takes one lock for one client.
type acquirer struct {
	what    string // key (and owner, for a waiter) in the log
	acquire func(context.Context) (releaser, error)
}

// mutexLock, ticketLock, queueLock and itemLock make the acquirer of one client (one owner
// name) of each strategy.
func mutexLock(db *dynamodb.Client, o options, owner, key string, opts ...lockcore.AcquireOption) acquirer {
	return acquirer{key + " (" + owner + ")", func(ctx context.Context) (releaser, error) {
		m, err := lockcore.NewMutex(db, o.lockTable(), lockcore.WithOwner(owner))
		if err != nil {
			return nil, err
		}
		return m.Acquire(ctx, key, opts...)
	}}
}

func ticketLock(db *dynamodb.Client, o options, owner, key string) acquirer {
	return acquirer{key + " (" + owner + ")", func(ctx context.Context) (releaser, error) {
		t, err := lockcore.NewTicketLock(db, o.lockTable(), lockcore.WithOwner(owner))
		if err != nil {
			return nil, err
		}
		return t.Acquire(ctx, key)
	}}
}

func queueLock(db *dynamodb.Client, o options, owner, key string) acquirer {
	return acquirer{key + " (" + owner + ")", func(ctx context.Context) (releaser, error) {
		q, err := lockcore.NewQueue(db, o.lockTable(), lockcore.WithOwner(owner))
		if err != nil {
			return nil, err
		}
		return q.Acquire(ctx, key)
	}}
}

func itemLock(db *dynamodb.Client, o options, owner string) acquirer {
	return acquirer{itemKeyArg + " (" + owner + ")", func(ctx context.Context) (releaser, error) {
		il, err := lockcore.NewItemLocker(db, o.itemTable(), lockcore.WithOwner(owner))
		if err != nil {
			return nil, err
		}
		return il.Acquire(ctx, itemKey)
	}}
}

// drainTimeout bounds the end of hold: the waiters' turns, each released at once.
const drainTimeout = 10 * time.Second

// hold is the holder process: it takes the held locks, queues the waiters, keeps them for
// o.duration (or until ctx ends: SIGTERM from stop), then releases everything and exits.
// The holders heartbeat (lockcore's default: every half lease), so the waiters wait.
//
// At the end the holders release first and each waiter, its turn come, releases at once:
// the queues drain as in production. (Waiters that gave up first would leave each lock
// handed to a ticket nobody holds, which the Inspector shows as held, then abandoned,
// until the next acquirer skips it.)
func hold(ctx context.Context, o options, log io.Writer) error {
	db, err := o.client(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.duration)
	defer cancel()
	var logMu sync.Mutex
	logf := func(format string, args ...any) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(log, time.Now().Format("15:04:05.000")+" "+format+"\n", args...)
	}

	var mu sync.Mutex
	var held []releaser
	stopping := false
	// keep records a lease to release at the end, or releases it now if the end has come.
	keep := func(what string, l releaser) {
		mu.Lock()
		if !stopping {
			held = append(held, l)
			mu.Unlock()
			return
		}
		mu.Unlock()
		releaseAll([]releaser{l}, logf)
		logf("released %s", what)
	}
	// The holders first, so the waiters queue behind them.
	for _, h := range []acquirer{
		mutexLock(db, o, "orderprocessor-a7f3", keyMutex, lockcore.Data([]byte("order ord-2001"))),
		ticketLock(db, o, "inventoryupdater-1e8a", keyTicket),
		queueLock(db, o, "orderprocessor-q1", keyQueue),
		itemLock(db, o, "inventoryupdater-i1"),
	} {
		l, err := h.acquire(ctx)
		if err != nil {
			releaseAll(held, logf)
			return fmt.Errorf("acquire %s: %w", h.what, err)
		}
		logf("holding %s", h.what)
		keep(h.what, l)
	}
	// The waiters, a moment apart so they line up in this order. They wait on a context
	// of their own, which ends only after the drain.
	waitCtx, stopWaiting := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWaiting()
	var wg sync.WaitGroup
	for _, w := range []acquirer{
		mutexLock(db, o, "orderprocessor-b2c4", keyMutex),
		mutexLock(db, o, "orderprocessor-c9d1", keyMutex),
		ticketLock(db, o, "inventoryupdater-2f4b", keyTicket),
		ticketLock(db, o, "inventoryupdater-3c5d", keyTicket),
		queueLock(db, o, "orderprocessor-q2", keyQueue),
		queueLock(db, o, "orderprocessor-q3", keyQueue),
		itemLock(db, o, "inventoryupdater-i2"),
	} {
		wg.Go(func() {
			l, err := w.acquire(waitCtx)
			if err != nil {
				if waitCtx.Err() == nil {
					logf("waiter %s: %v", w.what, err)
				}
				return
			}
			logf("waiter %s got the lock", w.what)
			keep(w.what, l)
		})
		time.Sleep(100 * time.Millisecond)
	}
	logf("ready: 4 locks held, 7 waiters queued; releasing at %s", time.Now().Add(o.duration).Format("15:04:05"))

	<-ctx.Done()
	logf("stopping: %v", ctx.Err())
	mu.Lock()
	stopping = true
	leases := held
	held = nil
	mu.Unlock()
	releaseAll(leases, logf) // the waiters' turns come, and keep releases each at once
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainTimeout):
		logf("waiters still waiting after %s; withdrawing them", drainTimeout)
		stopWaiting()
		<-drained
	}
	if b, err := os.ReadFile(o.pidFile()); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(os.Getpid()) {
		if err := os.Remove(o.pidFile()); err != nil {
			logf("remove %s: %v", o.pidFile(), err)
		}
	}
	logf("released everything; exiting")
	return nil
}

// releaseAll releases the held leases, the last taken first.
func releaseAll(held []releaser, logf func(string, ...any)) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, l := range slices.Backward(held) {
		switch err := l.Release(ctx); {
		case errors.Is(err, lockcore.ErrLeaseLost):
			logf("release: the lease was already lost (force-released?): %v", err)
		case err != nil:
			logf("release: %v", err)
		}
	}
}

// stopHolders stops the holder process of the pid file, if it runs: SIGTERM (it releases
// its locks and exits), SIGKILL if it has not exited within the drain and a margin.
func stopHolders(o options, w io.Writer) error {
	b, err := os.ReadFile(o.pidFile())
	if errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(w, "playground: no holders running")
		return nil
	}
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%s: %w", o.pidFile(), err)
	}
	if !isHolder(pid) {
		fmt.Fprintln(w, "playground: no holders running")
		return removeIfExists(o.pidFile())
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal holders (pid %d): %w", pid, err)
	}
	if !waitGone(pid, drainTimeout+10*time.Second) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		if !waitGone(pid, 5*time.Second) {
			return fmt.Errorf("holders (pid %d) did not exit", pid)
		}
	}
	fmt.Fprintf(w, "playground: stopped the holders (pid %d); their locks are released. The engine keeps running (make engine-stop).\n", pid)
	return removeIfExists(o.pidFile())
}

func removeIfExists(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// isHolder reports whether pid is a live holder process (not a recycled pid): its
// command line has the "hold" command.
func isHolder(pid int) bool {
	if !alive(pid) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return true // no procfs: trust the signal probe
	}
	return slices.Contains(strings.Split(string(cmdline), "\x00"), "hold")
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(stat)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func waitGone(pid int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if !alive(pid) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return !alive(pid)
}

// tail returns the last n lines of a file ("" if unreadable).
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
