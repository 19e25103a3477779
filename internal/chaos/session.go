package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// Strategies.
const (
	StratMutex       = "mutex"       // lockcore.Mutex + fenced read and write of the data
	StratLockingRead = "lockingread" // lockcore.ItemLocker: lock, read and write on the data item
	StratQueue       = "queue"       // lockcore.Queue + fenced data (half the writes also guarded)
	StratTicket      = "ticket"      // lockcore.TicketLock + fenced data (half the writes also guarded)
	StratVersioned   = "versioned"   // lockcore.Versioned: optimistic, no lock
	StratMulti       = "multi"       // lockcore.Mutex.AcquireAll on two of three keys, guarded transaction
	StratNaive       = "naive"       // no lock at all: plain read, plain write (must fail the checks)
)

// LockStrategies are the strategies that hold locks (and so have holders to crash and
// pause).
var LockStrategies = []string{StratMutex, StratLockingRead, StratQueue, StratTicket, StratMulti}

// DefaultStrategies run unless Config.Strategies says otherwise.
var DefaultStrategies = []string{StratMutex, StratLockingRead, StratQueue, StratTicket, StratVersioned, StratMulti}

func isLockStrategy(s string) bool { return slices.Contains(LockStrategies, s) }

// sessionSpec configures one lockcore client.
type sessionSpec struct {
	Strategy  string        `json:"strategy"`
	Owner     string        `json:"owner"`
	Locks     string        `json:"locks"` // lock table
	Data      string        `json:"data"`  // data table
	Lease     time.Duration `json:"lease"`
	Offset    time.Duration `json:"offset"`    // clock offset (skewed client)
	Heartbeat bool          `json:"heartbeat"` // automatic heartbeats (the queue and the ticket lock always have them)
	// Bypass: lockcore.WithBypass(lease, lease/2), so that a worker's next critical
	// section often continues its lease (Mutex workers only).
	Bypass bool `json:"bypass,omitempty"`
}

// session is one client of one strategy: a worker, or a holder process.
type session struct {
	spec  sessionSpec
	data  *dataClient
	mutex *lockcore.Mutex
	queue *lockcore.Queue
	tick  *lockcore.TicketLock
	item  *lockcore.ItemLocker
	ver   *lockcore.Versioned
	rng   *rand.Rand

	lastLease string // the lease id of the last acquisition (Bypass: a continuation repeats it)
}

// offsetClock is a clock running a constant offset ahead (or behind).
type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time { return time.Now().Add(c.d) }

func newSession(db *dynamodb.Client, spec sessionSpec, seed uint64) (*session, error) {
	opts := []lockcore.Option{
		lockcore.WithOwner(spec.Owner),
		lockcore.WithLease(spec.Lease),
		lockcore.WithMinLease(min(spec.Lease, lockcore.DefaultMinLease)),
		lockcore.WithBackoff(5*time.Millisecond, 250*time.Millisecond),
	}
	if spec.Offset != 0 {
		opts = append(opts, lockcore.WithClock(offsetClock{spec.Offset}))
	}
	if spec.Bypass {
		opts = append(opts, lockcore.WithBypass(spec.Lease, spec.Lease/2))
	}
	if !spec.Heartbeat && spec.Strategy != StratQueue && spec.Strategy != StratTicket {
		opts = append(opts, lockcore.WithHeartbeat(0))
	}
	s := &session{
		spec: spec,
		data: &dataClient{db: db, table: spec.Data},
		rng:  rand.New(rand.NewPCG(seed, seed>>1|1)),
	}
	var err error
	switch spec.Strategy {
	case StratMutex, StratMulti:
		s.mutex, err = lockcore.NewMutex(db, spec.Locks, opts...)
	case StratQueue:
		s.queue, err = lockcore.NewQueue(db, spec.Locks, opts...)
	case StratTicket:
		s.tick, err = lockcore.NewTicketLock(db, spec.Locks, opts...)
	case StratLockingRead:
		s.item, err = lockcore.NewItemLocker(db, spec.Data, opts...)
	case StratVersioned:
		s.ver, err = lockcore.NewVersioned(db, spec.Data, append(opts, lockcore.WithMaxAttempts(50))...)
	case StratNaive:
	default:
		err = fmt.Errorf("unknown strategy %q", spec.Strategy)
	}
	return s, err
}

// held is a successful acquisition with the data read under it.
type held struct {
	keys    []int
	leases  []*lockcore.Lease // per key
	tokens  []lockcore.Fence  // per key
	obs     []obs             // per key: the data as read under the lock
	ilease  *lockcore.ItemLease
	multi   *lockcore.MultiLease
	started time.Time // real time before the acquire call
	// ambig: an attempt of the write may have landed unseen, and a copy of it may still
	// land later (a bypass worker then ends the tenure: see session.release).
	ambig bool
}

// remaining is the least local validity of the held leases.
func (h *held) remaining() time.Duration {
	r := time.Duration(1<<63 - 1)
	for _, l := range h.leases {
		r = min(r, l.Remaining())
	}
	return r
}

// problemFunc receives fencing and exclusion problems found at the data.
type problemFunc func(kind, msg string)

const (
	problemRegression = "fence_regression"
	problemViolation  = "mutual_exclusion_violation"
)

// acquire takes the locks of keys and reads the data under them. On error nothing is
// held.
func (s *session) acquire(ctx context.Context, keys []int, report problemFunc) (*held, error) {
	h := &held{keys: keys, started: time.Now()}
	st := s.spec.Strategy
	switch st {
	case StratMutex, StratQueue, StratTicket:
		var l *lockcore.Lease
		var err error
		switch st {
		case StratMutex:
			l, err = s.mutex.Acquire(ctx, lockKey(st, keys[0]))
		case StratQueue:
			l, err = s.queue.Acquire(ctx, lockKey(st, keys[0]))
		default:
			l, err = s.tick.Acquire(ctx, lockKey(st, keys[0]))
		}
		if err != nil {
			return nil, err
		}
		h.leases, h.tokens = []*lockcore.Lease{l}, []lockcore.Fence{l.Token()}
	case StratMulti:
		names := make([]string, len(keys))
		for i, k := range keys {
			names[i] = lockKey(st, k)
		}
		ml, err := s.mutex.AcquireAll(ctx, names)
		if err != nil {
			return nil, err
		}
		h.multi = ml
		for _, k := range keys {
			for _, l := range ml.Leases() {
				if l.Key() == lockKey(st, k) {
					h.leases = append(h.leases, l)
					h.tokens = append(h.tokens, l.Token())
				}
			}
		}
		if len(h.leases) != len(keys) {
			s.release(ctx, h, false)
			return nil, fmt.Errorf("multi: %d leases for %d keys", len(h.leases), len(keys))
		}
	case StratLockingRead:
		il, err := s.item.Acquire(ctx, itemKey(st, keys[0]))
		if err != nil {
			return nil, err
		}
		h.ilease = il
		h.leases, h.tokens = []*lockcore.Lease{il.Lease}, []lockcore.Fence{il.Token()}
		h.obs = []obs{obsOf(il.Item())}
		return h, nil
	default:
		return nil, fmt.Errorf("acquire: %s is not a lock strategy", st)
	}
	// Fenced reads.
	for i, k := range keys {
		l := h.leases[i]
		rem0, t0 := l.Remaining(), time.Now()
		old, res := s.data.fencedRead(ctx, s.rng, itemKey(st, k), l.Token(), l.ID())
		if res.Status != stOK {
			if res.Status == stFailed && res.Refusal != nil && !res.Ambig && rem0-time.Since(t0) > 0 && report != nil {
				var ccf *types.ConditionalCheckFailedException
				cur := int64(-1)
				if errors.As(res.Refusal, &ccf) {
					cur, _ = numAttr(ccf.Item, attrFence)
				}
				report(problemRegression, fmt.Sprintf("%s: fresh holder %s with token %d found fence %d at the data while its lease was valid",
					partName(st, k), l.ID(), l.Token(), cur))
			}
			s.release(ctx, h, false)
			return nil, fmt.Errorf("fenced read: %s: %w", res.Status, res.Err)
		}
		if f, ok := numAttr(old, attrFence); ok && f == int64(l.Token()) && strAttr(old, attrFenceLease) != l.ID() && report != nil {
			report(problemRegression, fmt.Sprintf("%s: token %d issued twice: to %s and to %s",
				partName(st, k), f, strAttr(old, attrFenceLease), l.ID()))
		}
		h.obs = append(h.obs, obsOf(old))
	}
	return h, nil
}

// write writes the increments ids (one per key) under h. It returns one outcome per key
// and whether a refusal came back while the leases were still valid by the local clock.
func (s *session) write(ctx context.Context, h *held, ids []string) (sts []opStatus, refusedWhileValid bool, err error) {
	st := s.spec.Strategy
	rem0, t0 := h.remaining(), time.Now()
	validAfter := func() bool { return rem0-time.Since(t0) > 0 }
	all := func(s opStatus) []opStatus {
		out := make([]opStatus, len(h.keys))
		for i := range out {
			out[i] = s
		}
		return out
	}
	switch st {
	case StratMutex:
		l := h.leases[0]
		res := s.data.fencedWrite(ctx, s.rng, itemKey(st, h.keys[0]), h.obs[0], ids[0], l.Token(), l.ID())
		h.ambig = res.Ambig
		return all(res.Status), res.Refusal != nil && res.Status == stFailed && validAfter(), res.Err
	case StratQueue, StratTicket:
		l := h.leases[0]
		if s.rng.IntN(2) == 0 {
			res := s.data.fencedWrite(ctx, s.rng, itemKey(st, h.keys[0]), h.obs[0], ids[0], l.Token(), l.ID())
			return all(res.Status), res.Refusal != nil && res.Status == stFailed && validAfter(), res.Err
		}
		var guard types.TransactWriteItem
		var gerr error
		if st == StratTicket {
			guard, gerr = s.tick.GuardCheck(l)
		} else {
			guard, gerr = s.queue.GuardCheck(l)
		}
		if gerr != nil {
			return nil, false, gerr
		}
		items := []types.TransactWriteItem{
			guard,
			{Update: s.data.fencedWriteUpdate(itemKey(st, h.keys[0]), h.obs[0], ids[0], l.Token(), l.ID())},
		}
		res := s.data.guardedWrite(ctx, s.rng, items)
		return all(res.Status), res.Refusal != nil && res.Status == stFailed && validAfter(), res.Err
	case StratMulti:
		var items []types.TransactWriteItem
		for _, l := range h.leases {
			guard, err := s.mutex.GuardCheck(l)
			if err != nil {
				return nil, false, err
			}
			items = append(items, guard)
		}
		for i, k := range h.keys {
			l := h.leases[i]
			items = append(items, types.TransactWriteItem{Update: s.data.fencedWriteUpdate(itemKey(st, k), h.obs[i], ids[i], l.Token(), l.ID())})
		}
		res := s.data.guardedWrite(ctx, s.rng, items)
		return all(res.Status), res.Refusal != nil && res.Status == stFailed && validAfter(), res.Err
	case StratLockingRead:
		// Half the writes keep the lock (Update; lockedOp releases it), half release in
		// the write (UpdateAndRelease). Both ADD to attrAdds, which exposes a write
		// applied twice.
		upd := incrementUpdate(h.obs[0], ids[0]).Add(expression.Name(attrAdds), expression.Value(1))
		var err error
		if s.rng.IntN(2) == 0 {
			_, err = s.item.Update(ctx, h.ilease, upd, nil) // the caller releases afterwards
		} else {
			_, err = s.item.UpdateAndRelease(ctx, h.ilease, upd, nil)
		}
		switch {
		case err == nil:
			return all(stOK), false, nil
		case errors.Is(err, lockcore.ErrUnknownOutcome):
			return all(stUnknown), false, err
		case errors.Is(err, lockcore.ErrLeaseLost), errors.Is(err, lockcore.ErrNotOwner), errors.Is(err, lockcore.ErrConditionFailed):
			// Documented: nothing was written.
			return all(stFailed), validAfter(), err
		default:
			return all(stUnknown), false, err
		}
	}
	return nil, false, fmt.Errorf("write: %s is not a lock strategy", st)
}

// release gives up whatever h still holds (best effort, on a context of its own).
//
// endTenure (WithBypass workers): a write of this tenure may still land, so the release
// must not be kept for a continuation, which would share the token (ReleaseTenure).
func (s *session) release(ctx context.Context, h *held, endTenure bool) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	switch {
	case h.multi != nil:
		return h.multi.Release(rctx)
	case h.ilease != nil:
		return h.ilease.Release(rctx)
	default:
		var errs []error
		for _, l := range h.leases {
			if endTenure {
				errs = append(errs, l.ReleaseTenure(rctx))
			} else {
				errs = append(errs, l.Release(rctx))
			}
		}
		return errors.Join(errs...)
	}
}
