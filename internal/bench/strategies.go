package bench

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// Env is what a strategy's workers talk to in one run.
type Env struct {
	Lock      *CountingDB // the lock's own calls
	Data      *CountingDB // the critical section's calls
	LockTable string      // LockTable of template.yaml (pk/sk strings)
	DataTable string      // InventoryTable of template.yaml (pk/sk strings)
}

// Tuning adjusts a strategy for a scenario; the zero value means the library's (or the
// published design's) defaults.
type Tuning struct {
	Lease    time.Duration          // lease duration (takeover runs: 3s)
	Takeover *lockcore.TakeoverMode // takeover mode (lockcore strategies)
}

// Held is a lock a worker holds.
type Held struct {
	// Release gives the lock up.
	Release func(ctx context.Context) error
	// Valid reports whether the holder still knows its lease to be valid (lockcore
	// leases: local validity left and not lost); nil for designs that cannot tell.
	Valid func() bool
}

// Worker is one client of a lock strategy, with its own owner name.
type Worker interface {
	// Acquire waits for the lock on key until it is held or ctx ends.
	Acquire(ctx context.Context, key string) (*Held, error)
}

func leaseHeld(l *lockcore.Lease) *Held {
	return &Held{Release: l.Release, Valid: func() bool { return l.Remaining() > 0 }}
}

// SetWorker is a worker with a multi-key acquisition of its own (Mutex.AcquireAll);
// the multi-key scenario takes other workers' keys one at a time in canonical order.
type SetWorker interface {
	// AcquireSet takes every key (sorted, distinct) or none.
	AcquireSet(ctx context.Context, keys []string) (*Held, error)
}

// Optimist is a worker without a lock: it increments the counter item itself,
// conditioned on the version it read (lockcore.Versioned).
type Optimist interface {
	Increment(ctx context.Context, counter map[string]types.AttributeValue) error
}

// Strategy is a way to protect the critical section.
type Strategy struct {
	Name     string
	About    string
	Baseline bool // a baseline (a published design, AWS's lock client), kept in the bench only
	// Modes are the takeover modes the takeover scenario runs; none: not measured.
	Modes []TakeoverCase
	// MultiKey: the strategy has a multi-key acquisition of its own (its workers are
	// SetWorkers); only such strategies run the multi-key scenario.
	MultiKey bool
	New      func(env *Env, owner string, t Tuning) (Worker, error)
	// Peer: the strategy runs in a process of its own (the AWS lock client peer, see
	// EnsureAWSPeer) with these settings, hot-key runs only; New is nil.
	Peer *PeerSettings
}

// TakeoverCase is one takeover mode of a strategy.
type TakeoverCase struct {
	Name string
	Mode *lockcore.TakeoverMode
}

// The bench's bounded-bypass setting (strategy mutex-bypass): a holder keeps the lock
// for its own next acquisitions for at most BypassBound, and a released lease waits
// BypassLinger for them.
const (
	BypassBound  = 100 * time.Millisecond
	BypassLinger = 5 * time.Millisecond
)

// WallClockSkew is the skew allowance of the wall-clock takeover mode in the bench.
const WallClockSkew = 100 * time.Millisecond

func lockcoreModes() []TakeoverCase {
	obs, wall := lockcore.ObserveTakeover(), lockcore.WallClockTakeover(WallClockSkew)
	return []TakeoverCase{{Name: obs.String(), Mode: &obs}, {Name: wall.String(), Mode: &wall}}
}

func lockcoreOptions(owner string, t Tuning) []lockcore.Option {
	opts := []lockcore.Option{lockcore.WithOwner(owner)}
	if t.Lease > 0 {
		opts = append(opts, lockcore.WithLease(t.Lease))
	}
	if t.Takeover != nil {
		opts = append(opts, lockcore.WithTakeover(*t.Takeover))
	}
	return opts
}

// Strategies returns every strategy the bench knows, lockcore's first.
func Strategies() []Strategy {
	return []Strategy{
		{
			Name:  "mutex",
			About: "lockcore.Mutex: lease row in the lock table, conditional UpdateItem acquire and release",
			Modes: lockcoreModes(),
			New: func(env *Env, owner string, t Tuning) (Worker, error) {
				m, err := lockcore.NewMutex(env.Lock, env.LockTable, lockcoreOptions(owner, t)...)
				if err != nil {
					return nil, err
				}
				return mutexWorker{m}, nil
			},
		},
		{
			Name: BypassStrategy,
			About: fmt.Sprintf("lockcore.Mutex with WithBypass(%s, %s): a releasing worker continues its lease without a call "+
				"while its tenure is under the bound (bounded bypass, off by default)", BypassBound, BypassLinger),
			New: func(env *Env, owner string, t Tuning) (Worker, error) {
				m, err := lockcore.NewMutex(env.Lock, env.LockTable, append(lockcoreOptions(owner, t), lockcore.WithBypass(BypassBound, BypassLinger))...)
				if err != nil {
					return nil, err
				}
				return mutexWorker{m}, nil
			},
		},
		{
			Name:  "lockingread",
			About: "lockcore.ItemLocker: lock attributes on an item of the data table (a lock item beside the counter)",
			Modes: lockcoreModes(),
			New: func(env *Env, owner string, t Tuning) (Worker, error) {
				il, err := lockcore.NewItemLocker(env.Lock, env.DataTable, lockcoreOptions(owner, t)...)
				if err != nil {
					return nil, err
				}
				return itemWorker{il}, nil
			},
		},
		{
			Name:  "queue",
			About: "lockcore.Queue: FIFO tickets (counter update + row put in one transaction), consistent Query polling",
			Modes: lockcoreModes(),
			New: func(env *Env, owner string, t Tuning) (Worker, error) {
				q, err := lockcore.NewQueue(env.Lock, env.LockTable, lockcoreOptions(owner, t)...)
				if err != nil {
					return nil, err
				}
				return queueWorker{q}, nil
			},
		},
		{
			Name:  "ticket",
			About: "lockcore.TicketLock: fair ticket lock in one row (ADD next; serving counter), consistent GetItem polling timed by queue position",
			Modes: []TakeoverCase{{Name: lockcore.ObserveTakeover().String()}},
			New: func(env *Env, owner string, t Tuning) (Worker, error) {
				tl, err := lockcore.NewTicketLock(env.Lock, env.LockTable, lockcoreOptions(owner, t)...)
				if err != nil {
					return nil, err
				}
				return ticketWorker{tl}, nil
			},
		},
		{
			Name:  "versioned",
			About: "lockcore.Versioned: no lock; consistent read + write conditioned on the version, retried",
			New: func(env *Env, owner string, t Tuning) (Worker, error) {
				v, err := lockcore.NewVersioned(env.Lock, env.DataTable, lockcoreOptions(owner, t)...)
				if err != nil {
					return nil, err
				}
				return versionedWorker{v}, nil
			},
		},
		{
			Name:     "multi",
			About:    "lockcore.Mutex.AcquireAll, canonical order: the hot key and a second one (hot key); the section's keys (multi-key)",
			MultiKey: true,
			New: func(env *Env, owner string, t Tuning) (Worker, error) {
				m, err := lockcore.NewMutex(env.Lock, env.LockTable, lockcoreOptions(owner, t)...)
				if err != nil {
					return nil, err
				}
				return multiWorker{m}, nil
			},
		},
		{
			Name:     "published-lockingread",
			About:    "the published locking read: conditional UpdateItem on lockTime/lockedBy, retry after uniform 0-100 ms",
			Baseline: true,
			Modes:    []TakeoverCase{{Name: "published"}},
			New: func(env *Env, owner string, t Tuning) (Worker, error) {
				return newPublishedLockingRead(env, owner, t), nil
			},
		},
		{
			Name:     "published-fifo",
			About:    "the published FIFO ticket queue: counter update, then row put, 25 ms consistent-Query polling",
			Baseline: true,
			Modes:    []TakeoverCase{{Name: "published"}},
			New: func(env *Env, owner string, t Tuning) (Worker, error) {
				return newPublishedFIFO(env, owner, t), nil
			},
		},
		{
			Name: AWSLockClient,
			About: "AWS's Java lock client (com.amazonaws:dynamodb-lock-client on the AWS SDK for Java 2.x) in a JVM of its own, " +
				"through the same proxy: " + AWSPeerSettings.String() + "; one lock client per worker, lock row deleted on release; hot key only",
			Baseline: true,
			Peer:     &AWSPeerSettings,
		},
	}
}

// SelectStrategies picks strategies by comma-separated names; "all" (or "") stands for
// every lockcore strategy and published design.
func SelectStrategies(list string) ([]Strategy, error) {
	known := Strategies()
	if list == "" {
		list = "all"
	}
	var out []Strategy
	add := func(s Strategy) {
		if !slices.ContainsFunc(out, func(o Strategy) bool { return o.Name == s.Name }) {
			out = append(out, s)
		}
	}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "all" {
			for _, s := range known {
				add(s)
			}
			continue
		}
		i := slices.IndexFunc(known, func(s Strategy) bool { return s.Name == n })
		if i < 0 {
			var names []string
			for _, s := range known {
				names = append(names, s.Name)
			}
			return nil, fmt.Errorf("unknown strategy %q (known: all, %s)", n, strings.Join(names, ", "))
		}
		add(known[i])
	}
	return out, nil
}

type mutexWorker struct{ m *lockcore.Mutex }

func (w mutexWorker) Acquire(ctx context.Context, key string) (*Held, error) {
	l, err := w.m.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return leaseHeld(l), nil
}

type multiWorker struct{ m *lockcore.Mutex }

func (w multiWorker) Acquire(ctx context.Context, key string) (*Held, error) {
	return w.AcquireSet(ctx, []string{key + "#b", key})
}

func (w multiWorker) AcquireSet(ctx context.Context, keys []string) (*Held, error) {
	ml, err := w.m.AcquireAll(ctx, keys)
	if err != nil {
		return nil, err
	}
	return &Held{Release: ml.Release, Valid: func() bool {
		for _, l := range ml.Leases() {
			if l.Remaining() == 0 {
				return false
			}
		}
		return true
	}}, nil
}

type queueWorker struct{ q *lockcore.Queue }

func (w queueWorker) Acquire(ctx context.Context, key string) (*Held, error) {
	l, err := w.q.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return leaseHeld(l), nil
}

type ticketWorker struct{ t *lockcore.TicketLock }

func (w ticketWorker) Acquire(ctx context.Context, key string) (*Held, error) {
	l, err := w.t.Acquire(ctx, key)
	if err != nil {
		return nil, err
	}
	return leaseHeld(l), nil
}

type itemWorker struct{ il *lockcore.ItemLocker }

// LockItemKey is the key of the item a locking read locks for key: an item of the data
// table beside the counter, so that every strategy runs the same critical section.
func LockItemKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "LOCK#" + key},
		"sk": &types.AttributeValueMemberS{Value: "LOCK"},
	}
}

func (w itemWorker) Acquire(ctx context.Context, key string) (*Held, error) {
	l, err := w.il.Acquire(ctx, LockItemKey(key))
	if err != nil {
		return nil, err
	}
	return leaseHeld(l.Lease), nil
}

type versionedWorker struct{ v *lockcore.Versioned }

func (w versionedWorker) Acquire(context.Context, string) (*Held, error) {
	return nil, fmt.Errorf("versioned has no lock")
}

func (w versionedWorker) Increment(ctx context.Context, counter map[string]types.AttributeValue) error {
	_, _, err := w.v.Update(ctx, counter, func(cur map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
		return map[string]types.AttributeValue{"n": num(counterValue(cur) + 1)}, nil
	})
	return err
}

// CounterKey is the key of the counter item the critical section reads and writes.
func CounterKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "CTR#" + key},
		"sk": &types.AttributeValueMemberS{Value: "STOCK"},
	}
}

func num(v int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func counterValue(it map[string]types.AttributeValue) int64 {
	if v, ok := it["n"].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}

// ReadCounter reads the counter with a strongly consistent GetItem.
func ReadCounter(ctx context.Context, db lockcore.DynamoDB, table, key string) (int64, error) {
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: aws.String(table), Key: CounterKey(key), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return 0, err
	}
	return counterValue(out.Item), nil
}

// WriteCounter writes the counter with a PutItem.
func WriteCounter(ctx context.Context, db lockcore.DynamoDB, table, key string, v int64) error {
	it := CounterKey(key)
	it["n"] = num(v)
	_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: it})
	return err
}
