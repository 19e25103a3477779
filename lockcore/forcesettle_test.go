package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// Outside review, issue 26: the settling of a release and of a force-release after a
// write whose outcome is unknown, when force-releases follow each other.

// unsentRelease fails the first release (an UpdateItem without return values that adds
// and removes: Mutex and TicketLock releases alike) once armed, before it is sent, with a
// transport error the client cannot tell from a lost response; between runs first (other
// clients acting before the release's retry).
type unsentRelease struct {
	lockcore.DynamoDB
	armed   atomic.Bool
	between func()
}

func (f *unsentRelease) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.ReturnValues == types.ReturnValueNone && isRelease(in) && f.armed.CompareAndSwap(true, false) {
		f.between()
		return nil, fmt.Errorf("write tcp 127.0.0.1:1->127.0.0.1:2: write: connection reset by peer")
	}
	return f.DynamoDB.UpdateItem(ctx, in, o...)
}

// releaseAfterTwoForces: A holds; A's release fails before it is sent; before its retry
// an operator force-releases A, B acquires, and B is force-released too. The retry finds
// the row naming B's force-release only. A's lease was ended by a force-release, so
// Release must report ErrLeaseLost (the Mutex reported nil: it looked at the last force
// record only and, its lease still valid, took the passed ticket for its own release).
func releaseAfterTwoForces(t *testing.T, st lockcore.Strategy,
	acquire func(ctx context.Context, db lockcore.DynamoDB, table, owner string) (*lockcore.Lease, error)) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	in := inspector(t, e)
	f := &unsentRelease{DynamoDB: e.db}
	la, err := acquire(ctx, f, e.locks, "a")
	if err != nil {
		t.Fatal(err)
	}
	var lb *lockcore.Lease
	f.between = func() {
		recA, err := in.ForceRelease(ctx, "k", lockcore.ForceOptions{Strategy: st, Actor: "op1", Reason: "a stuck"})
		if err != nil || recA.Token.Token != la.Token() {
			t.Errorf("force-release of a: %+v, %v (a's token %d)", recA, err, la.Token())
			return
		}
		if lb, err = acquire(ctx, e.db, e.locks, "b"); err != nil {
			t.Errorf("b: %v", err)
			return
		}
		recB, err := in.ForceRelease(ctx, "k", lockcore.ForceOptions{Strategy: st, Actor: "op2", Reason: "b stuck"})
		if err != nil || recB.Token.Token != lb.Token() {
			t.Errorf("force-release of b: %+v, %v (b's token %d)", recB, err, lb.Token())
		}
	}
	f.armed.Store(true)
	err = la.Release(ctx)
	t.Logf("a's release: %v", err)
	if t.Failed() {
		t.FailNow()
	}
	if !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("a's release after a was force-released (and then b): %v, want ErrLeaseLost", err)
	}
	if !errors.Is(la.Err(), lockcore.ErrLeaseLost) {
		t.Fatalf("a's lease Err() = %v, want ErrLeaseLost", la.Err())
	}
	if lb != nil {
		if err := lb.Release(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
			t.Fatalf("b's release after b was force-released: %v, want ErrLeaseLost", err)
		}
	}
}

func TestMutexReleaseAfterTwoForceReleasesReportsLost(t *testing.T) {
	t.Parallel()
	releaseAfterTwoForces(t, lockcore.StrategyMutex, func(ctx context.Context, db lockcore.DynamoDB, table, owner string) (*lockcore.Lease, error) {
		m, err := lockcore.NewMutex(db, table, fast(owner)...)
		if err != nil {
			return nil, err
		}
		return m.TryAcquire(ctx, "k")
	})
}

func TestTicketReleaseAfterTwoForceReleasesReportsLost(t *testing.T) {
	t.Parallel()
	releaseAfterTwoForces(t, lockcore.StrategyTicket, func(ctx context.Context, db lockcore.DynamoDB, table, owner string) (*lockcore.Lease, error) {
		tl, err := lockcore.NewTicketLock(db, table, fast(owner)...)
		if err != nil {
			return nil, err
		}
		return tl.TryAcquire(ctx, "k")
	})
}

// lostForce lands the first TransactWriteItems (a force-release) once armed, runs
// between, and then reports a lost response.
type lostForce struct {
	lockcore.InspectorAPI
	armed   atomic.Bool
	between func()
}

func (f *lostForce) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	out, err := f.InspectorAPI.TransactWriteItems(ctx, in, o...)
	if err == nil && f.armed.CompareAndSwap(true, false) {
		f.between()
		return nil, fmt.Errorf("read tcp 127.0.0.1:1->127.0.0.1:2: read: connection reset by peer")
	}
	return out, err
}

// forceAfterLostResponse: A holds; an operator's force-release of A lands but its
// response is lost; before its retry B acquires, and a second operator force-releases B.
// The retry finds the row naming the second force-release and nobody holding: the first
// call reported ErrNotHeld, though it had ended A's lease and its audit row was in the
// table. It must report what it ended.
func forceAfterLostResponse(t *testing.T, st lockcore.Strategy,
	acquire func(ctx context.Context, db lockcore.DynamoDB, table, owner string) (*lockcore.Lease, error)) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	in2 := inspector(t, e)
	f := &lostForce{InspectorAPI: e.db}
	in1, err := lockcore.NewInspector(f, e.locks)
	if err != nil {
		t.Fatal(err)
	}
	la, err := acquire(ctx, e.db, e.locks, "a")
	if err != nil {
		t.Fatal(err)
	}
	var lb *lockcore.Lease
	var recB *lockcore.ForceRecord
	f.between = func() {
		var err error
		if lb, err = acquire(ctx, e.db, e.locks, "b"); err != nil {
			t.Errorf("b: %v", err)
			return
		}
		if recB, err = in2.ForceRelease(ctx, "k", lockcore.ForceOptions{Strategy: st, Actor: "op2", Reason: "b stuck"}); err != nil {
			t.Errorf("second operator's force-release: %v", err)
		}
	}
	f.armed.Store(true)
	rec, err := in1.ForceRelease(ctx, "k", lockcore.ForceOptions{Strategy: st, Actor: "op1", Reason: "a stuck"})
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("first operator's force-release: %+v, %v", rec, err)
	if err != nil {
		t.Fatalf("the first force-release ended a's lease but returned %v", err)
	}
	if rec.Actor != "op1" || rec.Token.Token != la.Token() || rec.Token.Token == recB.Token.Token {
		t.Fatalf("record %+v: want op1's, of a's lease (token %d); b's token %d", rec, la.Token(), lb.Token())
	}
	if st == lockcore.StrategyMutex && rec.LeaseID != la.ID() {
		t.Fatalf("record names lease %s, want a's %s", rec.LeaseID, la.ID())
	}
	show := showOne(t, ctx, in2, "k", lockcore.ShowOptions{Strategy: st})
	if len(show.Audit) != 2 || show.Audit[0].ID != rec.ID || show.Audit[1].ID != recB.ID {
		t.Fatalf("audit %+v: want the two force-releases, op1's (%s) first", show.Audit, rec.ID)
	}
	if err := la.Release(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
		t.Fatalf("a's release: %v, want ErrLeaseLost", err)
	}
}

func TestForceReleaseMutexLostResponseThenSecondForce(t *testing.T) {
	t.Parallel()
	forceAfterLostResponse(t, lockcore.StrategyMutex, func(ctx context.Context, db lockcore.DynamoDB, table, owner string) (*lockcore.Lease, error) {
		m, err := lockcore.NewMutex(db, table, fast(owner)...)
		if err != nil {
			return nil, err
		}
		return m.TryAcquire(ctx, "k")
	})
}

func TestForceReleaseTicketLostResponseThenSecondForce(t *testing.T) {
	t.Parallel()
	forceAfterLostResponse(t, lockcore.StrategyTicket, func(ctx context.Context, db lockcore.DynamoDB, table, owner string) (*lockcore.Lease, error) {
		tl, err := lockcore.NewTicketLock(db, table, fast(owner)...)
		if err != nil {
			return nil, err
		}
		return tl.TryAcquire(ctx, "k")
	})
}

// When a force-release's write may have landed and the call cannot settle it (here its
// context ends before the re-read), it must say the outcome is unknown: not a bare
// context error an operator would take for "nothing happened".
func TestForceReleaseUnsettledReportsUnknownOutcome(t *testing.T) {
	t.Parallel()
	for _, st := range []lockcore.Strategy{lockcore.StrategyMutex, lockcore.StrategyTicket} {
		t.Run(string(st), func(t *testing.T) {
			e := newEnv(t)
			ctx := ctxT(t, time.Minute)
			var la *lockcore.Lease
			var err error
			if st == lockcore.StrategyMutex {
				m, _ := lockcore.NewMutex(e.db, e.locks, fast("a")...)
				la, err = m.TryAcquire(ctx, "k")
			} else {
				tl := newTicket(t, e.db, e.locks, "a")
				la, err = tl.TryAcquire(ctx, "k")
			}
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = la.Release(ctx) }()
			fctx, cancel := context.WithCancel(ctx)
			f := &lostForce{InspectorAPI: e.db, between: cancel}
			f.armed.Store(true)
			in, _ := lockcore.NewInspector(f, e.locks)
			_, err = in.ForceRelease(fctx, "k", lockcore.ForceOptions{Strategy: st, Actor: "op", Reason: "stuck"})
			t.Logf("force-release: %v", err)
			if !errors.Is(err, lockcore.ErrUnknownOutcome) || errors.Is(err, lockcore.ErrNotHeld) {
				t.Fatalf("force-release whose write landed, response lost, context ended: %v, want ErrUnknownOutcome", err)
			}
		})
	}
}

// The settling the Mutex and TicketLock now share (settleRelease) gives a TicketLock
// the Mutex's settling by validity: a release that landed, its response lost, while the
// next holder entered and released before the retry, was reported as lost with an
// unknown outcome (neither rel nor skip names the ticket any more). No waiter skips a
// ticket whose lease is valid and no force-release ran since the ticket was served, so
// only the release itself can have passed it.
func TestTicketAmbiguousReleaseSettledByValidity(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	b := newTicket(t, e.db, e.locks, "b")
	bDone := make(chan struct{})
	f := &faulty{DynamoDB: e.db}
	f.landAndLose = func(in *dynamodb.UpdateItemInput) bool {
		return in.ReturnValues == types.ReturnValueNone && isRelease(in)
	}
	f.between = func() { <-bDone } // b enters and releases before the retry
	a := newTicket(t, f, e.locks, "a")
	la, err := a.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(bDone)
		lb, err := b.Acquire(ctx, "k")
		if err != nil {
			t.Error(err)
			return
		}
		if err := lb.Release(ctx); err != nil {
			t.Error(err)
		}
	}()
	waitNext(t, ctx, b, "k", 2) // b queued
	if err := la.Release(ctx); err != nil {
		t.Fatalf("release landed, lease valid throughout, no force-release: %v, want nil", err)
	}
	<-bDone
}

// slowInspector delays every read the Inspector makes: an operator far from the table.
type slowInspector struct {
	lockcore.InspectorAPI
	delay time.Duration
}

func (s slowInspector) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := s.InspectorAPI.GetItem(ctx, in, o...)
	time.Sleep(s.delay) // the answer is slow to come back: the row moves on meanwhile
	return out, err
}

// TestForceReleaseOutpacesFastHeartbeats: a force-release was conditioned on the row's
// revision as read, which every heartbeat bumps; a holder heartbeating more often than the
// operator's read-then-write round trip refused every attempt ("gave up after 10
// attempts"), as TestInspectorForceRelease did on a loaded machine. It is conditioned on
// the served ticket of the row's life now, which heartbeats leave alone (Mutex and
// TicketLock).
func TestForceReleaseOutpacesFastHeartbeats(t *testing.T) {
	e := newEnv(t)
	ctx := ctxT(t, time.Minute)
	in, err := lockcore.NewInspector(slowInspector{InspectorAPI: e.db, delay: 150 * time.Millisecond}, e.locks)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := lockcore.NewMutex(e.db, e.locks, fast("m", lockcore.WithHeartbeat(50*time.Millisecond))...)
	lm, err := m.Acquire(ctx, "fast-hb-mutex")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.ForceRelease(ctx, "fast-hb-mutex", lockcore.ForceOptions{Actor: "op", Reason: "stuck"}); err != nil {
		t.Fatalf("Mutex: %v", err)
	}
	mustNot(t, lm.Release(ctx), lockcore.ErrLeaseLost)
	tl, _ := lockcore.NewTicketLock(e.db, e.locks, fast("t", lockcore.WithHeartbeat(50*time.Millisecond))...)
	lt, err := tl.Acquire(ctx, "fast-hb-ticket")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := in.ForceRelease(ctx, "fast-hb-ticket", lockcore.ForceOptions{Actor: "op", Reason: "stuck", Strategy: lockcore.StrategyTicket}); err != nil {
		t.Fatalf("TicketLock: %v", err)
	}
	mustNot(t, lt.Release(ctx), lockcore.ErrLeaseLost)
}

// epochWriterDB lets a test act as a holder between the Inspector's read of a lock row
// and its transaction: after the first read of the row it runs between once.
type epochWriterDB struct {
	lockcore.InspectorAPI
	once    sync.Once
	between func()
}

func (d *epochWriterDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, o ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := d.InspectorAPI.GetItem(ctx, in, o...)
	if err == nil && out.Item != nil {
		d.once.Do(d.between)
	}
	return out, err
}

// A holder that has taken its ticket but not yet written its row life's fence epoch may
// write it between ForceRelease's read of the row and its transaction. The record must
// name the token of the lease it ended, epoch included: it named the ticket alone
// ("token 1", while the lease it ended had token 4294967297), which settling releases,
// Show and operators compare by token (found by the deterministic simulator).
func TestForceReleaseRecordsTheEpochWrittenAfterItsRead(t *testing.T) {
	t.Parallel()
	for _, st := range []lockcore.Strategy{lockcore.StrategyMutex, lockcore.StrategyTicket} {
		t.Run(string(st), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			ctx := ctxT(t, time.Minute)
			var lease *lockcore.Lease
			var err error
			sk := "lock"
			if st == lockcore.StrategyTicket {
				sk = "lock#ticket"
				tl, _ := lockcore.NewTicketLock(e.db, e.locks, fast("a")...)
				lease, err = tl.Acquire(ctx, "k")
			} else {
				m, _ := lockcore.NewMutex(e.db, e.locks, fast("a")...)
				lease, err = m.Acquire(ctx, "k")
			}
			if err != nil {
				t.Fatal(err)
			}
			key := map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: "k"}, "sk": &types.AttributeValueMemberS{Value: sk}}
			// The holder as it was before writing its epoch: the row without one.
			if _, err := e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(e.locks), Key: key,
				UpdateExpression: aws.String("REMOVE epoch"), ConditionExpression: aws.String("attribute_exists(epoch)")}); err != nil {
				t.Fatalf("remove the epoch: %v", err)
			}
			db := &epochWriterDB{InspectorAPI: e.db, between: func() {
				// The holder writes its epoch (A10), after the Inspector's read.
				if _, err := e.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: aws.String(e.locks), Key: key,
					UpdateExpression:          aws.String("SET epoch = :e"),
					ConditionExpression:       aws.String("attribute_not_exists(epoch)"),
					ExpressionAttributeValues: map[string]types.AttributeValue{":e": &types.AttributeValueMemberN{Value: fmt.Sprint(lease.Token().Epoch())}},
				}); err != nil {
					t.Errorf("write the epoch: %v", err)
				}
			}}
			in, err := lockcore.NewInspector(db, e.locks)
			if err != nil {
				t.Fatal(err)
			}
			rec, err := in.ForceRelease(ctx, "k", lockcore.ForceOptions{Strategy: st, Actor: "ops", Reason: "stuck"})
			if err != nil {
				t.Fatal(err)
			}
			if rec.Token.Token != lease.Token() {
				t.Fatalf("the force-release record names token %d, but the lease it ended has token %d", rec.Token.Token, lease.Token())
			}
			if err := lease.Release(ctx); !errors.Is(err, lockcore.ErrLeaseLost) {
				t.Fatalf("the ended lease's release: %v, want ErrLeaseLost", err)
			}
		})
	}
}
