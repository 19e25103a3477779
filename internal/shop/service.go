package shop

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/internal/emf"
	"github.com/turnstile-locks/turnstile/lockcore"
)

// Status is the state of an order item.
type Status string

// Order states. RESERVED and REJECTED are final: an order reaches exactly one of them,
// exactly once. PENDING means the order was seen (its lines are stored) but not yet
// decided — a holder died or gave up on contention.
const (
	StatusPending  Status = "PENDING"
	StatusReserved Status = "RESERVED"
	StatusRejected Status = "REJECTED"
)

// Final reports whether s is RESERVED or REJECTED.
func (s Status) Final() bool { return s == StatusReserved || s == StatusRejected }

// Outcome is what ProcessOrder did with an order.
type Outcome struct {
	OrderID   string
	Status    Status // RESERVED or REJECTED
	Duplicate bool   // the order was already final: nothing changed
	Reason    string // why it was rejected (empty when reserved)
}

// Errors of the service. Every error matching ErrBusy or lockcore.ErrLeaseLost is
// transient: nothing was written, retry later (SQS: report the message in
// batchItemFailures).
var (
	// ErrBusy means a lock the operation needs was held by someone else for longer than
	// the wait budget, or too little time was left before the context's deadline.
	ErrBusy = errors.New("shop: busy: lock contended, retry later")
	// ErrInsufficientStock means an adjustment would make the available stock negative.
	ErrInsufficientStock = errors.New("shop: insufficient stock")
)

// Crash points of WithCrashHook.
const (
	// CrashOrderLocked: the batch's orders are known; nothing is recorded or locked yet
	// (the legacy mode: the order item is locked, and PENDING with its lines).
	CrashOrderLocked = "order-locked"
	// CrashStockLocked: a leader holds its stock items (its orders, and those of the
	// waiters, recorded on them) and read the stock; the decision transaction has not
	// been sent (the legacy mode: the order and its SKUs are locked).
	CrashStockLocked = "stock-locked"
	// CrashAdjustmentLocked: ApplyAdjustment holds the SKU lock; nothing is written yet.
	CrashAdjustmentLocked = "adjustment-locked"
)

// Tables names the application's tables (template.yaml: LockTable, OrdersTable,
// InventoryTable).
type Tables struct {
	Locks, Orders, Inventory string
}

// MetricsSink receives the service's metrics; *emf.Logger satisfies it.
type MetricsSink interface {
	PutMetric(name string, value float64, unit emf.Unit)
}

// Metric names.
const (
	// Lock metrics, emitted through lockcore's Observer (see lockObserver).
	MetricLockWait   = "LockWait"       // ms one acquisition waited (order lock, each SKU lock)
	MetricLockHold   = "LockHold"       // ms a lease was held until its release
	MetricContention = "LockContention" // acquisitions given up on a held lock (the operation fails with ErrBusy)
	MetricLeaseLost  = "LeaseLost"      // leases found lost (by a heartbeat, a refused write's release, ...)
	// Business metrics.
	MetricOrdersReserved       = "OrdersReserved"
	MetricOrdersRejected       = "OrdersRejected"
	MetricOrdersDuplicate      = "OrdersDuplicate"
	MetricAdjustmentsApplied   = "AdjustmentsApplied"
	MetricAdjustmentsDuplicate = "AdjustmentsDuplicate"
	MetricAdjustmentsRejected  = "AdjustmentsRejected"
)

type metricsKey struct{}

// ContextWithMetrics returns a context whose operations report their metrics to m
// instead of the service's sink (a per-invocation EMF logger, say).
func ContextWithMetrics(ctx context.Context, m MetricsSink) context.Context {
	return context.WithValue(ctx, metricsKey{}, m)
}

// Defaults of the service.
const (
	DefaultLease = 10 * time.Second
	// DefaultWaitBudget is the wait budget of the legacy mode (WithLegacyWait): give up
	// after 1s and let SQS redeliver.
	DefaultWaitBudget   = time.Second
	DefaultTakeoverSkew = 2 * time.Second
	// NoDeadlineWait is how long an operation whose context has no deadline waits for
	// held locks (outside Lambda: tests, tools).
	NoDeadlineWait = 10 * time.Second
	// MinRemaining is the least time before the context's deadline an operation needs
	// to start; with less it fails with ErrBusy at once. It is also the least safety
	// margin (see SafetyMargin).
	MinRemaining = 500 * time.Millisecond
	// AdjustmentMarkerRetention is how long an ADJ#<id> marker (and so the idempotency
	// of its adjustment) is kept before TTL removes it.
	AdjustmentMarkerRetention = 30 * 24 * time.Hour
)

// DB is the part of the DynamoDB client the service uses (*dynamodb.Client satisfies
// it): what lockcore needs, BatchGetItem, with which ProcessOrders reads the orders of a
// batch in one request, and Scan, with which the janitor's sweep looks for abandoned
// stock locks (AbandonedStock).
type DB interface {
	lockcore.DynamoDB
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

var _ DB = (*dynamodb.Client)(nil)

// Service reserves stock for orders and applies stock adjustments under turnstile locks.
// It is safe for concurrent use.
type Service struct {
	db       DB
	t        Tables
	owner    string
	lease    time.Duration
	wait     time.Duration // < 0: derived from the deadline (the default)
	legacy   bool
	skew     time.Duration
	wall     bool // WallClockTakeover (WithTakeoverSkew) instead of observation
	clock    lockcore.Clock
	metrics  MetricsSink
	log      *slog.Logger
	crash    func(point string) error
	lockOpts []lockcore.Option
	lockObs  []lockcore.Observer // WithLockObserver's, after the service's own

	holdObs []func(ctx context.Context, e HoldEvent) // WithHoldObserver's

	busyMu sync.Mutex
	busy   map[string]time.Time // stock items found held lately (sawBusy)

	sweepMu  sync.Mutex
	sweepIL  *lockcore.ItemLocker // the janitor's stock locker (sweepLocker)
	sweepAge time.Duration

	// The lockers are built once (they keep what they learn, such as takeover
	// observations, for the life of the container); each acquisition passes its lease.
	orders *lockcore.ItemLocker // the legacy mode's order locks; nil without an orders table
	stock  *lockcore.ItemLocker // the stock items' locking read; nil without an inventory table
	skus   *lockcore.Mutex      // the lock table's SKU locks: the legacy mode's (WithLegacyWait); nil without one
}

// Option configures a Service.
type Option func(*Service) error

// WithOwner names this client in lock rows. Every process (Lambda execution environment)
// needs its own name; the default is "shop-<hostname>-<random>".
func WithOwner(owner string) Option {
	return func(s *Service) error {
		if owner == "" {
			return errors.New("shop: owner must not be empty")
		}
		s.owner = owner
		return nil
	}
}

// WithLease sets the longest lease an operation takes (default 10s). Each operation
// shortens it to the time left before its context's deadline (the Lambda invocation's),
// but never below min(lease, 3s), so a holder that dies with its invocation frees its
// locks soon. Heartbeats renew leases at half their length while an operation runs.
func WithLease(d time.Duration) Option {
	return func(s *Service) error {
		if d <= 0 {
			return fmt.Errorf("shop: lease must be positive, got %s", d)
		}
		s.lease = d
		return nil
	}
}

// WithWaitBudget caps how long an operation waits for held locks in total before giving
// up with ErrBusy (0 = do not wait). By default there is no cap but the deadline: an
// operation waits until SafetyMargin before its context's deadline (the Lambda
// invocation's), because the locks are fair (FIFO) and a waiter's turn comes, while a
// message returned to SQS pays a redelivery, a cold read of everything and, with
// maxReceiveCount, a step towards the dead-letter queue.
func WithWaitBudget(d time.Duration) Option {
	return func(s *Service) error {
		if d < 0 {
			return fmt.Errorf("shop: wait budget must not be negative, got %s", d)
		}
		s.wait = d
		return nil
	}
}

// WithLegacyWait restores the behaviour before waits were derived from the deadline, for
// comparison (the demo's -legacy): an operation waits at most WithWaitBudget (default 1s,
// and at most a quarter of the time left) and then gives up with ErrBusy, so that the
// message goes back to SQS; orders are decided one by one, each under its order item's
// lock and its SKUs' lock-table rows (Mutex, Tables.Locks), and adjustments lock those
// rows too. The order processor's handler then also processes a batch order by order
// (see functions/orderprocessor/handler.WithLegacy). The two modes must not share tables.
func WithLegacyWait() Option {
	return func(s *Service) error { s.legacy = true; return nil }
}

// Legacy reports whether the service runs in the legacy mode (WithLegacyWait).
func (s *Service) Legacy() bool { return s.legacy }

// WithTakeoverSkew makes locks be taken over by wall clock (lockcore.WallClockTakeover)
// with this clock-skew allowance: a lease whose recorded end lies more than skew in the
// past may be taken. It is for tests that stage dead holders; the default is
// lockcore's observation takeover (a waiter takes a lease over after watching it
// unchanged for its full length), which no clock skew can break. Waiters now wait for
// most of their invocation, which is longer than any lease (leases are at most the time
// left, and WithLease caps them), so a dead holder's locks are freed by the first waiter
// that watched them for a lease. The fair locks may refuse wall-clock takeover.
func WithTakeoverSkew(d time.Duration) Option {
	return func(s *Service) error {
		if d < 0 {
			return fmt.Errorf("shop: takeover skew must not be negative, got %s", d)
		}
		s.skew, s.wall = d, true
		return nil
	}
}

// WithClock replaces the clock of the service and its locks.
func WithClock(c lockcore.Clock) Option {
	return func(s *Service) error {
		if c == nil {
			return errors.New("shop: clock must not be nil")
		}
		s.clock = c
		return nil
	}
}

// WithMetrics sets the default metrics sink (see ContextWithMetrics for a per-call one).
func WithMetrics(m MetricsSink) Option {
	return func(s *Service) error { s.metrics = m; return nil }
}

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(s *Service) error {
		if l == nil {
			return errors.New("shop: logger must not be nil")
		}
		s.log = l
		return nil
	}
}

// WithCrashHook installs a fault-injection hook for demos and chaos tests. The service
// calls it at the named points (CrashOrderLocked, CrashStockLocked,
// CrashAdjustmentLocked); when it returns an error the operation returns that error at
// once, like a holder that died: it releases no lock and writes nothing more, and the
// heartbeats of its leases stop, so the leases expire and are taken over (or removed by
// TTL and reported by the janitor).
func WithCrashHook(hook func(point string) error) Option {
	return func(s *Service) error { s.crash = hook; return nil }
}

// WithLockOptions passes extra options to the service's lockcore clients (after the
// service's own, so they win): WithTTLGrace, WithBackoff, WithMinLease, ...
func WithLockOptions(opts ...lockcore.Option) Option {
	return func(s *Service) error { s.lockOpts = append(s.lockOpts, opts...); return nil }
}

// WithLockObserver adds an observer of the service's lock events (lockcore.Observer),
// called after the service's own, which turns them into the lock metrics. Passing
// lockcore.WithObserver through WithLockOptions would replace that one and silence the
// metrics; this adds to it. The demo uses it to time each hold of a hot SKU's lock.
func WithLockObserver(o lockcore.Observer) Option {
	return func(s *Service) error { s.lockObs = append(s.lockObs, o); return nil }
}

// HoldEvent is one critical section on a SKU's stock item: from the locking read that
// took it to the write that released it (the decision transaction, or an adjustment's).
type HoldEvent struct {
	SKU    string
	Held   time.Duration
	Orders int  // orders decided by the write that released it
	Lost   bool // the lease was lost: the write was refused
}

// WithHoldObserver adds an observer of the critical sections on stock items (see
// HoldEvent). The stock items are released by the service's own transactions, which
// lockcore's Observer does not see (its Released event is for lockcore's own releases);
// the demo times the hottest SKU's lock with it.
func WithHoldObserver(f func(ctx context.Context, e HoldEvent)) Option {
	return func(s *Service) error {
		if f != nil {
			s.holdObs = append(s.holdObs, f)
		}
		return nil
	}
}

// NewService returns a Service on the given tables. Orders and Inventory are required only
// by the operations that use them (the inventory updater has no orders table); Locks only
// by the legacy mode (WithLegacyWait), whose SKU locks are lock-table rows — the others
// lock the stock items themselves.
func NewService(db DB, t Tables, opts ...Option) (*Service, error) {
	if db == nil {
		return nil, errors.New("shop: db must not be nil")
	}
	s := &Service{
		db: db, t: t, lease: DefaultLease, wait: -1, skew: DefaultTakeoverSkew,
		clock: lockcore.SystemClock, log: slog.Default(),
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(s); err != nil {
			return nil, err
		}
	}
	if s.legacy && s.wait < 0 {
		s.wait = DefaultWaitBudget
	}
	if s.legacy && t.Locks == "" {
		return nil, fmt.Errorf("shop: tables: the legacy mode needs Locks, got %+v", t)
	}
	if s.owner == "" {
		host, _ := os.Hostname()
		if host == "" {
			host = "host"
		}
		s.owner = "shop-" + host + "-" + randomHex(4)
	}
	if err := s.buildLockers(); err != nil {
		return nil, err
	}
	return s, nil
}

// Tables returns the service's tables.
func (s *Service) Tables() Tables { return s.t }

// Owner returns the owner name the service's locks carry.
func (s *Service) Owner() string { return s.owner }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *Service) now() time.Time { return s.clock.Now() }

func (s *Service) sink(ctx context.Context) MetricsSink {
	if m, ok := ctx.Value(metricsKey{}).(MetricsSink); ok && m != nil {
		return m
	}
	return s.metrics
}

func (s *Service) count(ctx context.Context, name string) {
	if m := s.sink(ctx); m != nil {
		m.PutMetric(name, 1, emf.Count)
	}
}

func (s *Service) millis(ctx context.Context, name string, d time.Duration) {
	if m := s.sink(ctx); m != nil {
		m.PutMetric(name, float64(d.Microseconds())/1000, emf.Milliseconds)
	}
}

// SafetyMargin is the time an operation keeps before its context's deadline when it
// waits for locks: a tenth of the time left (3s of a 30s invocation), at least
// MinRemaining. It pays for writing the decisions, releasing the locks and returning the
// batch response before Lambda's timeout kills the invocation.
func SafetyMargin(remaining time.Duration) time.Duration {
	return max(MinRemaining, remaining/10)
}

// budget derives the lease and the wait budget of one operation from the context's
// deadline: the lease is the time left (at least min(WithLease, 3s), at most WithLease)
// — the holder cannot outlive its invocation, so its locks need not outlive it either —
// and the wait is the time left less SafetyMargin, capped by WithWaitBudget. In the
// legacy mode the wait is WithWaitBudget (1s), at most a quarter of the time left.
func (s *Service) budget(ctx context.Context) (lease, wait time.Duration, err error) {
	lease, wait = s.lease, s.wait
	dl, ok := ctx.Deadline()
	if !ok {
		if wait < 0 {
			wait = NoDeadlineWait
		}
		return lease, wait, nil
	}
	rem := time.Until(dl)
	if rem < MinRemaining {
		return 0, 0, fmt.Errorf("%w: only %s left before the deadline", ErrBusy, rem.Round(time.Millisecond))
	}
	floor := min(s.lease, 3*time.Second)
	lease = max(floor, min(lease, rem)).Truncate(time.Millisecond)
	switch {
	case s.legacy:
		wait = min(wait, rem/4)
	case wait < 0:
		wait = rem - SafetyMargin(rem)
	default:
		wait = min(wait, rem-SafetyMargin(rem))
	}
	return lease, max(wait, 0), nil
}

func waitPolicy(d time.Duration) lockcore.WaitPolicy {
	if d <= 0 {
		return lockcore.NoWait()
	}
	return lockcore.WaitUpTo(d)
}

// buildLockers builds the stock items' locker, the legacy mode's order item locker and
// SKU mutex, with s.lease as the longest lease (each acquisition passes its own,
// lockcore.LeaseDuration).
func (s *Service) buildLockers() error {
	takeover := lockcore.ObserveTakeover()
	if s.wall {
		takeover = lockcore.WallClockTakeover(s.skew)
	}
	opts := append([]lockcore.Option{
		lockcore.WithOwner(s.owner),
		lockcore.WithLease(s.lease),
		lockcore.WithMinLease(min(s.lease, lockcore.DefaultMinLease)),
		lockcore.WithClock(s.clock),
		lockcore.WithTakeover(takeover),
		// Waits now last up to the whole invocation: poll up to once a second, not four
		// times, or the waiters' polls (and their capacity) dominate a hot SKU's traffic
		// and slow its holder. Measured with the demo at 40 concurrent invocations: p99
		// order latency 74s -> 20s, calls per order 22 -> 15.
		lockcore.WithBackoff(20*time.Millisecond, time.Second),
		lockcore.WithObserver(chainObservers(append([]lockcore.Observer{s.lockObserver()}, s.lockObs...))),
	}, s.lockOpts...)
	var err error
	if s.t.Orders != "" {
		// An order lock is contended only by another copy of the same message, whose
		// holder may wait seconds for its SKUs: poll it gently (the caller's options
		// still win).
		oopts := append([]lockcore.Option{}, opts[:len(opts)-len(s.lockOpts)]...)
		oopts = append(oopts, lockcore.WithBackoff(50*time.Millisecond, time.Second))
		oopts = append(oopts, s.lockOpts...)
		if s.orders, err = lockcore.NewItemLocker(s.db, s.t.Orders, oopts...); err != nil {
			return fmt.Errorf("shop: %w", err)
		}
	}
	if s.t.Inventory != "" {
		// A stock item is locked by the locking read that reads it (and the waiting orders
		// recorded on it); the decision transaction releases it.
		if s.stock, err = lockcore.NewItemLocker(s.db, s.t.Inventory, opts...); err != nil {
			return fmt.Errorf("shop: %w", err)
		}
	}
	if s.t.Locks != "" {
		if s.skus, err = lockcore.NewMutex(s.db, s.t.Locks, opts...); err != nil {
			return fmt.Errorf("shop: %w", err)
		}
	}
	return nil
}

// lockObserver turns lockcore's events into the service's lock metrics, on the sink of
// the context that caused them (the invocation's).
func (s *Service) lockObserver() lockcore.Observer {
	return lockcore.Observer{
		Acquired: func(ctx context.Context, e lockcore.AcquireEvent) { s.millis(ctx, MetricLockWait, e.Wait) },
		AcquireFailed: func(ctx context.Context, e lockcore.AcquireEvent) {
			// A take that does not wait (ProcessOrders' first try of a stock item, a
			// leader's try of one more) finds it held as an answer: the orders wait on.
			if probe, _ := ctx.Value(probeKey{}).(bool); errors.Is(e.Err, lockcore.ErrLockHeld) && !probe {
				s.count(ctx, MetricContention)
			}
		},
		Released:  func(ctx context.Context, e lockcore.LeaseEvent) { s.millis(ctx, MetricLockHold, e.Held) },
		LeaseLost: func(ctx context.Context, e lockcore.LeaseEvent) { s.count(ctx, MetricLeaseLost) },
	}
}

// chainObservers returns an observer that passes each event to every one of obs, in
// order.
func chainObservers(obs []lockcore.Observer) lockcore.Observer {
	if len(obs) == 1 {
		return obs[0]
	}
	return lockcore.Observer{
		Acquired:       chain(obs, func(o lockcore.Observer) func(context.Context, lockcore.AcquireEvent) { return o.Acquired }),
		AcquireFailed:  chain(obs, func(o lockcore.Observer) func(context.Context, lockcore.AcquireEvent) { return o.AcquireFailed }),
		Released:       chain(obs, func(o lockcore.Observer) func(context.Context, lockcore.LeaseEvent) { return o.Released }),
		LeaseLost:      chain(obs, func(o lockcore.Observer) func(context.Context, lockcore.LeaseEvent) { return o.LeaseLost }),
		UnknownOutcome: chain(obs, func(o lockcore.Observer) func(context.Context, lockcore.LeaseEvent) { return o.UnknownOutcome }),
	}
}

// chain calls the picked function of each observer that has one (nil if none has).
func chain[E any](obs []lockcore.Observer, pick func(lockcore.Observer) func(context.Context, E)) func(context.Context, E) {
	var fs []func(context.Context, E)
	for _, o := range obs {
		if f := pick(o); f != nil {
			fs = append(fs, f)
		}
	}
	if len(fs) == 0 {
		return nil
	}
	return func(ctx context.Context, e E) {
		for _, f := range fs {
			f(ctx, e)
		}
	}
}

// crashAt runs the crash hook; a non-nil result means "die here".
func (s *Service) crashAt(point string) error {
	if s.crash == nil {
		return nil
	}
	if err := s.crash(point); err != nil {
		return fmt.Errorf("shop: crashed at %s: %w", point, err)
	}
	return nil
}

// cleanupCtx is a context for releasing locks after the caller's context ended.
func cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}

// busy wraps a lock error as ErrBusy.
func busy(what string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrBusy, what, err)
}

// txReasons returns the cancellation reason codes of a failed transaction (nil if err is
// not a TransactionCanceledException).
func txReasons(err error) []string {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return nil
	}
	codes := make([]string, len(tce.CancellationReasons))
	for i, r := range tce.CancellationReasons {
		if r.Code != nil {
			codes[i] = *r.Code
		}
	}
	return codes
}

// NewOwner returns a fresh owner name "<prefix>-<random>" for one process (a Lambda
// execution environment): lock owners must differ between processes.
func NewOwner(prefix string) string {
	if prefix == "" {
		prefix = "shop"
	}
	return prefix + "-" + randomHex(6)
}

// TablesFromEnv reads the table names from LOCK_TABLE, ORDERS_TABLE and INVENTORY_TABLE
// (the functions' environment in template.yaml).
func TablesFromEnv() Tables {
	return Tables{Locks: os.Getenv("LOCK_TABLE"), Orders: os.Getenv("ORDERS_TABLE"), Inventory: os.Getenv("INVENTORY_TABLE")}
}
