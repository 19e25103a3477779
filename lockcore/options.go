package lockcore

import (
	"fmt"
	"math"
	"os"
	"reflect"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Clock tells time. lockcore measures takeover observations and local lease validity as
// differences of Now (Go's time.Time carries a monotonic reading, so a clock that adds a
// constant offset to the wall time keeps exact differences), and uses Now's wall time for
// the wall-clock takeover mode and the TTL attribute.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// SystemClock is the default Clock.
var SystemClock Clock = systemClock{}

// TakeoverMode decides when a waiter may take a lease whose holder stopped renewing it.
type TakeoverMode struct {
	wallClock bool
	skew      time.Duration
}

// ObserveTakeover is the default, clock-skew-safe mode: a waiter takes over a lease only
// after it has seen the same lease version (lease id and revision) unchanged for the
// holder's full lease duration on its own monotonic clock. Wall clocks never matter; the
// only assumption is that clocks tick at about the same rate. The price is that a waiter
// arriving at an abandoned lock waits a full lease before taking it.
func ObserveTakeover() TakeoverMode { return TakeoverMode{} }

// WallClockTakeover lets a waiter take a lease as soon as the holder's recorded lease end
// plus skew lies in the past by the waiter's wall clock. It is faster for a waiter that
// arrives late, and safe only while every two clients' wall clocks differ by less than
// skew. A Mutex records the lease end of the served ticket with every acquisition served
// at once, handoff, skip and heartbeat, naming the ticket it belongs to; a holder that
// entered by a handoff ends its own validity at the lease end written for it. Where no
// lease end is recorded for the served ticket, Mutex waiters fall back to observation.
// TicketLock supports ObserveTakeover only.
func WallClockTakeover(skew time.Duration) TakeoverMode {
	return TakeoverMode{wallClock: true, skew: skew}
}

// String names the mode.
func (m TakeoverMode) String() string {
	if m.wallClock {
		return fmt.Sprintf("wallclock(skew=%s)", m.skew)
	}
	return "observe"
}

// Defaults.
const (
	DefaultLease       = 10 * time.Second
	DefaultMinLease    = 3 * time.Second
	DefaultTTLGrace    = 15 * time.Minute
	DefaultRetention   = 24 * time.Hour
	DefaultBackoffBase = 20 * time.Millisecond
	DefaultBackoffCap  = time.Second
	// MinHeartbeat is the shortest heartbeat interval WithHeartbeat accepts: each beat is a write.
	MinHeartbeat = 10 * time.Millisecond
)

// config holds the options shared by every strategy.
type config struct {
	strategy    Strategy        // set by clientConfig
	names       TableAttributes // the lock table's key and TTL attribute names
	namesSet    bool
	lease       time.Duration
	minLease    time.Duration
	heartbeat   time.Duration // 0 = no automatic heartbeat
	hbSet       bool
	owner       string
	clock       Clock
	takeover    TakeoverMode
	ttlGrace    time.Duration
	retention   time.Duration
	backoffBase time.Duration
	backoffCap  time.Duration
	wait        WaitPolicy
	hooks       testHooks
	seen        *observations
	server      *serverClock
	observer    Observer
	bypass      *bypassLot // WithBypass (nil: off)

	// Strategy options, refused by the other strategies.
	strategyOnly map[string]Strategy // option field → the strategy it belongs to
	item         struct {
		attrs   *ItemAttributes
		require bool
	}
	versioned struct {
		attr        string
		maxAttempts int
	}
}

// only records that option field belongs to strategy s.
func (c *config) only(field string, s Strategy) {
	if c.strategyOnly == nil {
		c.strategyOnly = map[string]Strategy{}
	}
	c.strategyOnly[field] = s
}

// testHooks lets tests inject delays at precise points of a protocol.
type testHooks struct {
	// afterTicket runs in the FIFO queue, the Mutex and the TicketLock after a ticket was
	// issued and before the caller looks at the queue.
	afterTicket func(key string, ticket int64)
	// beforeIssue runs in the FIFO queue before the transaction that tries to issue
	// ticket is sent.
	beforeIssue func(key string, ticket int64)
	// rowBytes, when set, replaces DynamoDB's item size limit in the Mutex's reasoning
	// about room in its row (so that tests can fill a row with a few KB).
	rowBytes int
	// waitRoom runs when a Mutex take waits for room in a full row.
	waitRoom func(key string)
	// entryID, when set, draws a TicketLock's entry ids instead of compactID (so that
	// tests can make two takes collide).
	entryID func() string
}

// Option configures a Mutex, TicketLock, Queue, ItemLocker or Versioned store. Options are validated
// by the constructor, which returns an *OptionError naming the field.
type Option func(*config) error

// WithLease sets the lease duration (default 10s). It must be at least the minimum lease
// (3s unless changed with WithMinLease).
func WithLease(d time.Duration) Option {
	return func(c *config) error { c.lease = d; return nil }
}

// WithMinLease changes the smallest lease WithLease accepts (default 3s). Short leases
// make takeover fast but let a GC pause or a slow network cost the lease; lower it only
// in tests or for very short critical sections.
func WithMinLease(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalidOption("minLease", "must be positive, got %s", d)
		}
		c.minLease = d
		return nil
	}
}

// WithHeartbeat sets the automatic renewal interval: at least MinHeartbeat and shorter
// than the lease. Zero disables automatic heartbeats (call Lease.Renew yourself).
// Default: half the lease.
func WithHeartbeat(d time.Duration) Option {
	return func(c *config) error { c.heartbeat = d; c.hbSet = true; return nil }
}

// WithOwner names this client in lock rows (default "<hostname>-<pid>-<random>"). The owner
// name is checked on release and renewal, so it must differ between clients.
func WithOwner(owner string) Option {
	return func(c *config) error {
		if owner == "" {
			return invalidOption("owner", "must not be empty")
		}
		if len(owner) > 256 {
			return invalidOption("owner", "must be at most 256 bytes, got %d", len(owner))
		}
		c.owner = owner
		return nil
	}
}

// WithClock replaces the clock (tests, skew simulation).
func WithClock(clk Clock) Option {
	return func(c *config) error {
		if clk == nil {
			return invalidOption("clock", "must not be nil")
		}
		if v := reflect.ValueOf(clk); v.Kind() == reflect.Pointer && v.IsNil() {
			return invalidOption("clock", "must not be a nil %T", clk)
		}
		c.clock = clk
		return nil
	}
}

// WithTakeover selects the takeover mode (default ObserveTakeover).
func WithTakeover(m TakeoverMode) Option {
	return func(c *config) error {
		if m.wallClock && m.skew < 0 {
			return invalidOption("takeover", "skew allowance must not be negative, got %s", m.skew)
		}
		c.takeover = m
		return nil
	}
}

// WithTTLGrace sets how long after its lease end a held row's TTL attribute (expiresAt)
// lies (default 15m). DynamoDB's TTL deletes on the server's clock, and lockcore counts
// TTLs from the later of the local clock and the server's clock as seen in responses
// (before the first response: at least the retention period ahead), so a holder whose
// clock runs slow keeps its row. The grace covers what remains: the Date header's
// one-second resolution and a local clock stepped back between a response and a
// renewal. Zero is allowed (tests of TTL behaviour).
func WithTTLGrace(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 {
			return invalidOption("ttlGrace", "must not be negative, got %s", d)
		}
		c.ttlGrace = d
		return nil
	}
}

// WithRetention sets how long a released lock row is kept before TTL removes it
// (default 24h). Keeping the row keeps its fencing counter.
func WithRetention(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return invalidOption("retention", "must be positive, got %s", d)
		}
		c.retention = d
		return nil
	}
}

// WithBackoff sets the retry backoff: capped exponential with full jitter, starting at
// base and never above max (defaults 20ms and 1s). It paces retries after refused or
// failed writes and reads, and a Mutex waiting on a row of the previous release; waiters
// in a queue otherwise read when their position and the queue's pace say their turn is
// near. The cap is also the least time the wait policy gives transient failures (see
// WaitPolicy).
func WithBackoff(base, max time.Duration) Option {
	return func(c *config) error {
		if base <= 0 {
			return invalidOption("backoff.base", "must be positive, got %s", base)
		}
		if max < base {
			return invalidOption("backoff.max", "must be at least base (%s), got %s", base, max)
		}
		c.backoffBase, c.backoffCap = base, max
		return nil
	}
}

// WithWait sets the default wait policy of Acquire (default WaitForever: wait until the
// context ends).
func WithWait(p WaitPolicy) Option {
	return func(c *config) error {
		if err := p.validate(); err != nil {
			return err
		}
		c.wait = p
		return nil
	}
}

// clientConfig validates a constructor's arguments and options for strategy s.
func clientConfig(db DynamoDB, table string, s Strategy, opts []Option) (*config, error) {
	if db == nil {
		return nil, invalidOption("db", "must not be nil")
	}
	if v := reflect.ValueOf(db); v.Kind() == reflect.Pointer && v.IsNil() {
		return nil, invalidOption("db", "must not be a nil %T", db)
	}
	if table == "" {
		return nil, invalidOption("table", "must not be empty")
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	c.strategy = s
	if c.namesSet && s == StrategyItem {
		return nil, invalidOption("WithTableAttributes", "applies to the lock table's strategies (Mutex, TicketLock, Queue), not to %s, which locks items of your own table", s)
	}
	if c.bypass != nil && s != StrategyMutex && s != StrategyTicket {
		return nil, invalidOption("bypass", "applies to the Mutex and the TicketLock, not to %s", s)
	}
	for field, owner := range c.strategyOnly {
		if owner != s {
			return nil, invalidOption(field, "applies to the %s strategy only, not to %s", owner, s)
		}
	}
	return c, nil
}

func newConfig(opts []Option) (*config, error) {
	host, _ := os.Hostname()
	if host == "" {
		host = "host"
	}
	c := &config{
		names:       DefaultTableAttributes,
		lease:       DefaultLease,
		minLease:    DefaultMinLease,
		owner:       fmt.Sprintf("%s-%d-%s", host, os.Getpid(), randomHex(2)),
		clock:       SystemClock,
		ttlGrace:    DefaultTTLGrace,
		retention:   DefaultRetention,
		backoffBase: DefaultBackoffBase,
		backoffCap:  DefaultBackoffCap,
		wait:        WaitForever(),
		seen:        &observations{},
	}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(c); err != nil {
			return nil, err
		}
	}
	c.server = serverClockOf(c.clock)
	if c.lease <= 0 {
		return nil, invalidOption("lease", "must be positive, got %s", c.lease)
	}
	if c.lease < c.minLease {
		return nil, invalidOption("lease", "must be at least %s (see WithMinLease), got %s", c.minLease, c.lease)
	}
	if c.lease%time.Millisecond != 0 {
		return nil, invalidOption("lease", "must be a whole number of milliseconds, got %s", c.lease)
	}
	if c.ttlGrace > math.MaxInt64-c.lease {
		// Rows' TTLs lie a lease and the grace ahead: the sum must not wrap around.
		return nil, invalidOption("ttlGrace", "plus the lease (%s) must fit a time.Duration, got %s", c.lease, c.ttlGrace)
	}
	if !c.hbSet {
		c.heartbeat = c.lease / 2
	}
	if c.heartbeat < 0 {
		return nil, invalidOption("heartbeat", "must not be negative, got %s", c.heartbeat)
	}
	if c.hbSet && c.heartbeat > 0 && c.heartbeat < MinHeartbeat {
		return nil, invalidOption("heartbeat", "must be 0 (off) or at least %s, got %s", MinHeartbeat, c.heartbeat)
	}
	if c.heartbeat >= c.lease {
		return nil, invalidOption("heartbeat", "must be shorter than the lease (%s), got %s", c.lease, c.heartbeat)
	}
	return c, nil
}

// WaitPolicy says how long Acquire waits for a held lock.
//
// Valid forms:
//
//	NoWait()        fail at once with ErrLockHeld
//	WaitUpTo(d)     wait at most d, then fail with ErrWaitTimeout (d >= 0; WaitUpTo(0) is NoWait)
//	WaitForever()   wait until the context ends
//
// A context deadline always wins over the policy. The policy also bounds retries of
// transient failures (throttling, conflicting transactions, unknown outcomes) while the
// lock is being asked for: after the policy's wait, and at least the client's backoff
// cap (WithBackoff), Acquire returns an error wrapping the last one (for throttling,
// the SDK's *types.ProvisionedThroughputExceededException or ThrottlingException), not
// ErrLockHeld — nobody may hold the lock.
type WaitPolicy struct {
	max     time.Duration
	forever bool
	set     bool
}

// NoWait fails at once when the lock is held.
func NoWait() WaitPolicy { return WaitPolicy{set: true} }

// WaitUpTo waits at most d for the lock.
func WaitUpTo(d time.Duration) WaitPolicy { return WaitPolicy{max: d, set: true} }

// WaitForever waits until the context ends.
func WaitForever() WaitPolicy { return WaitPolicy{forever: true, set: true} }

func (p WaitPolicy) validate() error {
	if !p.set {
		return invalidOption("wait", "zero WaitPolicy; use NoWait, WaitUpTo or WaitForever")
	}
	if !p.forever && p.max < 0 {
		return invalidOption("wait", "WaitUpTo duration must not be negative, got %s", p.max)
	}
	return nil
}

// String describes the policy.
func (p WaitPolicy) String() string {
	switch {
	case p.forever:
		return "wait-forever"
	case p.max == 0:
		return "no-wait"
	default:
		return fmt.Sprintf("wait-up-to(%s)", p.max)
	}
}

// AcquireOption adjusts one acquisition. Valid forms:
//
//	NoWait(), WaitUpTo(d), WaitForever()   the wait policy of this call
//	Namespace(ns)                          an independent lock on the same key
//	Data(b)                                bytes stored with the lease (Mutex only)
//	LeaseDuration(d)                       this acquisition's lease instead of the client's
//	MinPollInterval(d)                     a floor under a waiter's reads
//	SetIfAbsent(attrs)                     attributes created with the item (ItemLocker only)
//
// A strategy refuses an option it cannot honour with an *OptionError.
type AcquireOption interface {
	applyAcquire(*acquireConfig) error
}

type acquireFunc func(*acquireConfig) error

func (f acquireFunc) applyAcquire(a *acquireConfig) error { return f(a) }

type acquireConfig struct {
	wait      WaitPolicy
	namespace string
	nsSet     bool // Namespace was given (a Queue's default differs)
	data      []byte
	lease     time.Duration
	heartbeat time.Duration
	urgent    bool                            // the caller holds other locks meanwhile (AcquireAll): never sleep far
	init      map[string]types.AttributeValue // SetIfAbsent (ItemLocker only)
	minPoll   time.Duration                   // MinPollInterval
	seen      map[string]types.AttributeValue // Seen (ItemLocker only): the item as the caller read it
	seenAt    time.Time                       // and when that answer came
}

// pollFloor is the shortest sleep between a waiter's reads: MinPollInterval, at most
// half of lease (the served holder's lease, so that a stalled holder is still skipped).
func (a *acquireConfig) pollFloor(lease time.Duration) time.Duration {
	return min(a.minPoll, lease/2)
}

// applyAcquire makes a WaitPolicy an AcquireOption: Acquire(ctx, key, WaitUpTo(d)).
func (p WaitPolicy) applyAcquire(a *acquireConfig) error {
	if err := p.validate(); err != nil {
		return err
	}
	a.wait = p
	return nil
}

// Wait overrides the client's wait policy for this call. A WaitPolicy is itself an
// AcquireOption, so Wait(WaitUpTo(d)) and WaitUpTo(d) are the same; Wait remains for
// code written before.
func Wait(p WaitPolicy) AcquireOption { return p }

// LeaseDuration gives this acquisition a lease of d instead of the client's (WithLease):
// for code that builds its clients once and derives each lease from a deadline (a
// Lambda's remaining time, say). The same rules apply: at least the minimum lease, whole
// milliseconds, longer than the heartbeat interval when one is set. Clients of one
// TicketLock must agree on the lease while it is in use.
//
// Options follow one rule: a client option (set once, for every call) is WithX, and the
// per-call option of the same setting is X (WithWait and Wait, WithObserver has none);
// the lease is the one exception, LeaseDuration, because Lease is the lease's type.
func LeaseDuration(d time.Duration) AcquireOption {
	return acquireFunc(func(a *acquireConfig) error { a.lease = d; return nil })
}

// Namespace selects an independent lock on the same key (the lock row's sort key).
// Default "lock" ("queue" for a Queue). Several namespaces give several independent
// locks on one entity. A namespace is non-empty UTF-8 without '#' (the separator of the
// strategies' row suffixes), so locks of different namespaces and strategies never
// share a row.
func Namespace(ns string) AcquireOption {
	return acquireFunc(func(a *acquireConfig) error { a.namespace, a.nsSet = ns, true; return nil })
}

// Data stores opaque bytes with the lock (at most 64 KiB), readable by Get.
//
// Keep it small. A Mutex keeps each waiter's data in its entry on the lock row until
// its turn, so the row grows by the data of every waiter: every write to the row is
// charged by the row's size (1 WCU per KB), and DynamoDB refuses items past 400 KB. A
// waiter whose data would leave the row less than 2 KiB short of that limit (room the
// holder's heartbeats and handoffs need) does not queue: it waits for room, reading the
// full row, and loses its place in line to waiters that arrive meanwhile — about six
// waiters with 64 KiB each fill a row. An id or two (the shop stores its batch's order
// ids) is what it is for.
func Data(b []byte) AcquireOption {
	return acquireFunc(func(a *acquireConfig) error {
		if len(b) > 64<<10 {
			return invalidOption("data", "must be at most 64 KiB, got %d bytes", len(b))
		}
		a.data = b
		return nil
	})
}

// SetIfAbsent makes an ItemLocker's Acquire write attrs in the same UpdateItem that takes
// the lock, each attribute only where the item does not have it yet (if_not_exists): to
// create an item in its first state as it is locked, without a second write. An
// acquisition that has to queue writes them only once the lock is its own (in the
// renewal that claims the handed-over lease, before Acquire returns, and only when one
// is missing): a waiter must not change an item another client holds — that holder may
// have read the attribute absent, or removed it. An existing attribute is never changed.
// attrs may not name the item's key or lock attributes, nor be empty; its names are
// top-level attributes (no '.', '[' or ']'); only an ItemLocker takes it.
//
//	lease, err := items.Acquire(ctx, key, lockcore.SetIfAbsent(map[string]types.AttributeValue{
//		"status": &types.AttributeValueMemberS{Value: "PENDING"},
//	}))
func SetIfAbsent(attrs map[string]types.AttributeValue) AcquireOption {
	return acquireFunc(func(a *acquireConfig) error {
		if len(attrs) == 0 {
			return invalidOption("setIfAbsent", "must name at least one attribute")
		}
		for k, v := range attrs {
			if err := validateAttrName("setIfAbsent", k); err != nil {
				return err // names are top-level attributes, never document paths
			}
			if v == nil {
				return invalidOption("setIfAbsent", "attribute values must be non-nil (%q)", k)
			}
		}
		a.init = attrs
		return nil
	})
}

// Seen tells an ItemLocker's Acquire what the caller already saw of the item: item as a
// read returned it (strongly or eventually consistently) and at, a time on the locker's
// clock (time.Now unless WithClock) no earlier than that read's answer. A caller that
// has watched a held item unchanged for a while — the same holder's lease id and
// lockRev — then has a stalled holder skipped a lease after at, not a lease after it
// queued: the takeover rule is the same (a lease of silence), with the caller's
// watching counted. Its safety rests on lockRev: every renewal and write of a live
// holder moves it, so the same lease id and lockRev seen again means silence since
// then, even when the first read was stale. An item that shows another holder or
// revision when Acquire looks is ignored. ItemLocker only.
func Seen(item map[string]types.AttributeValue, at time.Time) AcquireOption {
	return acquireFunc(func(a *acquireConfig) error {
		if item == nil {
			return invalidOption("seen", "item must not be nil")
		}
		if at.IsZero() {
			return invalidOption("seen", "at must be set: when the read that returned item was answered")
		}
		a.seen, a.seenAt = item, at
		return nil
	})
}

// MinPollInterval makes a waiting Acquire read the lock at most once per d (at most
// half a lease, so that a stalled holder is still taken over). Waiters read when the
// pace of the queue says their turn is near, and a queue that stands is read less and
// less often; d puts a floor under that. It is for a caller to whom noticing its turn up
// to d late costs less than the reads: a duplicate of work another holder is doing, a
// background job. It never makes a wait end early. d must be positive and at most a
// minute. Mutex, TicketLock, Queue and ItemLocker take it.
//
//	lease, err := items.Acquire(ctx, key, lockcore.WaitUpTo(10*time.Second),
//		lockcore.MinPollInterval(250*time.Millisecond))
func MinPollInterval(d time.Duration) AcquireOption {
	return acquireFunc(func(a *acquireConfig) error {
		if d <= 0 || d > time.Minute {
			return invalidOption("minPollInterval", "must be positive and at most 1m, got %s", d)
		}
		a.minPoll = d
		return nil
	})
}

const defaultNamespace = "lock"

func (c *config) acquireConfig(opts []AcquireOption) (*acquireConfig, error) {
	a := &acquireConfig{wait: c.wait, namespace: defaultNamespace, lease: c.lease, heartbeat: c.heartbeat}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.applyAcquire(a); err != nil {
			return nil, err
		}
	}
	if a.init != nil && c.strategy != StrategyItem {
		return nil, invalidOption("setIfAbsent", "applies to an ItemLocker only, not to %s", c.strategy)
	}
	if a.seen != nil && c.strategy != StrategyItem {
		return nil, invalidOption("seen", "applies to an ItemLocker only, not to %s", c.strategy)
	}
	if a.lease != c.lease {
		switch {
		case a.lease < c.minLease:
			return nil, invalidOption("lease", "must be at least %s (see WithMinLease), got %s", c.minLease, a.lease)
		case a.lease%time.Millisecond != 0:
			return nil, invalidOption("lease", "must be a whole number of milliseconds, got %s", a.lease)
		case a.lease > math.MaxInt64-c.ttlGrace:
			return nil, invalidOption("lease", "plus the TTL grace (%s) must fit a time.Duration, got %s", c.ttlGrace, a.lease)
		case !c.hbSet:
			a.heartbeat = a.lease / 2
		case a.heartbeat >= a.lease:
			return nil, invalidOption("lease", "must be longer than the heartbeat interval (%s), got %s", a.heartbeat, a.lease)
		}
	}
	return a, nil
}

// refuse rejects acquire options a strategy cannot honour.
func (a *acquireConfig) refuse(strategy string, namespace, data bool) error {
	if namespace && a.nsSet {
		return invalidOption("namespace", "%s has no namespaces (its lock lives on the item)", strategy)
	}
	if data && a.data != nil {
		return invalidOption("data", "%s stores no data with its leases", strategy)
	}
	return nil
}
