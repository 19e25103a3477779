package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ticketLock is a prototype, kept in the bench only, of a lock proposed for lockcore: a
// fair lease mutex whose whole queue lives in one row of the lock table, as a ticket
// counter and a now-serving counter (a ticket lock, as in operating-system kernels).
//
//	acquire   one unconditional UpdateItem: ADD next 1, returning the row. The ticket is
//	          the new next; if it equals serving, the lock is ours (uncontended: 1 call).
//	wait      strongly consistent GetItem of the row (1 RCU) until serving equals our
//	          ticket: further back, sleeping half the predicted time to the front
//	          ((position − 1) × (this client's usual hold time + a round trip)); next
//	          in line, polling every half round trip, or a quarter of the current hold
//	          so far when that is longer (never slower than a tenth of the lease).
//	release   one UpdateItem: serving = ticket + 1, rev + 1, if serving = ticket.
//	heartbeat UpdateItem rev + 1 if serving = ticket, every half lease.
//
// So a critical section costs two writes plus a few 1-RCU reads however many wait, and
// waiters enter strictly in ticket order.
//
// Validity: a waiter whose ticket comes up counts its lease from the send time of its
// last read that still showed an earlier ticket served. That read was processed before
// the release that served our ticket, so before any other waiter can have seen the new
// (serving, rev) — and a waiter skips a holder only after seeing the same (serving, rev)
// for a full lease on its own clock (observation takeover). No claim write is needed.
//
// A ticket whose owner gave up waiting is added to the row's gone set (conditioned on it
// not being served yet); whoever sees a gone ticket served skips it at once. A ticket
// whose owner crashed while waiting is skipped like a crashed holder, after a lease.
type ticketLock struct {
	db    *CountingDB
	table string
	owner string
	lease time.Duration

	mu   sync.Mutex
	hold time.Duration // moving average of this client's hold times (0: none yet)
}

func (l *ticketLock) holdEstimate(fallback time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hold == 0 {
		return fallback
	}
	return l.hold
}

func (l *ticketLock) held(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hold == 0 {
		l.hold = d
	} else {
		l.hold = (7*l.hold + 3*d) / 10
	}
}

// ProposalLease is the prototype's default lease (lockcore's default).
const ProposalLease = 10 * time.Second

func newTicketLock(env *Env, owner string, t Tuning) *ticketLock {
	l := &ticketLock{db: env.Lock, table: env.LockTable, owner: owner, lease: ProposalLease}
	if t.Lease > 0 {
		l.lease = t.Lease
	}
	return l
}

func (l *ticketLock) rowKey(key string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: key},
		"sk": &types.AttributeValueMemberS{Value: "ticket-lock"},
	}
}

type ticketRow struct {
	next, serving, rev int64
	gone               []int64
}

func parseTicketRow(it map[string]types.AttributeValue) ticketRow {
	var r ticketRow
	num := func(name string) int64 {
		if v, ok := it[name].(*types.AttributeValueMemberN); ok {
			n, _ := strconv.ParseInt(v.Value, 10, 64)
			return n
		}
		return 0
	}
	r.next, r.serving, r.rev = num("next"), num("serving"), num("rev")
	if ns, ok := it["gone"].(*types.AttributeValueMemberSS); ok {
		for _, v := range ns.Value {
			n, _ := strconv.ParseInt(v, 10, 64)
			r.gone = append(r.gone, n)
		}
	}
	return r
}

// stringSet marshals to a DynamoDB string set.
type stringSet []string

func (s stringSet) MarshalDynamoDBAttributeValue() (types.AttributeValue, error) {
	return &types.AttributeValueMemberSS{Value: s}, nil
}

var noRetry = func(o *dynamodb.Options) { o.RetryMaxAttempts = 1 }

func (l *ticketLock) update(ctx context.Context, key string, b expression.Builder, rv types.ReturnValue) (map[string]types.AttributeValue, error) {
	e := mustExpr(b)
	out, err := l.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(l.table), Key: l.rowKey(key),
		ConditionExpression: e.Condition(), UpdateExpression: e.Update(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(),
		ReturnValues: rv,
	}, noRetry)
	if err != nil {
		return nil, err
	}
	return out.Attributes, nil
}

func (l *ticketLock) Acquire(ctx context.Context, key string) (*Held, error) {
	send := time.Now()
	it, err := l.update(ctx, key, expression.NewBuilder().WithUpdate(
		expression.Add(expression.Name("next"), expression.Value(1)).
			Set(expression.Name("serving"), expression.IfNotExists(expression.Name("serving"), expression.Value(1))).
			Set(expression.Name("rev"), expression.IfNotExists(expression.Name("rev"), expression.Value(0)))),
		types.ReturnValueAllNew)
	if err != nil {
		return nil, fmt.Errorf("ticket lock: take ticket: %w", err)
	}
	row := parseTicketRow(it)
	ticket := row.next
	rtt := time.Since(send)
	// The send time of the last request processed before our ticket was served.
	lastBefore := send
	type seen struct {
		serving, rev int64
		at           time.Time
	}
	obs := seen{serving: row.serving, rev: row.rev, at: time.Now()}
	for row.serving != ticket {
		now := time.Now()
		switch {
		case row.serving > ticket:
			return nil, fmt.Errorf("ticket lock: ticket %d was skipped (serving %d)", ticket, row.serving)
		case slices.Contains(row.gone, row.serving):
			l.skip(ctx, key, row.serving, row.rev, true)
		case now.Sub(obs.at) >= l.lease:
			// The holder stopped heartbeating. If the skip loses a race, the next read
			// tells; pace the retries.
			if !l.skip(ctx, key, row.serving, row.rev, false) {
				if err := sleepCtx(ctx, max(rtt, time.Millisecond)); err != nil {
					l.abandon(key, ticket)
					return nil, err
				}
			}
		default:
			pos := ticket - row.serving
			var d time.Duration
			if pos > 1 {
				// Half the predicted time to the front, so each poll halves the distance.
				// A turn takes this client's own usual hold time plus a round trip for
				// the handoff: unlike the rate at which serving is seen to advance, that
				// does not grow when waiters poll late, so lateness cannot feed on
				// itself. Without a hold time yet, assume a round trip per turn.
				turn := rtt
				if hold := l.holdEstimate(0); hold > 0 {
					turn = (hold + rtt) / 2
				}
				d = time.Duration(pos-1) * turn
			} else {
				// Next in line: poll every half round trip, slowing down (a quarter
				// of the hold so far) for a holder that takes long.
				d = max(rtt/2, now.Sub(obs.at)/4)
			}
			d = max(d, time.Millisecond)
			d = min(d, l.lease/10, obs.at.Add(l.lease).Sub(now)+time.Millisecond)
			if err := sleepCtx(ctx, d); err != nil {
				l.abandon(key, ticket)
				return nil, err
			}
		}
		send = time.Now()
		out, err := l.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: aws.String(l.table), Key: l.rowKey(key), ConsistentRead: aws.Bool(true),
		})
		if err != nil {
			if ctx.Err() != nil {
				l.abandon(key, ticket)
				return nil, ctx.Err()
			}
			continue
		}
		rtt = time.Since(send)
		row = parseTicketRow(out.Item)
		now = time.Now()
		if row.serving != ticket {
			lastBefore = send
		}
		if row.serving != obs.serving || row.rev != obs.rev {
			obs = seen{serving: row.serving, rev: row.rev, at: now}
		}
	}
	h := &ticketHeld{l: l, key: key, ticket: ticket, validUntil: lastBefore.Add(l.lease), since: time.Now(),
		stop: make(chan struct{}), done: make(chan struct{})}
	go h.heartbeat(ctx)
	return &Held{Release: h.release, Valid: h.valid}, nil
}

// skip moves serving past a ticket whose owner is gone or stopped heartbeating,
// conditioned on what was observed. It reports whether it did.
func (l *ticketLock) skip(ctx context.Context, key string, serving, rev int64, gone bool) bool {
	cond := expression.And(
		expression.Equal(expression.Name("serving"), expression.Value(serving)),
		expression.Equal(expression.Name("rev"), expression.Value(rev)))
	upd := expression.Set(expression.Name("serving"), expression.Value(serving+1)).
		Add(expression.Name("rev"), expression.Value(1))
	if gone {
		cond = expression.And(
			expression.Equal(expression.Name("serving"), expression.Value(serving)),
			expression.Contains(expression.Name("gone"), strconv.FormatInt(serving, 10)))
		upd = upd.Delete(expression.Name("gone"), expression.Value(stringSet{strconv.FormatInt(serving, 10)}))
	}
	_, err := l.update(ctx, key, expression.NewBuilder().WithCondition(cond).WithUpdate(upd), types.ReturnValueNone)
	return err == nil
}

// abandon withdraws a ticket that is not served yet, or releases it if it just was.
func (l *ticketLock) abandon(key string, ticket int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := l.update(ctx, key, expression.NewBuilder().
		WithCondition(expression.LessThan(expression.Name("serving"), expression.Value(ticket))).
		WithUpdate(expression.Add(expression.Name("gone"), expression.Value(stringSet{strconv.FormatInt(ticket, 10)}))),
		types.ReturnValueNone)
	if isCCF(err) {
		_ = l.releaseTicket(ctx, key, ticket)
	}
}

func (l *ticketLock) releaseTicket(ctx context.Context, key string, ticket int64) error {
	_, err := l.update(ctx, key, expression.NewBuilder().
		WithCondition(expression.Equal(expression.Name("serving"), expression.Value(ticket))).
		WithUpdate(expression.Set(expression.Name("serving"), expression.Value(ticket+1)).
			Add(expression.Name("rev"), expression.Value(1))), types.ReturnValueNone)
	return err
}

type ticketHeld struct {
	l      *ticketLock
	key    string
	ticket int64

	since time.Time // when Acquire returned

	mu         sync.Mutex
	validUntil time.Time
	lost       bool
	once       sync.Once
	stop, done chan struct{}
}

func (h *ticketHeld) valid() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.lost && time.Now().Before(h.validUntil)
}

// heartbeat renews the lease every half lease until release, loss, or the end of the
// context given to Acquire (a crash, in the takeover scenario).
func (h *ticketHeld) heartbeat(ctx context.Context) {
	defer close(h.done)
	for {
		h.mu.Lock()
		wait := time.Until(h.validUntil) - h.l.lease/2
		h.mu.Unlock()
		t := time.NewTimer(max(wait, 0))
		select {
		case <-h.stop:
			t.Stop()
			return
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		send := time.Now()
		cctx, cancel := context.WithTimeout(ctx, h.l.lease/4)
		_, err := h.l.update(cctx, h.key, expression.NewBuilder().
			WithCondition(expression.Equal(expression.Name("serving"), expression.Value(h.ticket))).
			WithUpdate(expression.Add(expression.Name("rev"), expression.Value(1))), types.ReturnValueNone)
		cancel()
		h.mu.Lock()
		switch {
		case err == nil:
			h.validUntil = send.Add(h.l.lease)
		case isCCF(err):
			h.lost = true
		}
		lost := h.lost
		h.mu.Unlock()
		if lost {
			return
		}
	}
}

func (h *ticketHeld) release(ctx context.Context) error {
	h.once.Do(func() { close(h.stop) })
	<-h.done
	h.l.held(time.Since(h.since))
	err := h.l.releaseTicket(ctx, h.key, h.ticket)
	if isCCF(err) {
		return errors.New("ticket lock: lease lost before release")
	}
	return err
}
